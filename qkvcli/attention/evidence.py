"""The evidence of one attention head, as frozen data (no I/O).

Checks, in order: forward (shapes, finite), weights (non-negative, rows sum to 1), mask
(causal only: nothing above the diagonal), hull (each output row is a convex combination
of the value rows), reverse (finite, shaped), shapes (empty batch and token axes), replay
(bitwise), gradcheck. Notes are a teacher's remarks, never failures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from qkvcli.attention.fixture import AttendFixture
from qkvcli.attention.gradcheck import gradcheck_head
from qkvcli.attention.head import AttentionForward, AttentionGradients, AttentionHead, output_loss
from qkvcli.checks.records import Check
from qkvcli.core.arrays import Array
from qkvcli.gradcheck.layer import GradcheckResult

EPSILON = float(np.finfo(np.float64).eps)


@dataclass(frozen=True)
class AttendConfig:
    batch: int
    tokens: int
    d_model: int
    d_k: int
    d_v: int
    causal: bool
    bias: tuple[bool, bool, bool]
    value_width: str
    layout: str
    layout_description: str
    scale: float
    parameter_count: int
    names: tuple[str, str, str]


@dataclass(frozen=True)
class AttendPrimary:
    """Every tensor of one forward and reverse pass, by stable name in report order."""

    tensors: dict[str, Array]
    loss: float

    def __getitem__(self, name: str) -> Array:
        return self.tensors[name]


@dataclass(frozen=True)
class TokenRow:
    """One query position: its weights over the keys, their sum, and its output."""

    batch: int
    token: int
    weights: tuple[float, ...]
    weight_sum: float
    output: tuple[float, ...]


@dataclass(frozen=True)
class WeightEvidence:
    min_weight: float
    max_row_deviation: float
    tolerance: float

    @property
    def passed(self) -> bool:
        return self.min_weight >= 0.0 and self.max_row_deviation <= self.tolerance


@dataclass(frozen=True)
class MaskEvidence:
    applicable: bool
    max_masked_weight: float

    @property
    def passed(self) -> bool:
        return not self.applicable or self.max_masked_weight == 0.0


@dataclass(frozen=True)
class HullEvidence:
    """``O_i = sum_j A_ij v_j`` recomputed term by term, and the coordinate box test."""

    barycentric_residual: float
    box_violations: int
    tolerance: float

    @property
    def passed(self) -> bool:
        return self.barycentric_residual <= self.tolerance and self.box_violations == 0


@dataclass(frozen=True)
class ShapeProbe:
    input: tuple[int, ...]
    weights: tuple[int, ...]
    output: tuple[int, ...]
    input_gradient: tuple[int, ...]


@dataclass(frozen=True)
class Note:
    code: str
    text: str


@dataclass(frozen=True)
class AttendEvidence:
    chapter: str
    seed: int
    config: AttendConfig
    primary: AttendPrimary
    rows: tuple[TokenRow, ...]
    weights: WeightEvidence
    mask: MaskEvidence
    hull: HullEvidence
    probes: tuple[ShapeProbe, ShapeProbe]
    notes: tuple[Note, ...]
    replay_bitwise: bool
    gradcheck: GradcheckResult
    checks: tuple[Check, ...]

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)


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
        ("upstream_output", fixture.upstream), ("weights_gradient", g.weights),
        ("scaled_scores_gradient", g.scaled_scores), ("scores_gradient", g.scores),
        ("query_gradient", g.query), ("key_gradient", g.key), ("value_gradient", g.value),
        ("input_gradient", g.input), ("query_weight_gradient", g.query_weight),
        ("key_weight_gradient", g.key_weight), ("value_weight_gradient", g.value_weight),
        ("query_bias_gradient", g.query_bias), ("key_bias_gradient", g.key_bias),
        ("value_bias_gradient", g.value_bias),
    ]
    out = {}
    for name, value in named:
        if value is not None:
            array = np.ascontiguousarray(value, dtype=np.float64)
            array.flags.writeable = False
            out[name] = array
    return out


def _hull(f: AttentionForward, tokens: int) -> HullEvidence:
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


def _probe(head: AttentionHead, shape: tuple[int, int, int], causal: bool) -> ShapeProbe:
    x = np.zeros(shape)
    f = head.forward(x, causal)
    g = head.backward(x, f, np.zeros(f.output.shape))
    return ShapeProbe(shape, tuple(f.weights.shape), tuple(f.output.shape), tuple(g.input.shape))


def _notes(head: AttentionHead) -> tuple[Note, ...]:
    w, b = head.weights, head.biases

    def same(i: int, j: int) -> bool:
        bi, bj = b[i], b[j]
        biases_equal = (bi is None and bj is None) or (
            bi is not None and bj is not None and np.array_equal(bi, bj)
        )
        return w[i].shape == w[j].shape and np.array_equal(w[i], w[j]) and biases_equal

    notes = []
    if same(0, 1) and same(0, 2):
        notes.append(Note("collapsed-roles", "W_Q = W_K = W_V: every token is matched with, and "
                          "hands over, the same vector; matching and content collapse into one "
                          "role (the primer's gotcha: self-attention means the same input, "
                          "not the same projection)"))
    elif same(0, 1):
        notes.append(Note("symmetric-matching", "W_Q = W_K: q_i.k_j = q_j.k_i, so matching is "
                          "symmetric; token i cannot look for something other than what it "
                          "advertises"))
    if head.d_v != head.d_k:
        notes.append(Note("independent-value-width", f"d_v = {head.d_v} differs from d_k = "
                          f"{head.d_k}: the output takes the value width"))
    return tuple(notes)


def _finite(*arrays: Array) -> bool:
    return all(bool(np.isfinite(a).all()) for a in arrays)


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
        above = weights[:, np.triu(np.ones((tokens, tokens), dtype=bool), k=1)]
        mask = MaskEvidence(True, float(above.max()) if above.size else 0.0)
    hull = _hull(forward, tokens)
    probes = (_probe(head, (0, tokens, d_model), causal),
              _probe(head, (max(batch, 1), 0, d_model), causal))
    probes_ok = all(
        p.weights == (p.input[0], p.input[1], p.input[1])
        and p.output == (p.input[0], p.input[1], head.d_v) and p.input_gradient == p.input
        for p in probes
    )
    gradcheck = gradcheck_head(head, x, fixture.upstream, grads, causal,
                               fixture.step, fixture.tolerance, fixture.samples)
    forward_ok = _finite(*forward[:3], forward.scores, weights, forward.output) and (
        forward.scores.shape == (batch, tokens, tokens)
        and forward.output.shape == (batch, tokens, head.d_v)
    )
    grad_arrays = [g for g in grads if g is not None]
    reverse_ok = _finite(*grad_arrays) and grads.input.shape == x.shape and all(
        grad.shape == weight.shape for grad, weight in zip(
            (grads.query_weight, grads.key_weight, grads.value_weight), head.weights, strict=True)
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
        weights=weight_evidence, mask=mask, hull=hull, probes=probes, notes=_notes(head),
        replay_bitwise=replay_bitwise, gradcheck=gradcheck, checks=checks,
    )

