"""Central differences, coordinate by coordinate, as the reference does them.

For a requested sample count ``n`` over a tensor of ``N`` elements the checked flat
indices are ``floor(k (N-1) / (n-1))`` for ``k = 0..n-1`` (``n = 1``: ``N // 2``). Each
selected element is perturbed to ``x - h`` and ``x + h``; because those points are
rounded to binary64, the *actual* spacings ``h1 = x - (x-h)`` and ``h2 = (x+h) - x`` are
used in the three-point formula for unequal spacing, which reduces to
``(f+ - f-) / 2h`` when the spacings are equal. Every evaluation of the objective is a
fresh forward pass; nothing is shared between evaluations.

A coordinate passes when ``|a - n| / max(1, |a|, |n|) <= tolerance``.

:func:`check_tensor` is the plain per-coordinate loop, one objective call per
evaluation and nothing batched: the independent reference that the one checker
(:func:`qkvcli.gradcheck.batched.check`, which every check runs) is held against by the
tests and the benchmark.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from qkvcli.core.arrays import Array
from qkvcli.gradcheck.records import CoordinateCheck, Progress, TensorCheck


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
        derivative = (
            h1 * h1 * plus_value - h2 * h2 * minus_value + (h2 * h2 - h1 * h1) * centre
        ) / (h1 * h2 * (h1 + h2))
    if not math.isfinite(derivative):
        return derivative, "objective is not finite near the point"
    return derivative, ""


def coordinate_check(
    tensor: str, index: int, shape: tuple[int, ...], analytic_flat: Array,
    numerical: float, note: str, tolerance: float,
) -> CoordinateCheck:
    """The verdict on flat ``index`` of ``tensor``: analytic against ``numerical``.

    A non-empty ``note`` (from :func:`central_difference`) fails the coordinate with an
    infinite scaled error.
    """
    a = float(analytic_flat[index])
    error = scaled_error(a, numerical) if not note else math.inf
    # Positional (tensor, flat_index, coordinate, analytic, numerical, scaled_error,
    # passed, note, direction): the cheap construction path, thousands of times in full mode.
    return CoordinateCheck(
        tensor, index, tuple(int(i) for i in np.unravel_index(index, shape)), a, numerical,
        error, (not note) and error <= tolerance, note, None,
    )


def check_tensor(
    tensor: str,
    values: Array,
    analytic: Array,
    step: float,
    tolerance: float,
    samples: int | None,
    objective: Callable[[Array], float],
    progress: Progress | None = None,
    *,
    mode: str | None = None,
) -> TensorCheck:
    """Check ``analytic`` against central differences of ``objective`` at sampled coordinates.

    The plain per-coordinate loop: ``objective`` receives a perturbed copy of ``values``
    once per evaluation, restored afterwards. ``progress(done, total)``, when given, is
    called after each coordinate. Gives a :class:`TensorCheck` whose mode is ``mode``
    when given, else ``full`` for every coordinate and ``sampled`` otherwise.
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
                flat[index] = original  # restore: evaluations never share state

        numerical, note = central_difference(original, step, evaluate)
        checks.append(coordinate_check(tensor, index, probe.shape, analytic_flat, numerical,
                                       note, tolerance))
        if progress is not None:
            progress(len(checks), len(indices))
    requested = flat.size if samples is None else samples
    if mode is None:
        mode = "full" if len(indices) == flat.size and samples is None else "sampled"
    return TensorCheck(tensor, tuple(probe.shape), requested, tuple(checks), mode)
