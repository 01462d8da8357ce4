"""A head wrong on purpose: its softmax normalises over the batch axis, not over each query's keys.

    qkv check examples/implementations/wrong_head_softmax_over_batch.py

``axis=0`` where ``axis=-1`` belongs: each (query, key) cell is shared out among the
batch items. Its causal mask is numpy_head's ``-1e9``, so a hidden cell, hidden in every
batch item alike, gets ``1/B`` (with ``-inf`` it would be 0/0): qkv names the slip on
causal fixtures as on the others. The backward is numpy_head's, right.
"""

import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_head
from numpy_qkv import backward, forward, validate  # noqa: F401  (the projections too)

head_backward = numpy_head.head_backward


def head_forward(x, w_query, w_key, w_value, causal):
    validate(x, w_query, w_key, w_value)
    q, k, v = x @ w_query, x @ w_key, x @ w_value  # [B,T,d] @ [d,h] -> [B,T,h]
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(w_query.shape[1])  # [B,T,T]
    tokens = x.shape[1]
    later = np.triu(np.ones((tokens, tokens), dtype=bool), k=1)
    z = np.where(later, -1e9, scores) if causal else scores
    if not z.size:
        return scores, np.zeros(z.shape), np.zeros(v.shape)
    e = np.exp(z - np.max(z, axis=0, keepdims=True))  # the slip: axis=0, the batch
    weights = e / np.sum(e, axis=0, keepdims=True)
    return scores, weights, weights @ v
