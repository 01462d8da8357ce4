"""Multi-head attention wrong on purpose: the heads are merged strided, not side by side.

    qkv check examples/implementations/wrong_mha_merge_strided.py

The split is right (head ``h`` takes columns ``h*d_h .. h*d_h + d_h - 1``), but the merge
transposes to ``[B, T, d_h, H]`` before reshaping, so head ``h``'s column ``j`` lands at
``j*H + h``: W_O then reads each head's values in the wrong rows. The backward is
numpy_rope_mha's, right.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_rope_mha
from numpy_rope_mha import _scale, _softmax, _split, _validate, rope, rope_reverse  # noqa: F401

mha_backward = numpy_rope_mha.mha_backward


def mha_forward(x, w_query, w_key, w_value, w_output, heads, causal, rope_on, base, offset):
    _validate(x, w_query, w_key, w_value, w_output, heads, rope_on)
    q, k, v = (_split(x @ w, heads) for w in (w_query, w_key, w_value))  # [B,H,T,d_h]
    if rope_on:
        q, k = rope(q, base, offset), rope(k, base, offset)
    scores = q @ np.swapaxes(k, -1, -2) / _scale(x.shape[2] // heads)  # [B,H,T,T]
    if causal:
        tokens = x.shape[1]
        scores = np.where(np.triu(np.ones((tokens, tokens), dtype=bool), k=1), -np.inf, scores)
    weights = _softmax(scores)
    heads_out = weights @ v  # [B,H,T,d_h]
    batch, _, tokens, size = heads_out.shape
    merged = heads_out.transpose(0, 2, 3, 1).reshape(batch, tokens, size * heads)  # the slip
    return weights, merged, merged @ w_output
