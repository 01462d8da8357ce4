"""Multi-head attention wrong on purpose: the heads are merged strided, not side by side.

    qkv check examples/implementations/wrong_mha_merge_strided.py

The split is right (head ``h`` takes columns ``h*d_h .. h*d_h + d_h - 1``), but the
merge transposes to ``[B, T, d_h, H]`` before reshaping, so head ``h``'s column ``j``
lands at ``j*H + h``: W_O then reads each head's values in the wrong rows. It is
numpy_rope_mha.py with its ``BUG`` switch set to "merge-strided", a slip of the forward
alone: the backward is right.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_rope_mha

numpy_rope_mha.BUG = "merge-strided"
rope = numpy_rope_mha.rope
rope_reverse = numpy_rope_mha.rope_reverse
mha_forward = numpy_rope_mha.mha_forward
mha_backward = numpy_rope_mha.mha_backward
