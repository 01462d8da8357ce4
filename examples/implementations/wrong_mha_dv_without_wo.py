"""Multi-head attention wrong on purpose: dV is made from dY, W_O left out of its path.

    qkv check examples/implementations/wrong_mha_dv_without_wo.py

numpy_rope_mha.py with its ``BUG`` switch set to "dv-without-wo" (the output
projection's reverse skipped on the value path): the forward is right, the slip is in
the backward.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_rope_mha

numpy_rope_mha.BUG = "dv-without-wo"
rope = numpy_rope_mha.rope
rope_reverse = numpy_rope_mha.rope_reverse
mha_forward = numpy_rope_mha.mha_forward
mha_backward = numpy_rope_mha.mha_backward
