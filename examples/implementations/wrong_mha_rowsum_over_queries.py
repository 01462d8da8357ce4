"""Multi-head attention wrong on purpose: the softmax backward's row-sum term sums over
the query axis.

``dZ = A * (dA - sum_j dA A)`` sums over each query's keys (the last axis); this one
sums over the queries (axis -2). The rest is numpy_rope_mha's, right.

    qkv check examples/implementations/wrong_mha_rowsum_over_queries.py
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_rope_mha


def _softmax_reverse(a, grad_a):
    return a * (grad_a - np.sum(grad_a * a, axis=-2, keepdims=True))  # the slip: axis -2


numpy_rope_mha._softmax_reverse = _softmax_reverse
rope, rope_reverse = numpy_rope_mha.rope, numpy_rope_mha.rope_reverse
mha_forward, mha_backward = numpy_rope_mha.mha_forward, numpy_rope_mha.mha_backward
