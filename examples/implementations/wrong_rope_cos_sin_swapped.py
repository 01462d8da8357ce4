"""RoPE or multi-head attention wrong on purpose (cos-sin-swapped): qkv check names it.

    qkv check examples/implementations/wrong_rope_cos_sin_swapped.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_rope_mha

numpy_rope_mha.BUG = "cos-sin-swapped"
rope = numpy_rope_mha.rope
rope_reverse = numpy_rope_mha.rope_reverse
mha_forward = numpy_rope_mha.mha_forward
mha_backward = numpy_rope_mha.mha_backward
