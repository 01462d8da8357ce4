"""The per-coordinate check of ``full`` and ``sampled`` modes, with evaluations batched.

Many perturbed copies of the tensor are stacked in a
:class:`~qkvcli.gradcheck.probes.StackedObjective` and their objectives computed in one
vectorized product, but every copy is still a complete, independent evaluation of ``L``
from the perturbed tensor (no use of the analytic gradient or of linearity). The
formula, notes and verdicts are :mod:`qkvcli.gradcheck.central`'s own.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from qkvcli.core.arrays import Array
from qkvcli.gradcheck.central import central_difference, coordinate_check
from qkvcli.gradcheck.probes import StackedObjective
from qkvcli.gradcheck.records import CoordinateCheck, Ticker


def batched_coordinates(
    objective: StackedObjective, tensor: str, values: Array, analytic: Array,
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
