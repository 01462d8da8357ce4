"""The explorer page of ``qkv attend``: one attention head or a multi-head layer.

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

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from qkvcli.attention.records import AttendConfig, AttendEvidence
from qkvcli.core.arrays import Array
from qkvcli.render.attend import (
    FORWARD,
    PARAMETERS,
    REVERSE,
    attend_checks,
    attend_verdict,
    checked_name,
    formula_of,
    published_name,
    tensor_policy,
)
from qkvcli.render.explorer.checks import checks_section
from qkvcli.render.explorer.derive import (
    Derivation,
    attention_weight,
    bias_gradient,
    input_paths,
    mixture,
    projection,
    weight_gradient,
)
from qkvcli.render.explorer.document import gradcheck_section
from qkvcli.render.explorer.page import Deriver, Page

TORCH_LAYOUTS = ("separate-torch", "packed", "query_key_value")
"""Layouts whose per-branch weights the evidence holds as torch ``[out, in]``."""
LETTERS = {"query": "Q", "key": "K", "value": "V"}
GIVEN = (*PARAMETERS, "grad_output")
"""The tensors the fixture holds (the input, the parameters, the upstream ``U``)."""
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


def attend_page(evidence: AttendEvidence, precision: int, title: str) -> str:
    """The head's or layer's explorer page (one self-contained HTML document); the
    weights under the other mask, when the evidence holds them, are drawn behind a
    causal toggle."""
    found = evidence.other_mask
    other: Mapping[str, Any] | None = None if found is None else {
        "causal": found.causal, "scores": found.scores, "scaled_scores": found.scaled_scores,
        "attention": found.attention}
    c = evidence.config
    arrays = evidence.primary.tensors
    page = Page(title, precision)
    heads = c.heads
    page.select("batch", "batch item", c.batch)
    page.select("head", "head", heads or 1)
    if other:
        page.mask_switch(c.causal)
    page.scale_switch()
    checks = attend_checks(evidence)
    page.sections.append(f'<p class="caption">{formula_of(c)}; batch {c.batch}, tokens '
                         f"{c.tokens}, d_model {c.d_model}, d_k {c.d_k}, d_v {c.d_v}"
                         + (f", {heads} heads" if heads else "")
                         + (", causal" if c.causal else ", not causal")
                         + f"; scale {page.fmt(c.scale)}</p>")
    page.sections.append(checks_section(checks))
    derivers = derivations(evidence)
    attention = arrays["attention"]
    slices = list(np.ndindex(*attention.shape[:-2]))

    name = published_name("attention", c)
    maps = [maps_of(page, name, arrays, slices, c.tokens, c.scale, c.causal,
                    f' data-causal="{str(c.causal).lower()}"' if other else "")]
    if other:
        flag = bool(other["causal"])
        maps.append(maps_of(page, name, other, slices, c.tokens, c.scale, flag,
                            f' data-causal="{str(flag).lower()}"', variant="other-mask"))
    page.sections.append(
        '<section class="group"><h2>Attention weights</h2><p class="caption">'
        "A = softmax(Z) row by row: queries down, keys across; each row sums to 1"
        + "</p>" + page.legend() + "".join(maps) + "</section>")
    for heading, names in STAGES:
        blocks = []
        for vocabulary in names:
            if vocabulary not in arrays or vocabulary == "attention":
                continue
            if tensor_policy(vocabulary, c, "summary") == "none":
                continue  # a packed layer's per-branch views: the packed tensor is shown
            value = arrays[vocabulary]
            lead = 2 if heads is not None and value.ndim == 4 else None
            blocks.append(page.tensor(published_name(vocabulary, c), value,
                                      derivers.get(vocabulary), lead=lead,
                                      given=vocabulary in GIVEN))
        page.sections.append(f'<section class="group"><h2>{heading}</h2>'
                             + "".join(blocks) + "</section>")
    page.sections.append(gradcheck_section(page, evidence.gradcheck,
                                           lambda tensor: checked_name(tensor, c)))
    return page.html(f"{title}: {evidence.chapter}", attend_verdict(evidence), evidence.passed)


def maps_of(page: Page, name: str, arrays: Mapping[str, Array],
            slices: list[tuple[int, ...]], tokens: int, factor: float, causal: bool,
            extra: str, variant: str = "") -> str:
    """The heat maps of one mask's weights (``arrays``: its ``scores``, ``scaled_scores``
    and ``attention``), each cell opening its softmax."""
    scores, scaled, attention = arrays["scores"], arrays["scaled_scores"], arrays["attention"]

    def weight(at: tuple[int, ...], numbered: bool) -> Derivation:
        return attention_weight(scores, scaled, attention, at, factor, keys=numbered)

    note = ("causal: keys after the query are masked (weight 0, struck through)" if causal
            else "not masked: every query sees every key")
    if variant:
        note += "; the other mask than the report's: the engine's forward alone, unchecked"
    return (f'<div class="mask"{extra}><p class="caption">{note}</p>'
            + page.heatmap(name, attention, slices, weight, tokens,
                           lambda at: float(scaled[at]), variant=variant) + "</div>")


def derivations(evidence: AttendEvidence) -> dict[str, Deriver]:
    """A deriver per tensor (vocabulary name) whose numbers the evidence can explain."""
    c = evidence.config
    a = evidence.primary.tensors
    x = a["input"]
    found: dict[str, Deriver] = {}
    d_v = c.d_v
    for branch in ("query", "key", "value"):
        letter = LETTERS[branch]
        given = a[f"w_{branch}"]
        flipped = transposed(given, c.d_model, c.layout)
        if flipped is None:
            continue
        weight = given.T if flipped else given  # [d_model, width]
        bias = a.get(f"b_{branch}")
        if weight.shape[1] != a[branch].shape[-1]:
            continue  # grouped K/V heads: per query head tensors, per K/V head weights
        found[branch] = _projection(x, weight, bias, a[branch], ("X", f"W_{letter}",
                                                                 f"b_{letter}"))
        found[f"grad_w_{branch}"] = _weight_gradient(x, a[f"grad_{branch}"], a[f"grad_w_{branch}"],
                                                    letter, flipped)
        if f"grad_b_{branch}" in a:
            found[f"grad_b_{branch}"] = _bias_gradient(a[f"grad_{branch}"],
                                                       a[f"grad_b_{branch}"], letter)
    if c.rope is None and all(b in found for b in ("query", "key", "value")):
        weights = tuple(_ours(a[f"w_{b}"], c) for b in ("query", "key", "value"))
        upstreams = (a["grad_query"], a["grad_key"], a["grad_value"])
        grad_input = a["grad_input"]

        def paths(at: tuple[int, ...]) -> Derivation:
            return input_paths(upstreams, weights, at, float(grad_input[at]))  # type: ignore[arg-type]

        found["grad_input"] = paths
    attention, values = a["attention"], a["value"]
    layer = c.heads is not None

    def mixed(target: Array) -> Deriver:
        def derive(at: tuple[int, ...]) -> Derivation:
            head = at[2] // d_v if layer else None
            return mixture(attention, values, at, float(target[at]), head, c.causal)
        return derive

    if not layer:
        found["output"] = mixed(a["output"])
    else:
        concat = a.get("concat")
        if concat is not None:
            found["concat"] = mixed(concat)
            w_out = a.get("w_out")
            if w_out is not None:
                ours = w_out.T if c.out_layout == "out_proj" else w_out  # [H*d_v, E_out]
                found["output"] = _projection(concat, ours, a.get("b_out"), a["output"],
                                              ("C", "W_O", "b_O"))
        else:
            found["output"] = mixed(a["output"])
    return found


def _ours(given: Array, c: AttendConfig) -> Array:
    """A branch weight in ``[d_model, width]`` (the caller knows its layout is known)."""
    return given.T if transposed(given, c.d_model, c.layout) else given


def _projection(x: Array, weight: Array, bias: Array | None, output: Array,
                names: tuple[str, str, str]) -> Callable[[tuple[int, ...]], Derivation]:
    def derive(at: tuple[int, ...]) -> Derivation:
        return projection(x, weight, bias, at, float(output[at]), names)
    return derive


def _weight_gradient(x: Array, upstream: Array, gradient: Array, letter: str,
                     flipped: bool) -> Callable[[tuple[int, ...]], Derivation]:
    def derive(at: tuple[int, ...]) -> Derivation:
        i, j = (at[1], at[0]) if flipped else (at[0], at[1])
        return weight_gradient(x, upstream, (i, j), float(gradient[at]), letter)
    return derive


def _bias_gradient(upstream: Array, gradient: Array,
                   letter: str) -> Callable[[tuple[int, ...]], Derivation]:
    def derive(at: tuple[int, ...]) -> Derivation:
        return bias_gradient(upstream, at[0], float(gradient[at]), letter)
    return derive
