"""Multi-head attention wrong on purpose: its backward recomputes the weights without
the causal mask.

    qkv check examples/implementations/wrong_mha_backward_ignores_mask.py
"""

import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from numpy_rope_mha import _forward, _merge, _split, mha_forward, rope, rope_reverse  # noqa: F401


def mha_backward(x, w_query, w_key, w_value, w_output, heads, causal, rope_on, base, offset,
                 grad_output):
    q, k, v, a, _, merged, _ = _forward(x, w_query, w_key, w_value, w_output, heads,
                                        False, rope_on, base, offset)
    if grad_output.shape != x.shape:
        raise ValueError(f"grad_output has shape {grad_output.shape}")
    width = x.shape[2]
    size = width // heads
    rows = x.reshape(-1, width)
    grad_w_output = merged.reshape(-1, width).T @ grad_output.reshape(-1, width)
    grad_heads = _split(grad_output @ w_output.T, heads)  # dO per head
    grad_a = grad_heads @ np.swapaxes(v, -1, -2)
    grad_v = np.swapaxes(a, -1, -2) @ grad_heads
    grad_s = a * (grad_a - np.sum(grad_a * a, axis=-1, keepdims=True)) / math.sqrt(size)
    grad_q, grad_k = grad_s @ k, np.swapaxes(grad_s, -1, -2) @ q
    if rope_on:
        grad_q, grad_k = rope_reverse(grad_q, base, offset), rope_reverse(grad_k, base, offset)
    grads = [_merge(g) for g in (grad_q, grad_k, grad_v)]
    grad_input = sum(g @ w.T for g, w in zip(grads, (w_query, w_key, w_value), strict=True))
    grad_w = [rows.T @ g.reshape(-1, width) for g in grads]
    return (grad_input + np.zeros_like(x), *grad_w, grad_w_output)
