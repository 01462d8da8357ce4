"""The one gradient checker: any objective, each tensor per coordinate (``full``,
``sampled``) or along directions (``fast``).

:func:`check` runs every tensor of a check and gives its
:class:`~qkvcli.gradcheck.records.GradcheckResult`; what differs between the checks of
the projections, of a head or layer, of a chapter and of a learner's implementation is
only the objective each tensor is evaluated by: slots of perturbed copies
(:class:`~qkvcli.gradcheck.records.Objective`: the projections' stacked copies, the
attention engine called on what a coordinate reaches), or a plain function of the
perturbed tensor (:class:`Points` over :func:`perturbing`).

Per coordinate:

Many perturbed copies of the tensor are stacked in a
:class:`~qkvcli.gradcheck.probes.StackedObjective` and their objectives computed in one
vectorized product, but every copy is still a complete, independent evaluation of ``L``
from the perturbed tensor (no use of the analytic gradient or of linearity). The
formula, notes and verdicts are :mod:`qkvcli.gradcheck.central`'s own.

Along directions (``fast``): directional derivatives along seeded random unit directions.

In the spirit of PyTorch's fast gradcheck, ``directions`` seeded (SplitMix64) random
unit directions ``u`` per tensor. The perturbed points ``θ+hu`` and ``θ-hu`` are rounded
to binary64, so the direction actually taken is ``D/2h`` with ``D = (θ+hu) - (θ-hu)``;
the numerical directional derivative ``(L(θ+hu) - L(θ-hu)) / 2h`` is compared with the
analytic projection ``<g, D> / 2h`` (``<g, u>`` up to that rounding), with the same
scaled error as the coordinate checks.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

import numpy as np

from qkvcli.core.arrays import Array
from qkvcli.core.record import Record
from qkvcli.core.splitmix import SplitMix64
from qkvcli.gradcheck.central import (
    central_difference,
    coordinate_check,
    sample_indices,
    scaled_error,
)
from qkvcli.gradcheck.records import (
    CoordinateCheck,
    GradcheckResult,
    Objective,
    PointObjective,
    Progress,
    TensorCheck,
    TensorObjective,
    Ticker,
)
from qkvcli.gradcheck.settings import (
    DEFAULT_DIRECTION_SEED,
    DEFAULT_DIRECTIONS,
    TooManyEvaluations,
    evaluations_allowed,
)


def batched_coordinates(
    objective: Objective, tensor: str, values: Array, analytic: Array,
    indices: list[int], step: float, tolerance: float, ticker: Ticker,
) -> list[CoordinateCheck]:
    """The checks of ``indices`` of ``tensor``, as :func:`~qkvcli.gradcheck.central.check_tensor`
    gives them, evaluating in batches of the objective's slots.

    :func:`central_difference` runs twice per coordinate: first recording which points
    it needs (so the formula and its notes are exactly the loop's), then reading the
    batched results. ``ticker`` ticks once per finished coordinate.
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
            checks.append(coordinate_check(tensor, index, tuple(values.shape), analytic_flat,
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


def directional_checks(
    objective: Objective, tensor: str, values: Array, analytic: Array,
    directions: int, rng: SplitMix64, step: float, tolerance: float, ticker: Ticker,
) -> list[CoordinateCheck]:
    """Fast mode for one tensor: ``directions`` random directions, two evaluations each.

    Directions are drawn in order; their ``θ-hu`` and ``θ+hu`` copies fill the
    objective's slots (as many directions at a time as there are slot pairs).
    ``ticker`` ticks once per direction.
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


class Points:
    """:class:`~qkvcli.gradcheck.records.Objective` over a point objective: each slot one
    perturbed coordinate, each evaluation a complete evaluation of ``L``."""

    def __init__(self, point: PointObjective, slots: int = 1) -> None:
        self.point = point
        self.slots = slots
        self._where = [0] * slots
        self._value = [0.0] * slots

    def put(self, k: int, flat_index: int, value: float) -> None:
        self._where[k] = flat_index
        self._value[k] = value

    def slot(self, k: int) -> Array:
        raise ValueError("a point objective has no slot copies; use put")

    def evaluate(self, count: int) -> Array:
        return np.array([self.point(self._where[k], self._value[k]) for k in range(count)])


class Copies:
    """:class:`~qkvcli.gradcheck.records.Objective` over whole perturbed copies (``fast``)."""

    def __init__(self, tensor: TensorObjective, values: Array) -> None:
        self.tensor = tensor
        self.slots = 2
        self._copies = [np.array(values, dtype=np.float64, copy=True) for _ in range(2)]

    def put(self, k: int, flat_index: int, value: float) -> None:
        self._copies[k].reshape(-1)[flat_index] = value

    def slot(self, k: int) -> Array:
        return self._copies[k]

    def evaluate(self, count: int) -> Array:
        return np.array([self.tensor(self._copies[k]) for k in range(count)])


def perturbing(tensor: TensorObjective, values: Array) -> PointObjective:
    """The point objective that perturbs one element of a copy of ``values``, evaluates
    ``tensor`` on the whole copy, and restores the element (evaluations never share state)."""
    probe = np.array(values, dtype=np.float64, copy=True)
    flat = probe.reshape(-1)

    def point(index: int, value: float) -> float:
        original = flat[index]
        flat[index] = value
        try:
            return tensor(probe)
        finally:
            flat[index] = original

    return point


class Checked(Record):
    """One tensor of a check: its name, values and analytic gradient, the objective its
    evaluations run, the mode it resolved to (``full``, ``sampled``, ``fast``), its
    sample count (``None``: every coordinate) and what each evaluation recomputes."""

    name: str
    values: Array
    analytic: Array
    objective: Objective
    mode: str
    samples: int | None = None
    recomputes: str = "full forward"

    @property
    def planned(self) -> int:
        """How many coordinates or directions it checks (``fast``: ``directions``)."""
        return len(sample_indices(int(self.values.size), self.samples))


def check(tensors: Iterable[Checked], step: float, tolerance: float, *, mode: str = "full",
          directions: int = DEFAULT_DIRECTIONS, seed: int = DEFAULT_DIRECTION_SEED,
          total: int = 0, progress: Progress | None = None) -> GradcheckResult:
    """Every tensor of ``tensors`` (made one at a time, so only one objective is held)
    checked in its mode: sampled coordinates by central differences, or ``directions``
    seeded directions (SplitMix64 from ``seed``, drawn in tensor order). ``total`` is the
    count ``progress(done, total)`` reports against, after each coordinate or direction;
    ``mode`` is the mode the check was asked for (``auto``), kept in the result."""
    ticker = Ticker(progress, total)
    rng = SplitMix64(seed)
    found = []
    for tensor in tensors:
        values, shape = tensor.values, tuple(tensor.values.shape)
        if tensor.mode == "fast":
            checks = directional_checks(tensor.objective, tensor.name, values, tensor.analytic,
                                        directions, rng, step, tolerance, ticker)
            requested = directions
        else:
            indices = sample_indices(int(values.size), tensor.samples)
            checks = batched_coordinates(tensor.objective, tensor.name, values,
                                         tensor.analytic, indices, step, tolerance, ticker)
            requested = int(values.size) if tensor.samples is None else tensor.samples
        found.append(TensorCheck(tensor.name, shape, requested, tuple(checks), tensor.mode,
                                 tensor.recomputes))
    return GradcheckResult(step, tolerance, tuple(found), mode)


def plain_check(tensors: Iterable[tuple[str, Array, Array, TensorObjective, int | None]],
                step: float, tolerance: float, mode: str = "full") -> GradcheckResult:
    """:func:`check` of ``(name, values, analytic, objective, samples)`` tensors, each
    evaluated by a function of the whole perturbed tensor at ``samples`` evenly spaced
    coordinates (``None``: every one, the ``full`` mode; else ``sampled``). Raises
    :class:`~qkvcli.gradcheck.settings.TooManyEvaluations` before any evaluation when
    the check would make more than an :func:`~qkvcli.gradcheck.settings.evaluation_budget`
    allows."""
    given = list(tensors)
    limit = evaluations_allowed()
    if limit is not None:
        total = sum(2 * (values.size if samples is None else min(values.size, samples))
                    for _, values, _, _, samples in given)
        if total > limit:
            causes = sorted({f"every coordinate of {len(given)} tensors" if samples is None
                             else f"--samples {samples}" for *_, samples in given})
            raise TooManyEvaluations(total, limit, ", ".join(causes), has_fast=False)
    return check((Checked(name, values, analytic, Points(perturbing(objective, values)),
                          "full" if samples is None else "sampled", samples)
                  for name, values, analytic, objective, samples in given), step, tolerance,
                 mode=mode)
