"""Multi-head attention wrong on purpose (dwq-transposed): dW_Q is returned transposed.

    qkv check examples/implementations/wrong_mha_dwq_transposed.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_rope_mha

numpy_rope_mha.BUG = "dwq-transposed"
rope = numpy_rope_mha.rope
rope_reverse = numpy_rope_mha.rope_reverse
mha_forward = numpy_rope_mha.mha_forward
mha_backward = numpy_rope_mha.mha_backward
