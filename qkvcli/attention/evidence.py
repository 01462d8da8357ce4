"""Run one attention head on its fixture and gather the evidence (no I/O, no wording).

Checks, in order: forward (shapes, finite), attention (non-negative, rows sum to 1;
published as ``weights``), mask (causal only: nothing above the diagonal), hull (each
output row is a convex combination of the value rows), reverse (finite, shaped), shapes
(empty batch and token axes), replay (bitwise), gradcheck. Notes are a teacher's
remarks on the parameters, never failures.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qkvcli.attention.engine import AttentionForward
from qkvcli.attention.fixture import AttendFixture, relative_sources
from qkvcli.attention.gradcheck import gradcheck_attention, plan_check
from qkvcli.attention.head import AttentionGradients, AttentionHead, output_loss
from qkvcli.attention.maths import causal_mask
from qkvcli.attention.records import (
    CHECK_ORDER,
    AttendConfig,
    AttendEvidence,
    AttendPrimary,
    AttentionEvidence,
    AttentionShapeProbe,
    HullEvidence,
    MaskEvidence,
    Note,
    TokenRow,
)
from qkvcli.core.arrays import Array, all_finite, readonly
from qkvcli.evidence.records import Verdict

EPSILON = float(np.finfo(np.float64).eps)
ROWS_LIMIT = 4096
"""Largest attention matrix (elements) whose per-token rows the evidence lists."""
PLAN_KEYS = ("mode", "directions", "limit", "reached")
"""The gradient-check settings its budget depends on (checked before any work)."""


def _run(fixture: AttendFixture, causal: bool) -> tuple[AttentionForward, AttentionGradients]:
    forward = fixture.head.forward(fixture.input, causal)
    return forward, fixture.head.backward(fixture.input, forward, fixture.upstream)


def _tensors(
    fixture: AttendFixture, f: AttentionForward, g: AttentionGradients
) -> dict[str, Array]:
    """Every tensor of the run by vocabulary name, in report order (absent biases left out)."""
    head = fixture.head
    named: list[tuple[str, Array | None]] = [
        ("input", fixture.input),
        ("w_query", head.weights[0]), ("w_key", head.weights[1]), ("w_value", head.weights[2]),
        ("b_query", head.biases[0]), ("b_key", head.biases[1]), ("b_value", head.biases[2]),
        ("query", f.query), ("key", f.key), ("value", f.value), ("scores", f.scores),
        ("scaled_scores", f.scaled_scores), ("attention", f.attention), ("output", f.output),
        ("grad_output", fixture.upstream), ("grad_attention", g.grad_attention),
        ("grad_scaled_scores", g.grad_scaled_scores), ("grad_scores", g.grad_scores),
        ("grad_query", g.grad_query), ("grad_key", g.grad_key), ("grad_value", g.grad_value),
        ("grad_input", g.grad_input), ("grad_w_query", g.grad_w_query),
        ("grad_w_key", g.grad_w_key), ("grad_w_value", g.grad_w_value),
        ("grad_b_query", g.grad_b_query), ("grad_b_key", g.grad_b_key),
        ("grad_b_value", g.grad_b_value),
    ]
    return {name: readonly(value) for name, value in named if value is not None}


def hull_evidence(f: AttentionForward, tokens: int, causal: bool = False) -> HullEvidence:
    """Recompute ``O`` term by term and test each output row against the value rows' box.

    ``causal``: key ``j`` reaches only the rows from ``j`` on (above the diagonal ``A`` is
    exactly 0, and adding its ``+-0`` terms to a sum that is never ``-0`` changes nothing),
    so those terms are left out: the same sums in half the work."""
    value = f.value
    # Rounding in a sum of T products, each at most max|v|, stays below a few T eps max|v|.
    scale = float(np.max(np.abs(value))) if value.size else 0.0
    tolerance = 4.0 * max(tokens, 1) * EPSILON * max(scale, 1.0)
    recomputed = np.zeros_like(f.output)
    term = np.empty_like(f.output)
    for j in range(tokens):  # term by term, independently of the matrix product
        rows = j if causal else 0
        part = term[:, rows:]
        np.multiply(f.attention[:, rows:, j:j + 1], value[:, j:j + 1, :], out=part)
        recomputed[:, rows:] += part
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
    return AttentionShapeProbe(shape, tuple(f.attention.shape), tuple(f.output.shape),
                               tuple(g.grad_input.shape))


def _finite(*arrays: Array) -> bool:
    return all(all_finite(a) for a in arrays)


def _same(head: AttentionHead, i: int, j: int) -> bool:
    """Whether branches ``i`` and ``j`` have equal weights and equal (or no) biases."""
    w, b = head.weights, head.biases
    bi, bj = b[i], b[j]
    biases_equal = (bi is None and bj is None) or (
        bi is not None and bj is not None and np.array_equal(bi, bj)
    )
    return w[i].shape == w[j].shape and np.array_equal(w[i], w[j]) and biases_equal


def notes_of(head: AttentionHead) -> tuple[Note, ...]:
    """A teacher's remarks on ``head``: collapsed or symmetric roles, a distinct ``d_v``.

    Takes the head (for a layer, its full-width projections); gives the notes in a
    fixed order, as data (:mod:`qkvcli.render.attend` words them).
    """
    notes = []
    if _same(head, 0, 1) and _same(head, 0, 2):
        notes.append(Note("collapsed-roles", head.d_k, head.d_v))
    elif _same(head, 0, 1):
        notes.append(Note("symmetric-matching", head.d_k, head.d_v))
    if head.d_v != head.d_k:
        notes.append(Note("independent-value-width", head.d_k, head.d_v))
    return tuple(notes)


def verdicts(*passed: bool) -> tuple[Verdict, ...]:
    """A :class:`Verdict` per :data:`~qkvcli.attention.records.CHECK_ORDER` name, in order."""
    return tuple(Verdict(name, bool(ok)) for name, ok in zip(CHECK_ORDER, passed, strict=True))


def build_attend_evidence(fixture: AttendFixture, causal: bool | None = None,
                          **gradcheck: Any) -> AttendEvidence:
    """Run the head on ``fixture`` and gather every check.

    Takes the fixture, the mask flag (default: the fixture's ``causal``) and the gradient
    check's settings (:func:`~qkvcli.attention.gradcheck.gradcheck_attention`'s keywords:
    ``mode``, ``directions``, ``limit``, ``progress``...); gives the evidence (no wording).
    Raises the head's input errors and, for unusable settings or a check over its budget
    (before any work), :class:`~qkvcli.gradcheck.settings.GradcheckSettingError`.
    """
    causal = fixture.causal if causal is None else causal
    head, x = fixture.head, fixture.input
    plan_check(head, x, fixture.step, fixture.tolerance, fixture.samples,
               **{k: v for k, v in gradcheck.items() if k in PLAN_KEYS})
    batch, tokens, d_model = x.shape
    forward, grads = _run(fixture, causal)
    replay_forward, replay_grads = _run(fixture, causal)
    tensors = _tensors(fixture, forward, grads)
    replay = _tensors(fixture, replay_forward, replay_grads)
    replay_bitwise = all(a.tobytes() == replay[k].tobytes() for k, a in tensors.items())

    attention = forward.attention
    # Per-token rows repeat A and O value by value: only while A is small enough to show
    # whole (a T=1024 head would hold a million Python floats twice).
    rows = tuple(
        TokenRow(bi, ti, tuple(float(v) for v in attention[bi, ti]),
                 float(np.sum(attention[bi, ti])), tuple(float(v) for v in forward.output[bi, ti]))
        for bi in range(batch) for ti in range(tokens)
    ) if attention.size <= ROWS_LIMIT else ()
    sums = np.sum(attention, axis=-1)
    rows_evidence = AttentionEvidence(
        min_attention=float(attention.min()) if attention.size else 0.0,
        max_row_deviation=max((abs(r.attention_sum - 1.0) for r in rows), default=0.0) if rows
        else float(np.max(np.abs(sums - 1.0))) if sums.size else 0.0,
        tolerance=4.0 * max(tokens, 1) * EPSILON,
    )
    mask = MaskEvidence(False, 0.0)
    if causal:
        above = attention[:, causal_mask(tokens)]
        mask = MaskEvidence(True, float(above.max()) if above.size else 0.0)
    hull = hull_evidence(forward, tokens, causal)
    probes = (_probe(head, (0, tokens, d_model), causal),
              _probe(head, (max(batch, 1), 0, d_model), causal))
    probes_ok = all(
        p.attention == (p.input[0], p.input[1], p.input[1])
        and p.output == (p.input[0], p.input[1], head.d_v) and p.grad_input == p.input
        for p in probes
    )
    checked = gradcheck_attention(head, x, fixture.upstream, grads, causal, fixture.step,
                                  fixture.tolerance, fixture.samples, **gradcheck)
    forward_ok = _finite(forward.query, forward.key, forward.value, forward.scores, attention,
                         forward.output) and (
        forward.scores.shape == (batch, tokens, tokens)
        and forward.output.shape == (batch, tokens, head.d_v)
    )
    # every gradient the reverse pass computed (grad_output is the given upstream U)
    grad_arrays = [a for name, a in tensors.items()
                   if name.startswith("grad_") and name != "grad_output"]
    reverse_ok = _finite(*grad_arrays) and grads.grad_input.shape == x.shape and all(
        grad.shape == weight.shape for grad, weight in zip(
            (grads.grad_w_query, grads.grad_w_key, grads.grad_w_value), head.weights,
            strict=True)
    )
    checks = verdicts(forward_ok, rows_evidence.passed, mask.passed, hull.passed, reverse_ok,
                      probes_ok, replay_bitwise, checked.passed)
    config = AttendConfig(
        batch=batch, tokens=tokens, d_model=d_model, d_k=head.d_k, d_v=head.d_v, causal=causal,
        bias=(head.biases[0] is not None, head.biases[1] is not None, head.biases[2] is not None),
        value_width=fixture.value_width, layout=fixture.layout,
        layout_description=fixture.layout_description, scale=head.scale,
        parameter_count=head.parameter_count, names=head.names, rope=head.rope,
        scale_given=head.given_scale is not None, architecture=fixture.architecture,
        sources=relative_sources(fixture.sources),
    )
    return AttendEvidence(
        chapter=fixture.chapter, seed=fixture.seed, config=config,
        primary=AttendPrimary(tensors, output_loss(forward, fixture.upstream)), rows=rows,
        attention=rows_evidence, mask=mask, hull=hull, probes=probes, notes=notes_of(head),
        replay_bitwise=replay_bitwise, gradcheck=checked, checks=checks,
    )
