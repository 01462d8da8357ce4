"""The three weights' shared checks (branch shapes, model widths, unique names, the input's
shape) and the packed matrices the engine multiplies: ``[W_Q|W_K|W_V]`` and the upstream
``[dQ|dK|dV]``.

The projections and the attention head both validate through these, in the same order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from qkvcli.core.arrays import Array, check_finite
from qkvcli.core.errors import (
    BranchInputWidthMismatch,
    BranchOutputWidthMismatch,
    DuplicateName,
    InputRank,
    InputWidthMismatch,
    ProjectionError,
    QkvError,
    WeightRank,
    ZeroInputWidth,
    ZeroOutputWidth,
)
from qkvcli.core.names import BRANCHES, validate_name

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


SCRATCH_BYTES = 64 << 20
"""The largest ``[dQ|dK|dV]`` copy the projections keep for their next reverse pass."""


def join_upstream(upstream: Sequence[Array], pool: list[Array]) -> Array:
    """``[dQ|dK|dV]`` (three ``[B,T,h]`` arrays) as one ``[B*T, 3h]`` matrix.

    A read-only view when the three are adjacent column blocks of one ``[B,T,3h]`` array
    (as :meth:`~qkvcli.core.projections.QkvProjections.forward`'s outputs are, and the
    gradient of packed projections' output is); otherwise a copy into a buffer taken from
    ``pool``. Give the matrix back with :func:`release_upstream`.
    """
    query, key, value = upstream
    batch, tokens, h = query.shape
    rows = batch * tokens
    size = query.itemsize
    base = query.base
    if (
        rows and h and base is not None and key.base is base and value.base is base
        and query.strides == key.strides == value.strides
        and query.strides[2] == size and query.strides[1] == 3 * h * size
        and (batch == 1 or query.strides[0] == tokens * 3 * h * size)
        and key.ctypes.data == query.ctypes.data + h * size
        and value.ctypes.data == query.ctypes.data + 2 * h * size
    ):
        # The three share one allocation laid out row by row as [dQ|dK|dV]: no copy.
        return np.lib.stride_tricks.as_strided(
            query, shape=(rows, 3 * h), strides=(3 * h * size, size), writeable=False
        )
    # A fresh buffer on every call costs more than its copy: freeing it lets the C
    # allocator hand its pages back to the system, and the next call faults them in
    # again (about a fifth of small projections' forward+reverse, measured). Popping it off
    # a list gives each concurrent caller a buffer of its own.
    try:
        joined = pool.pop()
    except IndexError:
        joined = None
    if joined is None or joined.shape != (rows, 3 * h) or joined.dtype != query.dtype:
        joined = np.empty((rows, 3 * h), dtype=query.dtype)
    # One concatenation writes each [dQ|dK|dV] row in turn: about half the time of three
    # column-block copies, each of which walks the whole buffer (measured in a small
    # projections' forward+reverse).
    np.concatenate(upstream, axis=2, out=joined.reshape(batch, tokens, 3 * h))
    return joined


def release_upstream(joined: Array, pool: list[Array]) -> None:
    """Keep a copied ``[dQ|dK|dV]`` (never a view) for the next reverse pass, up to a size."""
    if joined.flags.owndata and joined.nbytes <= SCRATCH_BYTES and not pool:
        pool.append(joined)


class NamedWeights:
    """The three weights, read-only, in query, key, value order, and their stable parameter
    names: what the projections and an attention head both hold (set by their makers)."""

    __slots__ = ()
    _weights: tuple[Array, Array, Array]
    _names: tuple[str, str, str]

    @property
    def weights(self) -> tuple[Array, Array, Array]:
        """The read-only weights in query, key, value order."""
        return self._weights

    @property
    def names(self) -> tuple[str, str, str]:
        """Stable parameter names in query, key, value order."""
        return self._names


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


def check_weights(weights: Sequence[Array], names: Sequence[str]) -> None:
    """The projections' three weights and names, in the engine's order (first failure
    wins): each weight's name, then its values finite, in query, key, value order; per
    branch its rank and non-zero widths; equal model widths, equal head widths, unique
    names. Raises a :class:`~qkvcli.core.errors.QkvError` subclass."""
    for name, weight in zip(names, weights, strict=True):
        validate_name(name)
        check_finite(weight, "parameter")
    check_branches(weights)
    check_model_widths(weights)
    head = tuple(int(weight.shape[1]) for weight in weights)
    if len(set(head)) != 1:
        raise BranchOutputWidthMismatch(*head)
    check_unique_names(names)


def check_input_shape(x: Array, d_model: int) -> None:
    """Rank three, then final width ``d_model``: the checks that precede any product."""
    if x.ndim != 3:
        raise InputRank(x.ndim)
    if x.shape[2] != d_model:
        raise InputWidthMismatch(d_model, int(x.shape[2]))

