"""A layer-local KV cache (chapter 37): one new token at a time through a multi-head layer.

The cache keeps, per batch item and head, the keys already turned by RoPE and the values
as projected, in storage ``[B,H,C,d_h]`` made once (``C`` the capacity), of which the
first ``length`` positions are the logical cache ``[B,H,length,d_h]``. A step
(:func:`step`) projects the one new token ``x [B,1,d_model]``, splits its heads, turns Q
and K by RoPE at the absolute position ``length`` (V is never turned, Q never kept),
weighs the cached keys and its own key, mixes the cached values and its own value, merges
the heads and applies ``W_O``: the last row of the layer's causal pass over the whole
prefix (:func:`qkvcli.attention.engine.forward`), with ``length`` rows of K and V read
instead of projected again.

A cache is bound to the layer it was made for (:class:`Binding`): the same parameter
arrays (identity, not equal values), each at the revision it had, and the same RoPE
table (feature width, positions, base bit for bit). A step validates in the course's
order, computes, validates the append, and only then writes: a refused step leaves the
cache as it was. :meth:`KvCache.reset` sets the length to 0 and keeps the storage and
the binding. Every piece of maths is the engine's (the projection, the heads' split and
merge, the rotation, the scale, the softmax, the output projection). No I/O.
"""

from __future__ import annotations

import math

import numpy as np

from qkvcli.attention.engine import heads_axis, merge_heads
from qkvcli.attention.errors import (
    AppendedShapeMismatch,
    CacheFull,
    CacheHeadCountMismatch,
    CacheHeadWidthMismatch,
    CacheLayerMismatch,
    CacheLayerRevisionMismatch,
    CacheModelWidthMismatch,
    CacheRopeMismatch,
    CapacityExceedsPositions,
    IncrementalBatchMismatch,
    IncrementalInputRank,
    IncrementalProjectionRefusal,
    IncrementalSoftmaxRefusal,
    IncrementalWidthMismatch,
    NonFiniteAppend,
    SingleTokenRequired,
    ZeroCacheBatch,
    ZeroCacheCapacity,
)
from qkvcli.attention.maths import rotate, scale, softmax
from qkvcli.attention.multihead import MultiHeadLayer
from qkvcli.core.arrays import Array, same_bits
from qkvcli.core.projections import project
from qkvcli.core.record import Record
from qkvcli.core.rope import Rope

PARAMETERS = ("query", "key", "value", "output")
"""The layer's parameters in the binding's stable order (the index a revision names)."""


class DecodingLayer(Record):
    """A multi-head layer as a cache binds to it: the engine's layer (causal, RoPE on each
    head), the rows of its RoPE table (``positions``: the last position it can turn is
    ``positions - 1``) and the revision of each parameter (:data:`PARAMETERS`' order).

    The engine's weights are read-only arrays; an update in place (an optimizer's step on
    the same arrays) is :meth:`updated`: the same arrays at the next revision."""

    layer: MultiHeadLayer
    positions: int
    revisions: tuple[int, ...] = (0, 0, 0, 0)

    @property
    def parameters(self) -> tuple[Array, ...]:
        """The four parameter arrays themselves: ``W_Q``, ``W_K``, ``W_V``, ``W_O``."""
        assert self.layer.out_weight is not None
        return (*self.layer.projections.weights, self.layer.out_weight)

    @property
    def rope(self) -> Rope:
        rope = self.layer.rope
        assert rope is not None  # a decoding layer turns Q and K
        return rope

    def updated(self, index: int) -> DecodingLayer:
        """The same layer after an update in place of parameter ``index``: its revision
        advanced by one."""
        revisions = list(self.revisions)
        revisions[index] += 1
        return self._replace(revisions=tuple(revisions))

    def with_table(self, base: float, positions: int) -> DecodingLayer:
        """The same parameter arrays (and revisions) under another RoPE table."""
        rope = self.rope._replace(theta=base)
        return self._replace(layer=self.layer.with_rope(rope), positions=positions)


def _base_bits(base: float) -> int:
    return int(np.float64(base).view(np.uint64))


