"""RoPE wrong on purpose (batch-positions): each position is read off the batch axis
(x.shape[0]) instead of the token axis, so every token of batch item b turns by
(offset + b) base^(-2i/d).

    qkv check examples/implementations/wrong_rope_batch_positions.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_rope_mha

numpy_rope_mha.BUG = "batch-positions"
rope = numpy_rope_mha.rope
rope_reverse = numpy_rope_mha.rope_reverse
mha_forward = numpy_rope_mha.mha_forward
mha_backward = numpy_rope_mha.mha_backward
