"""The claims every attention computation must keep, judged once on its own results.

A head chapter's engine, a learner's head or multi-head layer (``qkv check``) and a real
model's layer (``qkv attend``) each compute their results their own way; the claims are
judged here, the same for all:

- :func:`prefix`: under the causal mask, a change to the last token leaves every earlier
  token's output bit for bit (a later key is never seen), and changes the last one;
- :func:`single_token`: with one token, every attention weight is exactly 1, and what
  only the scores reach (the query's and the key's projections) gets no gradient at all;
- :func:`isolated_heads`: before the output projection the heads are apart: a change to
  the query columns of one head moves its attention weights and no other head's, and a
  change to the value columns of one K/V head moves the merged columns of the heads that
  read it and no others (chapter 30's engine, a learner's multi-head layer, a real
  layer; its probes are part of the claim, so every caller perturbs the same way);
- :func:`position_zero`: a rotation from position zero leaves the first token as it was,
  bit for bit (chapter 29's engine, a learner's RoPE, a real layer's);
- :func:`row_sums`: every attention weight is at least 0 and every row sums to 1 within a
  tolerance (chapters 27, 28 and 30, ``qkv check``'s softmax, a real layer's heads);
- :func:`future_zero`: every weight on a key the mask hides (a later one, or one outside
  a sliding window) is exactly 0 (chapters 28 and 30, a real layer's heads).
"""

from __future__ import annotations

from collections.abc import Callable
from types import EllipsisType
from typing import TYPE_CHECKING

import numpy as np

from qkvcli.core.arrays import Array, first_difference, first_outside, same_bits
from qkvcli.core.record import Record
from qkvcli.core.results import Clause

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


def position_zero(turned: Array, given: Array) -> tuple[str, str, str] | None:
    """The position-zero claim on ``[..., tokens, width]`` arrays: the first token of
    ``turned`` (a rotation from position zero of ``given``) equals ``given``'s own
    exactly (the angle is 0: ``x cos 0 - y sin 0`` is ``x``, though ``-0.0`` may come out
    as ``0.0``). ``None`` when it holds, else ``(coordinate, turned, given)`` where it
    first differs (a coordinate ``""`` and the two shapes when the shapes differ)."""
    return first_difference(turned[..., :1, :], given[..., :1, :], lambda a, b: a != b)


class RowSums(Record):
    """The row-sums claim's facts: the least weight, the largest deviation of a row's sum
    from 1, and the tolerance it must keep within."""

    min_attention: float
    max_row_deviation: float
    tolerance: float

    @property
    def passed(self) -> bool:
        return self.min_attention >= 0.0 and self.max_row_deviation <= self.tolerance


def row_sums(weights: Array, tolerance: float, scaled: bool = False) -> RowSums:
    """The row-sums claim on weights ``[..., T, T]``: none below 0, each row's sum within
    ``tolerance`` of 1 (absolute, or ``scaled``: ``|s-1|/max(1,|s|)``, check's). NaN fails."""
    sums = np.sum(weights, axis=-1)
    with np.errstate(invalid="ignore"):
        deviation = np.abs(sums - 1.0) / (np.maximum(1.0, np.abs(sums)) if scaled else 1.0)
    return RowSums(float(weights.min()) if weights.size else 0.0,
                   float(np.max(deviation)) if deviation.size else 0.0, tolerance)


class FutureZero(Record):
    """The future-zero claim's facts: whether a mask hides any key (``applicable``), and
    the largest magnitude of a weight on a hidden key (0 when none is hidden)."""

    applicable: bool
    max_masked_attention: float

    @property
    def passed(self) -> bool:
        return not self.applicable or self.max_masked_attention == 0.0


def future_zero(weights: Array, hidden: npt.NDArray[np.bool_] | None) -> FutureZero:
    """The future-zero claim on weights ``[..., T, T]``: each where ``hidden [T, T]`` (keys
    a query may not see; ``None``: no mask) exactly 0, measured in place on one copy."""
    if hidden is None:
        return FutureZero(False, 0.0)
    outside = weights[..., hidden]
    return FutureZero(True, float(np.abs(outside, out=outside).max()) if outside.size else 0.0)


