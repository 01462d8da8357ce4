"""Run a multi-head layer on its fixture and gather the evidence (no I/O).

The same checks as one head, in the same order (forward, weights, mask, hull, reverse,
shapes, replay, gradcheck); weights, mask and hull are found per head
(:class:`~qkvcli.attention.records.HeadEvidence`) and pass when every head passes. The
central-difference check covers the whole layer. Tensors are named as in the JSON
report; every weight and its gradient appear in the layout the fixture gave them in.
"""

from __future__ import annotations

import math

import numpy as np

from qkvcli.attention.evidence import EPSILON, hull_evidence
from qkvcli.attention.fixture import AttendFixture, LayerParts
from qkvcli.attention.gradcheck import gradcheck_layer
from qkvcli.attention.head import causal_mask
from qkvcli.attention.multihead import LayerForward, LayerGradients, MultiHeadLayer, layer_loss
from qkvcli.attention.notes import notes_of
from qkvcli.attention.records import (
    AttendConfig,
    AttendEvidence,
    AttendPrimary,
    AttentionShapeProbe,
    HeadEvidence,
    HullEvidence,
    MaskEvidence,
    WeightEvidence,
)
from qkvcli.core.arrays import Array, all_finite, readonly
from qkvcli.core.names import BRANCHES
from qkvcli.evidence.records import Check


def _run(fixture: AttendFixture, layer: MultiHeadLayer, causal: bool) -> tuple[
    LayerForward, LayerGradients
]:
    forward = layer.forward(fixture.input, causal)
    return forward, layer.backward(fixture.input, forward, fixture.upstream)


def _given(array: Array, layout: str) -> Array:
    return array.T if layout == "torch" else array


def layer_tensors(fixture: AttendFixture, parts: LayerParts, f: LayerForward,
                  g: LayerGradients) -> dict[str, Array]:
    """Every tensor of the layer by its JSON name, weights in the layout they were given in."""
    layer = parts.layer
    p = layer.projections
    heads_axis = 1  # [B,H,T,T]: the heads' tensors stacked on axis 1
    named: list[tuple[str, Array | None]] = [("input", fixture.input)]
    grads_w = (g.grad_w_query, g.grad_w_key, g.grad_w_value)
    grads_b = (g.grad_b_query, g.grad_b_key, g.grad_b_value)
    for i, branch in enumerate(BRANCHES):
        named.append((f"{branch}_weight", _given(p.weights[i], parts.branch_layouts[i])))
        named.append((f"{branch}_bias", p.biases[i]))
    if parts.packed is not None:
        # in_proj stacks torch [W, d_model] rows; c_attn puts Conv1D [d_model, W] side by side
        axis = 0 if parts.packed == "in_proj" else 1
        named.append((f"{parts.packed}_weight", np.concatenate(
            [_given(w, parts.branch_layouts[0]) for w in p.weights], axis=axis)))
        if all(b is not None for b in p.biases):
            named.append((f"{parts.packed}_bias", np.concatenate([b for b in p.biases
                                                                 if b is not None])))
    out = parts.out_layout
    if out is not None and layer.out_weight is not None:
        named.append((f"{out}_weight", _given(layer.out_weight,
                                              "torch" if out == "out_proj" else "qkv")))
        named.append((f"{out}_bias", layer.out_bias))

    def stacked(name: str, source: tuple[object, ...]) -> Array:
        return np.stack([getattr(item, name) for item in source], axis=heads_axis)

    def joined(name: str, source: tuple[object, ...]) -> Array:
        return np.concatenate([getattr(item, name) for item in source], axis=-1)

    named += [
        ("query", joined("query", f.heads)), ("key", joined("key", f.heads)),
        ("value", joined("value", f.heads)), ("scores", stacked("scores", f.heads)),
        ("scaled_scores", stacked("scaled_scores", f.heads)),
        ("weights", stacked("weights", f.heads)),
        ("heads_output", f.concat if out is not None else None), ("output", f.output),
        ("upstream_output", fixture.upstream),
        ("heads_output_gradient", g.grad_concat if out is not None else None),
        ("weights_gradient", stacked("grad_weights", g.heads)),
        ("scaled_scores_gradient", stacked("grad_scaled_scores", g.heads)),
        ("scores_gradient", stacked("grad_scores", g.heads)),
        ("query_gradient", joined("grad_query", g.heads)),
        ("key_gradient", joined("grad_key", g.heads)),
        ("value_gradient", joined("grad_value", g.heads)),
        ("input_gradient", g.grad_input),
    ]
    for i, branch in enumerate(BRANCHES):
        named.append((f"{branch}_weight_gradient", _given(grads_w[i], parts.branch_layouts[i])))
    for i, branch in enumerate(BRANCHES):
        named.append((f"{branch}_bias_gradient", grads_b[i]))
    if parts.packed is not None:
        axis = 0 if parts.packed == "in_proj" else 1
        named.append((f"{parts.packed}_weight_gradient", np.concatenate(
            [_given(w, parts.branch_layouts[0]) for w in grads_w], axis=axis)))
        if all(b is not None for b in grads_b):
            named.append((f"{parts.packed}_bias_gradient",
                          np.concatenate([b for b in grads_b if b is not None])))
    if out is not None and g.grad_out_weight is not None:
        named.append((f"{out}_weight_gradient", _given(
            g.grad_out_weight, "torch" if out == "out_proj" else "qkv")))
        named.append((f"{out}_bias_gradient", g.grad_out_bias))
    return {name: readonly(np.ascontiguousarray(value)) for name, value in named
            if value is not None}


