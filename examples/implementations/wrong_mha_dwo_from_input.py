"""Multi-head attention wrong on purpose: dW_O is X^T dY.

    qkv check examples/implementations/wrong_mha_dwo_from_input.py

The output projection's input is the merged heads, so ``dW_O = merged^T dY``; this one
takes the layer's input X instead (the same shape with square weights). The rest is
numpy_rope_mha's, right.
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
    q, k, v, a, _, _merged, _ = _forward(x, w_query, w_key, w_value, w_output, heads, causal,
                                        rope_on, base, offset)
    if grad_output.shape != x.shape:
        raise ValueError(f"grad_output has shape {grad_output.shape}")
    width = x.shape[2]
    grad_w_output = x.reshape(-1, width).T @ grad_output.reshape(-1, width)  # the slip: X
    grad_heads = _split(grad_output @ w_output.T, heads)  # dC split per head
    grad_a = grad_heads @ np.swapaxes(v, -1, -2)
    grad_v = np.swapaxes(a, -1, -2) @ grad_heads
    grad_s = _softmax_reverse(a, grad_a) / _scale(width // heads)
    grad_q, grad_k = grad_s @ k, np.swapaxes(grad_s, -1, -2) @ q
    if rope_on:
        grad_q, grad_k = rope_reverse(grad_q, base, offset), rope_reverse(grad_k, base, offset)
    grads = [_merge(g) for g in (grad_q, grad_k, grad_v)]
    grad_input = sum(g @ w.T for g, w in zip(grads, (w_query, w_key, w_value), strict=True))
    rows = x.reshape(-1, width)
    grad_w = [rows.T @ g.reshape(-1, width) for g in grads]
    return (grad_input + np.zeros_like(x), *grad_w, grad_w_output)
