"""Run one attention head on its fixture and gather the evidence (no I/O).

Checks, in order: forward (shapes, finite), weights (non-negative, rows sum to 1), mask
(causal only: nothing above the diagonal), hull (each output row is a convex combination
of the value rows), reverse (finite, shaped), shapes (empty batch and token axes), replay
(bitwise), gradcheck. Notes are a teacher's remarks, never failures.
"""

from __future__ import annotations

import math

import numpy as np

from qkvcli.attention.fixture import AttendFixture
from qkvcli.attention.gradcheck import gradcheck_head
from qkvcli.attention.head import (
    AttentionForward,
    AttentionGradients,
    AttentionHead,
    causal_mask,
    output_loss,
)
from qkvcli.attention.notes import notes_of
from qkvcli.attention.records import (
    AttendConfig,
    AttendEvidence,
    AttendPrimary,
    AttentionShapeProbe,
    HullEvidence,
    MaskEvidence,
    TokenRow,
    WeightEvidence,
)
from qkvcli.core.arrays import Array, all_finite, readonly
from qkvcli.evidence.records import Check

EPSILON = float(np.finfo(np.float64).eps)


def _run(fixture: AttendFixture, causal: bool) -> tuple[AttentionForward, AttentionGradients]:
    forward = fixture.head.forward(fixture.input, causal)
    return forward, fixture.head.backward(fixture.input, forward, fixture.upstream)


def _tensors(
    fixture: AttendFixture, f: AttentionForward, g: AttentionGradients
) -> dict[str, Array]:
    head = fixture.head
    named: list[tuple[str, Array | None]] = [
        ("input", fixture.input),
        ("query_weight", head.weights[0]), ("key_weight", head.weights[1]),
        ("value_weight", head.weights[2]),
        ("query_bias", head.biases[0]), ("key_bias", head.biases[1]),
        ("value_bias", head.biases[2]),
        ("query", f.query), ("key", f.key), ("value", f.value), ("scores", f.scores),
        ("scaled_scores", f.scaled_scores), ("weights", f.weights), ("output", f.output),
        ("upstream_output", fixture.upstream), ("weights_gradient", g.grad_weights),
        ("scaled_scores_gradient", g.grad_scaled_scores), ("scores_gradient", g.grad_scores),
        ("query_gradient", g.grad_query), ("key_gradient", g.grad_key),
        ("value_gradient", g.grad_value),
        ("input_gradient", g.grad_input), ("query_weight_gradient", g.grad_w_query),
        ("key_weight_gradient", g.grad_w_key), ("value_weight_gradient", g.grad_w_value),
        ("query_bias_gradient", g.grad_b_query), ("key_bias_gradient", g.grad_b_key),
        ("value_bias_gradient", g.grad_b_value),
    ]
    out = {}
    for name, value in named:
        if value is not None:
            out[name] = readonly(value)
    return out


def hull_evidence(f: AttentionForward, tokens: int) -> HullEvidence:
    """Recompute ``O`` term by term and test each output row against the value rows' box."""
    value = f.value
    # Rounding in a sum of T products, each at most max|v|, stays below a few T eps max|v|.
    scale = float(np.max(np.abs(value))) if value.size else 0.0
    tolerance = 4.0 * max(tokens, 1) * EPSILON * max(scale, 1.0)
    recomputed = np.zeros_like(f.output)
    for j in range(tokens):  # term by term, independently of the matrix product
        recomputed += f.weights[:, :, j:j + 1] * value[:, j:j + 1, :]
    residual = float(np.max(np.abs(recomputed - f.output))) if f.output.size else 0.0
    violations = 0
    if value.size:
        low = value.min(axis=1, keepdims=True)  # [B,1,d_v]: the box around the value rows
        high = value.max(axis=1, keepdims=True)
        outside = (f.output < low - tolerance) | (f.output > high + tolerance)
        violations = int(np.count_nonzero(outside))
    return HullEvidence(residual, violations, tolerance)


def _probe(head: AttentionHead, shape: tuple[int, int, int], causal: bool) -> AttentionShapeProbe:
    x = np.zeros(shape)
    f = head.forward(x, causal)
    g = head.backward(x, f, np.zeros(f.output.shape))
    return AttentionShapeProbe(shape, tuple(f.weights.shape), tuple(f.output.shape),
                      tuple(g.grad_input.shape))


def _finite(*arrays: Array) -> bool:
    return all(all_finite(a) for a in arrays)


