"""How qkv's engine made the expected value of a failing ``qkv check`` finding: its terms.

Where a finding's result is one a stage of :mod:`qkvcli.stages` describes, the engine's
number opens the stage's terms with the operands' values from the engine's own pass on
the same fixture (:func:`engine_terms`): the projections and their reverse, a head's
scaled scores, weights, mixture and reverse, RoPE's turn and its turn back, a multi-head
layer's weights, merged heads, output and gradients, and a KV cache's step output and
cached keys and values. The findings of families whose expected value is not the
engine's result on the fixture (independence, the probes, the gradient check) have no
terms here: their panel gives the comparison alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from qkvcli.check.cases import Case, Run
from qkvcli.check.kinds import CACHE_STEPS, HEAD, MULTI_HEAD, PROJECTIONS, ROPE, Kind
from qkvcli.core.arrays import Array
from qkvcli.render.explorer.derive import BRANCHES, Makers, branch_gradients, branches
from qkvcli.stages.terms import (
    MINUS,
    Derivation,
    Step,
    attention_weight,
    mixture,
    projection,
    rotation,
    scores,
    weight_gradient,
)

FAMILY_KINDS: dict[str, Kind] = {"forward": PROJECTIONS, "reverse": PROJECTIONS,
                                 "head-forward": HEAD, "head-reverse": HEAD, "rope": ROPE,
                                 "rope-reverse": ROPE, "multi-head": MULTI_HEAD,
                                 "multi-head-reverse": MULTI_HEAD, "cache-steps": CACHE_STEPS}
"""The families whose expected value is the engine's result on the run itself, by kind."""
PUBLISHED = {"grad_input": "input_gradient",
             **{f"grad_w_{b}": f"{b}_weight_gradient" for _, b in BRANCHES}}
"""A finding's gradient by the name the explorer's terms give it."""
Maker = Callable[[Run, str, tuple[int, ...], float], Derivation | None]


def parse_at(text: str) -> tuple[str, tuple[int, ...]] | None:
    """``grad_input[0,1,2]`` (or a name and ``[0,1,2]`` apart): the name and coordinate."""
    name, _, rest = text.partition("[")
    if not rest.endswith("]"):
        return None
    try:
        return name, tuple(int(i) for i in rest[:-1].split(",") if i != "")
    except ValueError:
        return None


def run_of(kind: Kind, label: str, cases: Sequence[Case]) -> Run | None:
    """The run labelled ``label`` among the kind's fixtures (its own, else the check's)."""
    candidates = kind.fixtures() if kind.fixtures is not None else [
        case for case in cases if kind.takes(case)]
    for case in candidates:
        for run in kind.runs(case):
            if run.label == label:
                return run
    return None


def engine_terms(family: str, label: str | None, tensor: str, at: tuple[int, ...],
                 value: float, cases: Sequence[Case]) -> Derivation | None:
    """The terms of the engine's ``value`` at ``tensor[at]`` on the run ``label`` of the
    failing ``family`` (``None``: no stage describes it, or the run is not among
    ``cases`` and the kind's own fixtures)."""
    kind = FAMILY_KINDS.get(family)
    if kind is None or label is None:
        return None
    run = run_of(kind, label, cases)
    if run is None:
        return None
    maker = MAKERS[kind.forward]
    try:
        with np.errstate(all="ignore"):
            found = maker(run, tensor, at, value)
    except (IndexError, ValueError, ArithmeticError):  # a coordinate the pass does not hold
        return None
    return found if found is not None and makes(found, value) else None


