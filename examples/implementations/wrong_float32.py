"""WRONG on purpose (float32): computes in float32 (caught by ``forward`` on the random fixtures).

float32 keeps about 7 significant digits; the chapter asks for float64, and the
default tolerance 1e-9 cannot be met in float32 by values that use all 53 bits.

    qkv check examples/implementations/wrong_float32.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_qkv

numpy_qkv.BUG = "float32"
forward = numpy_qkv.forward
backward = numpy_qkv.backward
