"""Which stage made each tensor a report publishes, and from which of its tensors.

A report's JSON document names its tensors (``dot_products``, ``rotated_query``,
``projected_query_heads``, ...); :func:`document_derivers` gives, for each one the page
can explain, a function from a coordinate to its terms: the stage's description
(:mod:`qkvcli.stages`) applied to the document's own arrays (and, where the document
leaves an operand out, to the engine's arrays of the same pass, ``extra``). The
tensors a fixture gives are listed apart (``given``): their panels say so.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from qkvcli.core.arrays import Array
from qkvcli.render.explorer.page import Deriver
from qkvcli.stages.terms import (
    Derivation,
    attention_weight,
    copied,
    facts,
    grad_keys,
    grad_queries,
    grad_values,
    input_paths,
    mask_entry,
    masked,
    mixture,
    mixture_term,
    projection,
    rotation,
    row_sum,
    scaled,
    scores,
    weight_gradient,
)

MAPS = ("probabilities", "attention_weights", "weights")
"""The published names of an attention matrix, drawn as heat maps."""
SCORES = ("dot_products", "raw_scores", "scores")
"""The published names of the raw scores an attention matrix is the softmax of."""
GIVEN = ("input", "query_weight", "key_weight", "value_weight", "output_weight", "upstream",
         "upstream_query", "upstream_key", "upstream_value", "suffix")
"""Published names of the tensors a fixture gives (Q, K and V too, where the chapter's
``config.source`` is ``operands``, and chapter 29's Q and K)."""


def _scale(raw: Array, scaled_scores: Array) -> float:
    """The factor between the raw and the scaled scores (their first non-zero pair)."""
    for a, b in zip(raw.reshape(-1), scaled_scores.reshape(-1), strict=True):
        if a != 0.0 and math.isfinite(b):
            return float(b / a)
    return 1.0


BRANCHES = (("Q", "query"), ("K", "key"), ("V", "value"))
Make = Callable[..., Derivation | None]
"""How a tensor's numbers are made: ``make(coordinate, the value there)``."""
Makers = dict[str, Make]


def each(array: Array, make: Make) -> Deriver:
    """A deriver of ``array``: ``make(coordinate, the value there)``."""
    def derive(at: tuple[int, ...]) -> Derivation | None:
        return make(at, float(array[at]))
    return derive


def derivers(arrays: Mapping[str, Array], makers: Mapping[str, Make]) -> dict[str, Deriver]:
    """The deriver of each tensor of ``arrays`` that one of ``makers`` makes."""
    return {name: each(arrays[name], make) for name, make in makers.items() if name in arrays}


def branches(x: Array, weights: Mapping[str, Array], upstreams: Mapping[str, Array] | None,
             found: Makers, gradient: str = "U_{}", d_head: int = 0) -> None:
    """The three projections of ``x`` by ``weights`` (by branch), as ``query`` or, split
    into heads of width ``d_head``, ``projected_query_heads``; given each branch's
    incoming gradient (``upstreams``, called ``gradient`` with the branch's letter), each
    weight's gradient and dX's three paths too."""
    for n, b in BRANCHES:
        found[f"projected_{b}_heads" if d_head else b] = lambda at, v, w=weights[b], n=n: _split(
            projection(x, w, None, (at[0], at[2], at[1] * d_head + at[3]) if d_head else at,
                       v, ("X", f"W_{n}", f"b_{n}")), at[1] if d_head else None)
        if upstreams is not None:
            found[f"{b}_weight_gradient"] = lambda at, v, u=upstreams[b], n=n: weight_gradient(
                x, u, (at[0], at[1]), v, gradient.format(n))
    if upstreams is not None:
        found["input_gradient"] = lambda at, v: input_paths(
            [upstreams[b] for _, b in BRANCHES], [weights[b] for _, b in BRANCHES], at, v,
            [gradient.format(n) for n, _ in BRANCHES])


def head_derivers(a: Mapping[str, Array], found: Makers) -> None:
    """A head on Q, K, V (chapters 27 and 28): scores, scale, mask, softmax, mixture and
    the reverse back to Q, K and V."""
    from qkvcli.stages.terms import attention_reverse

    weights = next(a[name] for name in MAPS if name in a)
    raw = next((a[name] for name in SCORES if name in a), None)
    q, k, v = a["query"], a["key"], a["value"]
    scaled_scores = a["scaled_scores"]
    softmax_input = a.get("masked_scores", scaled_scores)
    factor = _scale(raw, scaled_scores) if raw is not None else 1.0
    if raw is not None:
        for name in SCORES:
            found[name] = lambda at, x: scores(q, k, at, x)
        found["scaled_scores"] = lambda at, x: scaled(float(raw[at]), factor, x)
    found["mask"] = lambda at, x: mask_entry(not math.isfinite(x), at[-2], at[-1], x)
    found["masked_scores"] = lambda at, x: masked(float(scaled_scores[at]),
                                                  not math.isfinite(x), x)
    for name in MAPS:
        found[name] = lambda at, x: attention_weight(raw, scaled_scores, softmax_input,
                                                     weights, at, factor)
    found["row_sums"] = lambda at, x: row_sum(weights, at, x)
    found["mixture_terms"] = lambda at, x: mixture_term(weights, v, at, x)
    found["output"] = lambda at, x: mixture(weights, v, at, x)
    upstream = a.get("upstream")
    if upstream is None or upstream.shape != a.get("output", upstream).shape:
        return
    _, _, grad_scores = attention_reverse(weights, v, upstream, factor)
    found["value_gradient"] = lambda at, x: grad_values(weights, upstream, at, x)
    found["query_gradient"] = lambda at, x: grad_queries(grad_scores, k, at, x)
    found["key_gradient"] = lambda at, x: grad_keys(grad_scores, q, at, x)


def rope_derivers(a: Mapping[str, Array], config: Mapping[str, Any],
                  tables: Callable[[int], tuple[Array, Array]], found: Makers) -> None:
    """Chapter 29: the frequencies, the angles, their cosines and sines, the turned Q and
    K at the positions and shifted, their dot products and the turn back of the gradients.
    ``tables(offset)``: the engine's cosines and sines of the tokens from ``offset``."""
    layout = "half" if config.get("layout") == "half" else "interleaved"
    base, features = float(config.get("base", 0.0)), int(config.get("features", 0))
    positions = [int(p) for p in config.get("token_positions", [])]
    shift = int(config.get("shift", 0))
    found["inverse_frequencies"] = lambda at, x: facts(
        "rope frequency", f"base^(\u22122\u00b7{at[0]}/{features})",
        [("base", base), ("exponent \u22122i/d", -2 * at[0] / features)], x)
    if positions:
        found["angles"] = lambda at, x: facts(
            "rope angle", f"position {positions[at[0]]} \u00d7 \u03c9_{at[1]}",
            [("position p", float(positions[at[0]])),
             (f"\u03c9_{at[1]}", float(a["inverse_frequencies"][at[1]]))], x)
    for name, fn in (("cosines", "cos"), ("sines", "sin")):
        found[name] = lambda at, x, fn=fn: facts(
            "rope angle", f"{fn}\u03b8 of the angle \u03b8{list(at)}",
            [("\u03b8", float(a["angles"][at]))], x)
    cos, sin = tables(int(config.get("offset", 0)))
    shifted = tables(int(config.get("shifted_offset", 0)))
    for n, branch in BRANCHES[:2]:
        found[f"rotated_{branch}"] = lambda at, v, b=branch, n=n: rotation(
            a[b], cos, sin, at, v, layout, (n, f"R{n}"), position=positions[at[0]])
        found[f"shifted_{branch}"] = lambda at, v, b=branch, n=n: rotation(
            a[b], *shifted, at, v, layout, (n, f"R'{n}"), position=positions[at[0]] + shift)
        found[f"{branch}_gradient"] = lambda at, v, b=branch, n=n: rotation(
            a[f"upstream_{b}"], cos, sin, at, v, layout, (f"U_{n}", f"d{n}"), inverse=True,
            position=positions[at[0]])
    for grid, prefix, m in (("dot_grid", "rotated", "R"), ("shifted_dot_grid", "shifted", "R'")):
        found[grid] = lambda at, v, p=prefix, m=m: scores(
            a[f"{p}_query"], a[f"{p}_key"], at, v, (f"{m}Q", f"{m}K"))


def layer_derivers(a: Mapping[str, Array], e: Mapping[str, Array], layout: str,
                   found: Makers) -> None:
    """Chapter 30: the projections split into heads, RoPE, each head's softmax and
    mixture, the merge, the output projection and the reverse to X and every weight;
    ``e`` the engine's arrays of the same pass (the weights, scores, cosines and sines,
    the gradients at each branch) that the document leaves out."""
    x, d_head = a["input"], int(a["projected_query_heads"].shape[-1])
    branches(x, {b: e[f"{b}_weight"] for _, b in BRANCHES},
             {b: e[f"grad_{b}"] for _, b in BRANCHES}, found, "d{}", d_head)
    for n, branch in BRANCHES[:2]:
        found[f"rotated_{branch}_heads"] = lambda at, v, b=branch, n=n: rotation(
            a[f"projected_{b}_heads"], e["cos"], e["sin"], at, v, layout, (f"{n}_h", f"R{n}_h"))
    weights, merged = a["attention_weights"], a["merged"]
    found["attention_weights"] = lambda at, v: attention_weight(
        e["scores"], e["scaled"], e["masked"], weights, at, float(e["scale"][()]))
    found["head_outputs"] = lambda at, v: mixture(weights, a["projected_value_heads"], at, v,
                                                  names=("A", "V_h"))
    found["merged"] = lambda at, v: copied(
        "head merge", "O_h", (at[0], at[2] // d_head, at[1], at[2] % d_head), v)
    found["output"] = lambda at, v: projection(
        merged, a["output_weight"], None, at, v, ("C", "W_O", "b_O"), "output projection")
    found["output_weight_gradient"] = lambda at, v: weight_gradient(
        merged, a["upstream"], (at[0], at[1]), v, "U", "C")
    found["prefix_perturbed_output"] = lambda at, v: _prefix(a["output"], at, v)


def _split(derivation: Derivation, head: int | None) -> Derivation:
    """A projection's element, placed in head ``head`` by the head split (``None``: as
    it is)."""
    if head is None:
        return derivation
    return derivation._replace(formula=f"{derivation.formula}; head {head}'s columns "
                               "(the head split)")


def _prefix(output: Array, at: tuple[int, ...], value: float) -> Derivation:
    """A row of the output with the last token replaced: an earlier row is the output's."""
    earlier = at[1] < int(output.shape[1]) - 1
    return facts("output projection", "the layer's output with the last token replaced "
                 "by the fixture's suffix: " + (
                     "an earlier row sees no later token, so it is the output's own"
                     if earlier else "the last row sees the new token"),
                 [(f"output[{','.join(map(str, at))}]", float(output[at])),
                  ("the same", "yes" if float(output[at]) == value else "no")], value)


def document_derivers(a: Mapping[str, Array], config: Mapping[str, Any],
                      extra: Mapping[str, Array],
                      tables: Callable[[int], tuple[Array, Array]] | None
                      ) -> tuple[dict[str, Deriver], set[str]]:
    """The derivers of a document's tensors ``a`` and the names the fixture gave.

    ``config``: the document's ``config``; ``extra``: the engine's arrays the document
    leaves out (chapter 30's weights and reverse); ``tables``: the engine's RoPE tables
    from an offset (chapter 29)."""
    found: Makers = {}
    given = {name for name in GIVEN if name in a or name in extra}
    if "projected_query_heads" in a and extra:
        layout = "half" if config.get("rope_layout") == "half" else "interleaved"
        layer_derivers(a, extra, layout, found)
    elif "rotated_query" in a and tables is not None:
        given |= {"query", "key"}
        rope_derivers(a, config, tables, found)
    elif "query" in a and any(name in a for name in MAPS):
        if config.get("source", "operands") == "operands":
            given |= {"query", "key", "value"}
        elif "input" in extra:
            branches(extra["input"], {b: extra[f"{b}_weight"] for _, b in BRANCHES}, None,
                     found)
        head_derivers(a, found)
    elif "query_weight" in a and "input" in a:  # chapter 26: the projections and their reverse
        branches(a["input"], {b: a[f"{b}_weight"] for _, b in BRANCHES},
                 {b: a[f"upstream_{b}"] for _, b in BRANCHES}, found)
    return derivers(a, found), given


Tables = Callable[[int], tuple[Array, Array]]
"""The engine's RoPE cosines and sines ``[T, pairs]`` of the tokens from an offset."""


def engine_operands(evidence: Any) -> tuple[dict[str, Array], Tables | None]:
    """What a chapter's document leaves out, from its evidence: the inputs its fixture
    gave (chapter 30's weights; a head's X and weights where its fixture gave them) and
    the engine's arrays of the same pass that terms need (chapter 30's scores, mask,
    RoPE tables and the gradient at each branch; chapter 29's RoPE tables)."""
    fixture = getattr(evidence, "fixture", None)
    inputs = getattr(fixture, "inputs", fixture)
    extra: dict[str, Array] = {}
    if inputs is not None and getattr(inputs, "source", "") == "projections" and (
            inputs.weights is not None):
        extra["input"] = inputs.x
        for branch, weight in zip(("query", "key", "value"), inputs.weights, strict=True):
            extra[f"{branch}_weight"] = weight
    table = getattr(fixture, "table", None)
    if table is not None and fixture is not None and getattr(fixture, "query", None) is not None:
        from qkvcli.attention.maths import rope_tables

        tokens = int(fixture.query.shape[-2])
        return extra, lambda offset: rope_tables(table.rope(offset), 0, tokens)
    spec = getattr(fixture, "spec", None)
    if spec is not None and all(hasattr(fixture, name) for name in ("input", "upstream",
                                                                    "offset")):
        extra.update(_layer_pass(fixture))
    return extra, None


def _layer_pass(fixture: Any) -> dict[str, Array]:
    """Chapter 30's pass through the engine, again: the arrays its terms need."""
    from qkvcli.attention import engine
    from qkvcli.attention.maths import causal_mask, rope_tables, score_factor
    from qkvcli.chapters.ch30 import forward_checked

    spec = fixture.spec
    layer, x, forward = forward_checked(spec, fixture.input, fixture.offset)
    with np.errstate(over="ignore", invalid="ignore"):
        grads = engine.backward(layer, x, forward, fixture.upstream)
    stacked = forward.stacked
    tokens = int(x.shape[1])
    hidden = causal_mask(tokens)
    cos, sin = rope_tables(spec.table.rope(fixture.offset), 0, tokens)
    found = {"query_weight": spec.w_query, "key_weight": spec.w_key,
             "value_weight": spec.w_value, "scores": stacked["scores"],
             "scaled": stacked["scaled_scores"],
             "masked": np.where(hidden, -np.inf, stacked["scaled_scores"]),
             "scale": np.asarray(score_factor(int(stacked["query"].shape[-1]), None)),
             "cos": cos, "sin": sin}
    found.update({f"grad_{b}": grad for b, grad in branch_gradients(grads).items()})
    return found


def branch_gradients(grads: Any) -> dict[str, Array]:
    """A layer's gradient at each branch's projection output, its heads merged
    ``[B,T,H*d_h]``, by branch (``grads``: the engine's ``LayerGradients``)."""
    from qkvcli.attention.engine import merge_heads

    return {b: merge_heads(np.stack([getattr(h, f"grad_{b}") for h in grads.heads], axis=1))
            for _, b in BRANCHES}
