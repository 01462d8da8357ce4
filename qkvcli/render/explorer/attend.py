"""The explorer page of ``qkv attend``: one attention head or a multi-head layer.

The page is drawn from attend's facts value (:func:`qkvcli.render.attend.facts`, the
same facts its JSON publishes, its tensors kept as arrays) through the sections every
report's page shares (:mod:`qkvcli.render.explorer.document`): its checks, its tensors'
blocks, its gradient check and its verdict; what is attend's own is the order of its
stages and the terms of each tensor, by published name (:func:`derivations`).
The attention weights first, as heat maps (per batch item and head, with a row-relative
or absolute scale), then every tensor in the text view's order: parameters and input,
the forward pass, the reverse pass, then the gradient check. An attention weight opens
its raw and scaled score, whether it is masked and its row's softmax; a projection value
its row-times-column terms (and bias); an output value its mixture of value rows (a
layer's output with a projection: the concatenation times ``W_O``); ``dX`` its three
paths; a weight's or bias's gradient its sum over batch and tokens.

A derivation is offered where the evidence holds every array it needs in one layout:
grouped K/V heads (whose ``key``/``value`` tensors are per query head while their
weights are per K/V head) have no projection or weight-gradient terms for K and V, and
RoPE (whose ``dQ``/``dK`` are turned back) no ``dX`` paths; those panels say so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from html import escape
from typing import Any

import numpy as np

from qkvcli.attention.engine import heads_axis
from qkvcli.attention.records import AttendConfig, AttendEvidence
from qkvcli.core.arrays import Array
from qkvcli.render.attend import FORWARD, PARAMETERS, REVERSE, facts, formula_of, published_name
from qkvcli.render.document import head
from qkvcli.render.explorer.checks import checks_section, entries_of
from qkvcli.render.explorer.derive import each as _each
from qkvcli.render.explorer.document import (
    finished,
    given_of,
    heat_maps,
    tensor_blocks,
    tensors_of,
)
from qkvcli.render.explorer.page import Deriver, Page, PageAsked
from qkvcli.render.numbers import fmt_general
from qkvcli.stages.terms import (
    Derivation,
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
    found_other = evidence.other_mask
    other: Mapping[str, Any] | None = None if found_other is None else {
        "scores": found_other.scores, "scaled_scores": found_other.scaled_scores,
        "attention": found_other.attention}
    page = Page(asked.title, asked.precision)
    page.select("batch", "batch item", c.batch)
    page.select("head", "head", c.heads or 1)
    if other:
        words = {True: "causal", False: "none (every key)"}
        page.switch("causal", "mask", [(str(flag).lower(), words[flag])
                                       for flag in (c.causal, not c.causal)])
    page.scale_switch()
    page.sections.append(f'<p class="caption">{formula_of(c)}; batch {c.batch}, tokens '
                         f"{c.tokens}, d_model {c.d_model}, d_k {c.d_k}, d_v {c.d_v}"
                         + (f", {c.heads} heads" if c.heads else "")
                         + (", causal" if c.causal else ", not causal")
                         + f"; scale {page.fmt(c.scale)}</p>")
    page.sections.append(checks_section(entries_of(found)))
    name = published_name("attention", c)
    named = {vocabulary: arrays[published_name(vocabulary, c)]
             for vocabulary in ("scores", "scaled_scores", "attention")}
    maps = [maps_of(page, name, named, c.scale, c.causal,
                    f' data-causal="{str(c.causal).lower()}"' if other else "")]
    if other and found_other is not None:
        flag = found_other.causal
        maps.append(maps_of(page, name, other, c.scale, flag,
                            f' data-causal="{str(flag).lower()}"', variant="other-mask"))
    page.sections.append(
        '<section class="group"><h2>Attention weights</h2><p class="caption">'
        "A = softmax(Z) row by row: queries down, keys across; each row sums to 1"
        + "</p>" + page.legend() + "".join(maps) + "</section>")
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


def maps_of(page: Page, name: str, arrays: Mapping[str, Array], factor: float, causal: bool,
            extra: str, variant: str = "") -> str:
    """The heat maps of one mask's weights (``arrays``: its ``scores``, ``scaled_scores``
    and ``attention``), each cell opening its softmax."""
    raw, scaled_scores, attention = (arrays["scores"], arrays["scaled_scores"],
                                     arrays["attention"])
    note = ("causal: keys after the query are masked (weight 0, struck through)" if causal
            else "not masked: every query sees every key")
    if variant:
        note += "; the other mask than the report's: the engine's forward alone, unchecked"
    return (f'<div class="mask"{extra}><p class="caption">{note}</p>' + heat_maps(
        page, name, attention, scaled_scores, lambda at, numbered: attention_weight(
            raw, scaled_scores, scaled_scores, attention, at, factor, keys=numbered),
        variant) + "</div>")


def derivations(tensors: Mapping[str, Array], c: AttendConfig) -> dict[str, Deriver]:
    """A deriver per tensor whose numbers the stages can explain, by published name;
    ``tensors``: the facts' tensors by published name (the split views too)."""
    names = {published_name(vocabulary, c): vocabulary for vocabulary in VOCABULARY}
    a = {names[name]: array for name, array in tensors.items() if name in names}
    found: dict[str, Deriver] = {}
    _derivations(a, c, found)
    return {published_name(vocabulary, c): derive for vocabulary, derive in found.items()}


