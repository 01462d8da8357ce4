"""Gradient-check modes: batched full/sampled against the per-coordinate loop, fast, auto."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qkvcli.core.outputs import weighted_loss
from qkvcli.core.projections import QkvProjections
from qkvcli.core.splitmix import SplitMix64
from qkvcli.gradcheck.batched import direction
from qkvcli.gradcheck.central import check_tensor, sample_indices
from qkvcli.gradcheck.projections import gradcheck_projections
from qkvcli.gradcheck.settings import (
    AUTO_FULL_LIMIT,
    DEFAULT_SAMPLES,
    InvalidMode,
    ZeroDirections,
    resolve_mode,
)

STEP = 1e-6
TOLERANCE = 2e-6


def _case(seed, batch, tokens, d_model, d_head, integers=False):
    rng = np.random.default_rng(seed)
    if integers:
        def draw(shape):
            return rng.integers(-3, 4, shape).astype(float)
    else:
        def draw(shape):
            return rng.uniform(-1, 1, shape)
    x = draw((batch, tokens, d_model))
    layer = QkvProjections.from_arrays(*[draw((d_model, d_head)) for _ in range(3)])
    upstream = tuple(draw((batch, tokens, d_head)) for _ in range(3))
    grads = layer.backward(x, *upstream)
    return layer, x, upstream, tuple(grads)


def _loop(layer, x, upstream, analytic, step, samples):
    """The plain per-coordinate loop: one forward pass per evaluation."""

    def input_objective(probe):
        return weighted_loss(layer.forward(probe), upstream)

    def weight_objective(branch):
        def objective(probe):
            weights = list(layer.weights)
            weights[branch] = probe
            return weighted_loss(QkvProjections.from_arrays(*weights).forward(x), upstream)
        return objective

    tensors = [check_tensor("input", x, analytic[0], step, TOLERANCE, samples, input_objective)]
    for branch in range(3):
        tensors.append(check_tensor("w", layer.weights[branch], analytic[branch + 1], step,
                                    TOLERANCE, samples, weight_objective(branch)))
    return tensors


@pytest.mark.parametrize("samples", [None, 5], ids=["full", "sampled"])
def test_batched_equals_the_loop_exactly_when_arithmetic_is_exact(samples):
    # Small integers and a power-of-two step: every perturbed point, product and sum is
    # exact in binary64, so both ways must give identical numbers, not merely close ones.
    layer, x, upstream, analytic = _case(1, 2, 5, 6, 3, integers=True)
    step = 2.0**-20
    mode = "full" if samples is None else "sampled"
    batched = gradcheck_projections(layer, x, upstream, analytic, step, TOLERANCE, samples, mode=mode)
    looped = _loop(layer, x, upstream, analytic, step, samples)
    assert batched.passed
    for fast_tensor, slow_tensor in zip(batched.tensors, looped, strict=True):
        assert fast_tensor.mode == mode
        assert len(fast_tensor.checks) == len(slow_tensor.checks) > 0
        for fast, slow in zip(fast_tensor.checks, slow_tensor.checks, strict=True):
            assert (fast.flat_index, fast.coordinate) == (slow.flat_index, slow.coordinate)
            assert fast.numerical == slow.numerical
            assert fast.analytic == slow.analytic
            assert fast.note == slow.note == ""


def test_batched_agrees_with_the_loop_on_general_values():
    # Here rounding differs between a stacked product and a single one; the two must
    # agree far inside the tolerance, coordinate by coordinate, with the same notes.
    layer, x, upstream, analytic = _case(2, 2, 16, 32, 8)
    batched = gradcheck_projections(layer, x, upstream, analytic, STEP, TOLERANCE, mode="full")
    looped = _loop(layer, x, upstream, analytic, STEP, None)
    assert batched.count == x.size + 3 * layer.d_model * layer.d_head
    for fast_tensor, slow_tensor in zip(batched.tensors, looped, strict=True):
        for fast, slow in zip(fast_tensor.checks, slow_tensor.checks, strict=True):
            assert fast.flat_index == slow.flat_index and fast.note == slow.note
            assert abs(fast.numerical - slow.numerical) <= TOLERANCE / 20
            assert fast.passed == slow.passed


def test_batched_equals_the_loop_bit_for_bit_on_the_chapter_fixture():
    # Each batched evaluation sums every branch's products in the loop's order, so the
    # chapter's printed numerical derivatives (9 decimals, pinned by golden files) are
    # the loop's exactly, not merely within rounding.
    from qkvcli.check.chapter26 import projections_of
    from qkvcli.reading.load import load_fixture

    fixture = load_fixture()
    layer = projections_of(fixture)
    grads = tuple(layer.backward(fixture.input, *fixture.upstream))
    batched = gradcheck_projections(layer, fixture.input, fixture.upstream, grads,
                                    fixture.step, fixture.tolerance, mode="full")
    looped = _loop(layer, fixture.input, fixture.upstream, grads, fixture.step, None)
    for fast_tensor, slow_tensor in zip(batched.tensors, looped, strict=True):
        assert [c.numerical for c in fast_tensor.checks] == [
            c.numerical for c in slow_tensor.checks
        ]


def test_unequal_spacings_use_the_three_point_formula_in_batches_too():
    # At 1.0 (a power of two) the rounded spacings differ: the centre is evaluated too.
    layer, x, upstream, analytic = _case(3, 1, 2, 3, 2)
    x = np.full_like(x, 1.0)
    analytic = tuple(layer.backward(x, *upstream))
    assert (1.0 - (1.0 - STEP)) != ((1.0 + STEP) - 1.0)
    batched = gradcheck_projections(layer, x, upstream, analytic, STEP, TOLERANCE, mode="full")
    looped = _loop(layer, x, upstream, analytic, STEP, None)
    for fast, slow in zip(batched.tensors[0].checks, looped[0].checks, strict=True):
        assert abs(fast.numerical - slow.numerical) <= 1e-9
    assert batched.passed


def test_chapter_default_checks_every_coordinate():
    from qkvcli.check.chapter26 import projections_of
    from qkvcli.reading.load import load_fixture

    fixture = load_fixture()
    layer = projections_of(fixture)
    grads = layer.backward(fixture.input, *fixture.upstream)
    result = gradcheck_projections(layer, fixture.input, fixture.upstream, tuple(grads),
                                   fixture.step, fixture.tolerance)
    assert [len(t.checks) for t in result.tensors] == [6, 6, 6, 6]
    assert [t.mode for t in result.tensors] == ["full"] * 4
    assert result.mode == "auto" and result.summary == "full: 24 coordinates"
    assert result.passed


@pytest.mark.parametrize(
    ("mode", "elements", "samples", "expected"),
    [
        ("auto", AUTO_FULL_LIMIT, None, ("full", None)),
        ("auto", AUTO_FULL_LIMIT + 1, None, ("sampled", DEFAULT_SAMPLES)),
        ("auto", 10, 3, ("sampled", 3)),
        ("full", 10**6, 3, ("full", None)),
        ("sampled", 10, None, ("sampled", DEFAULT_SAMPLES)),
        ("fast", 10, None, ("fast", None)),
    ],
    ids=["auto-small", "auto-large", "auto-samples", "full", "sampled-default", "fast"],
)
def test_resolve_mode(mode, elements, samples, expected):
    assert resolve_mode(mode, elements, samples) == expected


def test_auto_samples_large_tensors_and_reports_it():
    # d_model * d_head = 4160 > 4096: weights sampled; the input (2*3*65) checked fully.
    layer, x, upstream, analytic = _case(4, 2, 3, 65, 64)
    result = gradcheck_projections(layer, x, upstream, analytic, STEP, TOLERANCE)
    assert [t.mode for t in result.tensors] == ["full", "sampled", "sampled", "sampled"]
    assert [len(t.checks) for t in result.tensors] == [x.size] + [DEFAULT_SAMPLES] * 3
    weight_indices = [c.flat_index for c in result.tensors[1].checks]
    assert weight_indices == sample_indices(65 * 64, DEFAULT_SAMPLES)
    assert result.summary == f"full: {x.size} coordinates, sampled: 18 coordinates"
    assert result.passed


def test_fast_mode_reports_each_direction():
    layer, x, upstream, analytic = _case(5, 4, 64, 128, 32)
    result = gradcheck_projections(layer, x, upstream, analytic, STEP, TOLERANCE, mode="fast",
                             directions=4, seed=11)
    assert result.summary == "fast: 16 directions"
    for tensor, values, gradient in zip(result.tensors, (x, *layer.weights), analytic,
                                        strict=True):
        assert tensor.mode == "fast" and tensor.requested == 4
        assert [c.direction for c in tensor.checks] == [0, 1, 2, 3]
        for check in tensor.checks:
            assert check.passed and check.flat_index == -1 and check.coordinate == ()
            # The analytic value is the projection on a unit direction: bounded by |g|.
            assert abs(check.analytic) <= np.linalg.norm(gradient) + 1e-9
            assert check.analytic != 0.0
        del values
    again = gradcheck_projections(layer, x, upstream, analytic, STEP, TOLERANCE, mode="fast",
                            directions=4, seed=11)
    assert again == result  # seeded: the same directions, the same numbers


def test_directions_are_seeded_unit_vectors():
    first = direction(SplitMix64(3), 1000)
    assert math.isclose(float(np.linalg.norm(first)), 1.0, rel_tol=1e-12)
    assert np.array_equal(first, direction(SplitMix64(3), 1000))
    assert not np.array_equal(first, direction(SplitMix64(4), 1000))


def _broken(analytic, how):
    wrong = [np.array(a, copy=True) for a in analytic]
    if how == "scaled":
        wrong = [a * 1.01 for a in wrong]
    else:
        wrong[0].reshape(-1)[7] += 0.5  # one entry of dX changed
    return tuple(wrong)


@pytest.mark.parametrize("how", ["scaled", "one-entry"])
@pytest.mark.parametrize("mode", ["full", "sampled", "fast", "auto"])
def test_a_wrong_analytic_gradient_is_caught_by_every_mode(mode, how):
    layer, x, upstream, analytic = _case(6, 2, 16, 32, 8)
    assert gradcheck_projections(layer, x, upstream, analytic, STEP, TOLERANCE, mode=mode).passed
    # One wrong entry is only visible to sampled mode if it is sampled: ask for as many
    # samples as dX has entries, so index 7 is among the evenly spaced ones.
    samples = x.size if mode == "sampled" and how == "one-entry" else None
    result = gradcheck_projections(layer, x, upstream, _broken(analytic, how), STEP, TOLERANCE,
                             samples, mode=mode)
    assert not result.passed
    failed = [c for t in result.tensors for c in t.checks if not c.passed]
    assert failed
    if how == "one-entry":
        assert {c.tensor for c in failed} == {"input"}
        if mode != "fast":
            assert [c.flat_index for c in failed] == [7]


@pytest.mark.parametrize("mode", ["full", "sampled", "fast"])
def test_progress_counts_every_check_across_tensors(mode):
    layer, x, upstream, analytic = _case(7, 1, 3, 4, 2)
    calls: list[tuple[int, int]] = []
    result = gradcheck_projections(layer, x, upstream, analytic, STEP, TOLERANCE, None,
                             lambda done, total: calls.append((done, total)), mode=mode,
                             directions=2)
    total = result.count
    assert calls == [(done, total) for done in range(1, total + 1)]


def test_check_tensor_progress_is_per_tensor():
    layer, x, upstream, analytic = _case(8, 1, 2, 3, 2)
    calls: list[tuple[int, int]] = []
    check_tensor("input", x, analytic[0], STEP, TOLERANCE, 4,
                 lambda probe: weighted_loss(layer.forward(probe), upstream),
                 progress=lambda done, total: calls.append((done, total)))
    assert calls == [(1, 4), (2, 4), (3, 4), (4, 4)]


def test_perturbations_that_round_back_are_noted_in_every_mode():
    layer, x, upstream, analytic = _case(9, 1, 2, 3, 2)
    x = np.full_like(x, 1e20)  # 1e20 +- 1e-6 rounds back to 1e20
    analytic = tuple(layer.backward(x, *upstream))
    for mode in ("full", "fast"):
        result = gradcheck_projections(layer, x, upstream, analytic, STEP, TOLERANCE, mode=mode)
        notes = {c.note for c in result.tensors[0].checks}
        assert notes == {"perturbation rounds back to the point"}
        assert not result.passed


def test_settings_are_validated():
    layer, x, upstream, analytic = _case(10, 1, 2, 3, 2)
    with pytest.raises(InvalidMode) as caught:
        gradcheck_projections(layer, x, upstream, analytic, STEP, TOLERANCE, mode="everything")
    assert str(caught.value) == (
        "gradient-check mode 'everything' is not one of auto, full, sampled, fast"
    )
    with pytest.raises(ZeroDirections):
        gradcheck_projections(layer, x, upstream, analytic, STEP, TOLERANCE, mode="fast",
                        directions=0)


def test_float32_analytic_gradients_are_checked_in_float64():
    layer, x, upstream, _ = _case(11, 2, 4, 8, 3)
    single = tuple(layer.astype("float32").backward(x, *upstream))
    result = gradcheck_projections(layer, x, upstream, single, STEP, 1e-5, mode="full")
    assert result.passed  # float32 gradients are good to ~1e-7 relative here
    assert max(c.scaled_error for t in result.tensors for c in t.checks) > 1e-9


@pytest.mark.parametrize("mode", ["auto", "full", "sampled", "fast"])
def test_empty_batch_is_checked_in_every_mode(mode):
    layer, _, upstream, _ = _case(12, 1, 2, 3, 2)
    x = np.zeros((0, 2, 3))
    x.flags.writeable = False  # as a fixture's input is
    upstream = tuple(np.zeros((0, 2, 2)) for _ in range(3))
    analytic = tuple(layer.backward(x, *upstream))
    result = gradcheck_projections(layer, x, upstream, analytic, STEP, TOLERANCE, mode=mode)
    assert result.passed
    assert result.tensors[0].shape == (0, 2, 3)
    if mode != "fast":
        assert len(result.tensors[0].checks) == 0
