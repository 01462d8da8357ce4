"""``fast`` mode: directional derivatives along seeded random unit directions.

In the spirit of PyTorch's fast gradcheck, ``directions`` seeded (SplitMix64) random
unit directions ``u`` per tensor. The perturbed points ``θ+hu`` and ``θ-hu`` are rounded
to binary64, so the direction actually taken is ``D/2h`` with ``D = (θ+hu) - (θ-hu)``;
the numerical directional derivative ``(L(θ+hu) - L(θ-hu)) / 2h`` is compared with the
analytic projection ``<g, D> / 2h`` (``<g, u>`` up to that rounding), with the same
scaled error as the coordinate checks.
"""

from __future__ import annotations

import math

import numpy as np

from qkvcli.core.arrays import Array
from qkvcli.core.splitmix import SplitMix64
from qkvcli.gradcheck.central import scaled_error
from qkvcli.gradcheck.probes import StackedObjective
from qkvcli.gradcheck.records import CoordinateCheck, Ticker


def direction(rng: SplitMix64, elements: int) -> Array:
    """A unit vector of ``elements`` entries ``2u-1`` from SplitMix64 draws ``u``, normalized.

    Draws ``elements`` values from ``rng``; a zero vector (all draws exactly 0.5, which
    does not happen in practice) is returned unnormalized.
    """
    raw = 2.0 * rng.next_unit_block(elements) - 1.0
    norm = float(np.sqrt(np.dot(raw, raw)))
    return raw / norm if norm > 0.0 else raw


def directional_checks(
    objective: StackedObjective, tensor: str, values: Array, analytic: Array,
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
