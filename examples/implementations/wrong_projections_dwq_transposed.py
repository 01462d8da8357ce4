"""The projections wrong on purpose (dwq-transposed): grad_w_query is returned transposed
(dQ^T X, [d_head, d_model], instead of X^T dQ).

    qkv check examples/implementations/wrong_projections_dwq_transposed.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_qkv

numpy_qkv.BUG = "dwq-transposed"
forward = numpy_qkv.forward
backward = numpy_qkv.backward
