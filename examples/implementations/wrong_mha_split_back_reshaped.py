"""Multi-head attention wrong on purpose: the backward splits dC into the heads with a bare reshape.

    qkv check examples/implementations/wrong_mha_split_back_reshaped.py

numpy_rope_mha.py with its ``BUG`` switch set to "split-back-reshaped" ([B,T,d] read as
[B,H,T,d_h] with no transpose): the forward is right, the slip is in the backward.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_rope_mha

numpy_rope_mha.BUG = "split-back-reshaped"
rope = numpy_rope_mha.rope
rope_reverse = numpy_rope_mha.rope_reverse
mha_forward = numpy_rope_mha.mha_forward
mha_backward = numpy_rope_mha.mha_backward
