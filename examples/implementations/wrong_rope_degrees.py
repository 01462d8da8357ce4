"""RoPE wrong on purpose (degrees): the angles (offset + t) base^(-2i/d), which are radians,
are converted as if they were degrees (np.radians), in the rotation and in the layer.

    qkv check examples/implementations/wrong_rope_degrees.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_rope_mha

numpy_rope_mha.BUG = "degrees"
rope = numpy_rope_mha.rope
rope_reverse = numpy_rope_mha.rope_reverse
mha_forward = numpy_rope_mha.mha_forward
mha_backward = numpy_rope_mha.mha_backward
