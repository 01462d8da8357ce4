"""A head wrong on purpose: its backward forgets the 1/sqrt(d_k) of the scores, which
its forward applies.

    qkv check examples/implementations/wrong_head_backward_unscaled.py
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from numpy_head import _forward, head_forward  # noqa: F401
from numpy_qkv import backward, forward  # noqa: F401  (the projections too)


def head_backward(x, w_query, w_key, w_value, causal, grad_output):
    q, k, v, a, _, _ = _forward(x, w_query, w_key, w_value, causal)
    batch, tokens, d_model = x.shape
    if grad_output.shape != (batch, tokens, w_value.shape[1]):
        raise ValueError(f"grad_output has shape {grad_output.shape}")
    grad_a = grad_output @ np.swapaxes(v, -1, -2)
    grad_v = np.swapaxes(a, -1, -2) @ grad_output
    grad_s = a * (grad_a - np.sum(grad_a * a, axis=-1, keepdims=True))  # the slip: no / sqrt(d_k)
    grad_q, grad_k = grad_s @ k, np.swapaxes(grad_s, -1, -2) @ q
    grad_input = grad_q @ w_query.T + grad_k @ w_key.T + grad_v @ w_value.T
    rows = x.reshape(batch * tokens, d_model)
    grad_w = [rows.T @ g.reshape(batch * tokens, g.shape[-1]) for g in (grad_q, grad_k, grad_v)]
    return (grad_input + np.zeros_like(x), *grad_w)
