"""What the projections give: the forward outputs, the gradients, and the loss they belong to.

Both records are tuples with named fields, written out by hand: a ``NamedTuple`` class
costs ~0.1 ms to create (``collections.namedtuple`` compiles its ``__new__`` with
``eval``), and this module is on every command's start-up path (see ARCHITECTURE.md).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from qkvcli.core.arrays import Array


class QkvForward(tuple[Array, Array, Array]):
    """The three projected views of the same batch and token positions: ``(query, key, value)``."""

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ("query", "key", "value")

    def __new__(cls, query: Array, key: Array, value: Array) -> QkvForward:
        return tuple.__new__(cls, (query, key, value))

    @property
    def query(self) -> Array:
        return self[0]

    @property
    def key(self) -> Array:
        return self[1]

    @property
    def value(self) -> Array:
        return self[2]

    def __repr__(self) -> str:
        return f"QkvForward(query={self[0]!r}, key={self[1]!r}, value={self[2]!r})"


class QkvGradients(tuple[Array, Array, Array, Array]):
    """Reverse-mode gradients: the shared input's and each branch's own weight gradient.

    Named as everywhere in qkv (see ARCHITECTURE.md): ``grad_input`` is dL/dX, and
    ``grad_w_query`` is dL/dW_Q, never to be confused with the output ``query`` (Q) or
    the upstream ``grad_query`` (dL/dQ).
    """

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ("grad_input", "grad_w_query", "grad_w_key",
                                          "grad_w_value")

    def __new__(cls, grad_input: Array, grad_w_query: Array, grad_w_key: Array,
                grad_w_value: Array) -> QkvGradients:
        return tuple.__new__(cls, (grad_input, grad_w_query, grad_w_key, grad_w_value))

    @property
    def grad_input(self) -> Array:
        return self[0]

    @property
    def grad_w_query(self) -> Array:
        return self[1]

    @property
    def grad_w_key(self) -> Array:
        return self[2]

    @property
    def grad_w_value(self) -> Array:
        return self[3]

    def __repr__(self) -> str:
        return (f"QkvGradients(grad_input={self[0]!r}, grad_w_query={self[1]!r}, "
                f"grad_w_key={self[2]!r}, grad_w_value={self[3]!r})")


def weighted_loss(outputs: QkvForward, upstream: tuple[Array, Array, Array]) -> float:
    """``L = <Q,U_Q> + <K,U_K> + <V,U_V>``: the scalar whose gradient ``backward`` gives."""
    total = 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        for out, up in zip(outputs, upstream, strict=True):
            total += float(np.sum(out * up))
    return total
