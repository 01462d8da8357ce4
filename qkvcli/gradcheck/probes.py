"""Evaluate the gradient check's objective for many perturbed copies of one tensor at once.

The objective is ``L = <Q,U_Q> + <K,U_K> + <V,U_V>`` with ``[Q|K|V] = X [W_Q|W_K|W_V]``.
A :class:`StackedObjective` owns a buffer of ``slots`` perturbable copies, each of which a
caller may perturb; :meth:`StackedObjective.evaluate` then computes ``L`` for every slot
at once. Each slot's value is a complete evaluation of ``L`` at its own perturbed tensor;
the analytic gradient is never consulted, so batching changes the speed of the check, not
what it measures.

Every product is the projections' own (:func:`qkvcli.core.projections.project`, forward's
product) called on less, and every sum the loss's own (:func:`~qkvcli.core.outputs.
weighted_sums`, :func:`~qkvcli.core.outputs.branch_sums`, :func:`~qkvcli.core.outputs.
add_branches`, which make :func:`~qkvcli.core.outputs.weighted_loss`). What an evaluation
recomputes (:attr:`StackedObjective.recomputes`) is only what the perturbation can change;
everything else is computed once, from the unperturbed tensors:

* a weight, one coordinate at a time (``local``): only the perturbed column of the
  branch's output, ``X W_b[:, j]`` (perturbing ``W_b[i,j]`` changes column ``j`` of
  ``Y_b`` and nothing else; a batch's perturbed columns go through the product together,
  ``[BT,d] @ [d,count]``); the branch's sum over all its terms is then taken again, with
  that column's terms replaced (the other two branches' sums are constants of the check);
* a weight otherwise (small tensors, and random directions): the perturbed branch's
  whole product, the slots' copies of ``W_b`` side by side as the columns of one product
  ``[BT,d] @ [d,count*h]``, and its sum ``<Y_b,U_b>``;
* the input, one coordinate at a time (``local``): only the perturbed row of ``[Q|K|V]``
  (the perturbed rows through the packed weights, ``[count,d] @ [d,3h]``); every
  branch's sum over all its terms is then taken again, with that row's terms replaced;
* the input otherwise (small tensors, and random directions): the whole forward, the
  slots' copies of ``X`` stacked along the batch axis, ``[count*BT,d] @ [d,3h]``.

Every sum is a full pass over a branch's ``[batch, tokens, d_head]`` terms in the order
:func:`~qkvcli.core.outputs.weighted_loss` takes it, so ``L`` at the perturbed point is
evaluated from the perturbed forward values, never from the analytic gradient or a
difference of sums. The unperturbed terms (:func:`loss_terms`) are computed once per
check and shared by its four objectives.
"""

from __future__ import annotations

import numpy as np

from qkvcli.core.arrays import Array
from qkvcli.core.outputs import add_branches, branch_sums, weighted_sums
from qkvcli.core.projections import QkvProjections, project

RECOMPUTES_BRANCH = "perturbed branch"
RECOMPUTES_ROW = "perturbed row"
RECOMPUTES_COLUMN = "perturbed column"
RECOMPUTES_ALL = "full forward"


def loss_terms(projections: QkvProjections, x: Array, upstream: tuple[Array, Array, Array]) -> Array:
    """The unperturbed terms ``Y_b * U_b`` of ``L``, per branch: ``[3, BT, h]``."""
    batch, tokens, d_model = x.shape
    rows, h = batch * tokens, projections.d_head
    packed = projections.astype(np.float64).packed
    terms = np.empty((3, rows, h))
    with np.errstate(over="ignore", invalid="ignore"):
        # forward's product: [BT,d] @ [d,3h] -> [BT,3h]
        outputs = project(np.ascontiguousarray(x, dtype=np.float64).reshape(rows, d_model),
                          packed)
        for branch, grad in enumerate(upstream):
            np.multiply(outputs[:, branch * h:(branch + 1) * h],
                        np.asarray(grad, dtype=np.float64).reshape(rows, h), out=terms[branch])
    terms.flags.writeable = False  # shared by a check's objectives: none may change it
    return terms


