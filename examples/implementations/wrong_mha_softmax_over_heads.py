"""Multi-head attention wrong on purpose: the softmax normalises over the heads axis
(axis 1 of [B,H,T,T]) instead of over each query's keys.

    qkv check examples/implementations/wrong_mha_softmax_over_heads.py
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
        q, k = rope(q, base, offset), rope(k, base, offset)
    size = x.shape[2] // heads
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(size)  # [B,H,T,T]
    tokens = x.shape[1]
    if causal:
        scores = np.where(np.triu(np.ones((tokens, tokens), dtype=bool), k=1), -np.inf, scores)
    with np.errstate(invalid="ignore"):  # a key every head masks: -inf - -inf
        weights = np.exp(scores - np.max(scores, axis=1, keepdims=True))
        weights = weights / np.sum(weights, axis=1, keepdims=True)  # the slip: axis=1
    merged = _merge(weights @ v)
    return weights, merged, merged @ w_output
