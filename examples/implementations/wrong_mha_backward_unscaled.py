"""Multi-head attention wrong on purpose (backward-unscaled): its backward forgets the 1/sqrt(d_k) of the
scores, which its forward applies.

    qkv check examples/implementations/wrong_mha_backward_unscaled.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_rope_mha

numpy_rope_mha.BUG = "backward-unscaled"
rope = numpy_rope_mha.rope
rope_reverse = numpy_rope_mha.rope_reverse
mha_forward = numpy_rope_mha.mha_forward
mha_backward = numpy_rope_mha.mha_backward
