"""Multi-head attention wrong on purpose: the causal mask is applied after the softmax.

    qkv check examples/implementations/wrong_mha_mask_after_softmax.py

The softmax runs over every key, then the later keys' weights are set to 0: the rows no
longer sum to 1, and an earlier position's output still depends on the later keys'
scores. The backward is numpy_rope_mha's, right.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_rope_mha
from numpy_rope_mha import _merge, _scale, _softmax, _split, _validate, rope, rope_reverse  # noqa: F401

mha_backward = numpy_rope_mha.mha_backward


def mha_forward(x, w_query, w_key, w_value, w_output, heads, causal, rope_on, base, offset):
    _validate(x, w_query, w_key, w_value, w_output, heads, rope_on)
    q, k, v = (_split(x @ w, heads) for w in (w_query, w_key, w_value))  # [B,H,T,d_h]
    if rope_on:
        q, k = rope(q, base, offset), rope(k, base, offset)
    scores = q @ np.swapaxes(k, -1, -2) / _scale(x.shape[2] // heads)  # [B,H,T,T]
    weights = _softmax(scores)
    if causal:
        tokens = x.shape[1]
        later = np.triu(np.ones((tokens, tokens), dtype=bool), k=1)
        weights = np.where(later, 0.0, weights)  # the slip: after the softmax, not before
    merged = _merge(weights @ v)
    return weights, merged, merged @ w_output