def makes(derivation: Derivation, value: float) -> bool:
    """Whether ``derivation`` makes ``value`` (its terms' sum, or a softmax weight's
    exponential over its row's sum, within a millionth): terms of another number are
    never shown beside it."""
    if derivation.terms_total == "sum":
        made = derivation.term_sum()
    else:
        rows = {row.label: row.value for row in derivation.rows}
        if derivation.stage == "scale":
            raw, factor = rows.get("raw score S = q\u00b7k"), rows.get("scale")
            if not isinstance(raw, float) or not isinstance(factor, float):
                return False
            made = raw * factor
        else:
            top, total = rows.get(f"exp(z {MINUS} max) of this key"), rows.get(
                "sum of the row's exponentials")
            if not isinstance(top, float) or not isinstance(total, float) or total == 0.0:
                return False
            made = top / total
    return bool(abs(made - value) <= 1e-6 * max(1.0, abs(value)))


def _projections(run: Run, tensor: str, at: tuple[int, ...], value: float) -> Derivation | None:
    case = run.case
    return _reverse(case.input, case.weights, case.upstream, tensor, at, value, "U_{}")


def _reverse(x: Array, weights: Sequence[Array], grads: Sequence[Array], tensor: str,
             at: tuple[int, ...], value: float, gradient: str) -> Derivation | None:
    """A projection, dX's three paths or a ``dW``, from the gradients at each
    projection's output (``gradient``: their name, with the branch's letter)."""
    found: Makers = {}
    names = [branch for _, branch in BRANCHES]
    branches(x, dict(zip(names, weights, strict=False)), dict(zip(names, grads, strict=False)),
             found, gradient)
    make = found.get(PUBLISHED.get(tensor, tensor))
    return make(at, value) if make is not None else None


def _head(run: Run, tensor: str, at: tuple[int, ...], value: float) -> Derivation | None:
    from qkvcli.attention.head import AttentionHead
    from qkvcli.attention.maths import score_factor

    case = run.case
    w_query, w_key, w_value = case.weights[:3]
    head = AttentionHead.from_arrays(w_query, w_key, w_value)
    done = head.forward(case.input, bool(run.mode))
    factor = score_factor(head.d_k, head.given_scale)
    if tensor == "scores":  # scaled, before the mask
        raw = scores(done.query, done.key, at, float(done.scores[at]))
        rows = (Step("raw score S = q\u00b7k", float(done.scores[at]), "fact"),
                Step("scale", factor, "fact"),
                *(row._replace(label=f"  {row.label}", part="fact") for row in raw.rows))
        return Derivation(f"{raw.formula}, times the scale", rows, value, "none", "scale")
    if tensor == "weights":
        return _weight(done.scores, factor, done.scaled_scores, done.attention, done.query,
                       done.key, at)
    if tensor == "output":
        return mixture(done.attention, done.value, at, value)
    grads = head.backward(case.input, done, run.upstream[0])
    return _reverse(case.input, case.weights, (grads.grad_query, grads.grad_key,
                                               grads.grad_value), tensor, at, value, "d{}")


def _weight(raw: Array, factor: float, softmax_input: Array, weights: Array, q: Array, k: Array,
            at: tuple[int, ...], names: tuple[str, str] = ("Q", "K")) -> Derivation:
    """An attention weight's softmax over its scaled scores, its raw score's own terms
    (``q``·``k``, called ``names``) listed under it."""
    raw = np.asarray(raw)
    return attention_weight(raw, raw * factor, softmax_input, weights, at, factor,
                            score=scores(q, k, at, float(raw[at]), names))


def _rope(run: Run, tensor: str, at: tuple[int, ...], value: float) -> Derivation | None:
    from qkvcli.attention.maths import rope_tables
    from qkvcli.core.rope import Rope

    case = run.case
    inverse = tensor == "turned_back"
    x = run.upstream[0] if inverse else case.input
    tokens = int(x.shape[-2])
    cos, sin = rope_tables(Rope(case.base, int(x.shape[-1]), "interleaved", case.offset), 0,
                           tokens)
    names = ("U", "dx") if inverse else ("x", "x'")
    return rotation(x, cos, sin, at, value, "interleaved", names, inverse=inverse,
                    position=case.offset + at[-2])


