"""Multi-head attention wrong on purpose: dV is made from dY, W_O left out of its path.

    qkv check examples/implementations/wrong_mha_dv_without_wo.py

Each head's ``dO`` is its part of ``dC = dY W_O^T``; this one gives dV the heads of
``dY`` itself (dA, and so dQ and dK, stay right). The rest is numpy_rope_mha's, right.
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
    grad_v = np.swapaxes(a, -1, -2) @ _split(grad_output, heads)  # the slip: dY, not dC
    grad_s = _softmax_reverse(a, grad_a) / _scale(width // heads)
    grad_q, grad_k = grad_s @ k, np.swapaxes(grad_s, -1, -2) @ q
    if rope_on:
        grad_q, grad_k = rope_reverse(grad_q, base, offset), rope_reverse(grad_k, base, offset)
    grads = [_merge(g) for g in (grad_q, grad_k, grad_v)]
    grad_input = sum(g @ w.T for g, w in zip(grads, (w_query, w_key, w_value), strict=True))
    rows = x.reshape(-1, width)
    grad_w = [rows.T @ g.reshape(-1, width) for g in grads]
    return (grad_input + np.zeros_like(x), *grad_w, grad_w_output)
