"""What one attention head gives: every intermediate of a forward and a reverse pass, and the loss.

Named as everywhere in qkv (:mod:`qkvcli.core.vocabulary`): the forward tensors are
``query``, ``key``, ``value``, ``scores``, ``scaled_scores``, ``weights``, ``output``;
each gradient is ``grad_`` and the tensor's name (``grad_query`` is dL/dQ), with
``grad_input`` for dL/dX, ``grad_w_query`` for dL/dW_Q and ``grad_b_query`` for dL/db_Q.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from qkvcli.core.arrays import Array


class AttentionForward(NamedTuple):
    """Every intermediate of one forward pass, in the order they are computed."""

    query: Array
    key: Array
    value: Array
    scores: Array
    scaled_scores: Array
    weights: Array
    output: Array


class AttentionGradients(NamedTuple):
    """The reverse pass: gradients from the output back to the input and parameters.

    In the order they are computed; a bias gradient is ``None`` when the head has no
    such bias.
    """

    grad_weights: Array
    grad_scaled_scores: Array
    grad_scores: Array
    grad_query: Array
    grad_key: Array
    grad_value: Array
    grad_input: Array
    grad_w_query: Array
    grad_w_key: Array
    grad_w_value: Array
    grad_b_query: Array | None
    grad_b_key: Array | None
    grad_b_value: Array | None


def output_loss(forward: AttentionForward, upstream: Array) -> float:
    """``L = <O, U>``: the scalar whose gradient the head's ``backward`` gives."""
    with np.errstate(over="ignore", invalid="ignore"):
        return float(np.sum(forward.output * upstream))
