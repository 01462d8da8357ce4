"""The explorer page of ``qkv attend``: one attention head or a multi-head layer.

Drawn from attend's facts value (:func:`qkvcli.render.attend.facts`, its tensors kept as
arrays) through the sections every report's page shares
(:mod:`qkvcli.render.explorer.document`); attend's own are the order of its stages and
the terms of each tensor by vocabulary name (:func:`derivations`). A derivation is
offered where the evidence holds every array it needs in one layout: grouped K/V heads
(per query head tensors, per K/V head weights) have no projection or weight-gradient
terms for K and V, and RoPE (whose ``dQ``/``dK`` are turned back) no ``dX`` paths.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape

import numpy as np

from qkvcli.attention.engine import heads_axis
from qkvcli.attention.records import AttendConfig, AttendEvidence
from qkvcli.core.arrays import Array
from qkvcli.render.attend import FORWARD, PARAMETERS, REVERSE, facts, formula_of, published_name
from qkvcli.render.document import head
from qkvcli.render.explorer.checks import checks_section, entries_of
from qkvcli.render.explorer.derive import BRANCHES, Makers, derivers
from qkvcli.render.explorer.document import (
    finished,
    given_of,
    tensor_blocks,
    tensors_of,
)
from qkvcli.render.explorer.page import Deriver, Page, PageAsked
from qkvcli.render.numbers import fmt_general
from qkvcli.stages.terms import (
    attention_weight,
    bias_gradient,
    grad_keys,
    grad_queries,
    grad_values,
    grad_weights,
    input_paths,
    mixture,
    projection,
    scaled,
    scores,
    softmax_reverse,
    weight_gradient,
)

TORCH_LAYOUTS = ("separate-torch", "packed", "query_key_value")
"""Layouts whose per-branch weights the evidence holds as torch ``[out, in]``."""
LETTERS = {"query": "Q", "key": "K", "value": "V"}
VOCABULARY = (*PARAMETERS, *FORWARD, *REVERSE)
"""Every tensor attend's evidence may hold, by vocabulary name."""
STAGES = (("Parameters and input", PARAMETERS),
          ("Forward: Q, K, V; S = Q Kᵀ; Z = S \u00d7 scale (masked: \u2212∞); A = softmax(Z); O = A V",
           FORWARD),
          ("Reverse: L = ⟨O, U⟩ back to X and every parameter", REVERSE))


def transposed(weight: Array, rows: int, layout: str) -> bool | None:
    """Whether ``weight`` (a branch's weight as the evidence holds it) is torch ``[out,
    in]`` for an input of width ``rows``; ``None`` when neither its shape nor the layout
    says (a square weight in a mixed layout), or when it does not read the whole input (a
    layer whose value reads a value_input: its weights read some of the columns)."""
    out_in, in_out = weight.shape[1] == rows, weight.shape[0] == rows
    if not (out_in or in_out):
        return None
    if in_out and not out_in:
        return False
    if out_in and not in_out:
        return True
    if layout == "separate-mixed":
        return None
    return layout in TORCH_LAYOUTS