class StackedObjective:
    """``L`` for up to ``slots`` perturbed copies of tensor ``index`` (0 input, 1-3 weights).

    Slot ``k``'s tensor is :meth:`slot` ``(k)``: a writable view that starts equal to the
    unperturbed tensor (for a weight, the branch's ``[d_model, d_head]`` weight). Perturb
    it (or :meth:`put` one element), call :meth:`evaluate`, and restore what you changed
    before reusing the slot. With ``local`` no copies exist: :meth:`put` is the only way
    to perturb, one element per slot, and :meth:`slot` is unavailable. ``base``, when
    given, is :func:`loss_terms` of the same projections, input and upstream (computed once and
    shared); otherwise it is computed when needed.
    """

    def __init__(
        self,
        projections: QkvProjections,
        x: Array,
        upstream: tuple[Array, Array, Array],
        index: int,
        slots: int,
        local: bool = False,
        base: Array | None = None,
    ) -> None:
        self.index = index
        self.slots = slots
        self.local = local
        packed = projections.astype(np.float64).packed
        batch, tokens, d_model = x.shape
        h = projections.d_head
        self._h = h
        rows = batch * tokens
        self._rows = np.ascontiguousarray(x, dtype=np.float64).reshape(rows, d_model)
        joined = np.empty((3, rows, h))
        for branch, grad in enumerate(upstream):
            joined[branch] = np.asarray(grad, dtype=np.float64).reshape(rows, h)
        self._upstream = joined  # [3,BT,h]
        self._packed = packed
        self.recomputes = RECOMPUTES_ALL
        if index > 0 or local:
            self._base = loss_terms(projections, x, upstream) if base is None else base  # [3,BT,h]
        if index > 0 and local:
            self.recomputes = RECOMPUTES_COLUMN
            self._sums = branch_sums(self._base.reshape(3, rows * h))  # constants
            self._weight = packed[:, (index - 1) * h:index * h]  # [d, h]
            self._where = np.zeros(slots, dtype=np.int64)
            self._value = np.zeros(slots)
            # One branch's terms, a column replaced at a time and restored after its sum.
            self._work = self._base[index - 1].copy()  # [BT, h]
            self._work_terms = self._work.reshape(-1)  # the same, as one row-major axis
        elif index > 0:
            self.recomputes = RECOMPUTES_BRANCH
            # slots copies of the branch's weight side by side: [d, slots*h], so one
            # product X_(BT) @ buffer evaluates every slot's branch.
            weight = packed[:, (index - 1) * h:index * h]
            self._buffer = np.empty((d_model, slots * h))
            self._buffer.reshape(d_model, slots, h)[...] = weight[:, None, :]
            self._outputs = np.empty(slots * rows * h)
            self._terms = np.empty_like(self._outputs)
            self._sums = branch_sums(self._base.reshape(3, rows * h))  # constants
        elif local:
            self.recomputes = RECOMPUTES_ROW
            self._where = np.zeros(slots, dtype=np.int64)
            self._value = np.zeros(slots)
            self._terms = np.empty((slots, 3, rows, h))
        else:
            # slots copies of X_(BT), stacked along the row axis: [slots*BT, d].
            self._buffer = np.empty((slots * rows, d_model))
            self._buffer.reshape(slots, rows, d_model)[...] = self._rows
            # Products are written into buffers made once: allocating them per batch made
            # the kernel zero fresh pages over and over (most of the time, measured).
            self._outputs = np.empty(slots * rows * 3 * h)
            self._terms = np.empty_like(self._outputs)

    @staticmethod
    def slot_elements(projections: QkvProjections, x: Array, index: int, local: bool = False) -> int:
        """Elements one slot costs (its copy plus its product and loss terms)."""
        batch, tokens, d_model = x.shape
        outputs = batch * tokens * 3 * projections.d_head
        if index > 0 and local:
            return int(d_model) + int(batch * tokens)  # the perturbed column and its product
        if index > 0:
            return int(d_model) * projections.d_head + 2 * int(outputs) // 3
        if local:
            return int(outputs)
        return int(x.size) + 2 * int(outputs)

    def slot(self, k: int) -> Array:
        """The writable tensor of slot ``k`` (shaped like the checked tensor)."""
        if self.local:
            raise ValueError("a local objective has no slot copies; use put")
        rows = self._rows.shape[0]
        if self.index == 0:
            return self._buffer[k * rows:(k + 1) * rows]  # [BT, d]
        return self._buffer[:, k * self._h:(k + 1) * self._h]  # [d, h]

    def put(self, k: int, flat_index: int, value: float) -> None:
        """Set element ``flat_index`` (row-major in the checked tensor) of slot ``k``."""
        if self.local:  # the flat index is decoded when the slots are evaluated
            self._where[k] = flat_index
            self._value[k] = value
            return
        rows, d_model = self._rows.shape
        if self.index == 0:
            row, column = divmod(flat_index, d_model)
            self._buffer[k * rows + row, column] = value
        else:
            row, column = divmod(flat_index, self._h)
            self._buffer[row, k * self._h + column] = value

    def evaluate(self, count: int) -> Array:
        """``L`` of slots ``0..count-1``, each from its own perturbed tensor: ``[count]``.

        Each branch's sum runs over its ``[batch, tokens, d_head]`` terms in row-major
        order, contiguous, and the three are added in query, key, value order: the sums of
        :func:`~qkvcli.core.outputs.weighted_loss`, by the same functions.
        """
        with np.errstate(over="ignore", invalid="ignore"):  # the checks report non-finite L
            if self.index > 0:
                per_branch = np.repeat(self._sums[None, :], count, axis=0)  # [count, 3]
                per_branch[:, self.index - 1] = (self._column_sums(count) if self.local
                                                 else self._branch_sums(count))
            elif self.local:
                per_branch = self._local_sums(count)
            else:
                per_branch = self._full_sums(count)
            total: Array = add_branches(per_branch)
        return total

    def _branch_sums(self, count: int) -> Array:
        rows = self._rows.shape[0]
        h = self._h
        size = count * rows * h
        outputs = self._outputs[:size].reshape(rows, count * h)
        project(self._rows, self._buffer[:, :count * h], out=outputs)  # [BT,d]@[d,count*h]
        terms = self._terms[:size].reshape(count, rows, h)
        upstream = self._upstream[self.index - 1]  # [BT, h]
        return weighted_sums(outputs.reshape(rows, count, h).transpose(1, 0, 2), upstream, terms)

    def _column_sums(self, count: int) -> Array:
        """The perturbed branch's sum per slot, recomputing only column ``j`` of ``Y_b``."""
        h = self._h
        branch = self.index - 1
        which, column = np.divmod(self._where[:count], h)  # W_b[i, j] of each slot
        # [d, count] copies of the perturbed columns, at least two: a one-column product
        # would be a matrix-vector kernel, whose summation order differs from the
        # matrix-matrix kernel every other batch (and the full forward) uses.
        columns = self._weight[:, np.resize(column, max(2, count))]
        columns[which, np.arange(count)] = self._value[:count]
        # [BT,d] @ [d,count] -> [BT,count]: Y_b[:, j] per slot
        products = project(self._rows, columns)
        upstream = self._upstream[branch]  # [BT, h]
        base = self._base[branch]
        work = self._work
        sums = np.empty(count)
        for k in range(count):
            j = column[k]
            np.multiply(products[:, k], upstream[:, j], out=work[:, j])
            sums[k] = branch_sums(self._work_terms)  # all BT*h terms of work, row-major
            work[:, j] = base[:, j]  # restore: evaluations never share state
        return sums

    def _local_sums(self, count: int) -> Array:
        rows, d_model = self._rows.shape
        h = self._h
        which, column = np.divmod(self._where[:count], d_model)
        changed = self._rows[which]  # [count, d]: copies of the perturbed rows
        changed[np.arange(count), column] = self._value[:count]
        products = project(changed, self._packed)  # [count,d] @ [d,3h] -> [count,3h]
        terms = self._terms[:count]
        terms[...] = self._base
        for k in range(count):
            terms[k, :, which[k], :] = products[k].reshape(3, h) * self._upstream[:, which[k], :]
        return branch_sums(terms.reshape(count, 3, rows * h))

    def _full_sums(self, count: int) -> Array:
        rows = self._rows.shape[0]
        h = self._h
        size = count * rows * 3 * h
        terms = self._terms[:size].reshape(count, 3, rows, h)
        outputs = self._outputs[:size].reshape(count * rows, 3 * h)
        project(self._buffer[:count * rows], self._packed, out=outputs)  # [count*BT,d]@[d,3h]
        by_branch = outputs.reshape(count, rows, 3, h).transpose(0, 2, 1, 3)
        return weighted_sums(by_branch, self._upstream, terms)  # [count, 3]
