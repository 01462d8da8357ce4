"""One branch's weight: its checks, and the packed ``[W_Q|W_K|W_V]`` matrix the engine multiplies by."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from qkvcli.core.arrays import Array
from qkvcli.core.errors import WeightRank, ZeroInputWidth, ZeroOutputWidth

if TYPE_CHECKING:
    import numpy.typing as npt


def pack(weights: Sequence[Array], dtype: npt.DTypeLike = np.float64) -> Array:
    """``[W_Q|W_K|W_V]`` as one read-only C-contiguous ``[d_model, 3*d_head]`` matrix."""
    d_model, d_head = weights[0].shape
    packed = np.empty((d_model, 3 * d_head), dtype=dtype)
    for index, weight in enumerate(weights):
        packed[:, index * d_head:(index + 1) * d_head] = weight
    packed.flags.writeable = False
    return packed


def check_branch(weight: Array) -> None:
    if weight.ndim != 2:
        raise WeightRank(weight.ndim)
    if weight.shape[0] == 0:
        raise ZeroInputWidth()
    if weight.shape[1] == 0:
        raise ZeroOutputWidth()


def rows_nonzero(matrix: Array) -> bool:
    """Whether every row of a 2-D array has a non-zero entry (vacuously true when empty)."""
    if matrix.shape[0] == 0:
        return True
    if matrix.all():  # no zero at all: the usual dense case, one pass and no temporary
        return True
    return bool(np.any(matrix != 0, axis=1).all())
