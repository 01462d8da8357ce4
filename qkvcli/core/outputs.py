"""What the projections give: the forward outputs, the gradients, and the loss they belong to.

Both are :class:`~qkvcli.core.record.Record` types that also unpack, in field order, as
the library's documented use does (``q, k, v = projections.forward(x)``; ``qkvcli/__init__.py``
and docs/commands.md): they define ``__iter__``, nothing more of a tuple.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from qkvcli.core.arrays import Array
from qkvcli.core.record import Record


class QkvForward(Record):
    """The three projected views of the same batch and token positions: ``(query, key, value)``."""

    query: Array
    key: Array
    value: Array

    def __iter__(self) -> Iterator[Array]:
        """``query``, ``key``, ``value``: so ``q, k, v = projections.forward(x)`` unpacks."""
        return iter((self.query, self.key, self.value))


class QkvGradients(Record):
    """Reverse-mode gradients: the shared input's and each branch's own weight gradient.

    Named as everywhere in qkv (:mod:`qkvcli.core.names`): ``grad_input`` is dL/dX, and
    ``grad_w_query`` is dL/dW_Q, never to be confused with the output ``query`` (Q) or
    the upstream ``grad_query`` (dL/dQ).
    """

    grad_input: Array
    grad_w_query: Array
    grad_w_key: Array
    grad_w_value: Array

    def __iter__(self) -> Iterator[Array]:
        """``grad_input``, ``grad_w_query``, ``grad_w_key``, ``grad_w_value``, in that order."""
        return iter((self.grad_input, self.grad_w_query, self.grad_w_key, self.grad_w_value))


def branch_sums(terms: Array) -> Array:
    """Each branch's ``<Y_b, U_b>`` from its terms ``Y_b * U_b``: ``[..., n] -> [...]``.

    The last axis holds a branch's ``[batch, tokens, d_head]`` terms in row-major order,
    contiguous. NumPy sums such an axis pairwise, the same way for one forward's terms as
    for a stack of evaluations', so the gradient check's sums are the loss's own.
    """
    sums: Array = terms.sum(axis=-1)
    return sums


def weighted_sums(outputs: Array, upstream: Array, terms: Array | None = None,
                  axes: int | None = 2) -> Array:
    """``<Y, U>`` over the last ``axes`` axes of ``Y * U`` (broadcast; ``None``: every axis),
    for each leading index.

    With the default, ``[..., B*T, d_head]`` rows of one branch give ``[...]``: a stack of
    evaluations at once. ``terms``, when given, is a C-contiguous buffer of the broadcast
    shape that receives ``Y * U`` (no allocation per call). The sum is :func:`branch_sums`.
    """
    terms = np.multiply(outputs, upstream, out=terms)
    lead = 0 if axes is None else terms.ndim - axes
    return branch_sums(terms.reshape((*terms.shape[:lead], -1)))


def add_branches(sums: Array) -> Array:
    """``L`` from the branches' sums ``[..., 3] -> [...]``, added in query, key, value order."""
    total: Array = sums[..., 0] + sums[..., 1] + sums[..., 2]
    return total


def weighted_loss(outputs: QkvForward, upstream: tuple[Array, Array, Array]) -> float:
    """``L = <Q,U_Q> + <K,U_K> + <V,U_V>``: the scalar whose gradient ``backward`` gives."""
    with np.errstate(over="ignore", invalid="ignore"):
        sums = np.array([weighted_sums(out, up, axes=None)
                         for out, up in zip(outputs, upstream, strict=True)])
        # + 0.0: the sum from zero, ((0 + L_Q) + L_K) + L_V, which differs from
        # add_branches' only in giving +0.0 where all three sums are -0.0.
        return float(add_branches(sums)) + 0.0
