"""A later chapter's fixture as a case of ``qkv check``: the kind each chapter's fixture is
a case of, a head chapter's operands as an input and weights, and what the check cannot
judge of such a fixture, refused before any call.

A chapter turns its fixture, read by its one reader, into the case its own session
judges (:mod:`qkvcli.chapters`). ``qkv check`` takes that case as it is, labelled as the
user named the file, as a case of the kind whose operations the chapter describes
(:data:`CHAPTER_KINDS`): chapter 29's Q and K stacked ``[2,T,d]`` for RoPE, chapter 30's
layer (its heads, RoPE base and offset, suffix) for multi-head attention, chapter 37's
layer and cache capacity for a KV cache. Such a case runs in every mode of its kind,
its chapter's own (causal with RoPE) the one single-run families use. What the
interface cannot be asked (RoPE's half-split pairs, a layer whose weights are not
``[d_model, d_model]``) is refused, naming the fixture's key.

Chapters 27 and 28 give a head's ``Q``, ``K``, ``V`` (or ``X`` and weights, a head case
as they are). The head's interface takes ``X`` and three weights of one width, so the
operands become ``X = [Q|K|V]`` and weights that select each third: every element of
``X W`` is one product by 1 plus products by 0, so ``X W_Q`` is ``Q`` exactly (checked
here, value for value). Values of another width than the keys have no such case.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from qkvcli.check.cases import Case
from qkvcli.check.kinds import CACHE_STEPS, HEAD, KINDS, MULTI_HEAD, ROPE
from qkvcli.core.arrays import Array
from qkvcli.core.results import Failure
from qkvcli.gradcheck.settings import DEFAULT_SAMPLES
from qkvcli.protocol.errors import CallFailed
from qkvcli.reading.problems import FixtureError

if TYPE_CHECKING:
    from qkvcli.check.diagnose import Bundle

CHAPTER_KINDS: dict[int, tuple[str, ...]] = {
    27: (HEAD.forward,),
    28: (HEAD.forward,),
    29: (ROPE.forward,),
    30: (MULTI_HEAD.forward,),
    37: (CACHE_STEPS.forward,),
}
"""The kinds (their forwards) each later chapter's fixture is a case of."""
READ = "qkv check reads fixtures of chapters 26, 29, 30 and 37, and of 27 and 28 when d_v = d_k"
"""What a refusal of a head chapter's fixture says the check reads."""


def chapter_case(number: int, label: str, case: Case, layout: str = "adjacent") -> Case:
    """The case chapter ``number`` judges its fixture by, as the check's case of the kinds
    the chapter describes, labelled ``label`` (the gradient check's samples the chapter 26
    default when the fixture gives none, as for a chapter 26 fixture). ``layout`` is the
    RoPE pairs the fixture turns. Raises :class:`FixtureError` for a layout other than
    adjacent pairs, the only one the interface's ``base`` and ``offset`` describe."""
    if layout != "adjacent":
        raise FixtureError("$.rope.layout", f'"{layout}" pairs; qkv check\'s rope, mha_forward '
                           "and cache_steps turn adjacent pairs (docs/protocol.md), so it "
                           "cannot judge this fixture")
    if CHAPTER_KINDS[number][0] in (MULTI_HEAD.forward, CACHE_STEPS.forward):
        _square(case, CHAPTER_KINDS[number][0])
    samples = case.samples if case.samples is not None else DEFAULT_SAMPLES
    # The prefix family claims every earlier token's output is kept: a one-token fixture
    # has none, so its suffix is dropped and the family does not count it.
    suffix = case.suffix if case.input.shape[1] >= 2 else None
    return case._replace(label=label, kinds=CHAPTER_KINDS[number], samples=samples,
                         suffix=suffix)


def _square(case: Case, operation: str) -> None:
    """Refuse a layer whose weights are not ``[d_model, d_model]``: the interface's layer
    (docs/protocol.md) projects to the model's width and back."""
    width = int(case.input.shape[-1])
    for name, weight in zip(("query", "key", "value", "output"), case.weights, strict=True):
        if weight.shape != (width, width):
            shape = ",".join(str(int(size)) for size in weight.shape)
            raise FixtureError(f"$.weights.{name}", f"[{shape}], not [d_model, d_model] = "
                               f"[{width},{width}]: qkv check's {operation} takes a layer of "
                               "square weights (docs/protocol.md), so it cannot judge this "
                               "fixture")


