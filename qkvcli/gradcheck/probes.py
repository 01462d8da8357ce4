"""Evaluate the gradient check's objective for many perturbed copies of one tensor at once.

The objective is ``L = <Q,U_Q> + <K,U_K> + <V,U_V>`` with ``[Q|K|V] = X [W_Q|W_K|W_V]``.
A :class:`StackedObjective` owns a buffer of ``slots`` full copies of one tensor (the
input, or the packed weight matrix for a weight), each of which a caller may perturb;
:meth:`StackedObjective.evaluate` then computes ``L`` for every slot with one stacked
matrix product. Each slot's value is a complete evaluation of ``L`` from its own
perturbed tensor: nothing is reused between slots, and the analytic gradient is never
consulted, so batching changes the speed of the check, not what it measures.
"""

from __future__ import annotations

import numpy as np

from qkvcli.core.arrays import Array
from qkvcli.core.projections import QkvProjections


class StackedObjective:
    """``L`` for up to ``slots`` perturbed copies of tensor ``index`` (0 input, 1-3 weights).

    Slot ``k``'s tensor is :meth:`slot` ``(k)``: a writable view that starts equal to the
    unperturbed tensor. Perturb it, call :meth:`evaluate`, and restore what you changed
    before reusing the slot for another evaluation.
    """

    def __init__(
        self,
        layer: QkvProjections,
        x: Array,
        upstream: tuple[Array, Array, Array],
        index: int,
        slots: int,
    ) -> None:
        self.index = index
        self.slots = slots
        packed = layer.astype(np.float64).packed
        batch, tokens, d_model = x.shape
        h = layer.d_head
        self._h = h
        self._rows = np.ascontiguousarray(x, dtype=np.float64).reshape(batch * tokens, d_model)
        joined = np.empty((batch * tokens, 3, h))
        for branch, grad in enumerate(upstream):
            joined[:, branch, :] = np.asarray(grad, dtype=np.float64).reshape(batch * tokens, h)
        self._upstream = joined  # [BT,3,h]
        self._packed = packed
        # Always a fresh, writable buffer (np.tile may hand back its read-only input
        # when it is empty).
        if index == 0:
            # slots copies of X_(BT), stacked along the row axis: [slots*BT, d].
            self._buffer = np.empty((slots * batch * tokens, d_model))
            self._buffer.reshape(slots, batch * tokens, d_model)[...] = self._rows
        else:
            # slots copies of [W_Q|W_K|W_V] side by side: [d, slots*3h], so one GEMM
            # X_(BT) @ buffer evaluates every slot.
            self._buffer = np.empty((d_model, slots * 3 * h))
            self._buffer.reshape(d_model, slots, 3 * h)[...] = packed[:, None, :]
        # Products are written into buffers made once: allocating them per batch made
        # the kernel zero fresh pages over and over (most of the time, measured).
        self._outputs = np.empty(slots * batch * tokens * 3 * h)
        self._terms = np.empty_like(self._outputs)

    @staticmethod
    def slot_elements(layer: QkvProjections, x: Array, index: int) -> int:
        """Elements one slot costs (its copy plus its product and loss terms)."""
        batch, tokens, d_model = x.shape
        outputs = batch * tokens * 3 * layer.d_head
        copy = int(x.size) if index == 0 else int(d_model) * 3 * layer.d_head
        return copy + 2 * int(outputs)

    def slot(self, k: int) -> Array:
        """The writable tensor of slot ``k`` (shaped like the checked tensor)."""
        rows = self._rows.shape[0]
        if self.index == 0:
            return self._buffer[k * rows:(k + 1) * rows]  # [BT, d]
        h = self._h
        start = k * 3 * h + (self.index - 1) * h
        return self._buffer[:, start:start + h]  # [d, h]

    def put(self, k: int, flat_index: int, value: float) -> None:
        """Set element ``flat_index`` (row-major in the checked tensor) of slot ``k``."""
        rows, d_model = self._rows.shape
        if self.index == 0:
            row, column = divmod(flat_index, d_model)
            self._buffer[k * rows + row, column] = value
        else:
            row, column = divmod(flat_index, self._h)
            self._buffer[row, k * 3 * self._h + (self.index - 1) * self._h + column] = value

    def evaluate(self, count: int) -> Array:
        """``L`` of slots ``0..count-1``, each from its own copy: ``[count]`` float64.

        Each branch's sum runs over its ``[batch, tokens, d_head]`` products in row-major
        order, contiguous, so it is the very sum :func:`~qkvcli.core.projections.weighted_loss`
        takes (same pairwise summation): batched values equal the one-at-a-time ones.
        """
        rows = self._rows.shape[0]
        h = self._h
        size = count * rows * 3 * h
        terms = self._terms[:size].reshape(count, 3, rows, h)
        upstream = self._upstream.transpose(1, 0, 2)  # [3, BT, h]
        with np.errstate(over="ignore", invalid="ignore"):  # the checks report non-finite L
            if self.index == 0:
                stacked = self._buffer[:count * rows]  # [count*BT, d]
                outputs = self._outputs[:size].reshape(count * rows, 3 * h)
                np.matmul(stacked, self._packed, out=outputs)  # [count*BT,d]@[d,3h]
                by_branch = outputs.reshape(count, rows, 3, h).transpose(0, 2, 1, 3)
            else:
                weights = self._buffer[:, :count * 3 * h]  # [d, count*3h]
                outputs = self._outputs[:size].reshape(rows, count * 3 * h)
                np.matmul(self._rows, weights, out=outputs)  # [BT,d]@[d,count*3h]
                by_branch = outputs.reshape(rows, count, 3, h).transpose(1, 2, 0, 3)
            np.multiply(by_branch, upstream, out=terms)  # [count, 3, BT, h]
            per_branch = terms.reshape(count, 3, rows * h).sum(axis=2)  # [count, 3]
            # Then in query, key, value order, as weighted_loss adds them.
            total: Array = per_branch[:, 0] + per_branch[:, 1] + per_branch[:, 2]
        return total
