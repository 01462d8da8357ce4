"""Multi-head attention wrong on purpose: every path of grad_input goes back through W_Q.

    qkv check examples/implementations/wrong_mha_dx_through_wq.py

numpy_rope_mha.py with its ``BUG`` switch set to "dx-through-wq" ((dQ + dK + dV) W_Q^T,
one weight for all three paths): the forward is right, the slip is in the backward.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_rope_mha

numpy_rope_mha.BUG = "dx-through-wq"
rope = numpy_rope_mha.rope
rope_reverse = numpy_rope_mha.rope_reverse
mha_forward = numpy_rope_mha.mha_forward
mha_backward = numpy_rope_mha.mha_backward
