"""Multi-head attention wrong on purpose: grad_input misses the value path.

    qkv check examples/implementations/wrong_mha_no_value_path.py

numpy_rope_mha.py with its ``BUG`` switch set to "no-value-path" (dV W_V^T left out of
dX): the forward is right, the slip is in the backward.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_rope_mha

numpy_rope_mha.BUG = "no-value-path"
rope = numpy_rope_mha.rope
rope_reverse = numpy_rope_mha.rope_reverse
mha_forward = numpy_rope_mha.mha_forward
mha_backward = numpy_rope_mha.mha_backward
