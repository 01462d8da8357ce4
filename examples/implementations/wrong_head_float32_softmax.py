"""A head wrong on purpose (float32-softmax): its forward's softmax runs in float32, so
the tiny weights of rows whose scores lie far apart underflow to 0 (its backward is
float64 and right). qkv check names it as precision, not as a mask that hides the diagonal.

    qkv check examples/implementations/wrong_head_float32_softmax.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_head

numpy_head.BUG = "float32-softmax"
head_forward = numpy_head.head_forward
head_backward = numpy_head.head_backward
forward = numpy_head.forward  # the projections too (right)
backward = numpy_head.backward
