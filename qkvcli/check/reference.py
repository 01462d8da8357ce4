"""The reference for RoPE and multi-head attention, and each known slip of them: qkv's
engine (:func:`qkvcli.attention.maths.rotate`, a
:class:`~qkvcli.attention.multihead.MultiHeadLayer`) on the arguments, or on arguments
transformed so that the engine computes what the slip computes (half-split pairs are
the engine's other layout, positions from 1 its offset plus one, heads split by a bare
reshape the engine's right split of permuted projections, ``W_O`` before the merge the
engine with ``W_O``'s off-diagonal blocks zeroed). The families in
:mod:`~qkvcli.check.rotary` and :mod:`~qkvcli.check.multihead` compare with them, and
:mod:`~qkvcli.check.engine` answers with them.
"""

from __future__ import annotations

import numpy as np

from qkvcli.attention.head import AttentionHead
from qkvcli.attention.maths import Rope, rotate
from qkvcli.attention.multihead import MultiHeadLayer
from qkvcli.core.arrays import Array

Bundle = tuple[Array, ...]


def engine_rope(x: Array, base: float, offset: int, bug: str = "",
                reverse: bool = False) -> Array:
    """qkv's rotation of ``x`` (``reverse``: turned back), or with ``bug``: ``half-split``
    pairs, positions ``from-one``, ``turned-back`` (the other way), ``frequency``
    (``base^(-i/d)``: the engine's with the root of the base), ``not-inverted`` (a
    reverse that turns forward again)."""
    rope = Rope(base ** 0.5 if bug == "frequency" else base, int(x.shape[-1]),
                "half" if bug == "half-split" else "interleaved",
                offset + (1 if bug == "from-one" else 0))
    inverse = reverse != (bug in ("turned-back", "not-inverted"))
    return rotate(x, rope, inverse=inverse)


def _reshaped(values: Array, heads: int) -> Array:
    """``[B,T,d]`` read as the bare reshape ``[B,H,T,d_h]`` reads it, laid out again the
    way a right split reads it: a right split of the result is the bare reshape's heads."""
    batch, tokens, width = values.shape
    split: Array = values.reshape(batch, heads, tokens, width // heads)
    return np.ascontiguousarray(np.swapaxes(split, 1, 2)).reshape(batch, tokens, width)


def _merged_bare(concat: Array, heads: int) -> Array:
    """The right concatenation ``[B,T,H*d_h]`` of the heads' outputs, merged instead by a
    bare reshape of ``[B,H,T,d_h]`` (the inverse of :func:`_reshaped`)."""
    batch, tokens, width = concat.shape
    per_head = np.swapaxes(concat.reshape(batch, tokens, heads, width // heads), 1, 2)
    merged: Array = np.ascontiguousarray(per_head).reshape(batch, tokens, width)
    return merged


def _layer(weights: tuple[Array, ...], heads: int, rope: bool, base: float, offset: int,
           bug: str = "") -> MultiHeadLayer:
    """The engine's layer for the arguments, or with ``bug``'s transformed parameters."""
    w_query, w_key, w_value, w_output = weights
    width = int(w_query.shape[1])
    turns = (rope and bug != "no-rope") or bug == "rope-always"
    rotary = Rope(base, width // heads, "half" if bug == "rope-half-split" else "interleaved",
                  offset) if turns else None
    scale = 1.0 / width ** 0.5 if bug == "scale-d_model" else None
    if bug == "wo-before-merge":  # each head's output through its own block of W_O alone
        size = width // heads
        blocks = np.kron(np.eye(heads), np.ones((size, size)))
        w_output = w_output * blocks
    head = AttentionHead.from_arrays(w_query, w_key, w_value, scale=scale, rope=rotary)
    return MultiHeadLayer.build(head, heads, out_weight=w_output)


def engine_mha(x: Array, weights: tuple[Array, ...], heads: int, causal: bool, rope: bool,
               base: float, offset: int, bug: str = "") -> Bundle:
    """``(weights, merged, output)`` of qkv's engine, or as a head with ``bug`` (one of
    :data:`~qkvcli.check.multihead.MHA_BUGS`) computes them."""
    with np.errstate(all="ignore"):
        if bug == "split-no-transpose":
            width = int(x.shape[-1])
            # The projections, split by a bare reshape, as the engine's right split of
            # permuted projections: X' = [P(X W_Q) | P(X W_K) | P(X W_V)], W = identity blocks.
            permuted = np.concatenate([_reshaped(x @ w, heads) for w in weights[:3]], axis=-1)
            eye = np.eye(width)
            zero = np.zeros((width, width))
            picks = tuple(np.vstack([eye if i == j else zero for j in range(3)])
                          for i in range(3))
            done = _layer((*picks, weights[3]), heads, rope, base, offset).forward(permuted,
                                                                                  causal)
            merged = _merged_bare(done.concat, heads)
            return done.attention, merged, merged @ weights[3]
        done = _layer(weights, heads, rope, base, offset, bug).forward(x, causal)
        if bug == "merge-no-transpose":
            merged = _merged_bare(done.concat, heads)
            return done.attention, merged, merged @ weights[3]
        if bug == "wo-before-merge":  # what is merged is already projected
            return done.attention, done.output, done.output
        return done.attention, done.concat, done.output


def engine_mha_backward(x: Array, weights: tuple[Array, ...], heads: int, causal: bool,
                        rope: bool, base: float, offset: int, grad_output: Array) -> Bundle:
    """The five gradients of qkv's engine."""
    layer = _layer(weights, heads, rope, base, offset)
    with np.errstate(all="ignore"):
        grads = layer.backward(x, layer.forward(x, causal), grad_output)
    assert grads.grad_out_weight is not None
    return (grads.grad_input, grads.grad_w_query, grads.grad_w_key, grads.grad_w_value,
            grads.grad_out_weight)
