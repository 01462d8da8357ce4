"""WRONG on purpose (key-path-uses-query-weight): dX sends the key path back through W_Q
(caught by ``reverse``: "grad_input's key path uses W_Q instead of W_K").

dX must add dQ W_Q^T + dK W_K^T + dV W_V^T; this one computes dK W_Q^T for the key path,
a copy-paste slip that the forward (and every weight gradient) never shows.

    qkv check examples/implementations/wrong_key_path_uses_query_weight.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_qkv

numpy_qkv.BUG = "key-path-uses-query-weight"
forward = numpy_qkv.forward
backward = numpy_qkv.backward
