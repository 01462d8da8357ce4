"""The Q/K/V projection engine: three independent bias-free ``[d_model, d_head]`` weights.

Forward ``Q = X W_Q``, ``K = X W_K``, ``V = X W_V``; reverse ``dX = dQ W_Q^T + dK W_K^T +
dV W_V^T`` (the shared input sums three paths) and ``dW = X_(BT)^T dY_(BT)`` per branch.
Validation precedes any output, in a declared order; the first failing check wins.

Speed: the weights are column views of one C-contiguous ``[d_model, 3*d_head]`` matrix
``[W_Q|W_K|W_V]``, so forward is one GEMM split into Q, K, V views and reverse is two
GEMMs over ``[dQ|dK|dV]``: the same sums as three products (equal to rounding) at about
half the cost.

:func:`project` is that one forward product, rows of inputs through columns of weights.
Forward calls it on the whole packed matrix; the gradient check
(:mod:`qkvcli.gradcheck.probes`) calls it on less: a few perturbed rows, a few perturbed
columns of one branch, perturbed copies stacked along the rows or the columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from qkvcli.core.arrays import Array, ArrayLike, all_finite, check_finite
from qkvcli.core.errors import (
    GradientShapeMismatch,
    ProjectionError,
    QkvError,
)
from qkvcli.core.names import BRANCHES, DEFAULT_NAMES, DEFAULT_PREFIX, validate_name
from qkvcli.core.outputs import QkvForward, QkvGradients
from qkvcli.core.splitmix import SplitMix64, xavier_uniform
from qkvcli.core.weights import (
    NamedWeights,
    check_input_shape,
    check_weights,
    join_upstream,
    pack,
    release_upstream,
    rows_nonzero,
)

if TYPE_CHECKING:
    import numpy.typing as npt


def project(rows: Array, weights: Array, out: Array | None = None,
            bias: Array | None = None) -> Array:
    """``rows @ weights (+ bias)``: ``[N, d_model] @ [d_model, n] -> [N, n]``, into ``out``
    when given; ``rows`` ``[B, T, d_model]`` gives ``[B, T, n]`` (no ``out`` then).

    Every projection of qkv: the chapter's three branches packed, the attention engine's
    ``X [W_Q|W_K|W_V] + b``, and the gradient checks' evaluations on less (a few rows, a
    few columns). On inputs already validated: no check. Call it
    inside ``np.errstate(over="ignore", invalid="ignore")``, as forward and the gradient
    check do: overflow to infinity is reported by the evidence's checks, not as a warning
    (the check enters that state once per batch of evaluations, not once per product).
    ``out`` must be a C-contiguous ``[N, n]`` array; writing into a buffer made once
    spares the kernel zeroing fresh pages on every call.

    The last bit of an output may depend on the shape: BLAS blocks a product by its
    sizes, and NumPy computes one with a single row or column by a matrix-vector kernel,
    whose sums run in another order. A caller that wants the matrix-matrix kernel for
    every batch keeps at least two of each.
    """
    if rows.ndim != 2:  # [B,T,d] -> [BT,d] @ [d,n] -> [B,T,n]
        tokens = rows.reshape(-1, rows.shape[-1]) @ weights
        shaped: Array = tokens.reshape(*rows.shape[:-1], weights.shape[1])
        if bias is not None:
            shaped += bias
        return shaped
    product: Array = np.matmul(rows, weights, out=out)
    if bias is not None:
        product += bias
    return product


def project_back(rows: Array, upstream: Array, weights: Array) -> tuple[Array, Array]:
    """The reverse of :func:`project` for ``upstream`` ``[N, n]``: ``(upstream weights^T,
    rows^T upstream)``, the gradient of the rows (every output column's path into them
    summed inside one product) and of the weights (each column its own)."""
    # [N,n] @ [n,d] -> [N,d]; [d,N] @ [N,n] -> [d,n]
    return upstream @ weights.T, rows.T @ upstream


class QkvProjections(NamedWeights):
    """Three independent bias-free linear maps sharing one input.

    Build one with :meth:`from_arrays` (existing weights) or :meth:`from_seed`
    (Xavier-uniform initialization from a SplitMix64 generator). Instances are
    immutable: their weights are read-only arrays (column views of one packed
    ``[d_model, 3*d_head]`` matrix). Computation is float64 unless :meth:`astype`
    made a float32 copy for speed studies.
    """

    __slots__ = ("_d_head", "_d_model", "_names", "_packed", "_rows_nonzero", "_scratch",
                 "_weights")

    def __init__(
        self,
        weights: tuple[Array, Array, Array],
        names: tuple[str, str, str],
        dtype: npt.DTypeLike = np.float64,
    ) -> None:
        # Private: use from_arrays or from_seed, which validate first.
        self._d_model = int(weights[0].shape[0])
        self._d_head = int(weights[0].shape[1])
        self._packed = pack(weights, dtype)
        h = self._d_head
        self._weights: tuple[Array, Array, Array] = (
            self._packed[:, :h], self._packed[:, h:2 * h], self._packed[:, 2 * h:]
        )
        self._names = names
        self._rows_nonzero = rows_nonzero(self._packed)
        # Reverse's [dQ|dK|dV] buffer, kept between calls (see join_upstream).
        self._scratch: list[Array] = []

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

        Raises a :class:`~qkvcli.core.errors.QkvError` subclass.
        """
        if names is None:
            names = DEFAULT_NAMES
        names = tuple(names)
        if len(names) != 3:
            raise ValueError(f"expected three parameter names, got {len(names)}")
        # No copy yet: _pack copies the validated weights into the projections' own matrix.
        arrays = tuple(np.asarray(w, dtype=np.float64) for w in (w_query, w_key, w_value))
        check_weights(arrays, names)
        return cls((arrays[0], arrays[1], arrays[2]), (names[0], names[1], names[2]))

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
        :class:`~qkvcli.core.errors.ProjectionError` and leaves ``rng`` unchanged.
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
        projections = cls.from_arrays(weights[0], weights[1], weights[2], names=names)
        rng.state = trial.state
        return projections

    # --- properties ---------------------------------------------------------------------

    @property
    def d_model(self) -> int:
        return self._d_model

    @property
    def d_head(self) -> int:
        return self._d_head

    @property
    def parameter_count(self) -> int:
        return 3 * self._d_model * self._d_head

    @property
    def packed(self) -> Array:
        """The read-only ``[d_model, 3*d_head]`` matrix ``[W_Q|W_K|W_V]``."""
        return self._packed

    @property
    def dtype(self) -> np.dtype[np.floating[npt.NBitBase]]:
        """The floating type the projections compute in (float64 unless made by :meth:`astype`)."""
        return self._packed.dtype  # type: ignore[return-value]

    def astype(self, dtype: npt.DTypeLike) -> QkvProjections:
        """The same projections computing in ``dtype`` (``float64`` or ``float32``).

        For speed studies only: gradient checks and reports stay float64. Raises
        ``ValueError`` for other types.
        """
        target = np.dtype(dtype)
        if target not in (np.dtype(np.float64), np.dtype(np.float32)):
            raise ValueError(f"dtype must be float64 or float32, got {target}")
        if target == self._packed.dtype:
            return self
        return QkvProjections(self._weights, self._names, target)

    def with_weight(self, branch: str, weight: ArrayLike) -> QkvProjections:
        """New projections with one branch's weight replaced (same names), validated."""
        index = BRANCHES.index(branch)
        weights = list(self._weights)
        weights[index] = np.asarray(weight, dtype=np.float64)
        return QkvProjections.from_arrays(weights[0], weights[1], weights[2], names=self._names)

    # --- computation --------------------------------------------------------------------

    def _shaped_input(self, x: ArrayLike) -> Array:
        # Rank, then final width: the checks that must precede any product.
        array: Array = np.asarray(x, dtype=self._packed.dtype)
        check_input_shape(array, self._d_model)
        return array

    def check_input(self, x: ArrayLike) -> Array:
        """Validate ``x`` (rank, then final width, then finite values) and return it as an array.

        The array has the projections' dtype (float64 unless :meth:`astype` was used); an input
        already of that type is not copied.
        """
        array = self._shaped_input(x)
        check_finite(array, "input")
        return array

    def forward(self, x: ArrayLike) -> QkvForward:
        """Project ``[batch, tokens, d_model]`` into three ``[batch, tokens, d_head]`` views.

        Q, K and V are views of one ``[batch, tokens, 3*d_head]`` result. Empty batch or
        token axes are valid and give empty outputs. Raises (in this order)
        :class:`~qkvcli.core.errors.InputRank`, :class:`~qkvcli.core.errors.InputWidthMismatch`
        or :class:`~qkvcli.core.errors.NonFiniteValue`.
        """
        x = self._shaped_input(x)
        batch, tokens, d_model = x.shape
        h = self._d_head
        # Proof by output: when no row of [W_Q|W_K|W_V] is all zero, a NaN or infinity in
        # x[b,t,i] meets a non-zero weight and makes an output of row (b,t) non-finite, so
        # a finite output proves a finite input. Checking the smaller output instead of x
        # saves a pass over the largest tensor; a non-finite output falls back to the
        # exact check, which raises the same error the up-front check would have.
        by_output = self._rows_nonzero and x.size > batch * tokens * 3 * h
        if not by_output:
            check_finite(x, "input")
        rows = x.reshape(batch * tokens, d_model)  # X_(BT): a view when x is contiguous
        # Overflow to inf is reported by the evidence's checks, not as a warning on stderr;
        # a NaN input may meet the product before its check.
        with np.errstate(over="ignore", invalid="ignore"):
            packed = project(rows, self._packed)  # [BT,d] @ [d,3h] -> [BT,3h]: all three
        if by_output and not all_finite(packed):
            check_finite(x, "input")
        packed = packed.reshape(batch, tokens, 3 * h)
        return QkvForward(packed[..., :h], packed[..., h:2 * h], packed[..., 2 * h:])

    def backward(
        self, x: ArrayLike, grad_query: ArrayLike, grad_key: ArrayLike, grad_value: ArrayLike
    ) -> QkvGradients:
        """Reverse pass for upstream gradients ``dQ, dK, dV`` (each ``[batch, tokens, d_head]``).

        Returns the input gradient (sum of the three paths) and each weight's own
        gradient (column views of one ``[d_model, 3*d_head]`` result). Raises, in this
        order, the input errors of :meth:`forward`, then per branch
        :class:`~qkvcli.core.errors.GradientShapeMismatch`, then per branch a non-finite
        upstream value (:class:`~qkvcli.core.errors.NonFiniteValue`).
        """
        x = self._shaped_input(x)
        batch, tokens, d_model = x.shape
        expected = (batch, tokens, self._d_head)
        h = self._d_head
        dtype = self._packed.dtype
        upstream = []
        for branch, grad in zip(BRANCHES, (grad_query, grad_key, grad_value), strict=True):
            g = np.asarray(grad, dtype=dtype)
            if g.shape != expected:
                check_finite(x, "input")  # the input's values are checked before any upstream
                raise GradientShapeMismatch(branch, expected, tuple(g.shape))
            upstream.append(g)
        rows = x.reshape(batch * tokens, d_model)  # X_(BT): [BT, d]
        # [dQ|dK|dV] as one [BT,3h] matrix, so each reverse product is a single GEMM: a view
        # when the upstream already is one (as forward's outputs are), else a copy (3h/d of
        # the input's size, far cheaper than accumulating three [BT,d] terms).
        joined = join_upstream(upstream, self._scratch)
        by_output = x.size > 2 * joined.size
        if not by_output:
            check_finite(x, "input")
        if not all_finite(joined):
            check_finite(x, "input")
            for branch, g in zip(BRANCHES, upstream, strict=True):
                check_finite(g, f"{branch} upstream")
        # dX = [dQ|dK|dV] [W_Q|W_K|W_V]^T sums the three paths inside one product.
        with np.errstate(over="ignore", invalid="ignore"):
            grad_rows, grad_packed = project_back(rows, joined, self._packed)  # each dW its own
            grad_input = grad_rows.reshape(batch, tokens, d_model)
        # Proof by output, as in forward: a non-finite x[r,i] reaches every dW[i,j] whose
        # upstream entry in row r is non-zero, so a finite dW proves x finite when no
        # upstream row is all zero.
        if by_output and not (all_finite(grad_packed) and rows_nonzero(joined)):
            check_finite(x, "input")
        release_upstream(joined, self._scratch)
        return QkvGradients(
            grad_input, grad_packed[:, :h], grad_packed[:, h:2 * h], grad_packed[:, 2 * h:]
        )
