"""What the projections give: the forward outputs, the gradients, and the loss they belong to.

Both are :class:`~qkvcli.core.record.Record` types that also unpack, in field order, as
the library's documented use does (``q, k, v = layer.forward(x)``; ``qkvcli/__init__.py``
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
        """``query``, ``key``, ``value``: so ``q, k, v = layer.forward(x)`` unpacks."""
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


def weighted_loss(outputs: QkvForward, upstream: tuple[Array, Array, Array]) -> float:
    """``L = <Q,U_Q> + <K,U_K> + <V,U_V>``: the scalar whose gradient ``backward`` gives."""
    total = 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        for out, up in zip(outputs, upstream, strict=True):
            total += float(np.sum(out * up))
    return total
