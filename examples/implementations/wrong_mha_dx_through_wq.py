"""Multi-head attention wrong on purpose: every path of grad_input goes back through W_Q.

    qkv check examples/implementations/wrong_mha_dx_through_wq.py

The reverse of ``Q = X W_Q``, ``K = X W_K``, ``V = X W_V`` into X is
``dQ W_Q^T + dK W_K^T + dV W_V^T``; this one sums the three gradients first and sends
them back through W_Q alone. The forward and the weight gradients are numpy_rope_mha's,
right.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_rope_mha
from numpy_rope_mha import _forward, _merge, _scale, _softmax_reverse, _split

rope, rope_reverse = numpy_rope_mha.rope, numpy_rope_mha.rope_reverse
mha_forward = numpy_rope_mha.mha_forward


def mha_backward(x, w_query, w_key, w_value, w_output, heads, causal, rope_on, base, offset,
                 grad_output):
    q, k, v, a, _, merged, _ = _forward(x, w_query, w_key, w_value, w_output, heads, causal,
                                        rope_on, base, offset)
    if grad_output.shape != x.shape:
        raise ValueError(f"grad_output has shape {grad_output.shape}")
    width = x.shape[2]
    grad_w_output = merged.reshape(-1, width).T @ grad_output.reshape(-1, width)
    grad_heads = _split(grad_output @ w_output.T, heads)  # dC split per head
    grad_a = grad_heads @ np.swapaxes(v, -1, -2)
    grad_v = np.swapaxes(a, -1, -2) @ grad_heads
    grad_s = _softmax_reverse(a, grad_a) / _scale(width // heads)
    grad_q, grad_k = grad_s @ k, np.swapaxes(grad_s, -1, -2) @ q
    if rope_on:
        grad_q, grad_k = rope_reverse(grad_q, base, offset), rope_reverse(grad_k, base, offset)
    grads = [_merge(g) for g in (grad_q, grad_k, grad_v)]
    # the slip: (dQ + dK + dV) W_Q^T, one weight for all three paths
    grad_input = (grads[0] + grads[1] + grads[2]) @ w_query.T
    rows = x.reshape(-1, width)
    grad_w = [rows.T @ g.reshape(-1, width) for g in grads]
    return (grad_input + np.zeros_like(x), *grad_w, grad_w_output)
