"""Multi-head attention wrong on purpose: the output is mixed with the unmasked weights.

    qkv check examples/implementations/wrong_mha_output_unmasked.py

numpy_rope_mha.py with its ``BUG`` switch set to "output-unmasked": the slip is in the forward,
and the backward recomputes the same wrong forward.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_rope_mha

numpy_rope_mha.BUG = "output-unmasked"
rope = numpy_rope_mha.rope
rope_reverse = numpy_rope_mha.rope_reverse
mha_forward = numpy_rope_mha.mha_forward
mha_backward = numpy_rope_mha.mha_backward
