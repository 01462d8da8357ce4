"""Multi-head attention wrong on purpose: the softmax subtracts the maximum over the
query axis.

Subtracting each row's own maximum leaves the softmax unchanged; subtracting a column's
(over the queries) gives each key of a row its own constant, and the weights change.
The rest is numpy_rope_mha's, right.

    qkv check examples/implementations/wrong_mha_softmax_max_over_queries.py
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_rope_mha


def _softmax(scores):
    if not scores.size:
        return np.zeros(scores.shape)
    e = np.exp(scores - np.max(scores, axis=-2, keepdims=True))  # the slip: axis -2
    return e / np.sum(e, axis=-1, keepdims=True)


numpy_rope_mha._softmax = _softmax
rope, rope_reverse = numpy_rope_mha.rope, numpy_rope_mha.rope_reverse
mha_forward, mha_backward = numpy_rope_mha.mha_forward, numpy_rope_mha.mha_backward
