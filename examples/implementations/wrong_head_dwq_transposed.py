"""A head wrong on purpose (dwq-transposed): its backward returns grad_w_query transposed
(dQ^T X, [d_head, d_model], instead of X^T dQ).

    qkv check examples/implementations/wrong_head_dwq_transposed.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_head

numpy_head.BUG = "dwq-transposed"
head_forward = numpy_head.head_forward
head_backward = numpy_head.head_backward
forward = numpy_head.forward  # the projections too (right)
backward = numpy_head.backward
