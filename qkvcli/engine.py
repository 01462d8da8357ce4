"""The Q/K/V projection engine: three independent bias-free ``[d_model, d_head]`` weights.

Forward: ``Q = X W_Q``, ``K = X W_K``, ``V = X W_V`` over the final axis of a rank-3
``[batch, tokens, d_model]`` input. Reverse: the shared input accumulates all three
paths, ``dX = dQ W_Q^T + dK W_K^T + dV W_V^T``, while each weight keeps its own
gradient ``dW = X_(BT)^T dY_(BT)``.

Validation happens before any output is produced, in a declared order (see
:meth:`QkvProjections.from_arrays` and :meth:`QkvProjections.forward`); the first
failing check wins.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from qkvcli.errors import (
    BRANCHES,
    BranchInputWidthMismatch,
    BranchOutputWidthMismatch,
    DuplicateName,
    EmptyName,
    EmptyNameSegment,
    GradientShapeMismatch,
    InputRank,
    InputWidthMismatch,
    InvalidNameCharacter,
    NonFiniteValue,
    ProjectionError,
    QkvError,
    WeightRank,
    ZeroInputWidth,
    ZeroOutputWidth,
)
from qkvcli.splitmix import SplitMix64, xavier_uniform

Array = npt.NDArray[np.float64]
ArrayLike = npt.ArrayLike

DEFAULT_PREFIX = "decoder.block.0.attention"
DEFAULT_NAMES: tuple[str, str, str] = tuple(  # type: ignore[assignment]
    f"{DEFAULT_PREFIX}.{branch}.weight" for branch in BRANCHES
)


class QkvForward(NamedTuple):
    """The three projected views of the same batch and token positions."""

    query: Array
    key: Array
    value: Array


class QkvGradients(NamedTuple):
    """Reverse-mode gradients: the shared input's and each branch's own weight gradient."""

    input: Array
    query: Array
    key: Array
    value: Array


def validate_name(name: str) -> None:
    """Reject names outside lowercase ASCII, digits, ``_`` and non-empty dot segments."""
    if not name:
        raise EmptyName()
    previous_was_dot = True
    encoded = name.encode("utf-8")
    for index, byte in enumerate(encoded):
        if byte == 0x2E:  # "."
            if previous_was_dot:
                raise EmptyNameSegment(index)
            previous_was_dot = True
            continue
        if not (0x61 <= byte <= 0x7A or 0x30 <= byte <= 0x39 or byte == 0x5F):
            raise InvalidNameCharacter(index, byte)
        previous_was_dot = False
    if previous_was_dot:
        raise EmptyNameSegment(len(encoded))


def first_non_finite(values: Array) -> tuple[int, float] | None:
    """The flat index and value of the first NaN or infinity, or ``None``."""
    finite = np.isfinite(values)
    if finite.all():
        return None
    index = int(np.argmin(finite.reshape(-1)))
    return index, float(values.reshape(-1)[index])


def check_finite(values: Array, operation: str) -> None:
    """Raise :class:`NonFiniteValue` naming the first non-finite entry of ``values``."""
    found = first_non_finite(values)
    if found is not None:
        raise NonFiniteValue(operation, found[0], found[1])


def _as_float_array(values: ArrayLike) -> Array:
    array = np.array(values, dtype=np.float64, copy=True, order="C")
    array.flags.writeable = False
    return array


def _check_branch(weight: Array) -> None:
    if weight.ndim != 2:
        raise WeightRank(weight.ndim)
    if weight.shape[0] == 0:
        raise ZeroInputWidth()
    if weight.shape[1] == 0:
        raise ZeroOutputWidth()


class QkvProjections:
    """Three independent bias-free linear maps sharing one input.

    Build one with :meth:`from_arrays` (existing weights) or :meth:`from_seed`
    (Xavier-uniform initialization from a SplitMix64 generator). Instances are
    immutable: their weights are read-only arrays.
    """

    __slots__ = ("_d_head", "_d_model", "_names", "_weights")

    def __init__(self, weights: tuple[Array, Array, Array], names: tuple[str, str, str]) -> None:
        # Private: use from_arrays or from_seed, which validate first.
        self._weights = weights
        self._names = names
        self._d_model = int(weights[0].shape[0])
        self._d_head = int(weights[0].shape[1])

    # --- construction -------------------------------------------------------------------

    @classmethod
    def from_arrays(
        cls,
        w_query: ArrayLike,
        w_key: ArrayLike,
        w_value: ArrayLike,
        names: Sequence[str] | None = None,
    ) -> QkvProjections:
        """Give Q/K/V semantics to three existing ``[d_model, d_head]`` weights.

        ``names`` defaults to ``decoder.block.0.attention.{query,key,value}.weight``.

        Validation order (first failure wins): for each weight in query, key, value
        order its name, then its values are finite; then per branch the weight's rank
        and non-zero widths (wrapped as ``"<branch> projection: ..."``); then equal
        model widths, equal head widths, and unique names.

        Raises a :class:`~qkvcli.errors.QkvError` subclass.
        """
        if names is None:
            names = DEFAULT_NAMES
        names = tuple(names)
        if len(names) != 3:
            raise ValueError(f"expected three parameter names, got {len(names)}")
        arrays = tuple(_as_float_array(w) for w in (w_query, w_key, w_value))
        for name, array in zip(names, arrays, strict=True):
            validate_name(name)
            check_finite(array, "parameter")
        for branch, array in zip(BRANCHES, arrays, strict=True):
            try:
                _check_branch(array)
            except QkvError as error:
                raise ProjectionError(branch, error) from None
        query, key, value = arrays
        model = (query.shape[0], key.shape[0], value.shape[0])
        if len(set(model)) != 1:
            raise BranchInputWidthMismatch(*model)
        head = (query.shape[1], key.shape[1], value.shape[1])
        if len(set(head)) != 1:
            raise BranchOutputWidthMismatch(*head)
        for repeated, name in enumerate(names):
            if name in names[:repeated]:
                raise DuplicateName(name, names.index(name), repeated)
        return cls((query, key, value), (names[0], names[1], names[2]))

    @classmethod
    def from_seed(
        cls,
        d_model: int,
        d_head: int,
        rng: SplitMix64,
        prefix: str = DEFAULT_PREFIX,
    ) -> QkvProjections:
        """Initialize query, key and value in that order, Xavier-uniform, row-major.

        Transactional: the draws come from a copy of ``rng``, which advances only
        after all three branches are valid. A failing branch raises
        :class:`~qkvcli.errors.ProjectionError` and leaves ``rng`` unchanged.
        """
        trial = rng.copy()
        names = tuple(f"{prefix}.{branch}.weight" for branch in BRANCHES)
        weights = []
        for branch, name in zip(BRANCHES, names, strict=True):
            validate_name(name)
            try:
                weights.append(xavier_uniform(d_model, d_head, trial))
            except QkvError as error:
                raise ProjectionError(branch, error) from None
        layer = cls.from_arrays(weights[0], weights[1], weights[2], names=names)
        rng.state = trial.state
        return layer

    # --- properties ---------------------------------------------------------------------

    @property
    def d_model(self) -> int:
        return self._d_model

    @property
    def d_head(self) -> int:
        return self._d_head

    @property
    def names(self) -> tuple[str, str, str]:
        """Stable parameter names in query, key, value order."""
        return self._names

    @property
    def weights(self) -> tuple[Array, Array, Array]:
        """The read-only weights in query, key, value order."""
        return self._weights

    @property
    def parameter_count(self) -> int:
        return 3 * self._d_model * self._d_head

    def with_weight(self, branch: str, weight: ArrayLike) -> QkvProjections:
        """A new layer with one branch's weight replaced (same names), validated."""
        index = BRANCHES.index(branch)
        weights = list(self._weights)
        weights[index] = np.asarray(weight, dtype=np.float64)
        return QkvProjections.from_arrays(weights[0], weights[1], weights[2], names=self._names)

    # --- computation --------------------------------------------------------------------

    def check_input(self, x: ArrayLike) -> Array:
        """Validate ``x`` (rank, then final width, then finite values) and return it as float64."""
        array = np.asarray(x, dtype=np.float64)
        if array.ndim != 3:
            raise InputRank(array.ndim)
        if array.shape[2] != self._d_model:
            raise InputWidthMismatch(self._d_model, int(array.shape[2]))
        check_finite(array, "input")
        return array

    def forward(self, x: ArrayLike) -> QkvForward:
        """Project ``[batch, tokens, d_model]`` into three ``[batch, tokens, d_head]`` views.

        Empty batch or token axes are valid and give empty outputs. Raises
        :class:`~qkvcli.errors.InputRank`, :class:`~qkvcli.errors.InputWidthMismatch`
        or :class:`~qkvcli.errors.NonFiniteValue`.
        """
        x = self.check_input(x)
        # Overflow to inf is reported by the evidence's checks, not as a warning on stderr.
        with np.errstate(over="ignore", invalid="ignore"):
            return QkvForward(*(x @ w for w in self._weights))  # [B,T,d] @ [d,h] -> [B,T,h]

    def backward(
        self, x: ArrayLike, grad_query: ArrayLike, grad_key: ArrayLike, grad_value: ArrayLike
    ) -> QkvGradients:
        """Reverse pass for upstream gradients ``dQ, dK, dV`` (each ``[batch, tokens, d_head]``).

        Returns the input gradient (sum of the three paths) and each weight's own
        gradient. Raises the input errors of :meth:`forward` or
        :class:`~qkvcli.errors.GradientShapeMismatch`.
        """
        x = self.check_input(x)
        batch, tokens, d_model = x.shape
        expected = (batch, tokens, self._d_head)
        upstream = []
        for branch, grad in zip(BRANCHES, (grad_query, grad_key, grad_value), strict=True):
            g = np.asarray(grad, dtype=np.float64)
            if g.shape != expected:
                raise GradientShapeMismatch(branch, expected, tuple(g.shape))
            check_finite(g, f"{branch} upstream")
            upstream.append(g)
        rows = x.reshape(batch * tokens, d_model)  # X_(BT): [BT, d]
        grad_input = np.zeros_like(x)
        weight_grads = []
        with np.errstate(over="ignore", invalid="ignore"):
            for w, g in zip(self._weights, upstream, strict=True):
                grad_input += g @ w.T  # [B,T,h] @ [h,d] -> [B,T,d]
                weight_grads.append(rows.T @ g.reshape(batch * tokens, self._d_head))  # [d,h]
        return QkvGradients(grad_input, *weight_grads)


def weighted_loss(outputs: QkvForward, upstream: tuple[Array, Array, Array]) -> float:
    """``L = <Q,U_Q> + <K,U_K> + <V,U_V>``: the scalar whose gradient ``backward`` gives."""
    total = 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        for out, up in zip(outputs, upstream, strict=True):
            total += float(np.sum(out * up))
    return total
