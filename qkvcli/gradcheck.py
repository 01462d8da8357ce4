"""Central-difference gradient checks, coordinate by coordinate, as the reference does them.

For a requested sample count ``n`` over a tensor of ``N`` elements the checked flat
indices are ``floor(k (N-1) / (n-1))`` for ``k = 0..n-1`` (``n = 1``: ``N // 2``). Each
selected element is perturbed to ``x - h`` and ``x + h``; because those points are
rounded to binary64, the *actual* spacings ``h1 = x - (x-h)`` and ``h2 = (x+h) - x`` are
used in the three-point formula for unequal spacing, which reduces to
``(f+ - f-) / 2h`` when the spacings are equal. Every evaluation of the objective is a
fresh forward pass; nothing is shared between evaluations.

A coordinate passes when ``|a - n| / max(1, |a|, |n|) <= tolerance``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from qkvcli.engine import Array, QkvProjections, weighted_loss
from qkvcli.errors import QkvError, format_float_debug

TENSOR_NAMES: tuple[str, str, str, str] = ("input", "query_weight", "key_weight", "value_weight")


class GradcheckSettingError(QkvError):
    """A step, tolerance or sample count the check cannot use."""


class InvalidStep(GradcheckSettingError):
    def __init__(self, step: float) -> None:
        self.step = step
        super().__init__(
            f"central-difference step {format_float_debug(step)} must be positive and finite"
        )


class InvalidTolerance(GradcheckSettingError):
    def __init__(self, tolerance: float) -> None:
        self.tolerance = tolerance
        super().__init__(
            f"gradient-check tolerance {format_float_debug(tolerance)} "
            "must be finite and nonnegative"
        )


class ZeroSamples(GradcheckSettingError):
    def __init__(self) -> None:
        super().__init__("gradient check needs at least one sample per tensor")


def validate_settings(step: float, tolerance: float, samples: int | None) -> None:
    """Raise a :class:`GradcheckSettingError` for a step, tolerance or count that cannot work."""
    if not (math.isfinite(step) and step > 0.0 and math.isfinite(2.0 * step)):
        raise InvalidStep(step)
    if not (math.isfinite(tolerance) and tolerance >= 0.0):
        raise InvalidTolerance(tolerance)
    if samples is not None and samples < 1:
        raise ZeroSamples()


@dataclass(frozen=True)
class CoordinateCheck:
    """One checked coordinate: the analytic and numerical derivative and their comparison."""

    tensor: str
    flat_index: int
    coordinate: tuple[int, ...]
    analytic: float
    numerical: float
    scaled_error: float
    passed: bool
    note: str = ""


@dataclass(frozen=True)
class TensorCheck:
    """The checks of one tensor (input or one weight)."""

    tensor: str
    shape: tuple[int, ...]
    requested: int
    checks: tuple[CoordinateCheck, ...]

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)


@dataclass(frozen=True)
class GradcheckResult:
    """Every tensor's checks, with the settings that produced them."""

    step: float
    tolerance: float
    tensors: tuple[TensorCheck, ...]

    @property
    def passed(self) -> bool:
        return all(tensor.passed for tensor in self.tensors)

    @property
    def count(self) -> int:
        return sum(len(tensor.checks) for tensor in self.tensors)

    def checks_of(self, tensor: str) -> TensorCheck:
        for item in self.tensors:
            if item.tensor == tensor:
                return item
        raise KeyError(tensor)

    @property
    def worst(self) -> CoordinateCheck | None:
        """The coordinate with the largest scaled error (a failed one first)."""
        all_checks = [check for tensor in self.tensors for check in tensor.checks]
        if not all_checks:
            return None
        return max(
            all_checks,
            key=lambda c: (not c.passed, c.scaled_error if math.isfinite(c.scaled_error) else 0),
        )


