"""A correct attention head in NumPy, with the projections.

    qkv check examples/implementations/numpy_head.py

``head_forward(x, w_query, w_key, w_value, causal) -> (scores, weights, output)``:
``scores = Q K^T / sqrt(d_k)`` before the mask ``[B,T,T]``, ``weights`` the row softmax
of the masked scores (row max subtracted, so large scores do not overflow), ``output =
weights V``. ``head_backward(..., causal, grad_output)`` gives ``(grad_input,
grad_w_query, grad_w_key, grad_w_value)``. ``BUG`` switches on one slip on purpose
(the ``wrong_head_*.py`` examples set it); ``""`` is the correct head.
"""

import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from numpy_qkv import backward, forward, validate  # noqa: F401  (the projections too)

BUG = ""


def _softmax(z):
    axis = -2 if BUG == "query-axis" else -1  # the slip: each key's column sums to 1
    if BUG == "global-max":
        z = z - np.max(z)  # the slip: rows far below the largest score underflow
    elif BUG != "unstable":
        z = z - np.max(z, axis=axis, keepdims=True)  # largest entry 0: exp never overflows
    with np.errstate(over="ignore", invalid="ignore"):  # the unstable slip gives NaN: qkv says so
        e = np.exp(z)
        return e / np.sum(e, axis=axis, keepdims=True)


def _forward(x, w_query, w_key, w_value, causal, from_forward=False):
    validate(x, w_query, w_key, w_value)
    q, k, v = x @ w_query, x @ w_key, x @ w_value  # [B,T,d] @ [d,h] -> [B,T,h]
    d_k = w_query.shape[1]
    scale = 1.0 if BUG == "unscaled" else math.sqrt(d_k)
    scores = q @ np.swapaxes(k, -1, -2) / scale  # [B,T,h] @ [B,h,T] -> [B,T,T]
    tokens = x.shape[1]
    above = np.triu(np.ones((tokens, tokens), dtype=bool), k=0 if BUG == "diagonal" else 1)
    z = np.where(above, -1e9, scores) if causal and BUG != "after-softmax" else scores
    weights = _softmax(z) if z.size else np.zeros(z.shape)
    if from_forward and BUG == "float32-softmax" and z.size:  # the slip, head_forward's alone:
        weights = _softmax(z.astype(np.float32)).astype(np.float64)  # tiny weights flushed to 0
    if causal and BUG == "after-softmax":
        weights = np.where(above, 0.0, weights)
    return q, k, v, weights, scores, weights @ v  # [B,T,T] @ [B,T,h] -> [B,T,h]


def head_forward(x, w_query, w_key, w_value, causal):
    _, _, _, weights, scores, output = _forward(x, w_query, w_key, w_value, causal, from_forward=True)
    return scores, weights, output


def head_backward(x, w_query, w_key, w_value, causal, grad_output):
    # The "ignores-mask" slip: the gradients of the unmasked head, whatever causal says.
    q, k, v, a, _, _ = _forward(x, w_query, w_key, w_value, causal and BUG != "ignores-mask")
    batch, tokens, d_model = x.shape
    d_k = w_query.shape[1]
    if grad_output.shape != (batch, tokens, w_value.shape[1]):
        raise ValueError(f"grad_output has shape {grad_output.shape}")
    grad_a = grad_output @ np.swapaxes(v, -1, -2)  # dA = dO V^T
    grad_v = (a if BUG == "dv-uses-a" else np.swapaxes(a, -1, -2)) @ grad_output  # A^T dO
    row_sum = 0.0 if BUG == "no-rowsum" else np.sum(grad_a * a, axis=-1, keepdims=True)
    scale = 1.0 if BUG == "backward-unscaled" else math.sqrt(d_k)  # the slip: 1/sqrt(d_k) forgotten
    grad_s = a * (grad_a - row_sum) / scale  # softmax reverse, then the scaling
    grad_q = grad_s @ k  # dQ = dS K
    grad_k = (grad_s if BUG == "dk-uses-ds" else np.swapaxes(grad_s, -1, -2)) @ q  # dS^T Q
    rows = x.reshape(batch * tokens, d_model)
    grads = (grad_q, grad_k, grad_v)
    grad_input = sum(g @ w.T for g, w in zip(grads, (w_query, w_key, w_value), strict=True))
    if BUG == "no-key-path":  # the slip: dX leaves out the key path dK W_K^T
        grad_input = grad_q @ w_query.T + grad_v @ w_value.T
    grad_w = [rows.T @ g.reshape(batch * tokens, g.shape[-1]) for g in grads]
    if BUG == "first-item" and batch:  # the slip: X[0]^T dY[0], the other items dropped
        grad_w = [x[0].T @ g[0] for g in grads]
    if BUG == "dwq-transposed":  # the slip: dQ^T X, [d_head, d_model]
        grad_w[0] = grad_w[0].T
    return (grad_input + np.zeros_like(x), *grad_w)
