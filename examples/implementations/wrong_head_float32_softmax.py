"""A head wrong on purpose: its softmax runs in float32, so the tiny weights of rows
whose scores lie far apart underflow to 0. qkv check names it as precision, not as a
mask that hides the diagonal.

    qkv check examples/implementations/wrong_head_float32_softmax.py
"""

import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from numpy_head import head_backward  # noqa: F401  (the backward is float64 and right)
from numpy_qkv import backward, forward, validate  # noqa: F401


def head_forward(x, w_query, w_key, w_value, causal):
    validate(x, w_query, w_key, w_value)
    q, k, v = x @ w_query, x @ w_key, x @ w_value
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(w_query.shape[1])
    tokens = x.shape[1]
    z = scores
    if causal:
        z = np.where(np.triu(np.ones((tokens, tokens), dtype=bool), k=1), -np.inf, scores)
    z32 = z.astype(np.float32)  # the slip: the softmax in float32
    if z32.size:
        z32 = z32 - np.max(z32, axis=-1, keepdims=True)
    e = np.exp(z32)
    weights = (e / np.sum(e, axis=-1, keepdims=True)).astype(np.float64)
    return scores, weights, weights @ v
