"""The claims every attention computation must keep, judged once on its own results.

A head chapter's engine, a learner's head or multi-head layer (``qkv check``) and a real
model's layer (``qkv attend``) each compute their results their own way; the claims are
judged here, the same for all:

- :func:`prefix`: under the causal mask, a change to the last token leaves every earlier
  token's output bit for bit (a later key is never seen), and changes the last one;
- :func:`single_token`: with one token, every attention weight is exactly 1, and what
  only the scores reach (the query's and the key's projections) gets no gradient at all;
- :func:`replayed`: the same inputs computed twice give every value bit for bit (chapter
  26's and each chapter's evidence; ``qkv check``'s replay family finds the first value
  that differs, and ``qkv attend`` compares a second run head by head without building it
  whole, both with the same :func:`~qkvcli.core.arrays.same_bits`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from qkvcli.core.arrays import Array, same_bits
from qkvcli.core.record import Record

if TYPE_CHECKING:
    import numpy.typing as npt  # annotations only: importing it costs start-up


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


def replayed(first: Iterable[npt.ArrayLike], second: Iterable[npt.ArrayLike]) -> bool:
    """The replay claim: each value of a second run (an array or a number, as float64) has
    the first run's shape and bits (``-0.0`` is not ``0.0``; a NaN equals the same NaN)."""
    return all(same_bits(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
               for a, b in zip(first, second, strict=True))
