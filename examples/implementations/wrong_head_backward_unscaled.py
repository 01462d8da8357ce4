"""A head wrong on purpose (backward-unscaled): its backward forgets the 1/sqrt(d_k) of the
scores, which its forward applies.

    qkv check examples/implementations/wrong_head_backward_unscaled.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_head

numpy_head.BUG = "backward-unscaled"
head_forward = numpy_head.head_forward
head_backward = numpy_head.head_backward
forward = numpy_head.forward  # the projections too (right)
backward = numpy_head.backward