class Binding(Record):
    """What a cache was made for: the parameter arrays (compared by identity), the
    revision each had, and the RoPE table's feature width, rows and base (its bits)."""

    parameters: tuple[Array, ...]
    revisions: tuple[int, ...]
    rope_width: int
    rope_positions: int
    rope_base_bits: int

    @classmethod
    def of(cls, layer: DecodingLayer) -> Binding:
        return cls(layer.parameters, layer.revisions, layer.rope.dims, layer.positions,
                   _base_bits(layer.rope.theta or 0.0))

    def same(self, other: Binding) -> bool:
        """The same arrays at the same revisions, the same table."""
        return (len(self.parameters) == len(other.parameters)
                and all(a is b for a, b in zip(self.parameters, other.parameters, strict=True))
                and (self.revisions, self.rope_width, self.rope_positions, self.rope_base_bits)
                == (other.revisions, other.rope_width, other.rope_positions,
                    other.rope_base_bits))


class CacheState(Record):
    """A copy of everything a step may change or is judged by: the whole storage (not
    only its logical rows), the length and the binding."""

    keys: Array
    values: Array
    length: int
    binding: Binding


class KvCache:
    """Rotated keys and projected values of one layer, ``[B,H,C,d_h]`` each, the first
    ``length`` positions in use. Make one with :meth:`for_layer`."""

    def __init__(self, batch: int, heads: int, head_width: int, model_width: int,
                 capacity: int, binding: Binding) -> None:
        # Private: for_layer validates first.
        self.batch = batch
        self.heads = heads
        self.head_width = head_width
        self.model_width = model_width
        self.capacity = capacity
        self.binding = binding
        self.length = 0
        self.keys = np.zeros((batch, heads, capacity, head_width))
        self.values = np.zeros((batch, heads, capacity, head_width))

    @classmethod
    def for_layer(cls, layer: DecodingLayer, batch: int, capacity: int) -> KvCache:
        """An empty cache of ``capacity`` positions for ``batch`` sequences through
        ``layer``. Order: a batch (:class:`ZeroCacheBatch`), a capacity
        (:class:`ZeroCacheCapacity`), within the RoPE table
        (:class:`CapacityExceedsPositions`)."""
        if batch == 0:
            raise ZeroCacheBatch()
        if capacity == 0:
            raise ZeroCacheCapacity()
        if capacity > layer.positions:
            raise CapacityExceedsPositions(capacity, layer.positions)
        engine_layer = layer.layer
        return cls(batch, engine_layer.heads, engine_layer.d_k, engine_layer.d_model, capacity,
                   Binding.of(layer))

    @property
    def full(self) -> bool:
        return self.length == self.capacity

    def logical_keys(self) -> Array:
        """The cached rotated keys, ``[B,H,length,d_h]`` (a copy)."""
        return np.array(self.keys[:, :, :self.length])

    def logical_values(self) -> Array:
        """The cached values, ``[B,H,length,d_h]`` (a copy)."""
        return np.array(self.values[:, :, :self.length])

    def state(self) -> CacheState:
        """A copy of the cache's state (what a refused step must leave as it was)."""
        return CacheState(np.array(self.keys), np.array(self.values), self.length, self.binding)

    def unchanged(self, before: CacheState) -> bool:
        """Whether the cache is as ``before`` says: the storage bit for bit, the length,
        the binding."""
        return (same_bits(self.keys, before.keys) and same_bits(self.values, before.values)
                and self.length == before.length and self.binding.same(before.binding))

    def reset(self) -> None:
        """Forget every cached position: the length 0; the storage (its values too) and
        the binding stay."""
        self.length = 0


class IncrementalStep(Record):
    """One step's results and facts: the output ``[B,1,E_out]``; the rotated key and the
    value it appended ``[B,H,1,d_h]``; its attention weights ``[B,H,1,length+1]``; its
    position (the cache's length before it, the RoPE offset); and its work: the rows each
    projection reads for the whole prefix, reads here (one), and reuses from the cache
    (the keys' and the values' alike)."""

    output: Array
    appended_key: Array
    appended_value: Array
    weights: Array
    position: int
    full_prefix_rows: int
    incremental_rows: int
    reused_rows: int


