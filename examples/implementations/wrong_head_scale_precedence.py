"""A head wrong on purpose: ``scores / d_k ** 1/2``, which Python reads as ``(scores / d_k) / 2``.

    qkv check examples/implementations/wrong_head_scale_precedence.py

``**`` binds tighter than ``/``, and ``/`` goes left to right: the scores are divided by
``2 d_k``, not by ``sqrt(d_k)``. The backward is numpy_head's, right.
"""

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
    d_k = w_query.shape[1]
    scores = q @ np.swapaxes(k, -1, -2) / d_k ** 1/2  # the slip: meant d_k ** (1/2)
    tokens = x.shape[1]
    later = np.triu(np.ones((tokens, tokens), dtype=bool), k=1)
    z = np.where(later, -1e9, scores) if causal else scores
    if not z.size:
        return scores, np.zeros(z.shape), np.zeros(v.shape)
    e = np.exp(z - np.max(z, axis=-1, keepdims=True))
    weights = e / np.sum(e, axis=-1, keepdims=True)
    return scores, weights, weights @ v
