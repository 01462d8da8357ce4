"""The attention engine: one forward and one reverse pass over ``[B,H,T,d]`` for every layer qkv computes.

A single head is a layer of one head; grouped-query and multi-query K/V heads, RoPE
(half, interleaved, partial, with a position offset), clipping of the projections, a
learned RMSNorm of Q and K, a given score scale, ALiBi and soft-capping of the scores,
the causal mask with an optional sliding window (or a two-sided window without it),
biases and the output projection are all this one path. The maths of each step is
:mod:`qkvcli.attention.maths`'. A value projected from an input of its own
(MobileBERT's) is the packed product of the joined input ``[X_QK | X_V]`` with a block
matrix (:class:`~qkvcli.attention.head.AttentionHead`), each weight's gradient the rows
its branch reads.

:func:`forward` runs one packed ``X [W_Q|W_K|W_V]`` GEMM, takes the heads as
``[B,H,T,d]`` views (grouped K/V heads ``[B,G,T,d]`` broadcast over their query heads,
never copied), turns all heads by RoPE at once and makes one ``[B,H,T,T]`` score
product; the softmax and ``A V`` run per block of query rows (:data:`BLOCK_ROWS`), and a
masked block reaches only the keys its rows may see. :func:`backward` reverses it the
same way: ``dA = dO V^T`` whole, the softmax reverse and ``dQ = dS K`` per block of rows,
``dV = A^T dO`` and ``dK = dS^T Q`` per block of key columns over the rows that see them,
``[dQ|dK|dV]`` packed so that ``dX`` and ``[dW_Q|dW_K|dW_V]`` are one GEMM each.

What the blocks leave out is exactly zero in real arithmetic and in floating point (a
masked weight is ``exp(-inf) = 0``; ``-inf`` never wins a row's max): the published ``S``
and ``dA`` stay whole, masked entries of ``A``, ``dZ`` and ``dS`` are ``+0.0``.

A cheaper evaluation of the gradient check is this engine called on less: a subset of
the heads (:meth:`~qkvcli.attention.multihead.MultiHeadLayer.subset`), of the batch, or
only the query rows from ``first_row`` on (the keys stay whole). The callers validate
their inputs once; the passes here take them as given. No I/O.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from qkvcli.attention.maths import (
    AlibiForm,
    QkNorm,
    alibi_bias,
    clip,
    clip_backward,
    hidden,
    key_span,
    layer_norm,
    layer_norm_backward,
    query_span,
    rms_norm,
    rms_norm_backward,
    rotate,
    scale,
    softcap,
    softcap_backward,
    softmax,
    softmax_backward,
)
from qkvcli.core.arrays import Array
from qkvcli.core.projections import project, project_back
from qkvcli.core.record import Record
from qkvcli.core.rope import Rope


class AttentionForward(Record):
    """One head's intermediates of a forward pass, in the order they are computed.

    ``attention`` is the attention matrix ``A`` (``weights`` is only ever W).
    """

    query: Array
    key: Array
    value: Array
    scores: Array
    scaled_scores: Array
    attention: Array
    output: Array
    rotated_query: Array | None = None  # RoPE's Q and K, which the scores use
    rotated_key: Array | None = None
    causal: bool = False  # the mask the pass applied
    window: int | None = None


class HeadGradients(Record):
    """One head's reverse pass from ``dA`` to ``dQ``, ``dK``, ``dV``."""

    grad_attention: Array
    grad_scaled_scores: Array
    grad_scores: Array
    grad_query: Array
    grad_key: Array
    grad_value: Array


class LayerForward(Record):
    """Every head's forward pass, their concatenation ``C`` and the final output ``Y``.

    ``stacked``: the pass's own arrays, of which the heads' records are views:
    ``scores``, ``scaled_scores``, ``attention`` ``[B,H,T,T]``, ``query`` ``[B,H,T,d_k]``,
    ``key``, ``value`` ``[B,G,T,d]`` (and RoPE's ``rotated_*``), and ``projected``, the
    ``[B,T,H*d_k + G*d_k + G*d_v]`` array ``[Q|K|V]`` they are views of. ``causal`` and ``window``:
    the mask the pass applied (the reverse skips what it zeroed).
    """

    heads: tuple[AttentionForward, ...]
    concat: Array
    output: Array
    stacked: dict[str, Array]
    causal: bool = False
    window: int | None = None

    @property
    def attention(self) -> Array:
        """The attention matrix of every head, ``[B,H,T,T]``."""
        return self.stacked["attention"]