def attend_page(evidence: AttendEvidence, asked: PageAsked) -> str:
    """The head's or layer's explorer page (one self-contained HTML document), drawn from
    its facts value (:func:`~qkvcli.render.attend.facts`: its tensors stay arrays) as
    every report's page is (:mod:`qkvcli.render.explorer.document`); the weights under
    the other mask, which the report does not publish, are drawn from the evidence
    behind a causal toggle when it holds them."""
    c = evidence.config
    found = {**head("attend", chapter=evidence.chapter, passed=evidence.passed),
             **facts(evidence)}
    arrays = tensors_of(found, digests=True)
    shown = tensors_of(found)
    other = evidence.other_mask
    page = Page(asked.title, asked.precision)
    page.select("batch", "batch item", c.batch)
    page.select("head", "head", c.heads or 1)
    if other:
        words = {True: "causal", False: "none (every key)"}
        page.switch("causal", "mask", [(str(flag).lower(), words[flag])
                                       for flag in (c.causal, not c.causal)])
    page.sections.append(f'<p class="caption">{formula_of(c)}; batch {c.batch}, tokens '
                         f"{c.tokens}, d_model {c.d_model}, d_k {c.d_k}, d_v {c.d_v}"
                         + (f", {c.heads} heads" if c.heads else "")
                         + (", causal" if c.causal else ", not causal")
                         + f"; scale {page.fmt(c.scale)}</p>")
    page.sections.append(checks_section(entries_of(found)))
    name = published_name("attention", c)
    masks = [(c.causal, [arrays[published_name(v, c)] for v in ("scores", "scaled_scores",
                                                                 "attention")], "")]
    if other is not None:
        masks.append((other.causal, [other.scores, other.scaled_scores, other.attention],
                      "other-mask"))
    maps = [maps_of(page, name, found_arrays, c.scale, flag,
                    f' data-causal="{str(flag).lower()}"' if other else "", variant)
            for flag, found_arrays, variant in masks]
    page.weights_section("A = softmax(Z) row by row: queries down, keys across; each row "
                         "sums to 1", maps)
    derivers = derivations(arrays, c)
    # the upstream U is an input either way: the fixture's, or drawn from its seed
    given = given_of(found) | {published_name("grad_output", c)}
    for heading, names in STAGES:
        members = [published_name(vocabulary, c) for vocabulary in names
                   if vocabulary != "attention"]
        blocks = tensor_blocks(page, {member: shown[member] for member in members
                                      if member in shown}, derivers, given)
        page.sections.append(f'<section class="group"><h2>{heading}</h2>'
                             + "".join(blocks.values()) + "</section>")
    result = found["gradcheck"].value
    caption = (f"mode {escape(result.mode)}, step {fmt_general(result.step)}, tolerance "
               f"{fmt_general(result.tolerance)}: {escape(result.summary)}")
    return finished(page, found, caption)


def maps_of(page: Page, name: str, arrays: Sequence[Array], factor: float, causal: bool,
            extra: str, variant: str = "") -> str:
    """The heat maps of one mask's weights (``arrays``: its raw and scaled scores and
    weights), each cell opening its softmax."""
    raw, scaled_scores, attention = arrays
    note = ("causal: keys after the query are masked (weight 0, struck through)" if causal
            else "not masked: every query sees every key")
    if variant:
        note += "; the other mask than the report's: the engine's forward alone, unchecked"
    return (f'<div class="mask"{extra}><p class="caption">{note}</p>' + page.heatmap(
        name, attention, scaled_scores, lambda at, numbered: attention_weight(
            raw, scaled_scores, scaled_scores, attention, at, factor, keys=numbered),
        variant=variant) + "</div>")


def derivations(tensors: Mapping[str, Array], c: AttendConfig) -> dict[str, Deriver]:
    """A deriver per tensor whose numbers the stages can explain, by published name;
    ``tensors``: the facts' tensors by published name (the split views too)."""
    names = {published_name(vocabulary, c): vocabulary for vocabulary in VOCABULARY}
    a = {names[name]: array for name, array in tensors.items() if name in names}
    found: Makers = {}
    _projections(a, c, found)
    _attention(a, c, found)
    _output(a, c, found)
    return {published_name(vocabulary, c): derive
            for vocabulary, derive in derivers(a, found).items()}


def _projections(a: Mapping[str, Array], c: AttendConfig, found: Makers) -> None:
    """Each branch's projection (with its bias), its weight's and bias's gradients, dX's
    three paths and the packed weight's gradient, where each weight's layout is known."""
    x = a["input"]
    weights = {}
    for n, branch in BRANCHES:
        flipped = transposed(a[f"w_{branch}"], c.d_model, c.layout)
        weight = a[f"w_{branch}"].T if flipped else a[f"w_{branch}"]  # [d_model, width]
        if flipped is None or weight.shape[1] != a[branch].shape[-1]:
            continue  # grouped K/V heads: per query head tensors, per K/V head weights
        weights[branch], grad, bias = weight, a[f"grad_{branch}"], a.get(f"b_{branch}")
        found[branch] = lambda at, v, w=weight, b=bias, n=n: projection(
            x, w, b, at, v, ("X", f"W_{n}", f"b_{n}"))
        found[f"grad_w_{branch}"] = lambda at, v, g=grad, f=flipped, n=n: weight_gradient(
            x, g, (at[1], at[0]) if f else (at[0], at[1]), v, f"d{n}")
        found[f"grad_b_{branch}"] = lambda at, v, g=grad, n=n: bias_gradient(g, at[0], v, f"d{n}")
    grads = [a[f"grad_{branch}"] for _, branch in BRANCHES]
    if c.rope is None and len(weights) == 3:
        found["grad_input"] = lambda at, v: input_paths(grads, list(weights.values()), at, v,
                                                        ("dQ", "dK", "dV"))
    if "w_packed" in a and c.kv_heads is None and c.packed in ("c_attn", "in_proj"):
        joined = np.concatenate(grads, axis=-1)  # the packed columns [dQ|dK|dV]
        torch = c.packed == "in_proj"
        found["grad_w_packed"] = lambda at, v: weight_gradient(
            x, joined, (at[1], at[0]) if torch else (at[0], at[1]), v, "[dQ|dK|dV]")
        found["grad_b_packed"] = lambda at, v: bias_gradient(joined, at[0], v, "[dQ|dK|dV]")