def _cache(run: Run, tensor: str, at: tuple[int, ...], value: float) -> Derivation | None:
    """A step's output (``output[b,e]`` of the step at position ``at``'s first), or the
    cached keys and values after the last step, from the engine's causal pass."""
    from qkvcli.attention import engine
    from qkvcli.attention.maths import rope_tables
    from qkvcli.check.reference import checked_layer

    case = run.case
    layer = checked_layer(case.weights, case.heads, case.base)
    x = case.input
    if tensor == "output":  # at: (position, b, e): the last row of the pass over the prefix
        position, b, e = at
        done = engine.forward(layer, x[:, :position + 1], True)
        return projection(done.concat, case.weights[3], None, (b, position, e), value,
                          ("C", "W_O", "b_O"), "output projection")
    done = engine.forward(layer, x, True)
    b, h, t, c = at
    if tensor == "values":
        d_v = int(done.stacked["value"].shape[-1])
        found = projection(x, case.weights[2], None, (b, t, h * d_v + c), value,
                           ("X", "W_V", "b_V"))
        return found._replace(formula=f"{found.formula}; head {h}'s columns (the head split)")
    if tensor == "keys":
        keys = done.stacked["key"]
        assert layer.rope is not None  # a cache's layer turns Q and K
        cos, sin = rope_tables(layer.rope, 0, int(x.shape[1]))
        return rotation(keys, cos, sin, at, value, layer.rope.layout, ("K_h", "RK_h"))
    return None


def _multi_head(run: Run, tensor: str, at: tuple[int, ...], value: float
                ) -> Derivation | None:
    """A multi-head layer's weights, merged heads and output, and its five gradients,
    from the engine's layer of the run's mode (the mask, RoPE from the fixture's offset)."""
    from qkvcli.attention.head import AttentionHead
    from qkvcli.attention.maths import score_factor
    from qkvcli.attention.multihead import MultiHeadLayer
    from qkvcli.core.rope import Rope

    case = run.case
    causal, turned = run.mode
    w_query, w_key, w_value, w_output = case.weights
    width = int(w_query.shape[1])
    rotary = Rope(case.base, width // case.heads, "interleaved", case.offset) if turned else None
    head = AttentionHead.from_arrays(w_query, w_key, w_value, rope=rotary)
    layer = MultiHeadLayer.build(head, case.heads, out_weight=w_output)
    x = case.input
    done = layer.forward(x, bool(causal))
    stacked = done.stacked
    if tensor == "weights":
        turn = "rotated_" if turned else ""
        return _weight(stacked["scores"], score_factor(head.d_k, head.given_scale),
                       stacked["scaled_scores"], stacked["attention"],
                       stacked[f"{turn}query"], stacked[f"{turn}key"], at,
                       ("RQ_h", "RK_h") if turned else ("Q_h", "K_h"))
    if tensor == "merged":
        b, t, column = at
        d_v = int(stacked["value"].shape[-1])
        found = mixture(stacked["attention"], stacked["value"], (b, column // d_v, t, column % d_v),
                        value, names=("A", "V_h"))
        return found._replace(formula=f"{found.formula}; head {column // d_v}'s columns of "
                              "the merge")
    if tensor == "output":
        return projection(done.concat, w_output, None, at, value, ("C", "W_O", "b_O"),
                          "output projection")
    grads = layer.backward(x, done, run.upstream[0])
    if tensor == "grad_w_output":
        return weight_gradient(done.concat, run.upstream[0], (at[0], at[1]), value, "U", "C")
    merged = branch_gradients(grads)
    return _reverse(x, (w_query, w_key, w_value), [merged[b] for _, b in BRANCHES], tensor,
                    at, value, "d{}")


MAKERS: dict[str, Maker] = {PROJECTIONS.forward: _projections, HEAD.forward: _head,
                            ROPE.forward: _rope, MULTI_HEAD.forward: _multi_head,
                            CACHE_STEPS.forward: _cache}


def as_float(text: Any) -> float | None:
    """A number a finding holds (a float, or its exact spelling), else ``None`` (a shape)."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return None
