"""The three weights' shared checks (branch shapes, model widths, unique names, the input's
shape) and the packed ``[W_Q|W_K|W_V]`` matrix the engine multiplies by.

The projections and the attention head both validate through these, in the same order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from qkvcli.core.arrays import Array
from qkvcli.core.errors import (
    BranchInputWidthMismatch,
    DuplicateName,
    InputRank,
    InputWidthMismatch,
    ProjectionError,
    QkvError,
    WeightRank,
    ZeroInputWidth,
    ZeroOutputWidth,
)
from qkvcli.core.vocabulary import BRANCHES

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


def check_branches(weights: Sequence[Array]) -> None:
    """Per branch, in query, key, value order: rank two and non-zero widths.

    Raises :class:`~qkvcli.core.errors.ProjectionError` (``"<branch> projection: ..."``).
    """
    for branch, weight in zip(BRANCHES, weights, strict=True):
        try:
            check_branch(weight)
        except QkvError as error:
            raise ProjectionError(branch, error) from None


def check_model_widths(weights: Sequence[Array]) -> None:
    """All three weights take the same input width (their row count)."""
    model = tuple(int(weight.shape[0]) for weight in weights)
    if len(set(model)) != 1:
        raise BranchInputWidthMismatch(*model)


def check_unique_names(names: Sequence[str]) -> None:
    """No parameter name repeats; names the first repetition."""
    for repeated, name in enumerate(names):
        if name in names[:repeated]:
            raise DuplicateName(name, list(names).index(name), repeated)


def check_input_shape(x: Array, d_model: int) -> None:
    """Rank three, then final width ``d_model``: the checks that precede any product."""
    if x.ndim != 3:
        raise InputRank(x.ndim)
    if x.shape[2] != d_model:
        raise InputWidthMismatch(d_model, int(x.shape[2]))