def _heads(tensor: Array, c: AttendConfig) -> Array:
    """A ``[B,T,H*d]`` tensor as ``[B,H,T,d]`` (a head's own: as it is)."""
    return tensor if c.heads is None else heads_axis(tensor, c.heads)


def _per_head(at: tuple[int, ...], c: AttendConfig, width: int) -> tuple[int, ...]:
    """``[b,t,h*d+c]`` as ``[b,h,t,c]`` (a head's own coordinate as it is)."""
    return at if c.heads is None else (at[0], at[2] // width, at[1], at[2] % width)


def _attention(a: Mapping[str, Array], c: AttendConfig, found: Makers) -> None:
    """Scores, scale, softmax and their reverse, where they are the plain stages: no
    RoPE, norm or clipping between Q, K and the scores; no soft-cap or ALiBi after."""
    q, k, v = (_heads(a[name], c) for name in ("query", "key", "value"))
    upstream = _heads(a.get("grad_concat", a["grad_output"]), c)
    attention, grad_scores = a["attention"], a["grad_scores"]
    plain = c.rope is None and c.qk_norm is None and c.clip_qkv is None
    if plain and q.shape[-1] == k.shape[-1] and q.shape[1] == k.shape[1]:
        names = ("Q", "K") if c.heads is None else ("Q_h", "K_h")
        found["scores"] = lambda at, val: scores(q, k, at, val, names)
        found["grad_query"] = lambda at, val: grad_queries(
            grad_scores, k, _per_head(at, c, c.d_k), val)
        found["grad_key"] = lambda at, val: grad_keys(
            grad_scores, q, _per_head(at, c, c.d_k), val, ("dS", names[0]))
    if c.softcap is None and c.alibi is None:
        found["scaled_scores"] = lambda at, val: scaled(
            float(a["scores"][at]), c.scale, val, hidden=not math.isfinite(val))
        found["grad_scaled_scores"] = lambda at, val: softmax_reverse(
            attention, a["grad_attention"], at, val)
        found["grad_scores"] = lambda at, val: scaled(
            float(a["grad_scaled_scores"][at]), c.scale, val, "dZ", "scale reverse")
    if upstream.shape[:-1] == v.shape[:-1]:
        found["grad_attention"] = lambda at, val: grad_weights(upstream, v, at, val, ("dO", "V"))
        if v.shape[1] == attention.shape[1] or c.heads is None:
            found["grad_value"] = lambda at, val: grad_values(
                attention, upstream, _per_head(at, c, c.d_v), val, ("A", "dO"))


def _output(a: Mapping[str, Array], c: AttendConfig, found: Makers) -> None:
    """The mixture of the value rows, the output projection and their reverse."""
    attention, values, d_v = a["attention"], a["value"], c.d_v
    concat, w_out = a.get("concat"), a.get("w_out")
    found["concat" if c.heads is not None and concat is not None else "output"] = (
        lambda at, val: mixture(attention, values, at, val,
                                at[2] // d_v if c.heads is not None else None))
    if c.heads is None or concat is None or w_out is None:
        return
    flipped = c.out_layout == "out_proj"
    ours = w_out.T if flipped else w_out  # [H*d_v, E_out]
    upstream = a["grad_output"]
    found["output"] = lambda at, val: projection(
        concat, ours, a.get("b_out"), at, val, ("C", "W_O", "b_O"), "output projection")
    found["grad_concat"] = lambda at, val: input_paths([upstream], [ours], at, val, ("U",),
                                                       ("W_O",))
    found["grad_w_out"] = lambda at, val: weight_gradient(
        concat, upstream, (at[1], at[0]) if flipped else (at[0], at[1]), val, "U", "C")
    found["grad_b_out"] = lambda at, val: bias_gradient(upstream, at[0], val, "U")
