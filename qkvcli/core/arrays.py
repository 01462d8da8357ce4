"""Typed float64 arrays and the comparisons every stage shares: finiteness, copies, bits, scaled error."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from qkvcli.core.errors import NonFiniteValue, format_shape

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy.typing as npt

    Array = npt.NDArray[np.float64]
    ArrayLike = npt.ArrayLike
    Differs = Callable[[Array, Array], npt.NDArray[np.bool_]]  # where two arrays differ
else:
    # numpy.typing costs ~1.5 ms to import; at run time these names only need to exist.
    Array = np.ndarray
    ArrayLike = object

def first_non_finite(values: Array) -> tuple[int, float] | None:
    """The flat index and value of the first NaN or infinity, or ``None``."""
    finite = np.isfinite(values)
    if finite.all():
        return None
    index = int(np.argmin(finite.reshape(-1)))
    return index, float(values.reshape(-1)[index])


SMALL = 4096  # elements below which the plain isfinite check is the cheaper one


def all_finite(values: Array) -> bool:
    """Whether every entry of ``values`` is finite, in one allocation-free pass when it is.

    A sum is finite only if every term is (an infinity or NaN cannot be cancelled back
    to a finite value), so a finite sum proves the array finite without the
    array-sized boolean temporary of ``np.isfinite``; only an overflowing sum or a
    genuinely non-finite array pays for the exact check. The sum is NumPy's own, not a
    BLAS dot product: ``v . v`` is faster on an idle machine, but above about 10,000
    elements OpenBLAS hands it to its threads, and on a busy machine each call then
    waits for them (measured: 2 ms median against 75 us for this sum).
    """
    if values.size <= SMALL:
        # Small arrays: the temporary is tiny, and errstate would cost more than it saves.
        return bool(np.isfinite(values).all())
    with np.errstate(all="ignore"):
        total = np.add.reduce(values, axis=None)
    if math.isfinite(total):
        return True
    return bool(np.isfinite(values).all())


def check_finite(values: Array, operation: str) -> None:
    """Raise :class:`NonFiniteValue` naming the first non-finite entry of ``values``."""
    if all_finite(values):
        return
    found = first_non_finite(values)
    if found is not None:
        raise NonFiniteValue(operation, found[0], found[1])


def readonly(values: Any) -> Array:
    """A read-only C-contiguous float64 copy of ``values`` (evidence never aliases inputs)."""
    array = np.array(values, dtype=np.float64, copy=True, order="C")
    array.flags.writeable = False
    return array


def same_bits(a: Array, b: Array) -> bool:
    """Whether two float64 arrays have the same shape and the same 64-bit patterns: the
    one bitwise comparison of every replay. Compared as unsigned integers, so ``-0.0 !=
    0.0`` and a NaN equals the same NaN, as byte comparison would, without copying
    either array to bytes (a non-contiguous one is made contiguous first)."""
    if a.shape != b.shape:
        return False
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return bool(np.array_equal(a.view(np.uint64), b.view(np.uint64)))

def coordinate(shape: tuple[int, ...], flat: int) -> str:
    """``[b,t,j]``: the multi-index of flat index ``flat`` in ``shape``."""
    return format_shape([int(i) for i in np.unravel_index(flat, shape)])


def first_difference(left: Array, right: Array, differs: Differs | None = None
                     ) -> tuple[str, str, str] | None:
    """Where two results first differ: ``(coordinate, left, right)`` (values as ``repr``),
    or ``None``; where ``differs(left, right)`` holds, by default bit for bit.

    A shape change gives ``("", left shape, right shape)``.
    """
    if left.shape != right.shape:
        return "", format_shape(list(left.shape)), format_shape(list(right.shape))
    flags = (np.ascontiguousarray(left).view(np.uint64) != np.ascontiguousarray(right).view(
        np.uint64) if differs is None else differs(left, right)).reshape(-1)
    if not flags.any():
        return None
    flat = int(np.argmax(flags))
    return (coordinate(left.shape, flat), repr(float(left.reshape(-1)[flat])),
            repr(float(right.reshape(-1)[flat])))


def mismatches(actual: Array, expected: Array, tolerance: float) -> npt.NDArray[np.bool_]:
    """A boolean array: where ``|a-e| / max(1,|a|,|e|) > tolerance`` (NaN counts as
    failing); two equal values never fail, an infinity beside the same infinity included
    (``inf - inf`` is no error)."""
    with np.errstate(all="ignore"):
        magnitude = np.maximum(1.0, np.maximum(np.abs(actual), np.abs(expected)))
        error = np.abs(actual - expected) / magnitude
        failing: npt.NDArray[np.bool_] = ~((error <= tolerance) | (actual == expected))
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
