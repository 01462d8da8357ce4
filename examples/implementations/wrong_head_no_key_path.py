"""A head wrong on purpose (no-key-path): its backward's grad_input misses the key path
(dX = dQ W_Q^T + dV W_V^T; dK W_K^T is left out).

    qkv check examples/implementations/wrong_head_no_key_path.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_head

numpy_head.BUG = "no-key-path"
head_forward = numpy_head.head_forward
head_backward = numpy_head.head_backward
forward = numpy_head.forward  # the projections too (right)
backward = numpy_head.backward
