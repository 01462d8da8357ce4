"""What the projections give: the forward outputs, the gradients, and the loss they belong to."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from qkvcli.core.arrays import Array


class QkvForward(NamedTuple):
    """The three projected views of the same batch and token positions."""

    query: Array
    key: Array
    value: Array


class QkvGradients(NamedTuple):
    """Reverse-mode gradients: the shared input's and each branch's own weight gradient.

    Named as everywhere in qkv (see ARCHITECTURE.md): ``grad_input`` is dL/dX, and
    ``grad_w_query`` is dL/dW_Q, never to be confused with the output ``query`` (Q) or
    the upstream ``grad_query`` (dL/dQ).
    """

    grad_input: Array
    grad_w_query: Array
    grad_w_key: Array
    grad_w_value: Array


def weighted_loss(outputs: QkvForward, upstream: tuple[Array, Array, Array]) -> float:
    """``L = <Q,U_Q> + <K,U_K> + <V,U_V>``: the scalar whose gradient ``backward`` gives."""
    total = 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        for out, up in zip(outputs, upstream, strict=True):
            total += float(np.sum(out * up))
    return total
