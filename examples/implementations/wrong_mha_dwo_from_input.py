"""Multi-head attention wrong on purpose: dW_O is X^T dY.

    qkv check examples/implementations/wrong_mha_dwo_from_input.py

numpy_rope_mha.py with its ``BUG`` switch set to "dwo-from-input" (the layer's input
where the merged heads belong): the forward is right, the slip is in the backward.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_rope_mha

numpy_rope_mha.BUG = "dwo-from-input"
rope = numpy_rope_mha.rope
rope_reverse = numpy_rope_mha.rope_reverse
mha_forward = numpy_rope_mha.mha_forward
mha_backward = numpy_rope_mha.mha_backward
