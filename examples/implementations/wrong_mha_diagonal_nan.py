"""Multi-head attention wrong on purpose: its causal mask hides the diagonal too, with -inf.

    qkv check examples/implementations/wrong_mha_diagonal_nan.py

Query 0 then sees no key at all, and the softmax of a row that is -inf everywhere is
0/0: the first row of every head's weights is NaN. qkv says the result holds NaN, and
names the slip all the same, as it does for the same mask written with -1e9. A slip of
the forward alone: the backward is numpy_rope_mha's, right.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_rope_mha
from numpy_rope_mha import _merge, _scale, _split, _validate, rope, rope_reverse  # noqa: F401

mha_backward = numpy_rope_mha.mha_backward


def mha_forward(x, w_query, w_key, w_value, w_output, heads, causal, rope_on, base, offset):
    _validate(x, w_query, w_key, w_value, w_output, heads, rope_on)
    q, k, v = (_split(x @ w, heads) for w in (w_query, w_key, w_value))  # [B,H,T,d_h]
    if rope_on:
        q, k = rope(q, base, offset), rope(k, base, offset)
    scores = q @ np.swapaxes(k, -1, -2) / _scale(x.shape[2] // heads)  # [B,H,T,T]
    if causal:
        tokens = x.shape[1]
        hidden = np.triu(np.ones((tokens, tokens), dtype=bool), k=0)  # the slip: k=0, not 1
        scores = np.where(hidden, -np.inf, scores)
    if scores.size:
        with np.errstate(invalid="ignore"):  # -inf - -inf: the row query 0 cannot fill
            e = np.exp(scores - np.max(scores, axis=-1, keepdims=True))
            weights = e / np.sum(e, axis=-1, keepdims=True)
    else:
        weights = np.zeros(scores.shape)
    merged = _merge(weights @ v)
    return weights, merged, merged @ w_output