def build_attend_evidence(fixture: AttendFixture, causal: bool = False) -> AttendEvidence:
    """Run the head on ``fixture`` and gather every check. Takes the fixture and the mask flag."""
    head, x = fixture.head, fixture.input
    batch, tokens, d_model = x.shape
    forward, grads = _run(fixture, causal)
    replay_forward, replay_grads = _run(fixture, causal)
    tensors = _tensors(fixture, forward, grads)
    replay = _tensors(fixture, replay_forward, replay_grads)
    replay_bitwise = all(a.tobytes() == replay[k].tobytes() for k, a in tensors.items())

    weights = forward.weights
    rows = tuple(
        TokenRow(bi, ti, tuple(float(v) for v in weights[bi, ti]), float(np.sum(weights[bi, ti])),
                 tuple(float(v) for v in forward.output[bi, ti]))
        for bi in range(batch) for ti in range(tokens)
    )
    weight_evidence = WeightEvidence(
        min_weight=float(weights.min()) if weights.size else 0.0,
        max_row_deviation=max((abs(r.weight_sum - 1.0) for r in rows), default=0.0),
        tolerance=4.0 * max(tokens, 1) * EPSILON,
    )
    mask = MaskEvidence(False, 0.0)
    if causal:
        above = weights[:, causal_mask(tokens)]
        mask = MaskEvidence(True, float(above.max()) if above.size else 0.0)
    hull = hull_evidence(forward, tokens)
    probes = (_probe(head, (0, tokens, d_model), causal),
              _probe(head, (max(batch, 1), 0, d_model), causal))
    probes_ok = all(
        p.weights == (p.input[0], p.input[1], p.input[1])
        and p.output == (p.input[0], p.input[1], head.d_v) and p.grad_input == p.input
        for p in probes
    )
    gradcheck = gradcheck_head(head, x, fixture.upstream, grads, causal,
                               fixture.step, fixture.tolerance, fixture.samples)
    forward_ok = _finite(forward.query, forward.key, forward.value, forward.scores, weights,
                         forward.output) and (
        forward.scores.shape == (batch, tokens, tokens)
        and forward.output.shape == (batch, tokens, head.d_v)
    )
    grad_arrays = [g for g in grads if g is not None]
    reverse_ok = _finite(*grad_arrays) and grads.grad_input.shape == x.shape and all(
        grad.shape == weight.shape for grad, weight in zip(
            (grads.grad_w_query, grads.grad_w_key, grads.grad_w_value), head.weights,
            strict=True)
    )
    checks = (
        Check("forward", forward_ok, "scores [B,T,T], output [B,T,d_v], all finite" if forward_ok
              else "a forward tensor is not finite or misshapen"),
        Check("weights", weight_evidence.passed,
              f"min weight {weight_evidence.min_weight:.6g} >= 0; max |row sum - 1| "
              f"{weight_evidence.max_row_deviation:.3g} <= {weight_evidence.tolerance:.3g} "
              "(4 T eps)"),
        Check("mask", mask.passed, "causal: largest weight above the diagonal "
              f"{mask.max_masked_weight!r} (must be exactly 0)" if causal
              else "not applicable: no causal mask"),
        Check("hull", hull.passed,
              "O = sum_j A_ij v_j recomputed term by term (residual "
              f"{hull.barycentric_residual:.3g} <= {hull.tolerance:.3g}); with the weights "
              "checked above this places each output in the convex hull of the value rows; "
              "box test (necessary only): "
              f"{hull.box_violations} coordinates outside [min_j v_j, max_j v_j]"),
        Check("reverse", bool(reverse_ok), "dA, dZ, dS, dQ, dK, dV, dX and parameter gradients "
              "finite and shaped" if reverse_ok else "a gradient is not finite or misshapen"),
        Check("shapes", probes_ok, "empty batch and empty token axes run forward and reverse"
              if probes_ok else "an empty-axis probe gave an unexpected shape"),
        Check("replay", replay_bitwise,
              "two runs agree bit for bit" if replay_bitwise else "two runs differ"),
        Check("gradcheck", gradcheck.passed, f"{gradcheck.count} coordinates, step "
              f"{gradcheck.step!r}, tolerance {gradcheck.tolerance!r}"),
    )
    config = AttendConfig(
        batch=batch, tokens=tokens, d_model=d_model, d_k=head.d_k, d_v=head.d_v, causal=causal,
        bias=(head.biases[0] is not None, head.biases[1] is not None, head.biases[2] is not None),
        value_width=fixture.value_width, layout=fixture.layout,
        layout_description=fixture.layout_description, scale=1.0 / math.sqrt(head.d_k),
        parameter_count=head.parameter_count, names=head.names,
    )
    return AttendEvidence(
        chapter=fixture.chapter, seed=fixture.seed, config=config,
        primary=AttendPrimary(tensors, output_loss(forward, fixture.upstream)), rows=rows,
        weights=weight_evidence, mask=mask, hull=hull, probes=probes, notes=notes_of(head),
        replay_bitwise=replay_bitwise, gradcheck=gradcheck, checks=checks,
    )

