"""The projections wrong on purpose (dw-mean): each weight gradient is averaged over the
B*T rows (np.mean-style) instead of summed: X^T dY / (B*T).

    qkv check examples/implementations/wrong_projections_dw_mean.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_qkv

numpy_qkv.BUG = "dw-mean"
forward = numpy_qkv.forward
backward = numpy_qkv.backward
