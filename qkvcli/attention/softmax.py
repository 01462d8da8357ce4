"""The attention weights' two pieces: a numerically stable softmax and the causal mask."""

from __future__ import annotations

import numpy as np

from qkvcli.core.arrays import Array


def stable_softmax(z: Array) -> Array:
    """Softmax over the last axis with the row maximum subtracted first.

    ``-inf`` entries get weight exactly 0. Each row needs one finite entry (a causal
    row always has its diagonal); empty axes give empty results.
    """
    if z.size == 0:
        return np.zeros(z.shape)
    shifted = z - np.max(z, axis=-1, keepdims=True)  # largest entry becomes 0: exp <= 1
    exps = np.exp(shifted)
    result: Array = exps / np.sum(exps, axis=-1, keepdims=True)
    return result


def causal_mask(tokens: int) -> Array:
    """``True`` above the diagonal: key positions after the query position."""
    return np.triu(np.ones((tokens, tokens), dtype=bool), k=1)
