"""Multi-head attention wrong on purpose: grad_input's paths use W, not W^T.

    qkv check examples/implementations/wrong_mha_dx_untransposed.py

numpy_rope_mha.py with its ``BUG`` switch set to "dx-untransposed" (g W where the
reverse of X W is g W^T): the forward is right, the slip is in the backward.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_rope_mha

numpy_rope_mha.BUG = "dx-untransposed"
rope = numpy_rope_mha.rope
rope_reverse = numpy_rope_mha.rope_reverse
mha_forward = numpy_rope_mha.mha_forward
mha_backward = numpy_rope_mha.mha_backward