def sample_indices(elements: int, samples: int | None) -> list[int]:
    """Evenly spaced flat indices: ``floor(k (N-1) / (n-1))``; ``N // 2`` for one sample.

    ``samples=None`` means every coordinate; a larger request is clamped to ``N``.
    """
    if elements == 0:
        return []
    count = elements if samples is None else min(samples, elements)
    if count == 1:
        return [elements // 2]
    return [(k * (elements - 1)) // (count - 1) for k in range(count)]


def scaled_error(analytic: float, numerical: float) -> float:
    """``|a - n| / max(1, |a|, |n|)``."""
    return abs(analytic - numerical) / max(1.0, abs(analytic), abs(numerical))


def central_difference(
    point: float, step: float, evaluate: Callable[[float], float]
) -> tuple[float, str]:
    """The numerical derivative at ``point`` and a note (empty when all went well).

    Uses the actual rounded spacings; evaluates the centre too only when they differ.
    """
    minus_point = point - step
    plus_point = point + step
    if not (math.isfinite(minus_point) and math.isfinite(plus_point)):
        return math.nan, "perturbation is not finite"
    if minus_point == point or plus_point == point:
        return math.nan, "perturbation rounds back to the point"
    h1 = point - minus_point
    h2 = plus_point - point
    minus_value = evaluate(minus_point)
    plus_value = evaluate(plus_point)
    if h1 == h2:
        derivative = (plus_value - minus_value) / (h1 + h2)
    else:
        centre = evaluate(point)
        derivative = (h1 * h1 * plus_value - h2 * h2 * minus_value + (h2 * h2 - h1 * h1) * centre) / (
            h1 * h2 * (h1 + h2)
        )
    if not math.isfinite(derivative):
        return derivative, "objective is not finite near the point"
    return derivative, ""


def check_tensor(
    tensor: str,
    values: Array,
    analytic: Array,
    step: float,
    tolerance: float,
    samples: int | None,
    objective: Callable[[Array], float],
    progress: Callable[[int, int], None] | None = None,
) -> TensorCheck:
    """Check ``analytic`` against central differences of ``objective`` at sampled coordinates.

    ``objective`` receives a perturbed copy of ``values`` each time. ``progress``, when
    given, is called as ``progress(done, total)`` after each coordinate.
    """
    probe = np.array(values, dtype=np.float64, copy=True)
    flat = probe.reshape(-1)
    analytic_flat = np.asarray(analytic, dtype=np.float64).reshape(-1)
    checks = []
    indices = sample_indices(flat.size, samples)
    for index in indices:
        original = float(flat[index])

        def evaluate(point: float, index: int = index, original: float = original) -> float:
            flat[index] = point
            try:
                return objective(probe)
            finally:
                flat[index] = original

        numerical, note = central_difference(original, step, evaluate)
        a = float(analytic_flat[index])
        error = scaled_error(a, numerical) if not note else math.inf
        checks.append(
            CoordinateCheck(
                tensor=tensor,
                flat_index=index,
                coordinate=tuple(int(i) for i in np.unravel_index(index, probe.shape)),
                analytic=a,
                numerical=numerical,
                scaled_error=error,
                passed=(not note) and error <= tolerance,
                note=note,
            )
        )
        if progress is not None:
            progress(len(checks), len(indices))
    requested = flat.size if samples is None else samples
    return TensorCheck(tensor, tuple(probe.shape), requested, tuple(checks))


def gradcheck_layer(
    layer: QkvProjections,
    x: Array,
    upstream: tuple[Array, Array, Array],
    analytic: tuple[Array, Array, Array, Array],
    step: float,
    tolerance: float,
    samples: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> GradcheckResult:
    """Check the input gradient and the three weight gradients of ``layer`` at ``x``.

    ``analytic`` is ``(dX, dW_Q, dW_K, dW_V)``; the objective is
    ``<Q,U_Q> + <K,U_K> + <V,U_V>``. ``progress``, when given, is called as
    ``progress(done, total)`` after each coordinate, counting over all four tensors.
    Raises :class:`GradcheckSettingError` for unusable settings.
    """
    validate_settings(step, tolerance, samples)
    names = layer.names
    sizes = [len(sample_indices(int(t.size), samples)) for t in (x, *layer.weights)]

    def offset(before: int) -> Callable[[int, int], None] | None:
        if progress is None:
            return None
        report = progress
        return lambda done, _count: report(before + done, sum(sizes))

    def input_objective(probe: Array) -> float:
        return weighted_loss(layer.forward(probe), upstream)

    def weight_objective(branch: int) -> Callable[[Array], float]:
        def objective(probe: Array) -> float:
            weights = list(layer.weights)
            weights[branch] = probe
            fresh = QkvProjections((weights[0], weights[1], weights[2]), names)
            return weighted_loss(fresh.forward(x), upstream)

        return objective

    tensors = [check_tensor("input", x, analytic[0], step, tolerance, samples, input_objective,
                            offset(0))]
    for branch in range(3):
        tensors.append(
            check_tensor(
                TENSOR_NAMES[branch + 1],
                layer.weights[branch],
                analytic[branch + 1],
                step,
                tolerance,
                samples,
                weight_objective(branch),
                offset(sum(sizes[: branch + 1])),
            )
        )
    return GradcheckResult(step, tolerance, tuple(tensors))
