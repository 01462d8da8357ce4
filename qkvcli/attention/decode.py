"""A real layer decoded one token at a time with a KV cache, against its full causal pass.

The cache (:class:`KvRing`) holds, per batch item and K/V head (a grouped layer's query
heads share their K/V head's keys, so the cache holds ``G`` heads, not ``H``, as
transformers' cache classes do), the keys as the scores read them (projected, clipped,
normalised, turned by RoPE at their own position) and the values as projected. Its
storage is made once: ``[B,G,C,d_k]`` and ``[B,G,C,d_v]``, ``C`` the sequence's ``T``
positions, or with a sliding window of ``W`` keys a ring of ``min(W, T)`` positions, in
which token ``t`` is written over token ``t - W``, the one key the window has just let
go. Whatever it holds is read oldest first.

A step (:func:`decode`) is the engine called on one token
(:mod:`qkvcli.attention.engine`): ``split_heads`` of its projection at its own position,
the key and value appended, then ``mix`` of its query against the keys the cache holds,
at their positions (the mask, ALiBi, the scale, the soft cap and the softmax are the
engine's), and the output projection. :func:`decode_evidence` compares each step's
output with row ``t`` of the engine's causal pass over every token. No I/O.
"""

from __future__ import annotations

import numpy as np

from qkvcli.attention.engine import Layer, LayerForward, mix, project_out, split_heads
from qkvcli.attention.errors import DecodeRefusal
from qkvcli.attention.records import DecodeEvidence, DecodeStep
from qkvcli.core.arrays import Array
from qkvcli.core.projections import project
from qkvcli.core.record import Record

LENGTH_DEPENDENT = ("dynamic", "longrope")
"""RoPE scalings whose frequencies depend on the sequence's length
(:func:`qkvcli.core.rope.inverse_frequencies`), once it passes the original length."""

TOLERANCE = 1e-12
"""The largest ``|cached - full|`` a step may give by default."""


def check_decodable(layer: Layer, causal: bool, batch: int, tokens: int) -> None:
    """Refuse, before any work, a layer a cache of earlier tokens cannot decode, in this
    order: no causal mask (a two-sided window named), no token, no batch item, a RoPE
    scaling whose frequencies change within the sequence (every key cached before the
    change would keep another rotation than the full pass gives it). Raises
    :class:`~qkvcli.attention.errors.DecodeRefusal`."""
    if not causal:
        if layer.window is not None:
            raise DecodeRefusal("two-sided-window", window=layer.window)
        raise DecodeRefusal("no-causal-mask")
    if tokens < 1:
        raise DecodeRefusal("no-token")
    if batch < 1:
        raise DecodeRefusal("no-batch")
    rope = layer.rope
    if rope is None or rope.frequencies is not None or rope.scaling is None:
        return
    scaling, positions = rope.scaling, rope.offset + tokens  # the table's last position + 1
    if scaling.kind in LENGTH_DEPENDENT and positions > scaling.original:
        raise DecodeRefusal("length-dependent-rope", scaling=scaling.kind,
                            original=scaling.original, positions=positions)


class KvRing:
    """The keys and values of ``kv_heads`` K/V heads, ``[B,G,C,d]`` each, made once;
    ``length`` tokens appended so far, the latest ``min(length, C)`` held (a ring when
    the tokens outnumber ``C``)."""

    def __init__(self, batch: int, kv_heads: int, capacity: int, d_k: int, d_v: int) -> None:
        self.capacity = capacity
        self.length = 0
        self.keys = np.zeros((batch, kv_heads, capacity, d_k))
        self.values = np.zeros((batch, kv_heads, capacity, d_v))

    @property
    def storage_bytes(self) -> int:
        """The bytes of the storage, keys and values."""
        return int(self.keys.nbytes + self.values.nbytes)

    def append(self, key: Array, value: Array) -> None:
        """Write one token's key ``[B,G,1,d_k]`` and value ``[B,G,1,d_v]`` at the next
        slot (over the oldest once full)."""
        slot = self.length % self.capacity
        self.keys[:, :, slot] = key[:, :, 0]
        self.values[:, :, slot] = value[:, :, 0]
        self.length += 1

    def held(self) -> tuple[Array, Array, int]:
        """The keys and values held, oldest first (a view until the ring wraps, then a
        copy), and the position of the oldest."""
        if self.length <= self.capacity:
            return self.keys[:, :, :self.length], self.values[:, :, :self.length], 0
        slot = self.length % self.capacity  # the oldest's
        order = np.r_[slot:self.capacity, 0:slot]
        return (self.keys[:, :, order], self.values[:, :, order],
                self.length - self.capacity)


