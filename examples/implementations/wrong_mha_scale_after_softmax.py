"""Multi-head attention wrong on purpose: the scores are scaled after the softmax.

    qkv check examples/implementations/wrong_mha_scale_after_softmax.py

numpy_rope_mha.py with its ``BUG`` switch set to "scale-after-softmax": the slip is in the forward,
and the backward recomputes the same wrong forward.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_rope_mha

numpy_rope_mha.BUG = "scale-after-softmax"
rope = numpy_rope_mha.rope
rope_reverse = numpy_rope_mha.rope_reverse
mha_forward = numpy_rope_mha.mha_forward
mha_backward = numpy_rope_mha.mha_backward