def _derivations(a: Mapping[str, Array], c: AttendConfig, found: dict[str, Deriver]) -> None:
    """:func:`derivations` by vocabulary name (``a``: the tensors by vocabulary name)."""
    x = a["input"]
    layer = c.heads is not None
    for branch in ("query", "key", "value"):
        letter = LETTERS[branch]
        given = a[f"w_{branch}"]
        flipped = transposed(given, c.d_model, c.layout)
        if flipped is None:
            continue
        weight = given.T if flipped else given  # [d_model, width]
        if weight.shape[1] != a[branch].shape[-1]:
            continue  # grouped K/V heads: per query head tensors, per K/V head weights
        bias = a.get(f"b_{branch}")
        found[branch] = _each(a[branch], lambda at, v, w=weight, b=bias, n=letter: projection(
            x, w, b, at, v, ("X", f"W_{n}", f"b_{n}")))
        grad = a[f"grad_{branch}"]
        found[f"grad_w_{branch}"] = _each(
            a[f"grad_w_{branch}"], lambda at, v, g=grad, f=flipped, n=letter: weight_gradient(
                x, g, (at[1], at[0]) if f else (at[0], at[1]), v, f"d{n}"))
        if f"grad_b_{branch}" in a:
            found[f"grad_b_{branch}"] = _each(a[f"grad_b_{branch}"], lambda at, v, g=grad,
                                              n=letter: bias_gradient(g, at[0], v, f"d{n}"))
    grads = (a["grad_query"], a["grad_key"], a["grad_value"])
    if c.rope is None and all(b in found for b in ("query", "key", "value")):
        weights = [_ours(a[f"w_{b}"], c) for b in ("query", "key", "value")]
        found["grad_input"] = _each(a["grad_input"], lambda at, v: input_paths(
            grads, weights, at, v, ("dQ", "dK", "dV")))
    if "w_packed" in a and c.kv_heads is None and c.packed in ("c_attn", "in_proj"):
        joined = np.concatenate(grads, axis=-1)  # the packed columns [dQ|dK|dV]
        torch = c.packed == "in_proj"
        if "grad_w_packed" in a:
            found["grad_w_packed"] = _each(a["grad_w_packed"], lambda at, v: weight_gradient(
                x, joined, (at[1], at[0]) if torch else (at[0], at[1]), v, "[dQ|dK|dV]"))
        if "grad_b_packed" in a:
            found["grad_b_packed"] = _each(a["grad_b_packed"], lambda at, v: bias_gradient(
                joined, at[0], v, "[dQ|dK|dV]"))
    _attention(a, c, found)
    _output(a, c, found, layer)


def _heads(tensor: Array, c: AttendConfig) -> Array:
    """A ``[B,T,H*d]`` tensor as ``[B,H,T,d]`` (a head's own: as it is)."""
    return tensor if c.heads is None else heads_axis(tensor, c.heads)


