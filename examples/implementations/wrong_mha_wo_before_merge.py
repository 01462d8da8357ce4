"""RoPE or multi-head attention wrong on purpose (wo-before-merge): qkv check names it.

    qkv check examples/implementations/wrong_mha_wo_before_merge.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_rope_mha

numpy_rope_mha.BUG = "wo-before-merge"
rope = numpy_rope_mha.rope
rope_reverse = numpy_rope_mha.rope_reverse
mha_forward = numpy_rope_mha.mha_forward
mha_backward = numpy_rope_mha.mha_backward
