"""The projections wrong on purpose: each weight gradient is averaged over the B*T rows
(np.mean-style) instead of summed: X^T dY / (B*T).

    qkv check examples/implementations/wrong_projections_dw_mean.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from numpy_qkv import forward, validate  # noqa: F401


def backward(x, w_query, w_key, w_value, grad_query, grad_key, grad_value):
    batch, tokens, d_model, d_head = validate(x, w_query, w_key, w_value)
    for grad in (grad_query, grad_key, grad_value):
        if grad.shape != (batch, tokens, d_head):
            raise ValueError(f"upstream gradient has shape {grad.shape}")
    rows = x.reshape(batch * tokens, d_model)
    grad_input = grad_query @ w_query.T + grad_key @ w_key.T + grad_value @ w_value.T
    count = max(batch * tokens, 1)
    grad_w = [rows.T @ g.reshape(batch * tokens, d_head) / count  # the slip: a mean
              for g in (grad_query, grad_key, grad_value)]
    return (grad_input, *grad_w)