class Decoded(Record):
    """What :func:`decode` gives: each step's output, stacked ``[B,T,E_out]``; the shapes
    and bytes of the keys and values held at each step; and the cache after the last."""

    output: Array
    held: tuple[tuple[tuple[int, ...], tuple[int, ...], int], ...]
    cache: KvRing


def decode(layer: Layer, x: Array) -> Decoded:
    """``x`` ``[B,T,d_model]`` through ``layer`` one token at a time, each step reading
    and extending one :class:`KvRing` (a ring of the layer's window, if it has one);
    causal, as :func:`check_decodable` requires. Expects a validated input."""
    batch, tokens, _ = x.shape
    window = layer.window
    capacity = tokens if window is None else min(window, tokens)
    cache = KvRing(batch, layer.kv_heads, capacity, layer.d_k, layer.d_v)
    weight, bias = layer.packed()
    outputs: list[Array] = []
    held: list[tuple[tuple[int, ...], tuple[int, ...], int]] = []
    with np.errstate(over="ignore", invalid="ignore"):
        for t in range(tokens):
            projected = project(x[:, t:t + 1], weight, bias=bias)  # [B,1,H*d_k+G*d_k+G*d_v]
            split = split_heads(layer, projected, first_row=t, key_first=t)
            cache.append(split.matched_key, split.value)
            keys, values, first = cache.held()
            concat = mix(layer, split.matched_query, keys, values, t, True, window,
                         key_first=first)  # [B,1,H*d_v]
            outputs.append(project_out(layer, concat))
            held.append((tuple(int(d) for d in keys.shape), tuple(int(d) for d in values.shape),
                         int(keys.nbytes + values.nbytes)))
    return Decoded(np.concatenate(outputs, axis=1), tuple(held), cache)


def _matched_key(layer: Layer, forward: LayerForward) -> Array:
    """The full pass's keys as its scores read them (normalised after RoPE, turned, or
    as projected)."""
    norm = layer.qk_norm
    stacked = forward.stacked
    if norm is not None and norm.after_rope:
        return stacked["normed_key"]
    return stacked["key" if layer.rope is None else "rotated_key"]


def _worst(got: Array, wanted: Array) -> float:
    """The largest ``|got - wanted|`` (NaN if any difference is; 0 for empty arrays)."""
    if not got.size:
        return 0.0
    with np.errstate(invalid="ignore"):
        return float(np.max(np.abs(got - wanted)))


def decode_evidence(layer: Layer, x: Array, full: LayerForward,
                    tolerance: float = TOLERANCE) -> DecodeEvidence:
    """``layer`` decoded over ``x`` (:func:`decode`) against ``full``, the engine's causal
    pass over every token with its records: each step's worst difference from row ``t``
    of its output, the cache's shapes and bytes, and the keys and values held after the
    last step against the full pass's own at those positions."""
    decoded = decode(layer, x)
    cache = decoded.cache
    steps = tuple(
        DecodeStep(t, _worst(decoded.output[:, t], full.output[:, t]), keys, values, held)
        for t, (keys, values, held) in enumerate(decoded.held))
    keys, values, first = cache.held()
    held_worst = max(_worst(keys, _matched_key(layer, full)[:, :, first:]),
                     _worst(values, full.stacked["value"][:, :, first:]),
                     key=lambda w: (w != w, w))
    return DecodeEvidence(steps, tolerance, layer.window,
                          tuple(int(d) for d in cache.keys.shape),
                          tuple(int(d) for d in cache.values.shape), cache.storage_bytes,
                          held_worst)