def operand_case(query: Array, key: Array, value: Array, upstream: Array, step: float,
                 tolerance: float, samples: int | None, suffix: Array | None = None) -> Case:
    """A head on given operands as a case of the head's interface: ``X = [Q|K|V]``
    ``[B,T,3 d_k]`` and weights that select each third (``W_Q`` the identity's first
    ``d_k`` columns...), the output's upstream gradient in the value's place (and the
    others'), ``suffix`` the last token's replacement row of ``X`` (``[B, 3 d_k]``).
    Raises :class:`FixtureError` when ``d_v`` differs from ``d_k`` (the interface's three
    weights have one width) or ``X W`` would not give the operands exactly."""
    width, value_width = int(query.shape[2]), int(value.shape[2])
    if value_width != width:
        raise FixtureError("$.value", f"values of width {value_width} beside queries and keys "
                           f"of width {width}: a head's interface takes three weights of one "
                           f"width; {READ}")
    x = np.concatenate([query, key, value], axis=-1)
    identity = np.eye(3 * width)
    weights = tuple(np.ascontiguousarray(identity[:, part * width:(part + 1) * width])
                    for part in range(3))
    for name, operand, weight in zip(("query", "key", "value"), (query, key, value), weights,
                                     strict=True):
        if not np.array_equal(x @ weight, operand):  # [B,T,3d] @ [3d,d] -> [B,T,d]
            raise FixtureError(f"$.{name}", f"[Q|K|V] times a selection of its columns does "
                               f"not give the {name} exactly here; {READ}")
    return Case("", x, weights, (upstream, upstream, upstream), step, tolerance,
                samples, suffix=suffix)


def perturbed(case: Case) -> bool:
    """Whether the check's gradient check perturbs ``case``: it has a step, and a kind
    that judges it has a backward (a KV cache's steps have none)."""
    from qkvcli.check.session import judges

    return case.step > 0 and any(kind.backward for kind in KINDS if judges(kind, case))


