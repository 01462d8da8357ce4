"""The projections wrong on purpose: the key and value weight gradients are swapped.

    qkv check examples/implementations/wrong_projections_dwk_dwv_swapped.py

Each ``dW = X^T dY`` belongs to its own branch; this one returns ``X^T dV`` as dW_K and
``X^T dK`` as dW_V. The forward and grad_input are numpy_qkv's, right.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_qkv

forward = numpy_qkv.forward


def backward(x, w_query, w_key, w_value, grad_query, grad_key, grad_value):
    grad_input, grad_w_query, grad_w_key, grad_w_value = numpy_qkv.backward(
        x, w_query, w_key, w_value, grad_query, grad_key, grad_value)
    return grad_input, grad_w_query, grad_w_value, grad_w_key  # the slip: dW_K, dW_V swapped
