"""Central-difference gradient checks: sampling, the unequal-spacing formula, and verdicts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qkvcli.core.projections import QkvProjections
from qkvcli.gradcheck.central import central_difference, sample_indices, scaled_error
from qkvcli.gradcheck.projections import gradcheck_projections
from qkvcli.gradcheck.settings import InvalidStep, InvalidTolerance, ZeroSamples, validate_settings


@pytest.mark.parametrize(
    ("elements", "samples", "expected"),
    [
        (6, None, [0, 1, 2, 3, 4, 5]),
        (6, 6, [0, 1, 2, 3, 4, 5]),
        (6, 60, [0, 1, 2, 3, 4, 5]),
        (6, 1, [3]),
        (7, 1, [3]),
        (10, 3, [0, 4, 9]),
        (10, 4, [0, 3, 6, 9]),
        (0, 5, []),
        (1, 3, [0]),
    ],
    ids=["all", "exact", "clamped", "one-even", "one-odd", "three", "four", "empty", "single"],
)
def test_sample_indices_are_evenly_spaced(
    elements: int, samples: int | None, expected: list[int]
) -> None:
    assert sample_indices(elements, samples) == expected


def test_scaled_error_uses_the_larger_magnitude_or_one() -> None:
    assert scaled_error(3.0, 3.0) == 0.0
    assert scaled_error(0.5, 0.25) == 0.25
    assert scaled_error(100.0, 101.0) == pytest.approx(1 / 101)


def test_central_difference_equal_spacing_is_the_symmetric_quotient() -> None:
    # At 0 the rounded spacings are equal, so the centre is never evaluated.
    calls: list[float] = []

    def f(x: float) -> float:
        calls.append(x)
        return x**3

    derivative, note = central_difference(0.0, 0.5, f)
    assert note == ""
    assert calls == [-0.5, 0.5]
    assert derivative == (0.125 - -0.125) / 1.0


def test_central_difference_unequal_spacing_uses_the_three_point_formula() -> None:
    # Around 1.0 the ulp below is half the ulp above, so x-h and x+h round unequally.
    point, step = 1.0, 1e-6
    h1 = point - (point - step)
    h2 = (point + step) - point
    assert h1 != h2
    calls: list[float] = []

    def f(x: float) -> float:
        calls.append(x)
        return x * x

    derivative, note = central_difference(point, step, f)
    assert note == ""
    assert len(calls) == 3 and point in calls
    # A quadratic is differentiated exactly by the unequal-spacing formula (up to rounding).
    assert derivative == pytest.approx(2.0, rel=1e-9)


def test_central_difference_reports_a_step_lost_to_rounding() -> None:
    derivative, note = central_difference(1e20, 1e-6, lambda x: x)
    assert math.isnan(derivative)
    assert note == "perturbation rounds back to the point"


@pytest.mark.parametrize(
    ("step", "tolerance", "samples", "error"),
    [
        (0.0, 1e-6, None, InvalidStep(0.0)),
        (-1.0, 1e-6, None, InvalidStep(-1.0)),
        (math.inf, 1e-6, None, InvalidStep(math.inf)),
        (1e308, 1e-6, None, InvalidStep(1e308)),
        (1e-6, -1e-9, None, InvalidTolerance(-1e-9)),
        (1e-6, math.nan, None, InvalidTolerance(math.nan)),
        (1e-6, 1e-6, 0, ZeroSamples()),
    ],
    ids=["zero-step", "negative-step", "inf-step", "2h-overflows", "negative-tol", "nan-tol",
         "zero-samples"],
)
def test_settings_are_validated(
    step: float, tolerance: float, samples: int | None, error: Exception
) -> None:
    with pytest.raises(type(error)) as caught:
        validate_settings(step, tolerance, samples)
    assert str(caught.value) == str(error)


def random_case(seed: int, shape: tuple[int, int, int, int]):  # type: ignore[no-untyped-def]
    batch, tokens, d_model, d_head = shape
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, tokens, d_model))
    layer = QkvProjections.from_arrays(*(rng.standard_normal((d_model, d_head)) for _ in range(3)))
    upstream = tuple(rng.standard_normal((batch, tokens, d_head)) for _ in range(3))
    grads = layer.backward(x, *upstream)
    return layer, x, upstream, tuple(grads)


@pytest.mark.parametrize("shape", [(1, 2, 3, 2), (2, 3, 4, 5), (3, 1, 2, 1)], ids=str)
def test_correct_gradients_pass(shape: tuple[int, int, int, int]) -> None:
    layer, x, upstream, grads = random_case(7, shape)
    result = gradcheck_projections(layer, x, upstream, grads, 1e-6, 2e-6)
    assert result.passed
    assert result.count == x.size + 3 * layer.d_model * layer.d_head


@pytest.mark.parametrize("tensor", [0, 1, 2, 3], ids=["input", "query", "key", "value"])
def test_a_wrong_gradient_is_caught(tensor: int) -> None:
    layer, x, upstream, grads = random_case(11, (2, 3, 4, 2))
    wrong = list(grads)
    wrong[tensor] = np.array(wrong[tensor])
    wrong[tensor].reshape(-1)[-1] += 0.01
    result = gradcheck_projections(layer, x, upstream, tuple(wrong), 1e-6, 2e-6)  # type: ignore[arg-type]
    assert not result.passed
    failed = [c for t in result.tensors for c in t.checks if not c.passed]
    assert len(failed) == 1
    assert failed[0].flat_index == wrong[tensor].size - 1
    assert result.worst == failed[0]


def test_samples_limit_the_checked_coordinates() -> None:
    layer, x, upstream, grads = random_case(3, (2, 4, 5, 3))
    result = gradcheck_projections(layer, x, upstream, grads, 1e-6, 2e-6, samples=4)
    assert [len(t.checks) for t in result.tensors] == [4, 4, 4, 4]
    assert [c.flat_index for c in result.checks_of("input").checks] == [0, 13, 26, 39]


def test_empty_tensors_pass_with_zero_checks() -> None:
    layer, x, upstream, grads = random_case(5, (0, 3, 2, 2))
    result = gradcheck_projections(layer, x, upstream, grads, 1e-6, 2e-6)
    assert result.passed
    assert len(result.checks_of("input").checks) == 0
    assert len(result.checks_of("query_weight").checks) == 4
