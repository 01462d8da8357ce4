"""Comparing tensors: the scaled error, the first failing coordinate, and bitwise equality."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from qkvcli.core.arrays import Array
from qkvcli.core.errors import format_shape
from qkvcli.gradcheck.central import scaled_error


def coordinate(shape: tuple[int, ...], flat: int) -> str:
    """``[b,t,j]``: the multi-index of flat index ``flat`` in ``shape``."""
    return format_shape([int(i) for i in np.unravel_index(flat, shape)])


def mismatches(actual: Array, expected: Array, tolerance: float) -> npt.NDArray[np.bool_]:
    """A boolean array: where ``|a-e| / max(1,|a|,|e|) > tolerance`` (NaN counts as failing)."""
    with np.errstate(all="ignore"):
        scale = np.maximum(1.0, np.maximum(np.abs(actual), np.abs(expected)))
        error = np.abs(actual - expected) / scale
    failing: npt.NDArray[np.bool_] = ~(error <= tolerance)
    return failing


def close(actual: Array, expected: Array, tolerance: float) -> bool:
    """Same shape and every scaled error within ``tolerance``."""
    return actual.shape == expected.shape and not mismatches(actual, expected, tolerance).any()


def first_outside(actual: Array, expected: Array, tolerance: float) -> tuple[str, float, float] | None:
    """``(coordinate, actual, expected)`` of the first element (row-major) outside ``tolerance``.

    Same shapes only; ``None`` when every element is within.
    """
    bad = mismatches(actual, expected, tolerance).reshape(-1)
    if not bad.any():
        return None
    flat = int(np.argmax(bad))
    return (coordinate(actual.shape, flat), float(actual.reshape(-1)[flat]),
            float(expected.reshape(-1)[flat]))


def first_mismatch(name: str, actual: Array, expected: Array, tolerance: float) -> tuple[str, str] | None:
    """``(coordinate, detail)`` of the first element (row-major) outside ``tolerance``, or ``None``.

    A wrong shape is reported as such (coordinate: the tensor's name).
    """
    if actual.shape != expected.shape:
        return name, (f"{name} has shape {format_shape(list(actual.shape))}, "
                      f"expected {format_shape(list(expected.shape))}")
    found = first_outside(actual, expected, tolerance)
    if found is None:
        return None
    where, a, e = found
    return f"{name}{where}", (f"{name}{where} = {a!r}, expected {e!r} "
                              f"(scaled error {scaled_error(a, e):.3g} > {tolerance!r})")


def same_bits(left: Array, right: Array) -> bool:
    """Equal shapes and identical binary64 values (NaN payloads and signed zeros included)."""
    return left.shape == right.shape and left.tobytes() == right.tobytes()


def first_bit_difference(left: Array, right: Array) -> tuple[str, str, str] | None:
    """Where two results first differ bit for bit: ``(coordinate, left, right)``, or ``None``.

    A shape change gives ``("", left shape, right shape)``.
    """
    if left.shape != right.shape:
        return "", format_shape(list(left.shape)), format_shape(list(right.shape))
    if same_bits(left, right):
        return None
    differs = left.reshape(-1).view(np.uint64) != right.reshape(-1).view(np.uint64)
    flat = int(np.argmax(differs))
    return (coordinate(left.shape, flat), repr(float(left.reshape(-1)[flat])),
            repr(float(right.reshape(-1)[flat])))
