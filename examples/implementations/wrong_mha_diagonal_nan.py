"""Multi-head attention wrong on purpose: its causal mask hides the diagonal too, with -inf.

    qkv check examples/implementations/wrong_mha_diagonal_nan.py

Query 0 then sees no key at all, and the softmax of a row that is -inf everywhere is
0/0: the first row of every head's weights is NaN. qkv says the result holds NaN, and
names the slip all the same, as it does for the same mask written with -1e9. It is
numpy_rope_mha.py with its ``BUG`` switch set to "diagonal-nan", a slip of the forward
alone: the backward is right.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_rope_mha

numpy_rope_mha.BUG = "diagonal-nan"
rope = numpy_rope_mha.rope
rope_reverse = numpy_rope_mha.rope_reverse
mha_forward = numpy_rope_mha.mha_forward
mha_backward = numpy_rope_mha.mha_backward
