"""Multi-head attention wrong on purpose (backward-no-mask): its backward recomputes the weights without
the causal mask.

    qkv check examples/implementations/wrong_mha_backward_ignores_mask.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_rope_mha

numpy_rope_mha.BUG = "backward-no-mask"
rope = numpy_rope_mha.rope
rope_reverse = numpy_rope_mha.rope_reverse
mha_forward = numpy_rope_mha.mha_forward
mha_backward = numpy_rope_mha.mha_backward
