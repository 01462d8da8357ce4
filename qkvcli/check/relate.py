"""Why a kind's wrong results differ from the engine's, by relation
(:mod:`~qkvcli.check.relations`), for every kind alike: what each kind gives the
relation finder (its named sizes, the axes of each result, the parts each result sums,
the other tensors of the run a result may equal, the engine in another setting or with
one stage given a wrong part), and the one diagnosis that reads them.

A run's wrong results are each named by the relations that explain them; when one is
left unexplained, the engine in another mode (the mask ignored, RoPE ignored) or with
one stage's part changed (:mod:`~qkvcli.check.stages`; RoPE's angles or positions) is
compared with the whole bundle; when nothing fits, a forward's first wrong result is
named as the first stage that diverges. The finding is ``relation-differs`` (the
relations, the mismatch), or the mismatch alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from qkvcli.check import stages
from qkvcli.check.cases import Run
from qkvcli.check.relations import Named, constants, every, leaked_band, relations, unexplained
from qkvcli.core.arrays import Array, close
from qkvcli.core.record import Record
from qkvcli.core.results import Clause

Bundle = tuple[Array, ...]
Parts = tuple[tuple[str, Array], ...]

AXES = {("scores", 3): ("batch", "query", "key"), ("weights", 3): ("batch", "query", "key"),
        ("weights", 4): ("batch", "head", "query", "key")}
"""The axes of a result whose axes are not ``[batch, token, feature]`` or ``[row, column]``."""


def axes_of(name: str, ndim: int) -> tuple[str, ...]:
    """The names of the axes of result ``name`` of ``ndim`` axes."""
    if (name, ndim) in AXES:
        return AXES[(name, ndim)]
    return {2: ("row", "column"), 3: ("batch", "token", "feature")}.get(
        ndim, tuple(f"axis {i}" for i in range(ndim)))


class Setting(Record):
    """What the relation finder knows of one run of a kind: the ``named`` sizes, each
    result's decompositions (``parts``: name to the ways it is a sum) and the tensors it
    may equal (``others``), the ``variants`` (a code and how to compute the bundle the
    engine gives with that one part changed), whether the results are stages in order
    (``staged``: a forward), the ``operation``, and with a causal mask ``leaking``: where
    the weights are among the results and the engine's results with a part changed (a
    mask that leaks, :func:`~qkvcli.check.relations.leaked_band`)."""

    named: Named
    operation: str
    parts: tuple[tuple[str, tuple[Parts, ...]], ...] = ()
    others: tuple[tuple[str, Parts], ...] = ()
    variants: tuple[tuple[str, Callable[[], Bundle]], ...] = ()
    staged: bool = False
    leaking: tuple[int, Callable[[stages.WrongPart], Bundle]] | None = None


def diagnose(names: Sequence[str], got: Bundle, expected: Bundle, setting: Setting,
             mismatch: Clause, tolerance: float) -> Clause:
    """``relation-differs`` (the relations that explain the wrong results, the mismatch,
    and every relation that holds: :func:`~qkvcli.check.relations.every`, what the
    fixtures' agreement asks of this one), or ``mismatch`` when none does."""
    found: list[Clause] = []
    held: list[Clause] = []
    wrong = [index for index, (g, e) in enumerate(zip(got, expected, strict=True))
             if not close(g, e, tolerance)]
    for index in wrong:
        name = names[index]
        arguments = (name, got[index], expected[index], setting.named,
                     axes_of(name, expected[index].ndim), tolerance,
                     dict(setting.parts).get(name, ()), dict(setting.others).get(name, ()))
        explained = relations(*arguments)
        found += explained or (unexplained(name),)
        held += every(*arguments)
    if any(clause.code == "unexplained" for clause in found):
        variants = tuple(dict.fromkeys(  # a code once, whichever of its fills fitted
            Clause("variant", (setting.operation, code)) for code, compute in setting.variants
            if _fits(got, _computed(compute), expected, tolerance)))
        leak, hides = _leak(got, expected, setting, tolerance)
        if leak is not None:  # said where it hides a key; else it is causal=false
            variants += (leak,) if hides else ()
            held.append(leak)
        if variants:
            return Clause("relation-differs", (variants, mismatch, (*variants, *held)))
        if setting.staged and wrong and found[0].code == "unexplained":
            first = wrong[0]
            found[0] = Clause("diverges", (names[first], names[first - 1] if first else ""))
            held.append(found[0])
    named = tuple(clause for clause in found if clause.code != "unexplained")
    return Clause("relation-differs", (named, mismatch, tuple(held))) if named else mismatch


def _leak(got: Bundle, expected: Bundle, setting: Setting,
          tolerance: float) -> tuple[Clause | None, bool]:
    """``variant`` (the operation, ``mask:from:m``) where the weights' zeros are a mask
    that leaks the keys nearer than ``m`` (:func:`~qkvcli.check.relations.leaked_band`)
    and the engine with that mask gives every result, and whether that mask hides a key
    at all (with none hidden it is the mask ignored); ``None`` where it does not fit."""
    if setting.leaking is None:
        return None, False
    index, compute = setting.leaking
    offset = leaked_band(got[index]) if got[index].shape == expected[index].shape else None
    if offset is None:
        return None, False
    code = f"mask:from:{offset}"
    part = stages.WrongPart(hidden=code.removeprefix("mask:"))
    if not _fits(got, _computed(lambda: compute(part)), expected,
                 tolerance):
        return None, False
    return Clause("variant", (setting.operation, code)), offset < got[index].shape[-1]


def _computed(compute: Callable[[], Bundle]) -> Bundle:
    """The bundle of a variant, or none where the engine refuses the changed part (a
    rotation of a width it cannot turn)."""
    try:
        return compute()
    except (ValueError, np.linalg.LinAlgError):
        return ()


def _defined_close(got: Array, candidate: Array, tolerance: float) -> bool:
    """``got`` is ``candidate`` wherever the candidate is defined: a row the candidate's
    mask hides whole has no softmax (NaN). ``got`` not finite exactly where the candidate
    is not fits it (the same slip, its NaN and all); a finite value there fits any, so long
    as at least half the candidate's values are defined. ``got`` not finite where the
    candidate is defined never fits."""
    if got.shape != candidate.shape:
        return False
    defined = np.isfinite(candidate)
    if defined.all():
        return close(got, candidate, tolerance)
    if not np.isfinite(got[defined]).all():
        return False
    if not (np.array_equal(~np.isfinite(got), ~defined)
            or 2 * int(defined.sum()) >= candidate.size):
        return False
    return close(got[defined], candidate[defined], tolerance)


def _fits(got: Bundle, candidate: Bundle, expected: Bundle, tolerance: float) -> bool:
    """Whether ``got`` is ``candidate`` throughout (wherever the candidate is defined),
    where ``candidate`` is not the engine's."""
    if len(candidate) != len(got):
        return False
    return all(_defined_close(g, c, tolerance)
               for g, c in zip(got, candidate, strict=True)) and not all(
        close(e, c, tolerance) for e, c in zip(expected, candidate, strict=True))


# --- what each kind gives the finder -----------------------------------------------------


def _sizes(x: Array, d_k: int, heads: int = 0) -> Named:
    batch, tokens, d_model = (int(size) for size in x.shape)
    return constants(d_k=d_k, d_model=d_model, B=batch, T=tokens, H=heads)


def _items(per_item: Callable[[slice], Bundle], index: int, batch: int) -> Parts:
    """Result ``index`` of the engine on each batch item alone: the parts a weight
    gradient sums."""
    return tuple((f"item:{b}", per_item(slice(b, b + 1))[index]) for b in range(batch))


def _paths(grads: Sequence[Array], weights: Sequence[Array], labels: Sequence[str]) -> Parts:
    """Each branch's path into ``grad_input``: ``dQ W_Q^T``, ``dK W_K^T``, ``dV W_V^T``."""
    # [B,T,h] @ [h,d] -> [B,T,d]
    return tuple((label, g @ w.T) for label, g, w in zip(labels, grads, weights, strict=True))


PATHS = ("path:query", "path:key", "path:value")


def projections_backward(run: Run) -> Setting:
    """The projections' gradients: ``grad_input`` as its three paths, each weight gradient
    as its batch items'."""
    case = run.case
    x, weights = case.input, case.weights
    batch = int(x.shape[0])
    parts: dict[str, tuple[Parts, ...]] = {
        "grad_input": (_paths(run.upstream, weights, PATHS),)}
    for index, name in enumerate(("grad_w_query", "grad_w_key", "grad_w_value")):
        # [d,T] @ [T,h] -> [d,h]: item b's part of X^T dY
        parts[name] = (tuple((f"item:{b}", x[b].T @ run.upstream[index][b])
                             for b in range(batch)),)
    return Setting(_sizes(x, int(weights[0].shape[1])), "backward", tuple(parts.items()))


HEAD_PARTS: tuple[tuple[str, stages.WrongPart], ...] = (
    ("softmax-axis:query", stages.WrongPart(softmax_axis=2)),
    ("softmax-axis:batch", stages.WrongPart(softmax_axis=0)),
    ("divisor:d_h", stages.WrongPart(divisor="d_h")),
    ("divisor:d_model", stages.WrongPart(divisor="d_model")),
    ("divisor:d_h/2", stages.WrongPart(divisor="d_h/2")),
    ("divisor:2 d_h", stages.WrongPart(divisor="2 d_h")),
)
"""The parts of a head's stages changed whatever its mode (a layer's, but the heads
axis, which a head has not)."""


FILLED = ("softmax-axis:head", "softmax-axis:batch", "mask:diagonal")
"""The parts whose softmax meets scores all hidden (a key every head hides, a cell every
batch item hides, a first row with no key): there a learner's ``-1e9`` gives a uniform
softmax and ``-inf`` gives 0/0, and each is compared as it is."""


def filled(parts: tuple[tuple[str, stages.WrongPart], ...],
           causal: bool) -> tuple[tuple[str, stages.WrongPart], ...]:
    """``parts``, and with a causal mask each of :data:`FILLED` again with a finite fill
    (:data:`~qkvcli.check.stages.FINITE_FILL`), under the same code."""
    if not causal:
        return parts
    return (*parts, *((code, part._replace(fill=stages.FINITE_FILL)) for code, part in parts
                      if code in FILLED))


def _head_staged(x: Array, weights: tuple[Array, ...], causal: bool,
                 part: stages.WrongPart) -> Bundle:
    """A head's ``(scores, weights, output)`` as a layer of one head without RoPE or an
    output projection, one part changed."""
    w_value = weights[2]
    done = stages.forward(x, (*weights, np.eye(int(w_value.shape[1]))), 1, causal, False,
                          1.0, 0, part)
    return done.scores[:, 0], done.weights[:, 0], done.output


def head_forward(run: Run, variant_forward: Callable[..., Bundle]) -> Setting:
    """A head's forward: the mask flag flipped (``variant_forward``: the head's slips'
    forward, :func:`qkvcli.check.reference.variant_forward`); output may be V itself; the
    softmax over another axis, the scores divided by another size, the mask changed (the
    layer's stages as one head)."""
    case = run.case
    x, weights, causal = case.input, case.weights, bool(run.mode)
    parts = filled(HEAD_PARTS + (MHA_MASK_PARTS + MASK_AFTER if causal else ()), causal)
    staged = tuple((code, _bound_head(x, weights, causal, part)) for code, part in parts)
    return Setting(_sizes(x, int(weights[0].shape[1])), "head_forward",
                   others=(("output", (("V", x @ weights[2]),)),),
                   variants=(("causal=" + str(not causal).lower(),
                              lambda: variant_forward(x, weights, not causal)), *staged),
                   staged=True, leaking=(1, lambda part: _head_staged(x, weights, True, part))
                   if causal else None)


def _bound_head(x: Array, weights: tuple[Array, ...], causal: bool,
                part: stages.WrongPart) -> Callable[[], Bundle]:
    return lambda: _head_staged(x, weights, causal, part)


def head_backward(run: Run, variant_backward: Callable[..., Bundle]) -> Setting:
    """A head's gradients: ``grad_input`` as its paths, each weight gradient as its batch
    items', the mask flag flipped (``variant_backward``: the head's slips' reverse,
    :func:`qkvcli.check.reference.variant_backward`), and the layer's reverse stages as
    one head's, one part changed (a reverse stage's, or its forward's)."""
    from qkvcli.attention.head import AttentionHead

    case = run.case
    x, weights, causal, upstream = case.input, case.weights, bool(run.mode), run.upstream[0]
    head = AttentionHead.from_arrays(weights[0], weights[1], weights[2])
    with np.errstate(all="ignore"):
        grads = head.backward(x, head.forward(x, causal), upstream)

    def per_item(item: slice) -> Bundle:
        return variant_backward(x[item], weights, causal, upstream[item])

    batch = int(x.shape[0])
    parts: dict[str, tuple[Parts, ...]] = {"grad_input": (_paths(
        (grads.grad_query, grads.grad_key, grads.grad_value), weights, PATHS),)}
    for index, name in enumerate(("grad_w_query", "grad_w_key", "grad_w_value"), 1):
        parts[name] = (_items(per_item, index, batch),)
    staged = filled(HEAD_PARTS + (MHA_MASK_PARTS if causal else ()), causal)
    return Setting(_sizes(x, int(weights[0].shape[1])), "head_backward", tuple(parts.items()),
                   variants=(("causal=" + str(not causal).lower(),
                              lambda: variant_backward(x, weights, not causal, upstream)),
                             *((code, _bound_head_back(x, weights, causal, upstream, part))
                               for code, part in (*MHA_REVERSE_PARTS, *staged))))


def _bound_head_back(x: Array, weights: tuple[Array, ...], causal: bool, upstream: Array,
                     part: stages.WrongPart) -> Callable[[], Bundle]:
    """A head's four gradients as a layer of one head's (no RoPE, ``W_O`` the identity),
    one part of its stages changed."""
    eye = np.eye(int(weights[2].shape[1]))
    return lambda: stages.backward(x, (*weights, eye), 1, causal, False, 1.0, 0, upstream,
                                   part)[:4]


ANGLES = (("pi/180", np.pi / 180), ("180/pi", 180 / np.pi), ("2", 2.0), ("1/2", 0.5))
"""Factors a learner's RoPE angles may carry (degrees read as radians, and back)."""


def _rope_variants(x: Array, base: float, offset: int,
                   reverse: bool) -> tuple[tuple[str, Callable[[], Bundle]], ...]:
    """RoPE's angles times a factor, and its positions read along the batch axis."""
    def turned(part: stages.WrongPart) -> Callable[[], Bundle]:
        def compute() -> Bundle:
            turn = stages.rope_turn(base, offset, int(x.shape[-1]), part)
            with np.errstate(all="ignore"):
                return (turn(x[:, None], reverse)[:, 0],)
        return compute

    found = [(f"angles:{name}", turned(stages.WrongPart(angle=value))) for name, value in ANGLES]
    found.append(("positions:batch", turned(stages.WrongPart(positions=0))))
    return tuple(found)


def rope(run: Run, reverse: bool = False) -> Setting:
    """RoPE's rotation (or its reverse, on the upstream gradient): its angles or
    positions changed."""
    case = run.case
    x = run.upstream[0] if reverse else case.input
    width = int(x.shape[-1])
    return Setting(_sizes(x, width), "rope_reverse" if reverse else "rope",
                   variants=_rope_variants(x, case.base, case.offset, reverse) if x.ndim == 3
                   else ())


MHA_PARTS: tuple[tuple[str, stages.WrongPart], ...] = (
    ("softmax-axis:head", stages.WrongPart(softmax_axis=1)),
    ("softmax-axis:query", stages.WrongPart(softmax_axis=2)),
    ("softmax-axis:batch", stages.WrongPart(softmax_axis=0)),
    ("divisor:d_h", stages.WrongPart(divisor="d_h")),
    ("divisor:d_model", stages.WrongPart(divisor="d_model")),
    ("divisor:root d_model", stages.WrongPart(divisor="root d_model")),
    ("divisor:d_h/2", stages.WrongPart(divisor="d_h/2")),
    ("divisor:2 d_h", stages.WrongPart(divisor="2 d_h")),
)
MHA_MASK_PARTS: tuple[tuple[str, stages.WrongPart], ...] = (
    ("mask:diagonal", stages.WrongPart(hidden="diagonal")),
    ("mask:earlier", stages.WrongPart(hidden="earlier")),
)
"""The parts of a layer's causal mask changed (with causal=true)."""
"""The parts of a layer's stages changed whatever its mode."""
MHA_ROPE_PARTS: tuple[tuple[str, stages.WrongPart], ...] = (
    ("rope-query-only", stages.WrongPart(turned=("query",))),
    ("rope-key-only", stages.WrongPart(turned=("key",))),
    ("rope-value-not-key", stages.WrongPart(turned=("query", "value"))),
    ("rope-before-split", stages.WrongPart(rope_first=True)),
    *((f"angles:{name}", stages.WrongPart(angle=value)) for name, value in ANGLES),
    ("positions:batch", stages.WrongPart(positions=0)),
    ("positions:head", stages.WrongPart(positions=1)),
    ("offset-ignored", stages.WrongPart(from_zero=True)),
    ("positions:from-one", stages.WrongPart(shift=1)),
)
"""The parts of a layer's RoPE changed (with rope=true)."""
MASK_AFTER: tuple[tuple[str, stages.WrongPart], ...] = (
    ("mask:after-softmax", stages.WrongPart(hidden="after-softmax")),
    ("mask:output-unmasked", stages.WrongPart(value_unmasked=True)),)
MERGE_STRIDED: tuple[tuple[str, stages.WrongPart], ...] = (
    ("merge:strided", stages.WrongPart(merge="strided")),
    ("max-axis:query", stages.WrongPart(max_axis=2)),
    ("max-axis:head", stages.WrongPart(max_axis=1)),
    ("scale-after-softmax", stages.WrongPart(scale_after=True)),)
"""A forward's causal mask applied after its softmax, and its heads merged strided (a
forward's parts alone: the reverse stages do not take them back)."""
MHA_REVERSE_PARTS: tuple[tuple[str, stages.WrongPart], ...] = (
    ("untransposed:grad_value", stages.WrongPart(untransposed="grad_value")),
    ("untransposed:grad_key", stages.WrongPart(untransposed="grad_key")),
    ("no-rowsum", stages.WrongPart(rowsum=False)),
    ("no-softmax-reverse", stages.WrongPart(softmax_reverse=False)),
    ("swapped:query-key", stages.WrongPart(swapped=True)),
    ("split-back:reshaped", stages.WrongPart(split_back="reshaped")),
    ("rowsum-axis:query", stages.WrongPart(rowsum_axis=-2)),
    ("value-path:no-w_output", stages.WrongPart(value_skips_w_output=True)),
    ("dw-output:input", stages.WrongPart(w_output_from_input=True)),
    *((f"through:{name}", stages.WrongPart(through=index))
      for index, name in enumerate(("w_query", "w_key", "w_value"))),
)
"""The reverse's stages with an operand left untransposed, a part of the softmax's
reverse left out, or dQ's and dK's operands swapped."""


def _mha_arguments(run: Run) -> tuple[Any, ...]:
    case, (causal, turned) = run.case, run.mode
    return case.input, case.weights, case.heads, causal, turned, case.base, case.offset


def _modes(run: Run, compute: Callable[..., Bundle]) -> tuple[tuple[str, Callable[[], Bundle]],
                                                             ...]:
    """The engine with each flag of the mode flipped: ``causal=false`` ...."""
    x, weights, heads, causal, turned, base, offset = _mha_arguments(run)
    found: list[tuple[str, Callable[[], Bundle]]] = [
        (f"causal={str(not causal).lower()}",
         lambda: compute(x, weights, heads, not causal, turned, base, offset))]
    if heads and (int(weights[0].shape[1]) // heads) % 2 == 0:
        found.append((f"rope={str(not turned).lower()}",
                      lambda: compute(x, weights, heads, causal, not turned, base, offset)))
    return tuple(found)


def _staged_forward(x: Array, weights: tuple[Array, ...], heads: int, causal: bool,
                    turned: bool, base: float, offset: int,
                    part: stages.WrongPart = stages.PLAIN) -> Bundle:
    done = stages.forward(x, weights, heads, causal, turned, base, offset, part)
    return done.weights, done.merged, done.output


def mha_forward(run: Run) -> Setting:
    """A layer's forward: the output may be the merged heads (``W_O`` skipped); the mode's
    flags flipped; the softmax over another axis; its RoPE changed."""
    arguments = _mha_arguments(run)
    x, weights, heads, causal, turned, base, offset = arguments
    expected = stages.forward(*arguments)
    width = int(weights[0].shape[1])
    parts = MHA_PARTS + MERGE_STRIDED + (MHA_MASK_PARTS + MASK_AFTER if causal else ())
    variants = [*_modes(run, _staged_forward),
                *((code, _bound(_staged_forward, arguments, part))
                  for code, part in filled(parts, causal))]
    if turned and heads and width % 2 == 0:
        variants += [(code, _bound(_staged_forward, arguments, part))
                     for code, part in MHA_ROPE_PARTS]
    variants += _transposed_weights(arguments, _staged_forward)
    return Setting(_sizes(x, width // max(heads, 1), heads), "mha_forward",
                   others=(("output", (("merged", expected.merged),)),),
                   variants=tuple(variants), staged=True,
                   leaking=(0, lambda part: _staged_forward(
                       x, weights, heads, causal, turned, base, offset, part))
                   if causal else None)


def _bound(compute: Callable[..., Bundle], arguments: tuple[Any, ...],
           part: stages.WrongPart) -> Callable[[], Bundle]:
    return lambda: compute(*arguments, part=part)


def mha_backward(run: Run) -> Setting:
    """A layer's gradients: ``grad_input`` as its three paths (every head's summed) or its
    heads' paths, each weight gradient as its batch items'; the mode's flags flipped; a
    reverse stage with an operand untransposed."""
    arguments = _mha_arguments(run)
    x, weights, heads, causal, turned, base, offset = arguments
    upstream = run.upstream[0]

    def compute(x: Array, weights: tuple[Array, ...], heads: int, causal: bool, turned: bool,
                base: float, offset: int, part: stages.WrongPart = stages.PLAIN) -> Bundle:
        return stages.backward(x, weights, heads, causal, turned, base, offset, upstream, part)

    def per_item(item: slice) -> Bundle:
        return stages.backward(x[item], weights, heads, causal, turned, base, offset,
                               upstream[item])

    batch, width = int(x.shape[0]), int(weights[0].shape[1])
    parts: dict[str, tuple[Parts, ...]] = {"grad_input": (_mha_paths(run),)}
    for index, name in enumerate(("grad_w_query", "grad_w_key", "grad_w_value",
                                  "grad_w_output"), 1):
        parts[name] = (_items(per_item, index, batch),)
    # the reverse of a forward with a part changed too: its backward is consistent with it
    consistent = list(filled(MHA_PARTS + (MHA_MASK_PARTS if causal else ()), causal))
    if turned and heads and width % 2 == 0:
        consistent += MHA_ROPE_PARTS
        # the turn back alone wrong (rope_reverse's slip inside the layer)
        consistent += [("back:" + code, part._replace(back_only=True))
                       for code, part in MHA_ROPE_PARTS]
    variants = [*_modes(run, compute),
                *((code, _bound(compute, arguments, part))
                  for code, part in (*MHA_REVERSE_PARTS, *consistent)),
                *_transposed_weights(arguments, compute)]
    if all(w.shape[0] == w.shape[1] for w in weights[:3]):  # dX = dQ W_Q + ...
        variants.append(("untransposed:grad_input", _bound(
            compute, arguments, stages.WrongPart(untransposed="grad_input"))))
    if weights[3].shape[0] == weights[3].shape[1]:  # W_O left out of the reverse alone
        skipped = (*weights[:3], np.eye(weights[3].shape[0]))
        variants.append(("skipped:w_output", _with_weights(compute, x, skipped,
                                                           list(arguments[2:]))))
    return Setting(_sizes(x, width // max(heads, 1), heads), "mha_backward",
                   tuple(parts.items()),
                   variants=tuple(variants))


WEIGHTS = ("w_query", "w_key", "w_value", "w_output")


def _transposed_weights(arguments: tuple[Any, ...], compute: Callable[..., Bundle]
                        ) -> list[tuple[str, Callable[[], Bundle]]]:
    """The stages given one square weight transposed (``X W^T``, ``C W_O^T``)."""
    x, weights, *rest = arguments
    found: list[tuple[str, Callable[[], Bundle]]] = []
    for index, name in enumerate(WEIGHTS):
        if weights[index].shape[0] == weights[index].shape[1]:
            given = tuple(w.T if i == index else w for i, w in enumerate(weights))
            found.append((f"transposed:{name}", _with_weights(compute, x, given, rest)))
    return found


def _with_weights(compute: Callable[..., Bundle], x: Array, weights: tuple[Array, ...],
                  rest: list[Any]) -> Callable[[], Bundle]:
    return lambda: compute(x, weights, *rest)


def _mha_paths(run: Run) -> Parts:
    """Each branch's path into a layer's ``grad_input``, every head's summed: the stages'
    gradient with the other branches' weights zeroed has that path alone."""
    x, weights, heads, causal, turned, base, offset = _mha_arguments(run)
    done = stages.forward(x, weights, heads, causal, turned, base, offset)
    found = []
    grads = stages.branch_gradients(x, weights, heads, causal, turned, base, offset,
                                    run.upstream[0], done)
    for label, grad, weight in zip(PATHS, grads, weights[:3], strict=True):
        found.append((label, grad @ weight.T))  # [B,T,W] @ [W,d] -> [B,T,d]
    return tuple(found)


CACHE_PARTS: tuple[tuple[str, stages.WrongPart], ...] = (
    *MHA_PARTS, *MHA_MASK_PARTS, *MASK_AFTER, *MERGE_STRIDED, *MHA_ROPE_PARTS,
    ("mask:own-key", stages.WrongPart(hidden="own")),
)
"""The parts of a cached layer's stages changed: a layer's, and each step reading the
earlier keys alone (the first its own)."""


def cache_variants(x: Array, weights: tuple[Array, ...], heads: int, base: float,
                   got: Bundle, tolerance: float) -> tuple[Clause, ...]:
    """``variant`` clauses (``cache_steps``, a code of :data:`CACHE_PARTS`) for each part
    whose causal pass gives a cache's whole run ``got`` (``(output, keys, values)``: each
    step's output, the keys and values held after the last) where the engine's does not:
    a cached step is the last row of the causal pass over its prefix, so the pass's
    rows with one part changed are what a cache with that slip gives."""
    width = int(weights[0].shape[1])
    if not heads or width % heads or (width // heads) % 2 or not x.size:
        return ()

    def bundle(part: stages.WrongPart) -> Bundle:
        done = stages.forward(x, weights, heads, True, True, base, 0, part)
        return done.output, done.key, done.value

    def bound(part: stages.WrongPart) -> Callable[[], Bundle]:
        return lambda: bundle(part)

    expected = bundle(stages.PLAIN)
    whole: list[Clause] = []  # fitted where the candidate is defined throughout
    partly: list[Clause] = []  # fitted where it is defined (a row it leaves 0/0)
    for code, part in filled(CACHE_PARTS, True):
        candidate = _computed(bound(part))
        if _fits(got, candidate, expected, tolerance):
            defined = all(np.isfinite(c).all() for c in candidate)
            (whole if defined else partly).append(Clause("variant", ("cache_steps", code)))
    return tuple(dict.fromkeys(whole or partly))
