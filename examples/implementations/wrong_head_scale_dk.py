"""A head wrong on purpose: its scores are divided by d_k, not sqrt(d_k), forward and back.

    qkv check examples/implementations/wrong_head_scale_dk.py

The forward's scale and the backward's are the same wrong one, so the slip shows in the
head's forward, its scaling family and its reverse: one slip, named once. The rest is
numpy_head's, right.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_head


class _DividedByWidth:
    """``math`` as numpy_head uses it, but ``sqrt(d_k)`` is ``d_k``: the slip."""

    @staticmethod
    def sqrt(value):
        return float(value)


numpy_head.math = _DividedByWidth()
head_forward = numpy_head.head_forward
head_backward = numpy_head.head_backward
