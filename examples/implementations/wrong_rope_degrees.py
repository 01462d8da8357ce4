"""RoPE wrong on purpose: the angles (offset + t) base^(-2i/d), which are radians, are
converted as if they were degrees (np.radians), in the rotation and in the layer.

    qkv check examples/implementations/wrong_rope_degrees.py
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_rope_mha
from numpy_rope_mha import mha_backward, mha_forward  # noqa: F401


def _turn(x, base, offset, sign):
    if x.ndim < 2:
        raise ValueError(f"RoPE needs [..., tokens, width], got shape {x.shape}")
    tokens, width = x.shape[-2], x.shape[-1]
    if width == 0 or width % 2:
        raise ValueError(f"RoPE needs an even, non-zero width, got {width}")
    if not base > 0:
        raise ValueError(f"RoPE needs a positive base, got {base}")
    if offset < 0:
        raise ValueError(f"RoPE needs an offset of 0 or more, got {offset}")
    positions = np.arange(offset, offset + tokens)
    angles = np.radians(positions[:, None] * base ** (-np.arange(0, width, 2) / width))  # the slip
    cos, sin = np.cos(angles), sign * np.sin(angles)
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty(x.shape)
    out[..., 0::2] = a * cos - b * sin
    out[..., 1::2] = b * cos + a * sin
    return out


def rope(x, base, offset):
    return _turn(x, base, offset, 1.0)


def rope_reverse(rotated, base, offset):
    return _turn(rotated, base, offset, -1.0)


numpy_rope_mha.rope, numpy_rope_mha.rope_reverse = rope, rope_reverse  # the layer's too
