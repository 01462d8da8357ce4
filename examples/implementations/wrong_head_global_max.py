"""A head wrong on purpose (global-max): qkv check names it.

    qkv check examples/implementations/wrong_head_global_max.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_head

numpy_head.BUG = "global-max"
head_forward = numpy_head.head_forward
head_backward = numpy_head.head_backward
