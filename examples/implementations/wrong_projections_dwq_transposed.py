"""The projections wrong on purpose: grad_w_query is returned transposed (dQ^T X,
[d_head, d_model], instead of X^T dQ).

    qkv check examples/implementations/wrong_projections_dwq_transposed.py
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
    grad_w_query = grad_query.reshape(batch * tokens, d_head).T @ rows  # the slip: dQ^T X
    grad_w_key, grad_w_value = (rows.T @ g.reshape(batch * tokens, d_head)
                                for g in (grad_key, grad_value))
    return grad_input, grad_w_query, grad_w_key, grad_w_value