def validate_request(layer: DecodingLayer, cache: KvCache, x: Array) -> None:
    """The course's checks of a step, before any arithmetic, the first failing wins:
    rank three, one token, the cache's batch, the layer's width; the cache's model width,
    head count and head width; every parameter the same array, then each at its captured
    revision (the first that differs); the RoPE table; room for one more position."""
    engine_layer = layer.layer
    if x.ndim != 3:
        raise IncrementalInputRank(x.ndim)
    batch, tokens, width = (int(size) for size in x.shape)
    if tokens != 1:
        raise SingleTokenRequired(tokens)
    if batch != cache.batch:
        raise IncrementalBatchMismatch(cache.batch, batch)
    if width != engine_layer.d_model:
        raise IncrementalWidthMismatch(engine_layer.d_model, width)
    if cache.model_width != engine_layer.d_model:
        raise CacheModelWidthMismatch(engine_layer.d_model, cache.model_width)
    if cache.heads != engine_layer.heads:
        raise CacheHeadCountMismatch(engine_layer.heads, cache.heads)
    if cache.head_width != engine_layer.d_k:
        raise CacheHeadWidthMismatch(engine_layer.d_k, cache.head_width)
    bound, current = cache.binding, Binding.of(layer)
    if not all(a is b for a, b in zip(bound.parameters, current.parameters, strict=True)):
        raise CacheLayerMismatch()  # identity over all four before any revision
    for index, (cached, now) in enumerate(zip(bound.revisions, current.revisions, strict=True)):
        if cached != now:
            raise CacheLayerRevisionMismatch(index, cached, now)
    if (bound.rope_width, bound.rope_positions, bound.rope_base_bits) != (
            current.rope_width, current.rope_positions, current.rope_base_bits):
        raise CacheRopeMismatch(bound.rope_width, current.rope_width, bound.rope_positions,
                                current.rope_positions,
                                float(np.uint64(bound.rope_base_bits).view(np.float64)),
                                float(np.uint64(current.rope_base_bits).view(np.float64)))
    if cache.full:
        raise CacheFull(cache.capacity)


def _finite_projection(stage: str, branch: str, operation: str, values: Array) -> None:
    """Refuse the first value (row-major) of one projection that is not finite."""
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        index = int(bad[0])
        raise IncrementalProjectionRefusal(stage, branch, operation, index,
                                           float(values.reshape(-1)[index]))


SAFE_SUM = 1e300
"""Below this sum of ``|x_k w_k|`` no partial sum of a product can overflow, whatever
order adds its terms."""


def _in_order(x: Array, weight: Array) -> Array:
    """``x W`` with each element's terms added first to last (``k = 0, 1, …``), as the
    course's matrix product does: where the terms are near the largest float, whether a
    partial sum overflows depends on the order, and so does the step's refusal."""
    product: Array = x[..., 0, None] * weight[0]
    for k in range(1, int(weight.shape[0])):
        product = product + x[..., k, None] * weight[k]
    return product


def _projected(stage: str, branches: tuple[tuple[str, int], ...], x: Array, weight: Array,
               bias: Array | None) -> Array:
    """``x W (+ b)`` for the step's token, each branch's columns (by name and width, in
    order) refused as the course's projections are: the product, then the bias added,
    branch by branch."""
    product = project(x, weight)  # [B,1,d_in] @ [d_in,sum of widths] -> [B,1,sum]
    if not np.all(np.abs(x) @ np.abs(weight) < SAFE_SUM):
        product = _in_order(x, weight)  # a partial sum may overflow: the course's order
    start = 0
    for branch, width in branches:
        columns = slice(start, start + width)
        start += width
        _finite_projection(stage, branch, "matmul", product[..., columns])
        if bias is not None:
            product[..., columns] += bias[columns]
            _finite_projection(stage, branch, "add", product[..., columns])
    return product


