"""WRONG on purpose (no-value-path): dX forgets the value path (caught by ``reverse``:
"grad_input misses the value path").

dX must add all three paths, dQ W_Q^T + dK W_K^T + dV W_V^T; this one stops after two.

    qkv check examples/implementations/wrong_no_value_path.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_qkv

numpy_qkv.BUG = "no-value-path"
forward = numpy_qkv.forward
backward = numpy_qkv.backward
