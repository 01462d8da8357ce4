"""A head wrong on purpose: its causal mask hides the diagonal too, with -inf.

    qkv check examples/implementations/wrong_head_diagonal_nan.py

Query 0 then sees no key, and the softmax of a row that is -inf everywhere is 0/0: the
first row of the weights is NaN. qkv says the result holds NaN and names the slip, as it
names wrong_head_diagonal.py's, whose mask is -1e9. The backward is numpy_head's, right.
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
    hidden = np.triu(np.ones((tokens, tokens), dtype=bool), k=0)  # the slip: k=0, not 1
    z = np.where(hidden, -np.inf, scores) if causal else scores
    if not z.size:
        return scores, np.zeros(z.shape), np.zeros(v.shape)
    with np.errstate(invalid="ignore"):  # -inf - -inf: the row query 0 cannot fill
        e = np.exp(z - np.max(z, axis=-1, keepdims=True))
        weights = e / np.sum(e, axis=-1, keepdims=True)
    return scores, weights, weights @ v
