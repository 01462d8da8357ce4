"""Multi-head attention wrong on purpose: RoPE turns the queries but not the keys.

    qkv check examples/implementations/wrong_mha_rope_query_only.py
"""

import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from numpy_rope_mha import (  # noqa: F401  (its backward: right for the right forward)
    _merge,
    _softmax,
    _split,
    _validate,
    mha_backward,
    rope,
    rope_reverse,
)


def mha_forward(x, w_query, w_key, w_value, w_output, heads, causal, rope_on, base, offset):
    _validate(x, w_query, w_key, w_value, w_output, heads, rope_on)
    q, k, v = (_split(x @ w, heads) for w in (w_query, w_key, w_value))
    if rope_on:
        q = rope(q, base, offset)  # the slip: k is not turned
    size = x.shape[2] // heads
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(size)  # [B,H,T,T]
    tokens = x.shape[1]
    if causal:
        scores = np.where(np.triu(np.ones((tokens, tokens), dtype=bool), k=1), -np.inf, scores)
    weights = _softmax(scores)
    merged = _merge(weights @ v)
    return weights, merged, merged @ w_output