class HeadLayout(Record):
    """Which weight columns each head reads: query head ``h`` the columns ``h*d_k`` on of
    ``W_Q``, and K/V head ``g`` the columns ``g*d_v`` on of ``W_V``; the ``heads`` query
    heads share the ``kv_heads`` K/V heads in consecutive groups (grouped-query
    attention; ``kv_heads == heads`` for plain multi-head attention)."""

    heads: int
    kv_heads: int
    d_k: int
    d_v: int


ISOLATION_STEP = 0.5
"""What each probe of :func:`isolated_heads` adds to the columns it changes."""

LayerOutputs = Callable[[tuple[Array, ...]], tuple[Array, Array]]
"""The layer on weights ``(W_Q, W_K, W_V, ...)``: its attention weights ``[B,H,T,T]`` and
the heads' outputs merged before the output projection ``[B,T,H*d_v]``."""


def isolated_heads(forward: LayerOutputs, x: Array, weights: tuple[Array, ...],
                   before: tuple[Array, Array], layout: HeadLayout, tolerance: float,
                   names: tuple[str, str] = ("weights", "merged"),
                   ) -> tuple[str | None, Clause] | None:
    """The isolation claim, probed: ``forward`` on the input ``x [B,T,d_model]`` and
    ``weights`` gave ``before``; then

    1. (with two tokens or more: one token's weight is 1 whatever its query) query head
       0's columns of ``W_Q`` raised by :data:`ISOLATION_STEP` must leave every other
       head's attention weights as they were (head 0's may stay too: keys that all
       match alike give uniform weights whatever the query);
    2. the last K/V head's columns of ``W_V`` raised must leave every merged column but
       those of the query heads that read it, and must move those (unless the input
       makes the change vanish: ``V`` then moves by ``ISOLATION_STEP`` times each
       token's row sum, and its heads mix those by their weights).

    Judged within ``tolerance`` (scaled error). ``None`` when it holds; else the
    coordinate and the finding: ``moved`` (what was changed, the tensor and coordinate
    that moved, before, after), ``unmoved`` (what was changed, the part that did not
    move), or ``reshaped`` (what was changed, the tensor whose shape it changed).
    ``forward`` may raise: the caller says what a failed call means.
    """
    attention = before[0]
    tokens = int(attention.shape[-1])
    per_group = layout.heads // layout.kv_heads
    last = layout.kv_heads - 1
    first, end = last * per_group * layout.d_v, layout.heads * layout.d_v
    reading = attention[:, last * per_group:]  # the heads that read the last K/V head
    # the columns W_V reads: its rows' count of the last ones (all of x, unless V has an
    # input of its own joined after Q's and K's)
    values = x[..., x.shape[-1] - weights[2].shape[0]:]
    shift = np.einsum("bhtj,bj->bht", reading, np.sum(values, axis=-1)) * ISOLATION_STEP
    probes: list[tuple[int, int, int, int, bool]] = [
        (2, last * layout.d_v, (last + 1) * layout.d_v, 1, bool(np.any(shift != 0.0)))]
    if tokens >= 2:
        probes.insert(0, (0, 0, layout.d_k, 0, False))
    for branch, start, stop, tensor, must_move in probes:
        changed = [np.array(w, copy=True) for w in weights]
        changed[branch][:, start:stop] += ISOLATION_STEP
        what = f"W_{'QKV'[branch]}[:,{start}:{stop}]"
        after = forward(tuple(changed))[tensor]
        old, name = before[tensor], names[tensor]
        if after.shape != old.shape:
            return name, Clause("reshaped", (what, name))
        own: tuple[slice | int, ...] | tuple[EllipsisType, slice]
        if tensor == 0:
            own, part = np.s_[:, 0], f"{name}[:,0]"
        else:
            own, part = np.s_[..., first:end], f"{name}[...,{first}:{end}]"
        others = np.ones(old.shape, dtype=bool)
        others[own] = False
        moved = first_outside(np.where(others, after, 0.0), np.where(others, old, 0.0),
                              tolerance)
        if moved is not None:
            where, new, previous = moved
            return f"{name}{where}", Clause("moved", (what, f"{name}{where}", repr(previous),
                                                      repr(new)))
        if must_move and first_outside(after[own], old[own], tolerance) is None:
            return name, Clause("unmoved", (what, part))
    return None
