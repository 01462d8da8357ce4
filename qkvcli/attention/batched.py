"""The batched engine of a multi-head layer: every head at once, and the layer's records.

:func:`batched_forward` runs one packed ``X [W_Q|W_K|W_V]`` GEMM, takes the heads as
``[B,H,T,d]`` views (grouped K/V heads ``[B,G,T,d]`` broadcast over their query heads,
never copied), turns all heads by RoPE at once, and makes one ``[B,H,T,T]`` score
product; the softmax and ``A V`` run per block of query rows (:data:`BLOCK_ROWS`), and a
causal block stops at its last unmasked key. :func:`batched_backward` reverses it the same
way: ``dA = dO V^T`` whole, the softmax reverse and ``dQ = dS K`` per block of rows,
``dV = A^T dO`` and ``dK = dS^T Q`` per block of key columns over the rows that see them,
``[dQ|dK|dV]`` packed so that ``dX`` and ``[dW_Q|dW_K|dW_V]`` are one GEMM each.

What the causal blocks leave out is exactly zero in real arithmetic and in floating point
(a masked weight is ``exp(-inf) = 0``; ``-inf`` never wins a row's max): the published
``S`` and ``dA`` stay whole, masked entries of ``A``, ``dZ`` and ``dS`` are ``+0.0``, and
every other entry is the whole matrix's maths summed over fewer zeros (to float64
rounding; tests/test_attention_batched.py). No I/O.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np

from qkvcli.attention.head import AttentionForward, AttentionHead, HeadGradients, causal_mask
from qkvcli.core.arrays import Array
from qkvcli.core.record import Record


class LayerForward(Record):
    """Every head's forward pass, their concatenation ``C`` and the final output ``Y``.

    ``stacked``: a batched pass's own arrays, of which the heads' records are views:
    ``scores``, ``scaled_scores``, ``attention`` ``[B,H,T,T]``, ``query`` ``[B,H,T,d_k]``,
    ``key``, ``value`` ``[B,G,T,d]`` (and RoPE's ``rotated_*``); ``None`` for one head.
    ``causal``: whether the pass was masked (the reverse then skips what the mask zeroed).
    """

    heads: tuple[AttentionForward, ...]
    concat: Array
    output: Array
    stacked: dict[str, Array] | None = None
    causal: bool = False

    @property
    def attention(self) -> Array:
        """The attention matrix of every head, ``[B,H,T,T]``."""
        if self.stacked is not None:
            return self.stacked["attention"]
        return np.stack([f.attention for f in self.heads], axis=1)


class LayerGradients(Record):
    """The reverse pass: per head, then the layer's input and full-width parameters.

    ``stacked`` as in :class:`LayerForward`: ``grad_attention``, ``grad_scaled_scores``,
    ``grad_scores`` as ``[B,H,T,T]``.
    """

    heads: tuple[HeadGradients, ...]
    grad_concat: Array
    grad_input: Array
    grad_w_query: Array
    grad_w_key: Array
    grad_w_value: Array
    grad_b_query: Array | None
    grad_b_key: Array | None
    grad_b_value: Array | None
    grad_out_weight: Array | None
    grad_out_bias: Array | None
    stacked: dict[str, Array] | None = None

class BatchedLayer(Protocol):
    """What the batched passes read of a layer (a :class:`~qkvcli.attention.multihead.MultiHeadLayer`)."""

    @property
    def projections(self) -> AttentionHead: ...
    @property
    def heads(self) -> int: ...
    @property
    def kv_heads(self) -> int: ...
    @property
    def d_k(self) -> int: ...
    @property
    def d_v(self) -> int: ...
    @property
    def concat_width(self) -> int: ...
    def packed(self) -> tuple[Array, Array | None]: ...
    def project_out(self, concat: Array) -> Array: ...


def _heads_axis(flat: Array, heads: int) -> Array:
    """``[B,T,n*d]`` -> ``[B,n,T,d]``, a view: head ``h`` is the columns ``h*d:(h+1)*d``."""
    batch, tokens, width = flat.shape
    return np.swapaxes(flat.reshape(batch, tokens, heads, width // heads), 1, 2)


def _grouped(per_query: Array, kv_heads: int) -> Array:
    """``[B,H,...]`` -> ``[B,G,H/G,...]``, a view: query heads in their K/V head's group
    (a K/V head ``[B,G,1,...]`` (``[:, :, None]``) is broadcast over it, never copied)."""
    shape = per_query.shape
    return per_query.reshape(shape[0], kv_heads, shape[1] // kv_heads, *shape[2:])


def _batched(forward: LayerForward, name: str, count: int, step: int) -> Array:
    """Tensor ``name`` of every ``step``-th head as ``[B,count,...]``: the batched forward's
    own array, else (a forward put together head by head) its heads' records stacked."""
    if forward.stacked is not None and name in forward.stacked:
        return forward.stacked[name]
    return np.stack([getattr(forward.heads[i * step], name) for i in range(count)], axis=1)


BLOCK_ROWS = 128
"""Query rows per block of the batched engine's softmax and ``[T,T]`` products: a causal
block stops at its last unmasked key (the masked ones weigh exactly 0), so a causal layer
does about half the work; a block's rows stay in cache."""


def _blocks(tokens: int, causal: bool) -> list[tuple[int, int, int]]:
    """``(first, end, keys)`` per block of query rows ``first:end``: the keys ``:keys`` they
    see. Without a mask one block of every row and key: the whole matrix's arithmetic."""
    if not causal:
        return [(0, tokens, tokens)] if tokens else []
    return [(r, min(r + BLOCK_ROWS, tokens), min(r + BLOCK_ROWS, tokens))
            for r in range(0, tokens, BLOCK_ROWS)]


def batched_forward(layer: BatchedLayer, x: Array, causal: bool) -> LayerForward:
    """The layer's forward with every head at once: one packed projection GEMM, RoPE over
    ``[B,H,T,d_k]``, one ``[B,H,T,T]`` score product and softmax, one ``A V``; grouped K/V
    heads are broadcast over their query heads, never copied. Each head's record holds
    views of the batched arrays. Expects ``errstate`` set by the caller."""
    p = layer.projections
    heads, kv, dk = layer.heads, layer.kv_heads, layer.d_k
    batch, tokens, d_model = x.shape
    weight, bias = layer.packed()
    projected = (x.reshape(batch * tokens, d_model) @ weight).reshape(
        batch, tokens, weight.shape[1])
    if bias is not None:
        projected += bias
    qw, kw = heads * dk, kv * dk
    query = _heads_axis(projected[..., :qw], heads)  # [B,H,T,d_k]
    key = _heads_axis(projected[..., qw:qw + kw], kv)  # [B,G,T,d_k]
    value = _heads_axis(projected[..., qw + kw:], kv)  # [B,G,T,d_v]
    rotated_query = rotated_key = None
    matched_query, matched_key = query, key
    if p.rope is not None:  # after the biases, before the scores (as HF applies it)
        matched_query = rotated_query = p.rope.rotate(query)
        matched_key = rotated_key = p.rope.rotate(key)
    # [B,G,H/G,T,d_k] @ [B,G,1,d_k,T] -> [B,G,H/G,T,T] -> [B,H,T,T]
    scores = (_grouped(matched_query, kv) @ np.swapaxes(matched_key, -1, -2)[:, :, None]
              ).reshape(batch, heads, tokens, tokens)
    if p.given_scale is None:  # the chapter's division, bit for bit
        scaled_scores = scores / math.sqrt(dk)
    else:
        scaled_scores = scores * p.given_scale
    if causal:
        np.copyto(scaled_scores, -np.inf, where=causal_mask(tokens))
    # one softmax pass per block of query rows, in one buffer (the steps of stable_softmax),
    # then that block's A V; causal blocks stop at their last unmasked key (see _blocks)
    attention = np.zeros(scaled_scores.shape)
    mixed = np.empty((batch, heads, tokens, layer.d_v))
    grouped_z, grouped_a = _grouped(scaled_scores, kv), _grouped(attention, kv)
    grouped_mixed, shared_value = _grouped(mixed, kv), value[:, :, None]
    for first, end, keys in _blocks(tokens, causal):
        block = grouped_a[..., first:end, :keys]
        z = grouped_z[..., first:end, :keys]
        np.subtract(z, np.max(z, axis=-1, keepdims=True), out=block)
        np.exp(block, out=block)
        block /= np.sum(block, axis=-1, keepdims=True)
        # [B,G,H/G,rows,keys] @ [B,G,1,keys,d_v] -> the block's rows of every head's O
        grouped_mixed[..., first:end, :] = block @ shared_value[..., :keys, :]
    concat = np.ascontiguousarray(np.swapaxes(mixed, 1, 2)).reshape(
        batch, tokens, layer.concat_width)
    per_kv = heads // kv
    records = tuple(
        AttentionForward(query[:, h], key[:, h // per_kv], value[:, h // per_kv], scores[:, h],
                         scaled_scores[:, h], attention[:, h], mixed[:, h],
                         None if rotated_query is None else rotated_query[:, h],
                         None if rotated_key is None else rotated_key[:, h // per_kv])
        for h in range(heads))
    stacked = {"scores": scores, "scaled_scores": scaled_scores, "attention": attention,
               "query": query, "key": key, "value": value}
    if rotated_query is not None and rotated_key is not None:
        stacked.update(rotated_query=rotated_query, rotated_key=rotated_key)
    return LayerForward(records, concat, layer.project_out(concat), stacked, causal)


def batched_backward(layer: BatchedLayer, x: Array, forward: LayerForward, grad_concat: Array,
                     grad_out_weight: Array | None, grad_out_bias: Array | None
                     ) -> LayerGradients:
    """The reverse of :func:`batched_forward` for ``dC`` (``[B,T,H*d_v]``): batched over heads
    as the forward is; a K/V head's gradients sum its group's. Expects ``errstate`` set."""
    p = layer.projections
    heads, kv, dk = layer.heads, layer.kv_heads, layer.d_k
    batch, tokens, d_model = x.shape
    per_kv = heads // kv
    causal = forward.causal
    matched = "" if p.rope is None else "rotated_"
    a = _batched(forward, "attention", heads, 1)
    grad_mixed = _heads_axis(grad_concat, heads)  # [B,H,T,d_v]
    value_kv = _batched(forward, "value", kv, per_kv)  # [B,G,T,d_v]
    key_kv = _batched(forward, matched + "key", kv, per_kv)  # [B,G,T,d_k]
    query_h = _batched(forward, matched + "query", heads, 1)  # [B,H,T,d_k]
    # dA = dO V^T: [B,G,H/G,T,d_v] @ [B,G,1,d_v,T] -> [B,H,T,T]
    grad_attention = (_grouped(grad_mixed, kv) @ np.swapaxes(value_kv, -1, -2)[:, :, None]
                      ).reshape(a.shape)
    # softmax reverse per block of query rows, one buffer: dZ = A * (dA - rowsum(dA * A));
    # a masked entry's dZ and dS are +0.0 (its score never reaches L)
    grad_scaled_scores = np.zeros(a.shape)
    grad_scores = np.zeros(a.shape)
    mask = causal_mask(tokens) if causal else None
    for first, end, keys in _blocks(tokens, causal):
        block = grad_scaled_scores[..., first:end, :keys]
        da, ab = grad_attention[..., first:end, :keys], a[..., first:end, :keys]
        np.multiply(da, ab, out=block)
        rowsum = np.sum(block, axis=-1, keepdims=True)
        np.subtract(da, rowsum, out=block)
        block *= ab
        if mask is not None:
            np.copyto(block, 0.0, where=mask[first:end, :keys])
        if p.given_scale is None:  # the chapter's division, bit for bit
            np.divide(block, math.sqrt(dk), out=grad_scores[..., first:end, :keys])
        else:
            np.multiply(block, p.given_scale, out=grad_scores[..., first:end, :keys])
    # dQ = dS K by query rows; dV = A^T dO and dK = dS^T Q (per query head) by key columns,
    # each over the rows that reach them (a causal key j: the rows from j on)
    grad_query = np.empty(query_h.shape)
    grad_value = np.empty((batch, heads, tokens, layer.d_v))
    grad_key = np.empty(query_h.shape)
    grouped_scores, grouped_mixed = _grouped(grad_scores, kv), _grouped(grad_mixed, kv)
    for first, end, keys in _blocks(tokens, causal):
        # [B,G,H/G,rows,keys] @ [B,G,1,keys,d_k] -> the block's rows of dQ
        _grouped(grad_query, kv)[..., first:end, :] = (
            grouped_scores[..., first:end, :keys] @ key_kv[:, :, None, :keys])
        reach = slice(first if causal else 0, None)  # rows that see keys first..end
        columns = slice(first, end)
        grad_value[..., columns, :] = np.swapaxes(a[..., reach, columns], -1, -2) @ (
            grad_mixed[..., reach, :])
        grad_key[..., columns, :] = np.swapaxes(grad_scores[..., reach, columns], -1, -2) @ (
            query_h[..., reach, :])
    del grouped_scores, grouped_mixed
    if p.rope is not None:  # back through the rotation: its transpose turns the other way
        grad_query = p.rope.rotate(grad_query, inverse=True)
        grad_key = p.rope.rotate(grad_key, inverse=True)
    head_grads = tuple(
        HeadGradients(grad_attention[:, h], grad_scaled_scores[:, h], grad_scores[:, h],
                      grad_query[:, h], grad_key[:, h], grad_value[:, h]) for h in range(heads))
    # [dQ | dK | dV] in the packed columns, a K/V head's the sum over its group
    qw, kw = heads * dk, kv * dk
    joined = np.empty((batch, tokens, qw + kw + kv * layer.d_v))
    _heads_axis(joined[..., :qw], heads)[...] = grad_query
    _heads_axis(joined[..., qw:qw + kw], kv)[...] = _grouped(grad_key, kv).sum(axis=2)
    _heads_axis(joined[..., qw + kw:], kv)[...] = _grouped(grad_value, kv).sum(axis=2)
    weight, _ = layer.packed()
    rows = x.reshape(batch * tokens, d_model)
    flat = joined.reshape(batch * tokens, joined.shape[-1])
    grad_input = (flat @ weight.T).reshape(x.shape)  # dX: the three paths in one GEMM
    grad_w = rows.T @ flat  # [d_model,BT] @ [BT, H*d_k + 2 G*d_k]
    cuts = (slice(0, qw), slice(qw, qw + kw), slice(qw + kw, None))
    w = [np.ascontiguousarray(grad_w[:, c]) for c in cuts]
    sums = flat.sum(axis=0) if any(b is not None for b in p.biases) else None
    b = [None if bias is None or sums is None else sums[c]
         for bias, c in zip(p.biases, cuts, strict=True)]
    grads_stacked = {"grad_attention": grad_attention, "grad_scaled_scores": grad_scaled_scores,
                     "grad_scores": grad_scores}
    return LayerGradients(head_grads, grad_concat, grad_input, w[0], w[1], w[2], b[0], b[1],
                          b[2], grad_out_weight, grad_out_bias, grads_stacked)
