"""RoPE wrong on purpose in its reverse alone: rope_reverse reads the angles as degrees.

    qkv check examples/implementations/wrong_rope_reverse_degrees.py

``rope`` is numpy_rope_mha's, right; ``rope_reverse`` passes its angles through
``np.deg2rad``, as if they were degrees, so it does not undo the rotation. The layer's
backward turns dQ and dK back with this same rope_reverse: qkv names the slip in
``rope-reverse`` and inside the layer's reverse.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_rope_mha
from numpy_rope_mha import _angles

rope = numpy_rope_mha.rope


def rope_reverse(rotated, base, offset):
    if rotated.ndim < 2:
        raise ValueError(f"RoPE needs [..., tokens, width], got shape {rotated.shape}")
    angles = np.deg2rad(_angles(rotated.shape[-2], rotated.shape[-1], base, offset))  # the slip
    cos, sin = np.cos(angles), -np.sin(angles)  # turned back: the angle's sine negated
    a, b = rotated[..., 0::2], rotated[..., 1::2]
    out = np.empty(rotated.shape)
    out[..., 0::2] = a * cos - b * sin
    out[..., 1::2] = b * cos + a * sin
    return out


numpy_rope_mha.rope_reverse = rope_reverse  # the layer's backward turns back with it
mha_forward = numpy_rope_mha.mha_forward
mha_backward = numpy_rope_mha.mha_backward
