"""Multi-head attention wrong on purpose (softmax-over-heads): the softmax normalises over the heads axis
(axis 1 of [B,H,T,T]) instead of over each query's keys.

    qkv check examples/implementations/wrong_mha_softmax_over_heads.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_rope_mha

numpy_rope_mha.BUG = "softmax-over-heads"
rope = numpy_rope_mha.rope
rope_reverse = numpy_rope_mha.rope_reverse
mha_forward = numpy_rope_mha.mha_forward
mha_backward = numpy_rope_mha.mha_backward
