"""WRONG on purpose: computes in float32 (caught by ``forward`` on the random fixtures).

float32 keeps about 7 significant digits; the chapter asks for float64, and the
default tolerance 1e-9 cannot be met in float32 by values that use all 53 bits.
"""

import numpy as np
from numpy_qkv import validate


def forward(x, w_query, w_key, w_value):
    validate(x, w_query, w_key, w_value)
    x32 = x.astype(np.float32)
    return tuple(x32 @ w.astype(np.float32) for w in (w_query, w_key, w_value))


def backward(x, w_query, w_key, w_value, grad_query, grad_key, grad_value):
    batch, tokens, d_model, d_head = validate(x, w_query, w_key, w_value)
    f32 = [a.astype(np.float32) for a in (x, w_query, w_key, w_value,
                                          grad_query, grad_key, grad_value)]
    x32, wq, wk, wv, gq, gk, gv = f32
    rows = x32.reshape(batch * tokens, d_model)
    grad_input = gq @ wq.T + gk @ wk.T + gv @ wv.T
    return (grad_input, *(rows.T @ g.reshape(batch * tokens, d_head) for g in (gq, gk, gv)))