def _per_head(at: tuple[int, ...], c: AttendConfig, width: int) -> tuple[int, ...]:
    """``[b,t,h*d+c]`` as ``[b,h,t,c]`` (a head's own coordinate as it is)."""
    return at if c.heads is None else (at[0], at[2] // width, at[1], at[2] % width)


def _attention(a: Mapping[str, Array], c: AttendConfig, found: dict[str, Deriver]) -> None:
    """Scores, scale, softmax and their reverse, where they are the plain stages: no
    RoPE, norm or clipping between Q, K and the scores; no soft-cap or ALiBi after."""
    plain_scores = c.rope is None and c.qk_norm is None and c.clip_qkv is None
    plain_scale = c.softcap is None and c.alibi is None
    q, k, v = (_heads(a[name], c) for name in ("query", "key", "value"))
    upstream = _heads(a.get("grad_concat", a["grad_output"]), c)
    attention, grad_scores = a["attention"], a["grad_scores"]
    if plain_scores and q.shape[-1] == k.shape[-1] and q.shape[1] == k.shape[1]:
        names = ("Q", "K") if c.heads is None else ("Q_h", "K_h")
        found["scores"] = _each(a["scores"], lambda at, val: scores(q, k, at, val, names))
        found["grad_query"] = _each(a["grad_query"], lambda at, val: grad_queries(
            grad_scores, k, _per_head(at, c, c.d_k), val))
        found["grad_key"] = _each(a["grad_key"], lambda at, val: grad_keys(
            grad_scores, q, _per_head(at, c, c.d_k), val, ("dS", names[0])))
    if plain_scale:
        raw = a["scores"]
        found["scaled_scores"] = _each(a["scaled_scores"], lambda at, val: scaled(
            float(raw[at]), c.scale, val, hidden=not math.isfinite(val)))
        found["grad_scaled_scores"] = _each(a["grad_scaled_scores"], lambda at, val:
                                            softmax_reverse(attention, a["grad_attention"],
                                                            at, val))
        found["grad_scores"] = _each(grad_scores, lambda at, val: scaled(
            float(a["grad_scaled_scores"][at]), c.scale, val, "dZ", "scale reverse"))
    if upstream.shape[:-1] == v.shape[:-1]:
        found["grad_attention"] = _each(a["grad_attention"], lambda at, val: grad_weights(
            upstream, v, at, val, ("dO", "V")))
        if v.shape[1] == attention.shape[1] or c.heads is None:
            found["grad_value"] = _each(a["grad_value"], lambda at, val: grad_values(
                attention, upstream, _per_head(at, c, c.d_v), val, ("A", "dO")))


def _output(a: Mapping[str, Array], c: AttendConfig, found: dict[str, Deriver],
            layer: bool) -> None:
    """The mixture of the value rows, the output projection and their reverse."""
    attention, values, d_v = a["attention"], a["value"], c.d_v

    def mixed(at: tuple[int, ...], val: float) -> Derivation:
        return mixture(attention, values, at, val, at[2] // d_v if layer else None)

    concat, w_out = a.get("concat"), a.get("w_out")
    if not layer or concat is None:
        found["output"] = _each(a["output"], mixed)
        return
    found["concat"] = _each(concat, mixed)
    if w_out is None:
        return
    ours = w_out.T if c.out_layout == "out_proj" else w_out  # [H*d_v, E_out]
    flipped = c.out_layout == "out_proj"
    upstream = a["grad_output"]
    found["output"] = _each(a["output"], lambda at, val: projection(
        concat, ours, a.get("b_out"), at, val, ("C", "W_O", "b_O"), "output projection"))
    if "grad_concat" in a:
        found["grad_concat"] = _each(a["grad_concat"], lambda at, val: input_paths(
            [upstream], [ours], at, val, ("U",), ("W_O",)))
    if "grad_w_out" in a:
        found["grad_w_out"] = _each(a["grad_w_out"], lambda at, val: weight_gradient(
            concat, upstream, (at[1], at[0]) if flipped else (at[0], at[1]), val, "U", "C"))
    if "grad_b_out" in a:
        found["grad_b_out"] = _each(a["grad_b_out"], lambda at, val: bias_gradient(
            upstream, at[0], val, "U"))


def _ours(given: Array, c: AttendConfig) -> Array:
    """A branch weight in ``[d_model, width]`` (the caller knows its layout is known)."""
    return given.T if transposed(given, c.d_model, c.layout) else given
