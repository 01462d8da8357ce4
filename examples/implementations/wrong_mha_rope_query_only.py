"""Multi-head attention wrong on purpose (rope-query-only): RoPE turns the queries but not the keys.

    qkv check examples/implementations/wrong_mha_rope_query_only.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_rope_mha

numpy_rope_mha.BUG = "rope-query-only"
rope = numpy_rope_mha.rope
rope_reverse = numpy_rope_mha.rope_reverse
mha_forward = numpy_rope_mha.mha_forward
mha_backward = numpy_rope_mha.mha_backward