class ParameterGradients(Record):
    """The reverse pass on to the input and the projections' parameters; a bias gradient
    is ``None`` where there is no such bias."""

    grad_input: Array
    grad_w_query: Array
    grad_w_key: Array
    grad_w_value: Array
    grad_b_query: Array | None
    grad_b_key: Array | None
    grad_b_value: Array | None


class LayerGradients(ParameterGradients):
    """The reverse pass: the layer's input and full-width parameters, then per head.

    ``stacked`` as in :class:`LayerForward`: ``grad_attention``, ``grad_scaled_scores``,
    ``grad_scores`` as ``[B,H,T,T]``.
    """

    heads: tuple[HeadGradients, ...]
    grad_concat: Array
    grad_out_weight: Array | None
    grad_out_bias: Array | None
    stacked: dict[str, Array]
    grad_norm_query: Array | None = None  # a q/k norm's weights (QkNorm)
    grad_norm_key: Array | None = None
    grad_norm_query_bias: Array | None = None  # a q/k LayerNorm's biases
    grad_norm_key_bias: Array | None = None


class Layer(Protocol):
    """What the passes read of a layer: the function's description (a
    :class:`~qkvcli.attention.multihead.MultiHeadLayer`, or a head as a layer of one)."""

    @property
    def heads(self) -> int: ...
    @property
    def kv_heads(self) -> int: ...
    @property
    def d_k(self) -> int: ...
    @property
    def d_v(self) -> int: ...
    @property
    def rope(self) -> Rope | None: ...
    @property
    def given_scale(self) -> float | None: ...
    @property
    def window(self) -> int | None: ...
    @property
    def softcap(self) -> float | None: ...
    @property
    def alibi(self) -> Array | None: ...
    @property
    def alibi_form(self) -> AlibiForm: ...
    @property
    def clip(self) -> float | None: ...
    @property
    def qk_norm(self) -> QkNorm | None: ...
    @property
    def branch_biases(self) -> tuple[bool, bool, bool]: ...
    @property
    def out_weight(self) -> Array | None: ...
    @property
    def out_bias(self) -> Array | None: ...
    def packed(self) -> tuple[Array, Array | None]: ...
    def input_columns(self) -> tuple[slice, slice, slice]: ...


