"""The ``expect`` family of ``qkv run``: a fixture's expected values (read by
:mod:`qkvcli.reading.expect`) judged against the run's.

A value passes when its scaled error ``abs(actual - expected) / max(1, abs(actual),
abs(expected))`` is at most the section's ``tolerance`` (default 0: exact equality); a
NaN error never passes. Each quantity's first value beyond it is a :class:`Mismatch`.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from qkvcli.core.arrays import Array
from qkvcli.core.record import Record
from qkvcli.reading.expect import EXPECT_KEYS, Expectations


class Mismatch(Record):
    """The first value of one quantity that is further from expected than the tolerance:
    its name, coordinate (``()`` for the loss), both values and the scaled error."""

    name: str
    coordinate: tuple[int, ...]
    expected: float
    actual: float
    error: float


class ExpectResult(Record):
    """The comparison of every expected quantity with the run's values: the quantities
    compared (names), how many values, the tolerance, and each quantity's first mismatch
    (worded by :func:`qkvcli.render.wording.expect_detail`)."""

    names: tuple[str, ...]
    values: int
    tolerance: float
    mismatches: tuple[Mismatch, ...]

    @property
    def passed(self) -> bool:
        return not self.mismatches


def _scaled_error(actual: Array, expected: Array) -> Array:
    scale = np.maximum(1.0, np.maximum(np.abs(actual), np.abs(expected)))
    return np.asarray(np.abs(actual - expected) / scale, dtype=np.float64)


def compare_expectations(expect: Expectations, actual: Mapping[str, Array | float]) -> ExpectResult:
    """Compare each expected quantity with ``actual`` (names as in :data:`EXPECT_KEYS`).

    Gives every quantity's first value beyond the tolerance, in declared order.
    """
    wanted: dict[str, Array] = dict(expect.tensors)
    if expect.loss is not None:
        wanted["loss"] = np.asarray(expect.loss, dtype=np.float64)
    names = tuple(key for key in EXPECT_KEYS if key in wanted)
    mismatches: list[Mismatch] = []
    values = 0
    for name in names:
        expected = wanted[name]
        got = np.asarray(actual[name], dtype=np.float64)
        values += int(expected.size)
        error = _scaled_error(got, expected)
        bad = np.flatnonzero(~(error <= expect.tolerance))  # NaN errors count as bad
        if bad.size:
            flat = int(bad[0])
            coordinate = tuple(int(i) for i in np.unravel_index(flat, expected.shape))
            mismatches.append(Mismatch(
                name, coordinate, float(expected.reshape(-1)[flat]),
                float(got.reshape(-1)[flat]), float(error.reshape(-1)[flat]),
            ))
    return ExpectResult(names, values, expect.tolerance, tuple(mismatches))
