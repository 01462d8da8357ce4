"""Multi-head attention wrong on purpose: the causal mask is applied after the softmax.

    qkv check examples/implementations/wrong_mha_mask_after_softmax.py

The softmax runs over every key, then the later keys' weights are set to 0: the rows no
longer sum to 1, and an earlier position's output still depends on the later keys'
scores. It is numpy_rope_mha.py with its ``BUG`` switch set to "mask-after-softmax", a
slip of the forward alone: the backward is right.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_rope_mha

numpy_rope_mha.BUG = "mask-after-softmax"
rope = numpy_rope_mha.rope
rope_reverse = numpy_rope_mha.rope_reverse
mha_forward = numpy_rope_mha.mha_forward
mha_backward = numpy_rope_mha.mha_backward