def head_evidence(f: LayerForward, tokens: int, causal: bool) -> tuple[HeadEvidence, ...]:
    """Row sums, mask and convex hull of each head, in head order."""
    found = []
    for h, head in enumerate(f.heads):
        w = head.weights
        sums = np.sum(w, axis=-1)
        weights = WeightEvidence(
            min_weight=float(w.min()) if w.size else 0.0,
            max_row_deviation=float(np.max(np.abs(sums - 1.0))) if sums.size else 0.0,
            tolerance=4.0 * max(tokens, 1) * EPSILON,
        )
        mask = MaskEvidence(False, 0.0)
        if causal:
            above = w[:, causal_mask(tokens)]
            mask = MaskEvidence(True, float(above.max()) if above.size else 0.0)
        found.append(HeadEvidence(h, weights, mask, hull_evidence(head, tokens)))
    return tuple(found)


def _probe(layer: MultiHeadLayer, shape: tuple[int, int, int], causal: bool) -> AttentionShapeProbe:
    x = np.zeros(shape)
    f = layer.forward(x, causal)
    g = layer.backward(x, f, np.zeros(f.output.shape))
    return AttentionShapeProbe(shape, tuple(f.weights.shape), tuple(f.output.shape),
                      tuple(g.grad_input.shape))


def _worst(heads: tuple[HeadEvidence, ...]) -> tuple[WeightEvidence, MaskEvidence, HullEvidence]:
    w = [h.weights for h in heads]
    m = [h.mask for h in heads]
    u = [h.hull for h in heads]
    return (
        WeightEvidence(min(x.min_weight for x in w), max(x.max_row_deviation for x in w),
                       w[0].tolerance),
        MaskEvidence(m[0].applicable, max(x.max_masked_weight for x in m)),
        HullEvidence(max(x.barycentric_residual for x in u), sum(x.box_violations for x in u),
                     max(x.tolerance for x in u)),
    )