def heads_axis(flat: Array, heads: int) -> Array:
    """``[B,T,n*d]`` -> ``[B,n,T,d]``, a view: head ``h`` is the columns ``h*d:(h+1)*d``."""
    batch, tokens, width = flat.shape
    return np.swapaxes(flat.reshape(batch, tokens, heads, width // heads), 1, 2)


def merge_heads(per_head: Array) -> Array:
    """``[B,n,T,d]`` -> ``[B,T,n*d]``, a new array: head ``h`` back to the columns
    ``h*d:(h+1)*d``, the inverse of :func:`heads_axis` (the one merge of the heads)."""
    batch, heads, tokens, width = per_head.shape
    return np.ascontiguousarray(np.swapaxes(per_head, 1, 2)).reshape(batch, tokens, heads * width)


def _grouped(per_query: Array, kv_heads: int) -> Array:
    """``[B,H,...]`` -> ``[B,G,H/G,...]``, a view: query heads in their K/V head's group
    (a K/V head ``[B,G,1,...]`` (``[:, :, None]``) is broadcast over it, never copied)."""
    shape = per_query.shape
    return per_query.reshape(shape[0], kv_heads, shape[1] // kv_heads, *shape[2:])


BLOCK_ROWS = 128
"""Query rows per block of the softmax and the ``[T,T]`` products: a masked block reaches
only the keys its rows may see (the others weigh exactly 0), so a causal layer does about
half the work; a block's rows stay in cache."""


def _blocks(first_row: int, tokens: int, causal: bool,
            window: int | None) -> list[tuple[int, int, int, int]]:
    """``(first, end, start, stop)`` per block of query rows ``first:end`` (positions):
    the keys ``start:stop`` they see. Without a mask (no causal mask, no window) one block
    of every row and key."""
    if not causal and window is None:
        return [(first_row, tokens, 0, tokens)] if tokens > first_row else []
    return [(r, min(r + BLOCK_ROWS, tokens), *key_span(r, min(r + BLOCK_ROWS, tokens), tokens,
                                                       causal, window))
            for r in range(first_row, tokens, BLOCK_ROWS)]


def project_out(layer: Layer, concat: Array) -> Array:
    """``Y = C W_O + b_O``, or ``C`` itself without an output projection."""
    if layer.out_weight is None:
        return concat
    output = concat @ layer.out_weight  # [B,T,H*d_v] @ [H*d_v,E_out] -> [B,T,E_out]
    if layer.out_bias is not None:
        output += layer.out_bias
    return output


def _norm_parts(norm: QkNorm, qw: int,
                kw: int) -> tuple[tuple[slice, Array, Array | None], ...]:
    """The packed columns of Q and of K with the weight and bias that normalise each."""
    return (slice(0, qw), norm.query, norm.query_bias), (slice(qw, qw + kw), norm.key,
                                                          norm.key_bias)


def _by_norm_width(block: Array, width: int) -> Array:
    """``[B,T,n]`` -> ``[B,T,n/width,width]``: the spans a norm normalises, a view."""
    return block.reshape(*block.shape[:-1], block.shape[-1] // width, width)


def _norm_of(values: Array, weight: Array, bias: Array | None, norm: QkNorm) -> Array:
    """``values [..., width]`` normalised over the last axis by ``norm``'s kind."""
    if norm.kind == "layer":
        return layer_norm(values, weight, bias, norm.eps, norm.offset)
    return rms_norm(values, weight, norm.eps, norm.offset)


def normalised(used: Array, norm: QkNorm, qw: int, kw: int) -> Array:
    """``[Q|K|V]`` with Q and K normalised by ``norm`` (each head alone, or a token's
    whole width, as the weights are wide; a weight ``[n, d_k]`` is each head's own), V as
    it was: a new array."""
    out = np.array(used, dtype=np.float64, copy=True)
    for part, weight, bias in _norm_parts(norm, qw, kw):
        block = _by_norm_width(used[..., part], weight.shape[-1])  # [B,T,n,width]
        normed = _norm_of(block, weight, bias, norm)
        out[..., part] = normed.reshape(*block.shape[:2], part.stop - part.start)
    return out


def _heads_normalised(per_head: Array, weight: Array, bias: Array | None,
                      norm: QkNorm) -> Array:
    """``[B,n,T,d]`` heads each normalised alone (a norm after RoPE; a weight ``[n, d]``
    is each head's own), a new array."""
    # [B,n,T,d] -> [B,T,n,d]: a weight [d] or [n, d] broadcasts over tokens
    return np.swapaxes(_norm_of(np.swapaxes(per_head, 1, 2), weight, bias, norm), 1, 2)


def _heads_norm_back(values: Array, grad: Array, weight: Array, bias: Array | None,
                     norm: QkNorm) -> tuple[Array, Array, Array | None]:
    """The reverse of :func:`_heads_normalised` at its input ``values`` ``[B,n,T,d]``
    for ``grad``: the gradient to the input, the weight and the bias (``None``: none)."""
    swapped, upstream = np.swapaxes(values, 1, 2), np.swapaxes(grad, 1, 2)
    if norm.kind == "layer":
        grad_values, grad_weight, grad_bias = layer_norm_backward(
            swapped, upstream, weight, norm.eps, norm.offset)
        return np.swapaxes(grad_values, 1, 2), grad_weight, None if bias is None else grad_bias
    grad_values, grad_weight = rms_norm_backward(swapped, upstream, weight, norm.eps,
                                                 norm.offset)
    return np.swapaxes(grad_values, 1, 2), grad_weight, None


class Split(Record):
    """The heads a pass reads, from ``[Q|K|V]`` of some tokens: ``query`` ``[B,H,R,d_k]``
    (the query rows asked for), ``key`` ``[B,G,K,d_k]`` and ``value`` ``[B,G,K,d_v]``
    after the clipping and a q/k norm before RoPE; RoPE's ``rotated_*`` (``None``: no
    RoPE); ``normed``, a norm after RoPE's output (``normed_query``, ``normed_key``);
    and ``matched_*``, what the scores read (the last of those)."""

    query: Array
    key: Array
    value: Array
    rotated_query: Array | None
    rotated_key: Array | None
    normed: dict[str, Array]
    matched_query: Array
    matched_key: Array


def split_heads(layer: Layer, projected: Array, first_row: int = 0,
                key_first: int = 0) -> Split:
    """The heads of ``projected``, ``[Q|K|V]`` ``[B,K,H*d_k + G*d_k + G*d_v]`` of the
    tokens at positions ``key_first ..``: every token's K/V heads and the query rows
    from position ``first_row`` on, clipped, normalised and turned (RoPE at each row's
    own position) as the scores read them. The one split of every forward path: the
    whole pass, its rows from one on, a KV cache's step (one token, ``first_row`` =
    ``key_first`` its position)."""
    heads, kv, dk = layer.heads, layer.kv_heads, layer.d_k
    qw, kw = heads * dk, kv * dk
    # OLMo clips the projections; the stacked "projected" stays unclipped (the reverse
    # reads where they were inside the bound)
    used = projected if layer.clip is None else clip(projected, layer.clip)
    norm = layer.qk_norm
    if norm is not None and not norm.after_rope:  # after the biases, before RoPE
        used = normalised(used, norm, qw, kw)
    query = heads_axis(used[:, first_row - key_first:, :qw], heads)  # [B,H,R,d_k]
    key = heads_axis(used[..., qw:qw + kw], kv)  # [B,G,K,d_k]
    value = heads_axis(used[..., qw + kw:], kv)  # [B,G,K,d_v]
    rope = layer.rope
    rotated_query = rotated_key = None
    matched_query, matched_key = query, key
    if rope is not None:  # after the biases, before the scores (as HF applies it)
        matched_query = rotated_query = rotate(query, rope, first_row)
        matched_key = rotated_key = rotate(key, rope, key_first)
    normed: dict[str, Array] = {}
    if norm is not None and norm.after_rope:  # Hunyuan: each rotated head normalised
        matched_query = normed["normed_query"] = _heads_normalised(
            matched_query, norm.query, norm.query_bias, norm)
        matched_key = normed["normed_key"] = _heads_normalised(matched_key, norm.key,
                                                               norm.key_bias, norm)
    return Split(query, key, value, rotated_query, rotated_key, normed, matched_query,
                 matched_key)


def forward(layer: Layer, x: Array, causal: bool, window: int | None = None,
            first_row: int = 0, projected: Array | None = None,
            records: bool = True) -> LayerForward:
    """The layer's forward pass on a validated ``x [B,T,d_model]``, every head at once.

    ``first_row`` > 0 computes only the query rows from there on (their scores, weights,
    outputs; the keys and values stay whole): what a change at that row reaches.
    ``projected``: ``[Q|K|V]`` of ``x`` when the caller has it (the gradient check's
    evaluations project only what they change). ``records=False`` gives only ``C`` and
    ``Y`` (no heads' records, nothing in ``stacked``): each block of query rows then
    scores only the keys it sees, and no ``[B,H,T,T]`` array is made. Expects
    ``errstate`` set by the caller. ``window`` (default: the layer's own) limits a causal
    mask to the ``window`` latest keys, and without the causal mask lets a query see the
    keys less than ``window`` positions away on either side."""
    heads, kv = layer.heads, layer.kv_heads
    batch, tokens, _ = x.shape
    rows = tokens - first_row
    if window is None:
        window = layer.window
    if projected is None:
        weight, bias = layer.packed()
        projected = project(x, weight, bias=bias)  # [B,T, H*d_k + G*d_k + G*d_v]
    split = split_heads(layer, projected, first_row)
    query, key, value = split.query, split.key, split.value
    rotated_query, rotated_key = split.rotated_query, split.rotated_key
    matched_query, matched_key = split.matched_query, split.matched_key
    if not records:
        concat = mix(layer, matched_query, matched_key, value, first_row, causal, window)
        return LayerForward((), concat, project_out(layer, concat), {}, causal, window)
    # [B,G,H/G,R,d_k] @ [B,G,1,d_k,T] -> [B,G,H/G,R,T] -> [B,H,R,T]
    scores = (_grouped(matched_query, kv) @ np.swapaxes(matched_key, -1, -2)[:, :, None]
              ).reshape(batch, heads, rows, tokens)
    alibi = None if layer.alibi is None else alibi_bias(layer.alibi, 0, tokens,
                                                        layer.alibi_form.rounding)
    scaled_scores = _read(layer, np.array(scores), alibi)  # [H,1,T] over [B,H,R,T]
    attention = np.zeros(scaled_scores.shape)
    mixed = np.empty((batch, heads, rows, layer.d_v))
    grouped_z, grouped_a = _grouped(scaled_scores, kv), _grouped(attention, kv)
    grouped_mixed, shared_value = _grouped(mixed, kv), value[:, :, None]
    for first, end, start, stop in _blocks(first_row, tokens, causal, window):
        r0, r1 = first - first_row, end - first_row
        # the block's rows of every key (the published scores masked whole), weighed
        # over the keys they see
        grouped_mixed[..., r0:r1, :] = _weighed(
            grouped_z[..., r0:r1, :], grouped_a[..., r0:r1, start:stop],
            shared_value[..., start:stop, :], (first, end, 0, tokens, start, stop), causal,
            window)
    concat = merge_heads(mixed)
    per_kv = heads // kv
    per_head = tuple(
        AttentionForward(query[:, h], key[:, h // per_kv], value[:, h // per_kv], scores[:, h],
                         scaled_scores[:, h], attention[:, h], mixed[:, h],
                         None if rotated_query is None else rotated_query[:, h],
                         None if rotated_key is None else rotated_key[:, h // per_kv],
                         causal, window)
        for h in range(heads))
    stacked = {"scores": scores, "scaled_scores": scaled_scores, "attention": attention,
               "query": query, "key": key, "value": value, "projected": projected}
    if rotated_query is not None and rotated_key is not None:
        stacked.update(rotated_query=rotated_query, rotated_key=rotated_key)
    stacked.update(split.normed)  # the norm's output after RoPE, which the scores use
    return LayerForward(per_head, concat, project_out(layer, concat), stacked, causal, window)


def _read(layer: Layer, z: Array, bias: Array | None) -> Array:
    """Raw scores ``z`` made what the softmax reads, in place: ALiBi's ``bias`` (shaped
    for ``z``) added before the scale (Falcon's form) or after it, the scale, the soft
    cap. The one sequence of both forward paths."""
    scaled = layer.alibi_form.scaled
    if bias is not None and scaled:
        z += bias
    scale(z, layer.d_k, layer.given_scale, out=z)
    if bias is not None and not scaled:
        z += bias
    if layer.softcap is not None:
        softcap(z, layer.softcap, out=z)
    return z


def _weighed(z: Array, into: Array, seen: Array, span: tuple[int, int, int, int, int, int],
             causal: bool, window: int | None) -> Array:
    """One block of query rows ``first:end`` (``span``: those, the keys ``lo:hi`` that ``z``
    holds, the keys ``start:stop`` the rows see): ``z`` masked with ``-inf`` in place,
    the softmax of the keys seen into ``into``, and their mixture of the value rows
    ``seen`` ``[..., stop-start, d_v]`` (those keys' own)."""
    first, end, lo, hi, start, stop = span
    masked = hidden(first, end, lo, hi, causal, window)
    if masked is not None:
        np.copyto(z, -np.inf, where=masked)
    softmax(z[..., start - lo:stop - lo], out=into)
    # [...,rows,keys] @ [...,keys,d_v] -> the block's rows of the mixture
    mixed: Array = into @ seen
    return mixed


def mix(layer: Layer, query: Array, key: Array, value: Array, first_row: int, causal: bool,
        window: int | None, key_first: int = 0) -> Array:
    """``C`` ``[B,R,H*d_v]`` for the query rows ``query`` ``[B,H,R,d_k]`` at positions
    ``first_row ..`` (turned and normalised as the scores read them: :class:`Split`'s
    ``matched_*``), against the keys ``key`` ``[B,G,K,d_k]`` and values ``[B,G,K,d_v]``
    at positions ``key_first .. key_first+K-1``: each block of rows scoring, reading
    (ALiBi at the keys' own positions, the scale, the soft cap), masking and weighing
    only the keys it sees. The forward's steps on less, and a KV cache's step
    (:mod:`qkvcli.attention.decode`: one row against the keys it holds). The keys must
    hold every key the rows see (:func:`~qkvcli.attention.maths.key_span`); raises
    ``ValueError`` otherwise."""
    kv = layer.kv_heads
    batch, heads, rows, _ = query.shape
    tokens = key_first + key.shape[2]
    mixed = np.empty((batch, heads, rows, layer.d_v))
    grouped_query, grouped_mixed = _grouped(query, kv), _grouped(mixed, kv)
    shared_key, shared_value = np.swapaxes(key, -1, -2)[:, :, None], value[:, :, None]
    form = layer.alibi_form
    for first, end, start, stop in _blocks(first_row, tokens, causal, window):
        if start < key_first:
            raise ValueError(f"rows {first}:{end} see key {start}; the keys start at {key_first}")
        r0, r1 = first - first_row, end - first_row
        lo, hi = start - key_first, stop - key_first  # the keys seen, in the arrays given
        # [B,G,H/G,rows,d_k] @ [B,G,1,d_k,keys] -> the block's scores, read in place
        alibi = None if layer.alibi is None else alibi_bias(  # [H,1,keys] as [G,H/G,1,keys]
            layer.alibi, start, stop, form.rounding).reshape(kv, heads // kv, 1, stop - start)
        z = _read(layer, grouped_query[..., r0:r1, :] @ shared_key[..., lo:hi], alibi)
        grouped_mixed[..., r0:r1, :] = _weighed(z, z, shared_value[..., lo:hi, :],
                                                (first, end, start, stop, start, stop),
                                                causal, window)
    return merge_heads(mixed)


def backward(layer: Layer, x: Array, forward: LayerForward, grad_output: Array) -> LayerGradients:
    """The reverse of :func:`forward` (of every row) for ``dY`` (``[B,T,E_out]``), batched
    over heads as the forward is; a K/V head's gradients sum its group's. A soft-capped
    layer's reverse reads the forward's capped ``scaled_scores``. Expects ``errstate``
    set by the caller and ``dY`` shaped like the output."""
    heads, kv, dk = layer.heads, layer.kv_heads, layer.d_k
    batch, tokens, d_model = x.shape
    causal, window = forward.causal, forward.window
    grad_out_weight = grad_out_bias = None
    grad_concat = grad_output
    if layer.out_weight is not None:
        width = heads * layer.d_v
        rows = forward.concat.reshape(batch * tokens, width)  # C: [BT,H*d_v]
        flat_up = grad_output.reshape(batch * tokens, grad_output.shape[-1])  # dY_(BT)
        grad_concat = grad_output @ layer.out_weight.T  # [B,T,E_out] @ [E_out,H*d_v]
        grad_out_weight = rows.T @ flat_up  # [H*d_v,BT] @ [BT,E_out] -> [H*d_v,E_out]
        grad_out_bias = None if layer.out_bias is None else flat_up.sum(axis=0)
    stacked = forward.stacked
    norm = layer.qk_norm
    after_rope = norm is not None and norm.after_rope
    matched = "normed_" if after_rope else "" if layer.rope is None else "rotated_"
    a = stacked["attention"]
    grad_mixed = heads_axis(grad_concat, heads)  # [B,H,T,d_v]
    value_kv, key_kv = stacked["value"], stacked[matched + "key"]  # [B,G,T,d]
    query_h = stacked[matched + "query"]  # [B,H,T,d_k]
    # dA = dO V^T: [B,G,H/G,T,d_v] @ [B,G,1,d_v,T] -> [B,H,T,T]
    grad_attention = (_grouped(grad_mixed, kv) @ np.swapaxes(value_kv, -1, -2)[:, :, None]
                      ).reshape(a.shape)
    # softmax reverse per block of query rows; a masked entry's dZ and dS are +0.0 (its
    # score never reaches L)
    grad_scaled_scores = np.zeros(a.shape)
    grad_scores = np.zeros(a.shape)
    blocks = _blocks(0, tokens, causal, window)
    for first, end, start, stop in blocks:
        block = grad_scaled_scores[..., first:end, start:stop]
        softmax_backward(a[..., first:end, start:stop], grad_attention[..., first:end, start:stop],
                         out=block)
        if layer.softcap is not None:  # back through the cap, to the scaled scores
            softcap_backward(stacked["scaled_scores"][..., first:end, start:stop], block,
                             layer.softcap, out=block)
        masked = hidden(first, end, start, stop, causal, window)
        if masked is not None:
            np.copyto(block, 0.0, where=masked)
        scale(block, dk, layer.given_scale, out=grad_scores[..., first:end, start:stop])
    # dQ = dS K by query rows; dV = A^T dO and dK = dS^T Q (per query head) by key columns,
    # each over the rows that reach them
    grad_query = np.empty(query_h.shape)
    grad_value = np.empty((batch, heads, tokens, layer.d_v))
    grad_key = np.empty(query_h.shape)
    grouped_scores = _grouped(grad_scores, kv)
    for first, end, start, stop in blocks:
        # [B,G,H/G,rows,keys] @ [B,G,1,keys,d_k] -> the block's rows of dQ
        _grouped(grad_query, kv)[..., first:end, :] = (
            grouped_scores[..., first:end, start:stop] @ key_kv[:, :, None, start:stop])
        # the rows that see keys first..end (causal: from first on), within a window's reach
        reach = slice(*query_span(first, end, tokens, causal, window))
        columns = slice(first, end)
        grad_value[..., columns, :] = np.swapaxes(a[..., reach, columns], -1, -2) @ (
            grad_mixed[..., reach, :])
        grad_key[..., columns, :] = np.swapaxes(grad_scores[..., reach, columns], -1, -2) @ (
            query_h[..., reach, :])
    del grouped_scores
    grad_norms: list[Array | None] = [None, None, None, None]  # weights, then biases
    if norm is not None and after_rope:  # back through the norm of the rotated heads
        rotated = "" if layer.rope is None else "rotated_"
        grad_query, grad_norms[0], grad_norms[2] = _heads_norm_back(
            stacked[rotated + "query"], grad_query, norm.query, norm.query_bias, norm)
        grad_key, grad_norms[1], grad_norms[3] = _keys_norm_back(
            stacked[rotated + "key"], grad_key, norm, heads // kv)
    if layer.rope is not None:  # back through the rotation: its transpose turns the other way
        grad_query = rotate(grad_query, layer.rope, inverse=True)
        grad_key = rotate(grad_key, layer.rope, inverse=True)
    head_grads = tuple(
        HeadGradients(grad_attention[:, h], grad_scaled_scores[:, h], grad_scores[:, h],
                      grad_query[:, h], grad_key[:, h], grad_value[:, h]) for h in range(heads))
    # [dQ | dK | dV] in the packed columns, a K/V head's the sum over its group
    qw, kw = heads * dk, kv * dk
    joined = np.empty((batch, tokens, qw + kw + kv * layer.d_v))
    heads_axis(joined[..., :qw], heads)[...] = grad_query
    heads_axis(joined[..., qw:qw + kw], kv)[...] = _grouped(grad_key, kv).sum(axis=2)
    heads_axis(joined[..., qw + kw:], kv)[...] = _grouped(grad_value, kv).sum(axis=2)
    if norm is not None and not after_rope:  # back through the norm, to what it normalised
        before = stacked["projected"] if layer.clip is None else clip(stacked["projected"],
                                                                       layer.clip)
        for i, (part, norm_weight, norm_bias) in enumerate(_norm_parts(norm, qw, kw)):
            width = norm_weight.shape[-1]
            values = _by_norm_width(before[..., part], width)
            upstream = _by_norm_width(np.ascontiguousarray(joined[..., part]), width)
            if norm.kind == "layer":
                grad_before, grad_norms[i], grad_bias = layer_norm_backward(
                    values, upstream, norm_weight, norm.eps, norm.offset)
                grad_norms[2 + i] = None if norm_bias is None else grad_bias
            else:
                grad_before, grad_norms[i] = rms_norm_backward(values, upstream, norm_weight,
                                                               norm.eps, norm.offset)
            joined[..., part] = grad_before.reshape(batch, tokens, part.stop - part.start)
    if layer.clip is not None:  # back through the clipping, to the projections
        clip_backward(stacked["projected"], joined, layer.clip, out=joined)
    weight, _ = layer.packed()
    flat = joined.reshape(batch * tokens, joined.shape[-1])
    # dX: the three paths in one GEMM; [dW_Q|dW_K|dW_V] in another
    grad_rows, grad_w = project_back(x.reshape(batch * tokens, d_model), flat, weight)
    grad_input = grad_rows.reshape(x.shape)
    cuts = (slice(0, qw), slice(qw, qw + kw), slice(qw + kw, None))
    # each weight's gradient in the rows of the columns of X its branch reads (a value
    # input's block matrix has zeros elsewhere, which are no parameters)
    w = [np.ascontiguousarray(grad_w[rows, c])
         for rows, c in zip(layer.input_columns(), cuts, strict=True)]
    present = layer.branch_biases
    sums = flat.sum(axis=0) if any(present) else None
    b = [sums[c] if has and sums is not None else None
         for has, c in zip(present, cuts, strict=True)]
    grads_stacked = {"grad_attention": grad_attention, "grad_scaled_scores": grad_scaled_scores,
                     "grad_scores": grad_scores}
    return LayerGradients(grad_input, w[0], w[1], w[2], b[0], b[1], b[2], head_grads,
                          grad_concat, grad_out_weight, grad_out_bias, grads_stacked, *grad_norms)


def _keys_norm_back(key: Array, grad_key: Array, norm: QkNorm,
                    per_kv: int) -> tuple[Array, Array, Array | None]:
    """The reverse of a norm after RoPE of the K/V heads ``key`` ``[B,G,T,d]`` for the
    gradient of each query head's view of them ``[B,H,T,d]`` (the norm's reverse is
    linear in its upstream, so each view goes back alone and a K/V head's sums them
    later): the gradient per query head, then the weight's and the bias's, each summed
    over the group where the parameter is a K/V head's own row."""
    def per_query(parameter: Array | None) -> Array | None:
        return None if parameter is None or parameter.ndim == 1 else np.repeat(
            parameter, per_kv, axis=0)

    weight = per_query(norm.key)
    bias = per_query(norm.key_bias)
    grad, grad_weight, grad_bias = _heads_norm_back(
        np.repeat(key, per_kv, axis=1), grad_key, norm.key if weight is None else weight,
        norm.key_bias if bias is None else bias, norm)

    def per_kv_head(summed: Array, own: Array) -> Array:
        if own.ndim == 1:
            return summed
        result: Array = summed.reshape(own.shape[0], per_kv, own.shape[-1]).sum(axis=1)
        return result

    return grad, per_kv_head(grad_weight, norm.key), (
        None if grad_bias is None or norm.key_bias is None
        else per_kv_head(grad_bias, norm.key_bias))


def loss(forward: LayerForward, upstream: Array) -> float:
    """``L = <Y, U>``: the scalar whose gradient :func:`backward` gives for ``dY = U``."""
    with np.errstate(over="ignore", invalid="ignore"):
        return float(np.sum(forward.output * upstream))
