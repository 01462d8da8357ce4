"""Multi-head attention wrong on purpose (no-output-projection): the output projection W_O is forgotten
(output = merged).

    qkv check examples/implementations/wrong_mha_no_output_projection.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_rope_mha

numpy_rope_mha.BUG = "no-output-projection"
rope = numpy_rope_mha.rope
rope_reverse = numpy_rope_mha.rope_reverse
mha_forward = numpy_rope_mha.mha_forward
mha_backward = numpy_rope_mha.mha_backward
