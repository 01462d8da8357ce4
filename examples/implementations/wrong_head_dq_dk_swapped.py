"""A head wrong on purpose: its backward makes dQ and dK each with the other's operand.

    qkv check examples/implementations/wrong_head_dq_dk_swapped.py

From ``S = Q K^T``, ``dQ = dS K`` and ``dK = dS^T Q``; this one writes ``dQ = dS Q`` and
``dK = dS^T K``, the same shapes when Q and K have one width. The forward is numpy_head's,
right.
"""

import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_head
from numpy_qkv import backward, forward  # noqa: F401  (the projections too)

head_forward = numpy_head.head_forward


def head_backward(x, w_query, w_key, w_value, causal, grad_output):
    q, k, v, a, _, _ = numpy_head._forward(x, w_query, w_key, w_value, causal)
    batch, tokens, d_model = x.shape
    if grad_output.shape != (batch, tokens, w_value.shape[1]):
        raise ValueError(f"grad_output has shape {grad_output.shape}")
    grad_a = grad_output @ np.swapaxes(v, -1, -2)  # dA = dO V^T
    grad_v = np.swapaxes(a, -1, -2) @ grad_output  # dV = A^T dO
    row_sum = np.sum(grad_a * a, axis=-1, keepdims=True)
    grad_s = a * (grad_a - row_sum) / math.sqrt(w_query.shape[1])
    grad_q = grad_s @ q  # the slip: dS K
    grad_k = np.swapaxes(grad_s, -1, -2) @ k  # the slip: dS^T Q
    grads = (grad_q, grad_k, grad_v)
    grad_input = sum(g @ w.T for g, w in zip(grads, (w_query, w_key, w_value), strict=True))
    rows = x.reshape(batch * tokens, d_model)
    grad_w = [rows.T @ g.reshape(batch * tokens, g.shape[-1]) for g in grads]
    return (grad_input + np.zeros_like(x), *grad_w)
