"""The projections wrong on purpose: grad_input sends all three paths back through W_Q.

    qkv check examples/implementations/wrong_projections_dx_through_wq.py

The reverse into the shared input is ``dQ W_Q^T + dK W_K^T + dV W_V^T``; this one sums
the three upstream gradients first, ``(dQ + dK + dV) W_Q^T``. The forward and the weight
gradients are numpy_qkv's, right.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_qkv

forward = numpy_qkv.forward


def backward(x, w_query, w_key, w_value, grad_query, grad_key, grad_value):
    _, grad_w_query, grad_w_key, grad_w_value = numpy_qkv.backward(
        x, w_query, w_key, w_value, grad_query, grad_key, grad_value)
    grad_input = (grad_query + grad_key + grad_value) @ w_query.T  # the slip: one weight
    return grad_input, grad_w_query, grad_w_key, grad_w_value
