"""The attention maths, each piece written once: the scale, the mask, the softmax and RoPE.

Everything that computes attention calls these: the engine (:mod:`qkvcli.attention.engine`),
the gradient check through it, and the diagnosis of a learner's slip, which composes
them into the wrong formulas it recognises. No I/O, no validation beyond what a piece
needs to be defined (a RoPE's description and its checks are :mod:`qkvcli.core.rope`).

- The scale: ``Z = S / sqrt(d_k)``, or ``Z = S * scale`` for a model that gives its own
  factor (:func:`scale`, the same function on the reverse pass: ``dS = dZ / sqrt(d_k)``).
- Soft-capping (Gemma 2): ``cap * tanh(Z / cap)`` and its reverse (:func:`softcap`,
  :func:`softcap_backward`), between the scale and the mask.
- Clipping of Q, K and V (OLMo's ``clip_qkv``) and its reverse (:func:`clip`,
  :func:`clip_backward`), right after the projections.
- RMSNorm of Q and K with a learned weight (Qwen3, OLMo 2, Gemma 3's ``q_norm``/``k_norm``)
  and its reverse to the input and the weight (:func:`rms_norm`, :func:`rms_norm_backward`),
  or LayerNorm with a learned weight and an optional bias (Phi, Persimmon, StableLM,
  Cohere) and its reverse to the input, the weight and the bias (:func:`layer_norm`,
  :func:`layer_norm_backward`); both described by :class:`QkNorm`, after the projections
  and before RoPE.
- ALiBi (BLOOM, MPT): ``slope_h * j`` added to the scaled scores, its reverse the
  identity (:func:`alibi_bias`; the slopes are the fixture's). Falcon adds it to the
  scores before the scale, its ``slope_h * j`` rounded to bfloat16 as transformers builds
  it (:class:`AlibiForm`, :func:`bfloat16`).
- The mask: a query at position ``i`` sees the keys ``j <= i`` (causal), and with a
  sliding window of ``w`` only those with ``i - j < w``; without the causal mask a window
  is two-sided, ``|i - j| < w`` (:func:`hidden`, :func:`key_span`).
- The softmax over the last axis with the row maximum subtracted first, and its reverse
  ``dZ = A * (dA - rowsum(dA * A))`` (:func:`softmax`, :func:`softmax_backward`).
- RoPE: position ``p`` turns pair ``i`` of the first ``dims`` coordinates by the angle
  ``p * theta^(-2i/dims)`` (:func:`rope_tables`, :func:`rotate`), or by ``p * f_i`` for
  a table of frequencies given as such (ESM's stored ``inv_freq``); a scaling (linear,
  dynamic, YaRN, LongRoPE, LLaMA 3) changes each pair's frequency and multiplies the
  turned pairs by an attention factor (:mod:`qkvcli.core.rope`'s
  :class:`~qkvcli.core.rope.RopeScaling` and
  :func:`~qkvcli.core.rope.inverse_frequencies`).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from qkvcli.core.arrays import Array
from qkvcli.core.record import Record
from qkvcli.core.rope import Rope, RopeScaling, attention_factor, inverse_frequencies

# --- the scale --------------------------------------------------------------------------


def score_factor(d_k: int, given: float | None) -> float:
    """The factor the scores are multiplied by: ``given``, else ``1/sqrt(d_k)``."""
    return 1.0 / math.sqrt(d_k) if given is None else given


def scale(values: Array, d_k: int, given: float | None, out: Array | None = None) -> Array:
    """``values / sqrt(d_k)`` (the chapter's division, not a multiplication by its
    inverse, which rounds differently), or ``values * given``; into ``out`` when given.
    The forward scales the scores with it, the reverse their gradient."""
    if given is None:
        return np.divide(values, math.sqrt(d_k), out=out)
    return np.multiply(values, given, out=out)


# --- soft-capping ------------------------------------------------------------------------


def softcap(values: Array, cap: float, out: Array | None = None) -> Array:
    """``cap * tanh(values / cap)``: Gemma 2's soft-capping of the scaled scores, which
    keeps every score inside ``(-cap, cap)``; into ``out`` when given."""
    out = np.divide(values, cap, out=out)
    np.tanh(out, out=out)
    out *= cap
    return out


def softcap_backward(capped: Array, grad: Array, cap: float, out: Array | None = None) -> Array:
    """The reverse of :func:`softcap` from its output ``capped``: ``dZ = dC * (1 - t^2)``
    with ``t = capped / cap`` (tanh's derivative); into ``out`` when given."""
    t = capped / cap
    np.multiply(t, t, out=t)
    np.subtract(1.0, t, out=t)
    return np.multiply(grad, t, out=out)


# --- clipping of Q, K and V --------------------------------------------------------------


def clip(values: Array, bound: float) -> Array:
    """``values`` clamped to ``[-bound, bound]`` (OLMo's ``clip_qkv`` of the projections),
    a new array."""
    return np.clip(values, -bound, bound)


def clip_backward(values: Array, grad: Array, bound: float, out: Array | None = None) -> Array:
    """The reverse of :func:`clip` at the unclipped ``values``: ``grad`` where
    ``-bound <= values <= bound`` (torch's ``clamp`` passes the bounds themselves), 0
    elsewhere; into ``out`` when given."""
    inside = np.abs(values) <= bound
    return np.multiply(grad, inside, out=out)


# --- RMSNorm of Q and K ------------------------------------------------------------------



class QkNorm(Record):
    """A learned norm of the projected Q and K (after their biases, before RoPE; with
    ``after_rope``, of the rotated Q and K, each head alone: Hunyuan V1).

    ``kind`` is ``"rms"`` (RMSNorm: Qwen3, OLMo 2, Gemma 3) or ``"layer"`` (LayerNorm,
    the mean subtracted first: Phi, Persimmon, StableLM, Cohere). ``query`` and ``key``
    are the weights, ``query_bias`` and ``key_bias`` the biases (LayerNorm only; ``None``:
    none), each shaped like its weight. ``span`` is ``"head"`` when each head's ``d_k``
    coordinates are normalised alone, with one weight ``[d_k]`` shared by every head
    (Qwen3, Gemma 3, Phi, Persimmon) or one per head, ``[H, d_k]`` and ``[G, d_k]``
    (StableLM, Cohere); ``"layer"`` when a token's whole query width ``H*d_k`` (key width
    ``G*d_k``) is normalised at once before the split into heads, weights ``[H*d_k]`` and
    ``[G*d_k]`` (OLMo 2). ``offset`` is added to the weight before it multiplies (Gemma
    3's ``1 + weight``: 1.0; else 0.0).
    """

    query: Array
    key: Array
    eps: float
    span: str = "head"
    offset: float = 0.0
    kind: str = "rms"
    query_bias: Array | None = None
    key_bias: Array | None = None
    after_rope: bool = False


def rms_norm(values: Array, weight: Array, eps: float, offset: float = 0.0) -> Array:
    """``values / sqrt(mean(values^2) + eps) * (offset + weight)`` over the last axis
    (``weight`` as wide as it), a new array."""
    inverse = 1.0 / np.sqrt(np.mean(values * values, axis=-1, keepdims=True) + eps)
    result: Array = (values * inverse) * (weight + offset)
    return result


def rms_norm_backward(values: Array, grad: Array, weight: Array, eps: float,
                      offset: float = 0.0) -> tuple[Array, Array]:
    """The reverse of :func:`rms_norm` at its input ``values`` for ``grad`` (shaped like
    ``values``): the gradient to the input, ``r (dn - n mean(dn n))`` with ``r`` the
    inverse root, ``n = values r`` and ``dn = grad (offset + weight)``; and the gradient to
    the weight, ``sum(grad n)`` over every axis but the last."""
    inverse = 1.0 / np.sqrt(np.mean(values * values, axis=-1, keepdims=True) + eps)
    normed = values * inverse
    grad_normed = grad * (weight + offset)
    grad_values: Array = inverse * (
        grad_normed - normed * np.mean(grad_normed * normed, axis=-1, keepdims=True))
    return grad_values, _summed_to(grad * normed, weight.shape)


def _summed_to(values: Array, shape: tuple[int, ...]) -> Array:
    """``values`` summed over every leading axis the parameter of ``shape`` is shared by."""
    result: Array = values.reshape(-1, *shape).sum(axis=0)
    return result


def layer_norm(values: Array, weight: Array, bias: Array | None, eps: float,
               offset: float = 0.0) -> Array:
    """``(values - mean) / sqrt(var + eps) * (offset + weight) + bias`` over the last axis
    (``var`` the mean square of ``values - mean``, as torch's ``LayerNorm``; ``weight``
    as wide as the axis, or ``[n, width]`` for the ``n`` axes before it: a weight per
    head), a new array."""
    centred = values - np.mean(values, axis=-1, keepdims=True)
    inverse = 1.0 / np.sqrt(np.mean(centred * centred, axis=-1, keepdims=True) + eps)
    result: Array = (centred * inverse) * (weight + offset)
    if bias is not None:
        result += bias
    return result


def layer_norm_backward(values: Array, grad: Array, weight: Array, eps: float,
                        offset: float = 0.0) -> tuple[Array, Array, Array]:
    """The reverse of :func:`layer_norm` at its input ``values`` for ``grad`` (shaped like
    ``values``): the gradient to the input, ``r (dn - mean(dn) - n mean(dn n))`` with
    ``r`` the inverse root, ``n`` the normalised values and ``dn = grad (offset +
    weight)``; to the weight, ``sum(grad n)``, and to the bias, ``sum(grad)``, each over
    the axes the parameter is shared by."""
    centred = values - np.mean(values, axis=-1, keepdims=True)
    inverse = 1.0 / np.sqrt(np.mean(centred * centred, axis=-1, keepdims=True) + eps)
    normed = centred * inverse
    grad_normed = grad * (weight + offset)
    grad_values: Array = inverse * (
        grad_normed - np.mean(grad_normed, axis=-1, keepdims=True)
        - normed * np.mean(grad_normed * normed, axis=-1, keepdims=True))
    return grad_values, _summed_to(grad * normed, weight.shape), _summed_to(grad, weight.shape)


# --- ALiBi ------------------------------------------------------------------------------



class AlibiForm(Record):
    """Where and how a layer's ALiBi bias enters the scores.

    ``scaled``: the bias is added to the raw scores and scaled with them,
    ``(S + bias) / sqrt(d_k)`` (Falcon's ``(scores + alibi) * inv_norm_factor``), rather
    than added to the scaled scores (BLOOM, MPT). ``rounding``: ``"bfloat16"`` when the
    slopes, the key positions and their products are each rounded to bfloat16 (Falcon's
    ``build_alibi_tensor``: ``slopes.bfloat16() * positions``); ``None``: exact.
    """

    scaled: bool = False
    rounding: str | None = None


def bfloat16(values: Array) -> Array:
    """``values`` rounded to float32, then to bfloat16 (round to nearest, ties to even, as
    torch converts), back in float64. Finite values only."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + np.uint64(0x7FFF) + ((bits >> np.uint64(16)) & np.uint64(1))) & np.uint64(
        0xFFFF0000)
    result: Array = rounded.astype(np.uint32).view(np.float32).astype(np.float64)
    return result


def alibi_bias(slopes: Array, start: int, stop: int, rounding: str | None = None) -> Array:
    """ALiBi's bias of keys ``start:stop`` for heads of ``slopes``: ``slope_h * j``,
    ``[H, 1, stop-start]`` (BLOOM's form: a query's row is shifted by a constant, which
    the softmax ignores, from the ``-slope_h * (i - j)`` of the paper); with ``rounding``
    ``"bfloat16"``, ``bf16(bf16(slope_h) * bf16(j))`` (the product of two bfloat16 numbers
    is exact in float64, then rounded once). Its reverse is the identity: the bias is a
    constant, ``dZ`` passes through it unchanged."""
    keys = np.arange(start, stop, dtype=np.float64)
    if rounding == "bfloat16":
        return bfloat16(bfloat16(slopes)[:, None, None] * bfloat16(keys)[None, None, :])
    result: Array = slopes[:, None, None] * keys[None, None, :]
    return result


# --- the mask ---------------------------------------------------------------------------


def key_span(first: int, end: int, tokens: int, causal: bool, window: int | None) -> tuple[int, int]:
    """The keys ``start:stop`` that queries ``first:end`` may see between them (what lies
    outside weighs exactly 0 in every one of those rows)."""
    if window is None:
        return 0, min(end, tokens) if causal else tokens
    start = max(0, first - window + 1)
    return start, min(end, tokens) if causal else min(tokens, end + window - 1)


def query_span(first: int, end: int, tokens: int, causal: bool,
               window: int | None) -> tuple[int, int]:
    """The queries ``start:stop`` that may see some key of ``first:end``: the mask read the
    other way (the reverse's ``dK`` and ``dV`` of those keys sum over these rows)."""
    if window is None:
        return (first, tokens) if causal else (0, tokens)
    start = first if causal else max(0, first - window + 1)
    return start, min(tokens, end + window - 1)


Mask = npt.NDArray[np.bool_]


def hidden(first: int, end: int, start: int, stop: int, causal: bool,
           window: int | None) -> Mask | None:
    """``True`` where query ``i`` (``first:end``) may not see key ``j`` (``start:stop``),
    ``[end-first, stop-start]``; ``None`` when it sees them all. Causal: ``j > i`` is
    hidden, and with a window also ``i - j >= window``; a window without the causal mask
    is two-sided: ``|i - j| >= window`` is hidden."""
    if not causal and window is None:
        return None
    rows = np.arange(first, end)[:, None]
    keys = np.arange(start, stop)[None, :]
    if causal:
        masked = keys > rows
        if window is not None:
            masked |= rows - keys >= window
    else:
        masked = np.abs(rows - keys) >= window
    return masked if masked.any() else None


def causal_mask(tokens: int, window: int | None = None, causal: bool = True) -> Mask:
    """``True`` where a query may not see a key, ``[tokens, tokens]`` (``causal=False``:
    a two-sided window's band alone, or nothing hidden without one)."""
    masked = hidden(0, tokens, 0, tokens, causal, window)
    return np.zeros((tokens, tokens), dtype=bool) if masked is None else masked


# --- the softmax ------------------------------------------------------------------------


def softmax(z: Array, out: Array | None = None, *, shift: bool = True) -> Array:
    """Softmax over the last axis, the row maximum subtracted first (``shift=False``
    leaves it out: the overflowing formula a diagnosis compares with); into ``out``.

    ``-inf`` entries weigh exactly 0; each row needs one finite entry. Empty axes give
    empty results."""
    out = exponentials(z, out, shift=shift)
    if out.size:
        out /= np.sum(out, axis=-1, keepdims=True)
    return out


def exponentials(z: Array, out: Array | None = None, *, shift: bool = True) -> Array:
    """The softmax's numerators over the last axis: ``exp(z - max)`` of each row (``shift=False``:
    ``exp(z)``); into ``out``. A ``-inf`` entry gives exactly 0."""
    if out is None:
        out = np.empty(z.shape)
    if z.size == 0:
        return out
    if shift:
        np.subtract(z, np.max(z, axis=-1, keepdims=True), out=out)  # largest entry 0: exp <= 1
    else:
        out[...] = z
    np.exp(out, out=out)
    return out


def softmax_backward(a: Array, grad_a: Array, out: Array | None = None) -> Array:
    """``dZ = A * (dA - rowsum(dA * A))``, the softmax's reverse, over the last axis;
    into ``out`` when given."""
    if out is None:
        out = np.empty(a.shape)
    np.multiply(grad_a, a, out=out)
    rowsum = np.sum(out, axis=-1, keepdims=True)
    np.subtract(grad_a, rowsum, out=out)
    out *= a
    return out


# --- RoPE -------------------------------------------------------------------------------

@lru_cache(maxsize=16)
def _tables(theta: float | None, dims: int, offset: int, end: int,
            precision: str = "float64", scaling: RopeScaling | None = None,
            given: tuple[float, ...] | None = None) -> tuple[Array, Array]:
    if precision == "float32":  # every step in float32, the tables widened after
        if given is not None:
            frequencies = np.asarray(given, dtype=np.float32)
        else:
            exponents = np.arange(0, dims, 2, dtype=np.float32) / np.float32(dims)
            frequencies = np.float32(1.0) / (np.float32(theta) ** exponents)
        narrow = np.arange(offset, offset + end, dtype=np.float32)[:, None] * frequencies
        cos, sin = (np.asarray(t, dtype=np.float64) for t in (np.cos(narrow), np.sin(narrow)))
    else:
        # a scaling's frequencies may depend on the sequence's length: its last position + 1
        angles = (np.arange(offset, offset + end, dtype=np.float64)[:, None]
                  * inverse_frequencies(Rope(theta, dims, scaling=scaling, frequencies=given),
                                        offset + end)[None, :])
        cos, sin = np.cos(angles), np.sin(angles)
        factor = 1.0 if scaling is None else attention_factor(scaling)
        if factor != 1.0:
            cos, sin = cos * factor, sin * factor
    cos.flags.writeable = sin.flags.writeable = False  # cached: shared by every caller
    return cos, sin


def rope_tables(rope: Rope, first: int, end: int) -> tuple[Array, Array]:
    """``cos`` and ``sin`` of the angles of positions ``first:end`` (after the offset),
    ``[end-first, dims/2]`` each, read-only, a scaling's attention factor multiplied in:
    rows of the table of a sequence of positions ``0:end``, made once per rope and
    length (a position's angle does not depend on the span; a ``dynamic`` or
    ``longrope`` scaling's depends on ``end``, the sequence's length, which every caller
    gives whole)."""
    cos, sin = _tables(rope.theta, rope.dims, rope.offset, end, rope.angles, rope.scaling,
                       rope.frequencies)
    return cos[first:], sin[first:]


def rotate(x: Array, rope: Rope, first: int = 0, inverse: bool = False) -> Array:
    """``x [..., T, d]`` (positions ``first .. first+T-1``) with each position's pairs
    turned; ``inverse``: turned back (the transpose, which carries a gradient from after
    the rotation to before it). A new array."""
    tokens = x.shape[-2]
    cos, sin = rope_tables(rope, first, first + tokens)
    if inverse:
        sin = -sin
    a_part, b_part = rope.pairs()
    a, b = x[..., a_part], x[..., b_part]
    # every coordinate turns: nothing to copy first
    out = np.empty(x.shape) if rope.dims == x.shape[-1] else np.array(x, dtype=np.float64)
    out[..., a_part] = a * cos - b * sin
    out[..., b_part] = b * cos + a * sin
    return out
