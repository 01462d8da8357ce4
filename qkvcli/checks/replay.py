"""The replay evidence: two runs of the same fixture agree bit for bit."""

from __future__ import annotations

import numpy as np

from qkvcli.checks.records import Primary
from qkvcli.core.arrays import Array


def same_bits(a: Array, b: Array) -> bool:
    """Whether two float64 arrays have the same shape and the same 64-bit patterns.

    Compared as unsigned integers, so ``-0.0 != 0.0`` and a NaN equals the same NaN, as
    byte comparison would, without copying either array to bytes.
    """
    if a.shape != b.shape:
        return False
    return bool(np.array_equal(a.view(np.uint64), b.view(np.uint64)))


def same_primary_bits(left: Primary, right: Primary) -> bool:
    """Whether two runs agree bit for bit in every tensor, the loss, names and count."""
    tensors_equal = all(
        same_bits(a, b)
        for a, b in zip(left.tensors().values(), right.tensors().values(), strict=True)
    )
    return (
        tensors_equal
        and np.float64(left.loss).tobytes() == np.float64(right.loss).tobytes()
        and left.parameter_names == right.parameter_names
        and left.parameter_count == right.parameter_count
    )
