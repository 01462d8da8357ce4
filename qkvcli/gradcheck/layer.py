"""Central-difference gradient checks, coordinate by coordinate, as the reference does them.

For a requested sample count ``n`` over a tensor of ``N`` elements the checked flat
indices are ``floor(k (N-1) / (n-1))`` for ``k = 0..n-1`` (``n = 1``: ``N // 2``). Each
selected element is perturbed to ``x - h`` and ``x + h``; because those points are
rounded to binary64, the *actual* spacings ``h1 = x - (x-h)`` and ``h2 = (x+h) - x`` are
used in the three-point formula for unequal spacing, which reduces to
``(f+ - f-) / 2h`` when the spacings are equal. Every evaluation of the objective is a
fresh forward pass; nothing is shared between evaluations.

A coordinate passes when ``|a - n| / max(1, |a|, |n|) <= tolerance``.

Modes (:func:`gradcheck_layer`, per tensor):

* ``full``: every coordinate. The perturbed evaluations are *batched*: many perturbed
  copies of the tensor are stacked and their objectives computed in one vectorized
  product, but every copy is still a complete, independent evaluation of ``L`` from
  the perturbed tensor (no use of the analytic gradient or of linearity).
* ``sampled``: the evenly spaced coordinates above (``samples``, default
  :data:`DEFAULT_SAMPLES`), evaluated the same way.
* ``fast``: in the spirit of PyTorch's fast gradcheck, ``directions`` seeded
  (SplitMix64) random unit directions ``u`` per tensor. The perturbed points
  ``θ+hu`` and ``θ-hu`` are rounded to binary64, so the direction actually taken is
  ``D/2h`` with ``D = (θ+hu) - (θ-hu)``; the numerical directional derivative
  ``(L(θ+hu) - L(θ-hu)) / 2h`` is compared with the analytic projection
  ``<g, D> / 2h`` (``<g, u>`` up to that rounding), with the same scaled error.
* ``auto`` (the default): ``sampled`` when a sample count is given; otherwise ``full``
  for tensors of up to :data:`AUTO_FULL_LIMIT` elements and ``sampled`` above.

:func:`check_tensor` keeps the plain per-coordinate loop (one objective call per
evaluation); tests prove the batched path agrees with it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import numpy as np

from qkvcli.core.arrays import Array
from qkvcli.core.errors import QkvError, format_float_debug
from qkvcli.core.projections import QkvProjections
from qkvcli.core.record import Record
from qkvcli.core.splitmix import SplitMix64
from qkvcli.gradcheck.probes import StackedObjective

TENSOR_NAMES: tuple[str, str, str, str] = ("input", "query_weight", "key_weight", "value_weight")
MODES: tuple[str, str, str, str] = ("auto", "full", "sampled", "fast")
AUTO_FULL_LIMIT = 4096
DEFAULT_SAMPLES = 6
DEFAULT_DIRECTIONS = 3
DEFAULT_DIRECTION_SEED = 26
# Elements of stacked probes and products per vectorized batch (float64: 4 MiB; larger
# batches measured slower: the products stop fitting in cache).
BATCH_ELEMENTS = 1 << 19

Progress = Callable[[int, int], None]


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


class InvalidMode(GradcheckSettingError):
    def __init__(self, mode: str) -> None:
        self.mode = mode
        super().__init__(
            f"gradient-check mode {mode!r} is not one of {', '.join(MODES)}"
        )


class ZeroDirections(GradcheckSettingError):
    def __init__(self) -> None:
        super().__init__("fast gradient check needs at least one direction per tensor")


def validate_settings(
    step: float, tolerance: float, samples: int | None,
    mode: str = "auto", directions: int = DEFAULT_DIRECTIONS,
) -> None:
    """Raise a :class:`GradcheckSettingError` for a step, tolerance or count that cannot work.

    Order: step, tolerance, samples, mode, directions.
    """
    if not (math.isfinite(step) and step > 0.0 and math.isfinite(2.0 * step)):
        raise InvalidStep(step)
    if not (math.isfinite(tolerance) and tolerance >= 0.0):
        raise InvalidTolerance(tolerance)
    if samples is not None and samples < 1:
        raise ZeroSamples()
    if mode not in MODES:
        raise InvalidMode(mode)
    if directions < 1:
        raise ZeroDirections()


class CoordinateCheck(Record):
    """One checked coordinate (or, in fast mode, one direction) and its comparison.

    In fast mode ``direction`` is the direction's number, ``flat_index`` is -1 and
    ``coordinate`` is empty; ``analytic`` is the gradient's projection on it.
    """

    tensor: str
    flat_index: int
    coordinate: tuple[int, ...]
    analytic: float
    numerical: float
    scaled_error: float
    passed: bool
    note: str = ""
    direction: int | None = None


class TensorCheck(Record):
    """The checks of one tensor (input or one weight) and the mode that produced them."""

    tensor: str
    shape: tuple[int, ...]
    requested: int
    checks: tuple[CoordinateCheck, ...]
    mode: str = "full"

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)


class GradcheckResult(Record):
    """Every tensor's checks, with the settings that produced them."""

    step: float
    tolerance: float
    tensors: tuple[TensorCheck, ...]
    mode: str = "full"

    @property
    def passed(self) -> bool:
        return all(tensor.passed for tensor in self.tensors)

    @property
    def summary(self) -> str:
        """Which mode ran and what it checked, e.g. ``"full: 24 coordinates"``.

        Tensors resolved to different modes (``auto``) are listed per mode in tensor
        order, e.g. ``"sampled: 6 coordinates, full: 1536 coordinates"``.
        """
        counts: dict[str, int] = {}
        for tensor in self.tensors:
            counts[tensor.mode] = counts.get(tensor.mode, 0) + len(tensor.checks)
        if not counts:
            return f"{self.mode}: 0 coordinates"
        return ", ".join(
            f"{mode}: {count} {'directions' if mode == 'fast' else 'coordinates'}"
            for mode, count in counts.items()
        )

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
        derivative = (
            h1 * h1 * plus_value - h2 * h2 * minus_value + (h2 * h2 - h1 * h1) * centre
        ) / (h1 * h2 * (h1 + h2))
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
    progress: Progress | None = None,
) -> TensorCheck:
    """Check ``analytic`` against central differences of ``objective`` at sampled coordinates.

    The plain per-coordinate loop: ``objective`` receives a perturbed copy of ``values``
    once per evaluation. ``progress(done, total)``, when given, is called after each
    coordinate. Gives a :class:`TensorCheck` (mode ``full`` for every coordinate,
    else ``sampled``).
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
        checks.append(_coordinate(tensor, index, probe.shape, analytic_flat, numerical, note,
                                  tolerance))
        if progress is not None:
            progress(len(checks), len(indices))
    requested = flat.size if samples is None else samples
    mode = "full" if len(indices) == flat.size and samples is None else "sampled"
    return TensorCheck(tensor, tuple(probe.shape), requested, tuple(checks), mode)


def _coordinate(
    tensor: str, index: int, shape: tuple[int, ...], analytic_flat: Array,
    numerical: float, note: str, tolerance: float,
) -> CoordinateCheck:
    a = float(analytic_flat[index])
    error = scaled_error(a, numerical) if not note else math.inf
    # Positional (tensor, flat_index, coordinate, analytic, numerical, scaled_error,
    # passed, note, direction): the cheap construction path, thousands of times in full mode.
    return CoordinateCheck(
        tensor, index, tuple(int(i) for i in np.unravel_index(index, shape)), a, numerical,
        error, (not note) and error <= tolerance, note, None,
    )


def resolve_mode(mode: str, elements: int, samples: int | None) -> tuple[str, int | None]:
    """The mode a tensor of ``elements`` gets, and its sample count (``None``: all).

    ``auto``: ``sampled`` with ``samples`` when given, else ``full`` up to
    :data:`AUTO_FULL_LIMIT` elements and ``sampled`` with :data:`DEFAULT_SAMPLES` above.
    ``full`` ignores ``samples``; ``sampled`` defaults to :data:`DEFAULT_SAMPLES`.
    """
    if mode == "auto":
        if samples is not None:
            return "sampled", samples
        if elements <= AUTO_FULL_LIMIT:
            return "full", None
        return "sampled", DEFAULT_SAMPLES
    if mode == "sampled":
        return "sampled", DEFAULT_SAMPLES if samples is None else samples
    return mode, None


class _Ticker:
    """Counts finished checks across tensors and reports them to ``progress``."""

    def __init__(self, progress: Progress | None, total: int) -> None:
        self.progress = progress
        self.total = total
        self.done = 0

    def tick(self) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, self.total)


def _batched_coordinates(
    objective: StackedObjective, tensor: str, values: Array, analytic: Array,
    indices: list[int], step: float, tolerance: float, ticker: _Ticker,
) -> list[CoordinateCheck]:
    """The per-coordinate check of :func:`check_tensor`, with evaluations batched.

    :func:`central_difference` runs twice per coordinate: first recording which points
    it needs (so the formula and its notes are exactly the loop's), then reading the
    batched results.
    """
    flat = np.asarray(values, dtype=np.float64).reshape(-1)
    analytic_flat = np.asarray(analytic, dtype=np.float64).reshape(-1)
    plans: list[tuple[int, float, list[float]]] = []
    for index in indices:
        original = float(flat[index])
        points: list[float] = []

        def record(point: float, points: list[float] = points) -> float:
            points.append(point)
            return 0.0

        central_difference(original, step, record)
        plans.append((index, original, points))

    evaluations = [(index, original, point) for index, original, points in plans
                   for point in points]
    results = np.empty(len(evaluations))
    done = 0
    checks: list[CoordinateCheck] = []
    finished = 0  # evaluations consumed by finished coordinates
    while True:
        # Finish every coordinate whose evaluations are all available.
        while len(checks) < len(plans) and finished + len(plans[len(checks)][2]) <= done:
            index, original, points = plans[len(checks)]
            values_iter = iter(results[finished:finished + len(points)].tolist())

            def lookup(point: float, values_iter: Iterator[float] = values_iter) -> float:
                return next(values_iter)  # the batched value of this very evaluation

            numerical, note = central_difference(original, step, lookup)
            finished += len(points)
            checks.append(_coordinate(tensor, index, tuple(values.shape), analytic_flat,
                                      numerical, note, tolerance))
            ticker.tick()
        if done == len(evaluations):
            return checks
        count = min(objective.slots, len(evaluations) - done)
        chunk = evaluations[done:done + count]
        for k, (index, _, point) in enumerate(chunk):
            objective.put(k, index, point)
        results[done:done + count] = objective.evaluate(count)
        for k, (index, original, _) in enumerate(chunk):
            objective.put(k, index, original)  # every slot is the unperturbed tensor again
        done += count


def direction(rng: SplitMix64, elements: int) -> Array:
    """A unit vector of ``elements`` entries ``2u-1`` from SplitMix64 draws ``u``, normalized.

    Draws ``elements`` values from ``rng``; a zero vector (all draws exactly 0.5, which
    does not happen in practice) is returned unnormalized.
    """
    raw = 2.0 * rng.next_unit_block(elements) - 1.0
    norm = float(np.sqrt(np.dot(raw, raw)))
    return raw / norm if norm > 0.0 else raw


def _directional(
    objective: StackedObjective, tensor: str, values: Array, analytic: Array,
    directions: int, rng: SplitMix64, step: float, tolerance: float, ticker: _Ticker,
) -> list[CoordinateCheck]:
    """Fast mode for one tensor: ``directions`` random directions, two evaluations each.

    Directions are drawn in order; their ``θ-hu`` and ``θ+hu`` copies fill the
    objective's slots (as many directions at a time as there are slot pairs).
    """
    flat = np.asarray(values, dtype=np.float64).reshape(-1)
    gradient = np.asarray(analytic, dtype=np.float64).reshape(-1)
    saved = objective.slot(0).copy()
    checks: list[CoordinateCheck] = []
    pairs = max(1, objective.slots // 2)
    for first in range(0, directions, pairs):
        batch: list[tuple[int, str, Array]] = []
        for number in range(first, min(directions, first + pairs)):
            u = direction(rng, flat.size)
            with np.errstate(over="ignore", invalid="ignore"):
                minus = flat - step * u
                plus = flat + step * u
                taken = plus - minus  # the rounded displacement actually applied
            note = ""
            if not (np.isfinite(minus).all() and np.isfinite(plus).all()):
                note = "perturbation is not finite"
            elif flat.size and not taken.any():
                note = "perturbation rounds back to the point"
            k = 2 * len(batch)
            if not note:
                objective.slot(k)[...] = minus.reshape(saved.shape)
                objective.slot(k + 1)[...] = plus.reshape(saved.shape)
            batch.append((number, note, taken))
        # Every slot holds a complete perturbed copy; a noted direction's slots hold the
        # unperturbed tensor and their values are not used.
        results = objective.evaluate(2 * len(batch)).tolist()
        for position, (number, note, taken) in enumerate(batch):
            numerical = analytic_value = math.nan
            if not note:
                analytic_value = float(np.dot(gradient, taken)) / (2.0 * step)
                numerical = (results[2 * position + 1] - results[2 * position]) / (2.0 * step)
                if not math.isfinite(numerical):
                    note = "objective is not finite near the point"
            error = scaled_error(analytic_value, numerical) if not note else math.inf
            checks.append(CoordinateCheck(
                tensor=tensor, flat_index=-1, coordinate=(), analytic=analytic_value,
                numerical=numerical, scaled_error=error,
                passed=(not note) and error <= tolerance, note=note, direction=number,
            ))
            ticker.tick()
        for k in range(2 * len(batch)):
            objective.slot(k)[...] = saved
    return checks


def gradcheck_layer(
    layer: QkvProjections,
    x: Array,
    upstream: tuple[Array, Array, Array],
    analytic: tuple[Array, Array, Array, Array],
    step: float,
    tolerance: float,
    samples: int | None = None,
    progress: Progress | None = None,
    *,
    mode: str = "auto",
    directions: int = DEFAULT_DIRECTIONS,
    seed: int = DEFAULT_DIRECTION_SEED,
) -> GradcheckResult:
    """Check the input gradient and the three weight gradients of ``layer`` at ``x``.

    ``analytic`` is ``(dX, dW_Q, dW_K, dW_V)``; the objective is
    ``<Q,U_Q> + <K,U_K> + <V,U_V>``, always evaluated in float64. ``mode`` is one of
    :data:`MODES` (see the module docstring); ``directions`` and ``seed`` (SplitMix64,
    drawn in input, query, key, value order) are used by ``fast``.
    ``progress(done, total)``, when given, is called after each coordinate or
    direction, counting across all four tensors. With the defaults a tensor of up to
    4096 elements gets every coordinate, as the chapter does.

    Raises :class:`GradcheckSettingError` for unusable settings.
    """
    validate_settings(step, tolerance, samples, mode, directions)
    x64 = np.asarray(x, dtype=np.float64)
    tensors_values = (x64, *layer.weights)
    plans: list[tuple[str, int | None, int]] = []
    for values in tensors_values:
        resolved, count = resolve_mode(mode, int(values.size), samples)
        planned = directions if resolved == "fast" else len(sample_indices(values.size, count))
        plans.append((resolved, count, planned))
    ticker = _Ticker(progress, sum(planned for _, _, planned in plans))
    rng = SplitMix64(seed)
    tensors = []
    for index, values in enumerate(tensors_values):
        resolved, count, planned = plans[index]
        name = TENSOR_NAMES[index]
        per_slot = StackedObjective.slot_elements(layer, x64, index)
        fits = max(1, BATCH_ELEMENTS // max(1, per_slot))  # an empty input costs nothing
        if resolved == "fast":
            slots = 2 * max(1, min(directions, fits // 2))
        else:
            slots = min(3 * max(planned, 1), fits)
        objective = StackedObjective(layer, x64, upstream, index, slots)
        if resolved == "fast":
            checks = _directional(objective, name, values, analytic[index], directions, rng,
                                  step, tolerance, ticker)
            requested = directions
        else:
            indices = sample_indices(values.size, count)
            checks = _batched_coordinates(objective, name, values, analytic[index], indices,
                                          step, tolerance, ticker)
            requested = values.size if count is None else count
        tensors.append(TensorCheck(name, tuple(values.shape), requested, tuple(checks), resolved))
    return GradcheckResult(step, tolerance, tuple(tensors), mode)
