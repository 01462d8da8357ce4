"""The claims every attention computation must keep, judged once on its own results.

A head chapter's engine, a learner's head or multi-head layer (``qkv check``) and a real
model's layer (``qkv attend``) each compute their results their own way; the claims are
judged here, the same for all:

- :func:`prefix`: under the causal mask, a change to the last token leaves every earlier
  token's output bit for bit (a later key is never seen), and changes the last one;
- :func:`single_token`: with one token, every attention weight is exactly 1, and what
  only the scores reach (the query's and the key's projections) gets no gradient at all.
"""

from __future__ import annotations

import numpy as np

from qkvcli.core.arrays import Array, same_bits
from qkvcli.core.record import Record


class Prefix(Record):
    """Per earlier position, whether its output stayed bit for bit when the last token
    changed (every batch item given); whether the last position's output changed."""

    unchanged: tuple[bool, ...]
    last_changed: bool

    @property
    def holds(self) -> bool:
        return all(self.unchanged) and self.last_changed



def prefix(before: Array, after: Array) -> Prefix:
    """The prefix claim on the outputs ``[B, T, ...]`` of an input and of the same input
    with its last token changed."""
    tokens = int(before.shape[1])
    return Prefix(tuple(same_bits(before[:, t], after[:, t]) for t in range(tokens - 1)),
                  not same_bits(before[:, tokens - 1:], after[:, tokens - 1:]))


def single_token(weights: Array, *score_gradients: Array) -> bool:
    """The single-token claim: every attention weight of a one-token pass exactly 1, and
    every element of ``score_gradients`` (the gradients of what only the scores reach:
    ``dQ``, ``dK``, or ``dW_Q``, ``dW_K``) exactly 0."""
    return bool(np.all(weights == 1.0)) and all(bool(np.all(g == 0.0)) for g in score_gradients)