def build_layer_evidence(fixture: AttendFixture, parts: LayerParts, causal: bool = False) -> (
    AttendEvidence
):
    """Run the layer on ``fixture`` and gather every check, per head where a head has its own."""
    layer, x = parts.layer, fixture.input
    batch, tokens, d_model = x.shape
    forward, grads = _run(fixture, layer, causal)
    replay_forward, replay_grads = _run(fixture, layer, causal)
    tensors = layer_tensors(fixture, parts, forward, grads)
    replay = layer_tensors(fixture, parts, replay_forward, replay_grads)
    replay_bitwise = all(a.tobytes() == replay[k].tobytes() for k, a in tensors.items())
    heads = head_evidence(forward, tokens, causal)
    weights, mask, hull = _worst(heads)
    probes = (_probe(layer, (0, tokens, d_model), causal),
              _probe(layer, (max(batch, 1), 0, d_model), causal))
    probes_ok = all(
        p.weights == (p.input[0], layer.heads, p.input[1], p.input[1])
        and p.output == (p.input[0], p.input[1], layer.e_out) and p.grad_input == p.input
        for p in probes
    )
    gradcheck = gradcheck_layer(layer, x, fixture.upstream, grads, causal, fixture.step,
                                fixture.tolerance, fixture.samples, parts.out_layout)
    forward_ok = all(all_finite(a) for a in (forward.output, forward.concat, forward.weights)) and (
        forward.output.shape == (batch, tokens, layer.e_out))
    reverse_ok = all(all_finite(a) for name, a in tensors.items() if name.endswith("_gradient"))
    failing = [str(h.head) for h in heads if not h.passed]
    per_head = f"{len(heads)} heads" + (f", failing: {','.join(failing)}" if failing else "")
    checks = (
        Check("forward", forward_ok, f"weights [B,H,T,T], output [B,T,E_out={layer.e_out}], all "
              "finite" if forward_ok else "a forward tensor is not finite or misshapen"),
        Check("weights", weights.passed, f"per head ({per_head}): min weight "
              f"{weights.min_weight:.6g} >= 0; max |row sum - 1| {weights.max_row_deviation:.3g} "
              f"<= {weights.tolerance:.3g} (4 T eps)"),
        Check("mask", mask.passed, f"causal, per head: largest weight above the diagonal "
              f"{mask.max_masked_weight!r} (must be exactly 0)" if causal
              else "not applicable: no causal mask"),
        Check("hull", hull.passed, "per head: O_h = sum_j A_ij v_j recomputed term by term "
              f"(largest residual {hull.barycentric_residual:.3g} <= {hull.tolerance:.3g}); box "
              f"test: {hull.box_violations} coordinates outside [min_j v_j, max_j v_j]"),
        Check("reverse", reverse_ok, "every gradient finite" if reverse_ok
              else "a gradient is not finite"),
        Check("shapes", probes_ok, "empty batch and empty token axes run forward and reverse"
              if probes_ok else "an empty-axis probe gave an unexpected shape"),
        Check("replay", replay_bitwise,
              "two runs agree bit for bit" if replay_bitwise else "two runs differ"),
        Check("gradcheck", gradcheck.passed, f"whole layer: {gradcheck.count} coordinates, step "
              f"{gradcheck.step!r}, tolerance {gradcheck.tolerance!r}"),
    )
    p = layer.projections
    config = AttendConfig(
        batch=batch, tokens=tokens, d_model=d_model, d_k=layer.d_k, d_v=layer.d_v, causal=causal,
        bias=(p.biases[0] is not None, p.biases[1] is not None, p.biases[2] is not None),
        value_width=fixture.value_width, layout=fixture.layout,
        layout_description=fixture.layout_description, scale=1.0 / math.sqrt(layer.d_k),
        parameter_count=layer.parameter_count, names=p.names, heads=layer.heads,
        e_out=layer.e_out, out_layout=parts.out_layout,
    )
    return AttendEvidence(
        chapter=fixture.chapter, seed=fixture.seed, config=config,
        primary=AttendPrimary(tensors, layer_loss(forward, fixture.upstream)), rows=(),
        weights=weights, mask=mask, hull=hull, probes=probes, notes=notes_of(p),
        replay_bitwise=replay_bitwise, gradcheck=gradcheck, checks=checks, heads=heads,
    )
