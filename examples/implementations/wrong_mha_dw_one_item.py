"""Multi-head attention wrong on purpose (dw-one-item): dW_Q, dW_K and dW_V come from batch item 0
alone (dW_O is summed over the batch as it should be).

    qkv check examples/implementations/wrong_mha_dw_one_item.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_rope_mha

numpy_rope_mha.BUG = "dw-one-item"
rope = numpy_rope_mha.rope
rope_reverse = numpy_rope_mha.rope_reverse
mha_forward = numpy_rope_mha.mha_forward
mha_backward = numpy_rope_mha.mha_backward