def _readable_scores(scores: Array) -> None:
    """Refuse the first score (row-major over ``[B*H, keys]``) the softmax cannot read."""
    flat = scores.reshape(-1, scores.shape[-1])
    bad = np.argwhere(~np.isfinite(flat))
    if bad.size:
        group, position = (int(i) for i in bad[0])
        value = float(flat[group, position])
        what = "NaN" if math.isnan(value) else ("positive infinity" if value > 0
                                               else "negative infinity")
        raise IncrementalSoftmaxRefusal(group, position, what)


def validate_append(cache: KvCache, key: Array, value: Array) -> None:
    """The course's checks of an append, after the arithmetic and before any write: the
    key's shape ``[B,H,1,d_h]``, the value's, room, the first non-finite key, value."""
    expected = (cache.batch, cache.heads, 1, cache.head_width)
    for branch, array in (("key", key), ("value", value)):
        if array.shape != expected:
            raise AppendedShapeMismatch(branch, expected, tuple(int(d) for d in array.shape))
    if cache.full:
        raise CacheFull(cache.capacity)
    for branch, array in (("key value", key), ("value", value)):
        bad = np.flatnonzero(~np.isfinite(array.reshape(-1)))
        if bad.size:
            raise NonFiniteAppend(branch, int(bad[0]), float(array.reshape(-1)[bad[0]]))


def step(layer: DecodingLayer, cache: KvCache, x: Array) -> IncrementalStep:
    """One new token ``x [B,1,d_model]`` through ``layer``, reading and extending
    ``cache``. Validates (:func:`validate_request`), computes, validates the append
    (:func:`validate_append`), then writes the rotated key and the value at position
    ``length`` and advances the length: the only change, after every check. Raises a
    :class:`~qkvcli.attention.errors.CacheRefusal`; the cache is then unchanged."""
    validate_request(layer, cache, x)
    engine_layer, rope = layer.layer, layer.rope
    heads, d_h, position = engine_layer.heads, engine_layer.d_k, cache.length
    with np.errstate(over="ignore", invalid="ignore"):
        weight, bias = engine_layer.packed()
        # [B,1,d_model] @ [d_model,3*H*d_h] -> [B,1,3*H*d_h]: Q, K and V, refused in order
        width = heads * d_h
        projected = _projected("Q/K/V", (("query", width), ("key", width),
                                         ("value", int(weight.shape[1]) - 2 * width)),
                               x, weight, bias)
        query = heads_axis(projected[..., :width], heads)  # [B,H,1,d_h]
        key = heads_axis(projected[..., width:2 * width], heads)
        value = np.array(heads_axis(projected[..., 2 * width:], heads))  # V is never turned
        rotated_query = rotate(query, rope, position)  # the absolute position: the length
        rotated_key = rotate(key, rope, position)
        keys = np.concatenate([cache.keys[:, :, :position], rotated_key], axis=2)  # [B,H,P,d_h]
        values = np.concatenate([cache.values[:, :, :position], value], axis=2)
        # [B,H,1,d_h] @ [B,H,d_h,P] -> [B,H,1,P]: the scores of the cached keys, then its own
        scores = scale(rotated_query @ np.swapaxes(keys, -1, -2), d_h, engine_layer.given_scale)
        _readable_scores(scores)
        weights = softmax(scores)
        mixed = weights @ values  # [B,H,1,P] @ [B,H,P,d_h] -> [B,H,1,d_h]
        merged = merge_heads(mixed)  # [B,1,H*d_h]
        output = (merged if engine_layer.out_weight is None else
                  _projected("output", (("", int(engine_layer.out_weight.shape[1])),),
                             merged, engine_layer.out_weight,
                             engine_layer.out_bias))
    validate_append(cache, rotated_key, value)
    cache.keys[:, :, position] = rotated_key[:, :, 0]
    cache.values[:, :, position] = value[:, :, 0]
    cache.length = position + 1
    return IncrementalStep(output, rotated_key, value, weights, position, position + 1, 1,
                           position)