def check_resolved(case: Case) -> None:
    """Raise :class:`FixtureError` at the fixture's value (:func:`_where`) for a value of
    the perturbed tensors (the input and the weights) so large that ``x + step`` or
    ``x - step`` rounds back to ``x``: a central difference there has no spacing to divide
    by, whatever the implementation."""
    step = case.step
    if not perturbed(case):
        return
    for number, tensor in enumerate(case.tensors):
        values = np.asarray(tensor, dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            lost = (values + step == values) | (values - step == values)
        if lost.any():
            index = tuple(int(i) for i in np.argwhere(lost)[0])
            raise FixtureError(_where(case, number, index), f"{float(values[index]):.6g}, "
                               f"beside which the gradient check's step {step:g} rounds "
                               "back to the value (use values of a smaller scale or a "
                               "larger $.gradcheck.step)")


def _where(case: Case, number: int, index: tuple[int, ...]) -> str:
    """The fixture's JSON path of element ``index`` of the case's tensor ``number`` (the
    input, then the weights): chapter 29's Q and K stacked in the input, chapters 27's
    and 28's operands side by side in it (:func:`operand_case`)."""
    if number > 0:
        name = ("query", "key", "value", "output")[number - 1]
        return f"$.weights.{name}" + "".join(f"[{i}]" for i in index)
    if ROPE.forward in case.kinds:
        return f"$.{('query', 'key')[index[0]]}" + "".join(f"[{i}]" for i in index[1:])
    width = int(case.weights[0].shape[-1]) if case.weights else 0
    if HEAD.forward in case.kinds and width and _selects(case.weights, width):
        part, column = divmod(index[-1], width)
        return (f"$.{('query', 'key', 'value')[part]}"
                + "".join(f"[{i}]" for i in (*index[:-1], column)))
    return "$.input" + "".join(f"[{i}]" for i in index)


def _selects(weights: tuple[Array, ...], width: int) -> bool:
    """Whether ``weights`` are :func:`operand_case`'s, each selecting a third of
    ``[Q|K|V]``."""
    identity = np.eye(3 * width)
    return len(weights) == 3 and all(
        weight.shape == (3 * width, width)
        and np.array_equal(weight, identity[:, part * width:(part + 1) * width])
        for part, weight in enumerate(weights))


def engine_fails(case: Case, operations: tuple[str, ...], tolerance: float) -> Failure | None:
    """The first finding of the check's families (but purity) on qkv's own engine, given
    ``case`` alone, in each kind that judges it whose forward and backward are among
    ``operations`` (the implementation's), or ``None``: a fixture on which the engine
    fails a family (its gradient check's step or tolerance not fitting its numbers, a
    softmax so saturated that the prefix probe changes nothing) fails every correct
    implementation too. A kind the implementation offers without its backward is not
    checked here."""
    from qkvcli.check.engine import engine_implementation
    from qkvcli.check.run import plan
    from qkvcli.check.session import Session, judges

    session = Session(engine_implementation(), [case], tolerance, isolated=False,
                      given_only=True)
    for kind in (kind for kind in KINDS if judges(kind, case)
                 and {kind.forward, kind.backward} <= set(operations)):
        for name, family in plan(kind):
            if name == kind.family("purity"):
                continue
            with np.errstate(all="ignore"):
                _, failures = family(session, kind)
            found = next((failure for failure in failures
                          if not failure.no_backward and not failure.not_run), None)
            if found is not None:
                return found
    return None


def overflowing_near(case: Case) -> str | None:
    """The first of qkv's forward results that is not finite on ``case``'s input and
    weights moved by the gradient check's step (each element up, then each down), as
    :func:`overflowing` names it, or ``None``: one coordinate's perturbation reaches no
    further than all of them moving together (the projections' products are sums)."""
    from qkvcli.check.cases import overflowing as projections_overflowing

    if not perturbed(case):
        return None
    for sign in (1.0, -1.0):
        with np.errstate(over="ignore", invalid="ignore"):
            moved = case._replace(input=case.input + sign * case.step,
                                  weights=tuple(w + sign * case.step for w in case.weights))
        found = (overflowing(moved, backward=False) if case.kinds
                 else projections_overflowing(moved))
        if found is not None:
            return found
    return None


def overflowing(case: Case, backward: bool = True) -> str | None:
    """The first of qkv's results on ``case`` that is not finite, in each mode of each kind
    it is a case of, as its operation and name (``"mha_backward grad_input"``; forwards
    only unless ``backward``), or ``None``: as for a chapter 26 fixture, the protocol
    carries finite numbers only. A KV cache's results are those of the causal pass its
    steps are judged by. Raises :class:`FixtureError` when qkv's engine refuses the case."""
    from qkvcli.check.engine import cache_prefix, engine_implementation

    engine = engine_implementation()
    for kind in (kind for kind in KINDS if kind.forward in case.kinds):
        for run in kind.runs(case):
            try:
                with np.errstate(all="ignore"):
                    if kind is CACHE_STEPS:
                        w_query, w_key, w_value, w_output = case.weights
                        found = _infinite(kind.forward, ("output", "keys", "values"),
                                          cache_prefix(case.input, w_query, w_key, w_value,
                                                       w_output, case.heads, case.base))
                    else:
                        found = _infinite(kind.forward, kind.forward_names, engine.call(
                            kind.forward, kind.call_arguments(run)))
                        if found is None and kind.backward and backward:
                            found = _infinite(kind.backward, kind.backward_names, engine.call(
                                kind.backward, kind.call_arguments(run, None, run.upstream)))
            except CallFailed as failure:
                raise FixtureError("", f"qkv's engine refuses it as {kind.forward}: "
                                   f"{failure.message}") from None
            if found is not None:
                return found
    return None


def _infinite(operation: str, names: tuple[str, ...], results: Bundle) -> str | None:
    """``"operation name"`` of the first of ``results`` that is not finite, or ``None``."""
    return next((f"{operation} {name}" for name, values in zip(names, results, strict=True)
                 if not np.isfinite(values).all()), None)


def replayable(case: Case) -> bool:
    """Whether ``--save-failures`` can write ``case`` as a fixture ``qkv check`` replays:
    a chapter 26 fixture's form (an input, three weights, three upstream gradients), as a
    chapter 26 or head case is; a later chapter's fixture is replayed from its own file."""
    return not case.kinds or set(case.kinds) <= {HEAD.forward}
