"""Multi-head attention wrong on purpose (dv-uses-a): dV = A dO instead of A^T dO.

    qkv check examples/implementations/wrong_mha_dv_uses_a.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_rope_mha

numpy_rope_mha.BUG = "dv-uses-a"
rope = numpy_rope_mha.rope
rope_reverse = numpy_rope_mha.rope_reverse
mha_forward = numpy_rope_mha.mha_forward
mha_backward = numpy_rope_mha.mha_backward
