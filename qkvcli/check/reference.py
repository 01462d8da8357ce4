"""Each known slip of a head, of RoPE and of multi-head attention, and the reference for
RoPE and multi-head attention: qkv's engine (an
:class:`~qkvcli.attention.head.AttentionHead`, :func:`qkvcli.attention.maths.rotate`, a
:class:`~qkvcli.attention.multihead.MultiHeadLayer`) on the arguments, or on arguments
transformed so that the engine computes what the slip computes, or with one part
changed. A head's slips are its scale, mask or softmax (or a step of the reverse) given
the slip's version of that one step. Half-split pairs are the engine's other layout;
positions from 1 its offset plus one; cos and sin swapped a quarter turn of each pair,
then the turn back (the angle ``π/2 - θ``); a layer's RoPE slip the engine without RoPE
given queries and keys turned by the slip's rotation; heads split by a bare reshape or by strided
columns the engine's right split of permuted projections; ``W_O`` before the merge the
engine with ``W_O``'s off-diagonal blocks zeroed; RoPE on V the engine given projections
whose values are turned. The families of :mod:`~qkvcli.check.values` compare with them
(through :mod:`~qkvcli.check.kinds`), and :mod:`~qkvcli.check.engine` answers with them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from qkvcli.attention import engine
from qkvcli.attention.engine import LayerForward, heads_axis, merge_heads
from qkvcli.attention.errors import HeadCountMismatch
from qkvcli.attention.head import AttentionHead
from qkvcli.attention.maths import (
    Mask,
    causal_mask,
    rotate,
    scale,
    score_factor,
    softmax,
    softmax_backward,
)
from qkvcli.attention.multihead import MultiHeadLayer
from qkvcli.check import relate
from qkvcli.check.cases import Run
from qkvcli.check.diagnose import Bundle, slip_clause
from qkvcli.core.arrays import Array
from qkvcli.core.projections import project, project_back
from qkvcli.core.results import Clause
from qkvcli.core.rope import Rope
from qkvcli.protocol.wire import (
    HEAD_BACKWARD_NAMES,
    HEAD_FORWARD_NAMES,
    MHA_BACKWARD_NAMES,
    MHA_FORWARD_NAMES,
    ROPE_REVERSE_NAMES,
)

ROTATION_BUGS = ("base-ignored", "base-squared", "cos-sin-swapped", "offset-ignored",
                 "float32-angles")
"""The slips the rotation and its reverse share (beside their own)."""
ROPE_BUGS = ("half-split", "from-one", "turned-back", "frequency", *ROTATION_BUGS)
"""The slips of the rotation, in the order they are tried."""
REVERSE_BUGS = ("not-inverted", "half-split", "from-one", "frequency", *ROTATION_BUGS)
"""The slips of the reverse, in the order they are tried."""
IGNORED_BASE = 10000.0
"""The base an implementation that ignores the one given uses (the usual default)."""
LAYER_ROPE_BUGS = ("half-split", "turned-back", "frequency", *ROTATION_BUGS[:3],
                   ROTATION_BUGS[4])
"""The rotation's slips a multi-head layer's RoPE can make, its queries and keys turned
by the slip's rotation (``rope-half-split``, ...). Positions counted from 1 and an ignored
offset are not among them: a common shift of every position leaves RoPE's scores as they
are (the ``rope`` family judges the offset)."""
MHA_BUGS = ("split-no-transpose", "merge-no-transpose", "strided-heads", "merge-reversed",
            "wo-before-merge", "scale-d_model", "unscaled", "one-softmax", "no-mask",
            "always-mask", "mask-one-head", *(f"rope-{bug}" for bug in LAYER_ROPE_BUGS),
            "no-rope", "rope-always", "rope-on-value")
"""The multi-head slips, in the order they are tried."""
MHA_BACKWARD_BUGS = ("wo-gradient-transposed", "input-first-head", "input-last-head",
                     "first-item", "last-item", "rope-backward-ignored",
                     "rope-backward-not-inverted")
"""The slips of a multi-head backward alone (its forward right), in the order they are
tried."""


def _quarter_turn(x: Array, rope: Rope, back: bool) -> Array:
    """Each pair ``(a, b)`` turned by a right angle: ``(-b, a)``, or ``(b, -a)`` ``back``."""
    first, second = rope.pairs()
    sign = -1.0 if back else 1.0
    out = np.array(x, dtype=np.float64, copy=True)
    out[..., first] = -sign * x[..., second]
    out[..., second] = sign * x[..., first]
    return out


def engine_rope(x: Array, base: float, offset: int, bug: str = "",
                reverse: bool = False) -> Array:
    """qkv's rotation of ``x`` (``reverse``: turned back), or with ``bug``: ``half-split``
    pairs, positions ``from-one``, ``turned-back`` (the other way), ``frequency``
    (``base^(-i/d)``: the engine's with the root of the base), ``not-inverted`` (a
    reverse that turns forward again), ``base-ignored`` (:data:`IGNORED_BASE` whatever
    the base), ``base-squared``, ``cos-sin-swapped`` (each angle ``θ`` turned by ``π/2 -
    θ``: a quarter turn, then the turn back), ``offset-ignored`` (positions from 0),
    ``float32-angles`` (the angles and their cosines and sines in float32)."""
    theta = {"frequency": base ** 0.5, "base-squared": base ** 2.0,
             "base-ignored": IGNORED_BASE}.get(bug, base)
    start = {"from-one": offset + 1, "offset-ignored": 0}.get(bug, offset)
    rope = Rope(theta, int(x.shape[-1]), "half" if bug == "half-split" else "interleaved",
                start, "float32" if bug == "float32-angles" else "float64")
    inverse = reverse != (bug in ("turned-back", "not-inverted", "cos-sin-swapped"))
    with np.errstate(all="ignore"):
        if bug == "cos-sin-swapped":
            x = _quarter_turn(x, rope, back=reverse)
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
    merged: Array = np.ascontiguousarray(heads_axis(concat, heads)).reshape(concat.shape)
    return merged


def _strided(width: int, heads: int) -> Array:
    """The column a strided split gives head ``h``'s feature ``j`` (``j H + h``), at the
    engine's place of it (``h d_h + j``)."""
    size = width // heads
    return np.array([j * heads + h for h in range(heads) for j in range(size)])


def _layer(weights: tuple[Array, ...], heads: int, rope: bool, base: float, offset: int,
           bug: str = "") -> MultiHeadLayer:
    """The engine's layer for the arguments, or with ``bug``'s transformed parameters."""
    w_query, w_key, w_value, w_output = weights
    width = int(w_query.shape[1])
    if heads < 1 or width % heads or int(w_value.shape[1]) % heads:
        raise HeadCountMismatch(heads, width, int(w_value.shape[1]))
    turns = (rope and bug != "no-rope") or bug == "rope-always"
    rotary = Rope(base, width // heads, "interleaved", offset) if turns else None
    scale = {"scale-d_model": score_factor(width, None), "unscaled": 1.0}.get(bug)
    if bug == "wo-before-merge":  # each head's output through its own block of W_O alone
        size = width // heads
        blocks = np.kron(np.eye(heads), np.ones((size, size)))
        w_output = w_output * blocks
    if bug == "strided-heads":  # the engine's head h reads the strided columns
        columns = _strided(width, heads)
        w_query, w_key, w_value = (w[:, columns] for w in (w_query, w_key, w_value))
    head = AttentionHead.from_arrays(w_query, w_key, w_value, scale=scale, rope=rotary)
    return MultiHeadLayer.build(head, heads, out_weight=w_output)


def checked_layer(weights: tuple[Array, ...], heads: int, base: float) -> MultiHeadLayer:
    """The engine's multi-head layer with RoPE from position 0 (a KV cache's layer), its
    arguments refused as ``mha_forward``'s are: a head count that does not divide the
    width, an odd head width, ``W_O`` of the wrong rows (the engine's typed errors)."""
    return _layer(weights, heads, True, base, 0)


def _one_softmax(layer: MultiHeadLayer, done: LayerForward) -> tuple[Array, Array]:
    """The weights and merged heads when one softmax normalises each query's scores over
    every head's keys together (the masked scaled scores, heads beside keys)."""
    z = done.stacked["scaled_scores"]  # [B,H,T,T], masked by the engine
    batch, heads, tokens, _ = z.shape
    joint = np.swapaxes(z, 1, 2).reshape(batch, tokens, heads * tokens)
    weights = np.swapaxes(softmax(joint).reshape(batch, tokens, heads, tokens), 1, 2)
    return weights, merge_heads(weights @ done.stacked["value"])


def _value_turned(layer: MultiHeadLayer, x: Array, causal: bool) -> LayerForward:
    """The engine given projections whose values are turned by RoPE as Q and K are."""
    weight, bias = layer.packed()
    projected = project(x, weight, bias=bias)
    width = layer.heads * layer.d_k
    if layer.rope is not None:
        values = heads_axis(projected[..., 2 * width:], layer.heads)
        heads_axis(projected[..., 2 * width:], layer.heads)[...] = rotate(values, layer.rope)
    return engine.forward(layer, x, causal, projected=projected)


def _slip_turned(weights: tuple[Array, ...], heads: int, x: Array, causal: bool, base: float,
                 offset: int, slip: str) -> LayerForward:
    """The engine without RoPE, given projections whose queries and keys are turned by
    the rotation with ``slip`` (one of :data:`LAYER_ROPE_BUGS`)."""
    layer = _layer(weights, heads, False, base, offset)
    weight, bias = layer.packed()
    projected = project(x, weight, bias=bias)
    width = layer.heads * layer.d_k
    for start in (0, width):  # the queries' columns, then the keys'
        turned = heads_axis(projected[..., start:start + width], layer.heads)
        turned[...] = engine_rope(np.array(turned), base, offset, slip)
    return engine.forward(layer, x, causal, projected=projected)


def engine_mha(x: Array, weights: tuple[Array, ...], heads: int, causal: bool, rope: bool,
               base: float, offset: int, bug: str = "") -> Bundle:
    """``(weights, merged, output)`` of qkv's engine, or as a layer with ``bug`` (one of
    :data:`MHA_BUGS`) computes them."""
    w_output = weights[3]
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
            done = _layer((*picks, w_output), heads, rope, base, offset).forward(permuted,
                                                                                causal)
            merged = _merged_bare(done.concat, heads)
            return done.attention, merged, merged @ w_output
        layer = _layer(weights, heads, rope, base, offset, bug)
        masked = {"no-mask": False, "always-mask": True}.get(bug, causal)
        if rope and bug.removeprefix("rope-") in LAYER_ROPE_BUGS:
            done = _slip_turned(weights, heads, np.asarray(x, dtype=np.float64), masked, base,
                                offset, bug.removeprefix("rope-"))
        elif bug == "rope-on-value":
            done = _value_turned(layer, np.asarray(x, dtype=np.float64), masked)
        else:
            done = layer.forward(x, masked)
        attention, merged = done.attention, done.concat
        if bug == "merge-no-transpose":
            merged = _merged_bare(done.concat, heads)
        elif bug == "strided-heads":  # merged back into the strided columns
            merged = np.empty_like(done.concat)
            merged[..., _strided(merged.shape[-1], heads)] = done.concat
        elif bug == "merge-reversed":
            merged = merge_heads(heads_axis(done.concat, heads)[:, ::-1])
        elif bug == "wo-before-merge":  # what is merged is already projected
            return done.attention, done.output, done.output
        elif bug == "one-softmax":
            attention, merged = _one_softmax(layer, done)
        elif bug == "mask-one-head" and causal:  # head 0 masked, the others not
            unmasked = layer.forward(x, False)
            attention = np.array(unmasked.attention)
            attention[:, 0] = done.attention[:, 0]
            per_head = np.array(heads_axis(unmasked.concat, heads))
            per_head[:, 0] = heads_axis(done.concat, heads)[:, 0]
            merged = merge_heads(per_head)
        else:
            return attention, merged, done.output
        return attention, merged, merged @ w_output


def _input_of_head(layer: MultiHeadLayer, grads: engine.LayerGradients, head: int) -> Array:
    """``dX`` through one head alone: its ``dQ W_Q^T + dK W_K^T + dV W_V^T``."""
    size = layer.d_k
    columns = slice(head * size, (head + 1) * size)
    one = grads.heads[head]
    w_query, w_key, w_value = layer.projections.weights
    # [B,T,d_h] @ [d_h,d_model] -> [B,T,d_model], for each branch of the head
    found: Array = (one.grad_query @ w_query[:, columns].T + one.grad_key @ w_key[:, columns].T
                    + one.grad_value @ w_value[:, columns].T)
    return found


def engine_mha_backward(x: Array, weights: tuple[Array, ...], heads: int, causal: bool,
                        rope: bool, base: float, offset: int, grad_output: Array,
                        bug: str = "") -> Bundle:
    """The five gradients of qkv's engine, or as a backward with ``bug`` (one of
    :data:`MHA_BACKWARD_BUGS`) gives them: ``wo-gradient-transposed`` (``dW_O`` as
    ``(Cᵀ dY)ᵀ``), ``input-first-head``/``input-last-head`` (``dX`` through one head
    only), ``first-item``/``last-item`` (every weight gradient from one batch item, the
    engine's on that item alone), ``rope-backward-ignored`` (``dQ`` and ``dK`` not turned
    back through RoPE: the engine without RoPE, run on queries and keys turned as the
    forward turns them), ``rope-backward-not-inverted`` (``dQ`` and ``dK`` turned forward
    again: those gradients turned by the engine's rotation, then taken back through the
    projections by :func:`~qkvcli.core.projections.project_back`)."""
    layer = _layer(weights, heads, rope, base, offset)
    with np.errstate(all="ignore"):
        if bug in ("rope-backward-ignored", "rope-backward-not-inverted") and rope:
            return _rope_backward_slip(weights, heads, np.asarray(x, dtype=np.float64), causal,
                                       base, offset, grad_output, bug)
        grads = layer.backward(x, layer.forward(x, causal), grad_output)
        assert grads.grad_out_weight is not None
        found = [grads.grad_input, grads.grad_w_query, grads.grad_w_key, grads.grad_w_value,
                 grads.grad_out_weight]
        if bug == "wo-gradient-transposed":
            found[4] = found[4].T
        elif bug in ("input-first-head", "input-last-head"):
            found[0] = _input_of_head(layer, grads, 0 if bug == "input-first-head" else heads - 1)
        elif bug in ("first-item", "last-item") and x.shape[0]:
            item = slice(0, 1) if bug == "first-item" else slice(-1, None)
            one = layer.backward(x[item], layer.forward(x[item], causal), grad_output[item])
            assert one.grad_out_weight is not None
            found[1:] = [one.grad_w_query, one.grad_w_key, one.grad_w_value,
                         one.grad_out_weight]
    return tuple(found)


def _rope_backward_slip(weights: tuple[Array, ...], heads: int, x: Array, causal: bool,
                        base: float, offset: int, grad_output: Array, bug: str) -> Bundle:
    """The five gradients of a backward that leaves ``dQ`` and ``dK`` as the rotated
    queries' and keys' (``rope-backward-ignored``) or turns them forward once more
    (``rope-backward-not-inverted``)."""
    unturned = _layer(weights, heads, False, base, offset)
    grads = unturned.backward(x, _slip_turned(weights, heads, x, causal, base, offset, ""),
                              grad_output)
    assert grads.grad_out_weight is not None
    if bug == "rope-backward-ignored":
        return (grads.grad_input, grads.grad_w_query, grads.grad_w_key, grads.grad_w_value,
                grads.grad_out_weight)
    by_head = [np.stack([getattr(g, name) for g in grads.heads], axis=1)  # [B,H,T,d]
               for name in ("grad_query", "grad_key", "grad_value")]
    turned = [engine_rope(by_head[0], base, offset), engine_rope(by_head[1], base, offset),
              by_head[2]]
    batch, tokens, width = x.shape
    joined = np.concatenate([merge_heads(g) for g in turned], axis=-1)
    weight, _ = unturned.packed()
    # [BT,3W] @ [3W,d] -> dX; [d,BT] @ [BT,3W] -> [dW_Q|dW_K|dW_V]
    grad_rows, grad_w = project_back(x.reshape(batch * tokens, width),
                                     joined.reshape(batch * tokens, -1), weight)
    size = grad_w.shape[1] // 3
    return (grad_rows.reshape(x.shape), grad_w[:, :size], grad_w[:, size:2 * size],
            grad_w[:, 2 * size:], grads.grad_out_weight)


# --- an attention head's slips: the engine, given a wrong part --------------------------

HIDDEN = -1e9  # what a learner's mask often writes instead of -inf (rows stay finite)


def _hidden(tokens: int, causal: bool, bug: str) -> Mask | None:
    """What a head with ``bug`` hides from each query, ``[T,T]`` (``None``: nothing): the
    causal mask, with the diagonal too (``diagonal``), transposed (``hides-past``: the
    earlier keys ``j < i``, ``np.tril`` for ``np.triu``), or always (``always-mask``)."""
    if not ((causal and bug != "no-mask") or bug == "always-mask"):
        return None
    hidden = causal_mask(tokens)
    if bug == "diagonal":
        return hidden | np.eye(tokens, dtype=bool)
    if bug == "hides-past":
        earlier: Mask = hidden.T
        return earlier
    return hidden


def _swapped(values: Array) -> Array:
    """The last two axes swapped: ``[B,T,T]`` queries for keys."""
    return np.swapaxes(values, -1, -2)


def _weights(z: Array, bug: str) -> Array:
    """The engine's softmax of the masked scores ``z``, or a slip of it: over the query
    axis (``query-axis``: the softmax of the swapped scores, swapped back), with the
    whole tensor's maximum subtracted (``global-max``: the unshifted softmax of ``z``
    minus that maximum), or with no maximum at all (``unstable``)."""
    if bug == "query-axis":
        return _swapped(softmax(_swapped(z)))
    if bug == "global-max" and z.size:
        return softmax(z - np.max(z), shift=False)
    return softmax(z, shift=bug != "unstable")


def variant_forward(x: Array, weights: tuple[Array, ...], causal: bool, bug: str = "") -> Bundle:
    """``(scores, weights, output)`` as a head with ``bug`` computes them ("" is correct):
    ``unscaled``, ``by-d_k``, ``by-root-d_model``, ``transposed-scores`` (``S = K Qᵀ``),
    ``diagonal`` (the mask hides it too), ``hides-past`` (the mask hides the earlier keys
    instead of the later ones), ``after-softmax``, ``no-mask`` (causal ignored),
    ``always-mask``, ``query-axis``, ``global-max``, ``unstable`` (no row max). Each is
    qkv's engine given a wrong part: its head on swapped projections or with another mask
    flag, or its raw scores and values with one later step (the scale, the mask, the
    softmax) the slip's, the steps after it :mod:`qkvcli.attention.maths`'."""
    w_query, w_key, w_value = weights
    if bug == "transposed-scores":  # S = K Qᵀ: the right maths on swapped projections
        w_query, w_key = w_key, w_query
    with np.errstate(all="ignore"):
        head = AttentionHead.from_arrays(w_query, w_key, w_value)
        plain, d_k = head.forward(x, False), head.d_k
        if bug in ("", "transposed-scores", "no-mask", "always-mask"):
            done = head.forward(x, {"no-mask": False, "always-mask": True}.get(bug, causal))
            return scale(plain.scores, d_k, None), done.attention, done.output
        # The scaling slips are the one scale given a wrong part: dividing by d_k is the
        # scale of a head d_k * d_k wide (exactly: the root of a square is exact), by
        # √d_model that of a head d_model wide, and leaving the scores unscaled is a
        # given factor of 1.
        width = {"by-d_k": d_k * d_k, "by-root-d_model": int(x.shape[-1])}.get(bug, d_k)
        scores = scale(plain.scores, width, 1.0 if bug == "unscaled" else None)
        hidden = _hidden(int(x.shape[1]), causal, bug)
        z = scores
        if hidden is not None and bug != "after-softmax":
            z = np.where(hidden, HIDDEN if bug == "diagonal" else -np.inf, scores)
        attention = _weights(z, bug)
        if hidden is not None and bug == "after-softmax":
            attention = np.where(hidden, 0.0, attention)
        return scores, attention, attention @ plain.value  # [B,T,T] @ [B,T,h] -> [B,T,h]


def _softmax_reverse(a: Array, grad_a: Array, bug: str) -> Array:
    """The engine's softmax backward, or a slip of it: its row sum over the query axis
    (``rowsum-axis``: the engine's on the swapped arrays, swapped back), without the row
    sum (``no-rowsum``: ``A * dA``), or only the Jacobian's diagonal (``elementwise``:
    ``A (1 - A) dA``, the row sum of the element itself)."""
    if bug == "rowsum-axis":
        return _swapped(softmax_backward(_swapped(a), _swapped(grad_a)))
    if bug == "no-rowsum":
        return a * grad_a
    if bug == "elementwise":
        return a * grad_a - a * (a * grad_a)
    return softmax_backward(a, grad_a)


def variant_backward(x: Array, weights: tuple[Array, ...], causal: bool, grad_output: Array,
                     bug: str = "") -> Bundle:
    """``(grad_input, grad_w_query, grad_w_key, grad_w_value)`` with ``bug``:
    ``no-rowsum``, ``rowsum-axis``, ``elementwise`` (:func:`_softmax_reverse`),
    ``dv-uses-a`` (``A dO``), ``dk-uses-ds`` (``dS Q``), ``ignores-mask`` (the unmasked
    head's gradients), ``first-item`` or ``last-item`` (each weight gradient from one
    batch item, not summed over the batch). Each is qkv's engine, forward and back,
    given a wrong part: the mask flag, one batch item, or one step of the reverse
    replaced, the steps after it the engine's (the scale's reverse, the projections'
    reverse :func:`~qkvcli.core.projections.project_back`)."""
    w_query, w_key, w_value = weights
    head = AttentionHead.from_arrays(w_query, w_key, w_value)
    with np.errstate(all="ignore"):
        if bug == "ignores-mask":
            causal, bug = False, ""
        done = head.forward(x, causal)
        grads = head.backward(x, done, grad_output)
        found = [grads.grad_input, grads.grad_w_query, grads.grad_w_key, grads.grad_w_value]
        if bug in ("first-item", "last-item") and x.shape[0]:
            item = slice(0, 1) if bug == "first-item" else slice(-1, None)
            one = head.backward(x[item], head.forward(x[item], causal), grad_output[item])
            found[1:] = [one.grad_w_query, one.grad_w_key, one.grad_w_value]
        if bug not in ("no-rowsum", "rowsum-axis", "elementwise", "dv-uses-a", "dk-uses-ds"):
            return tuple(found)
        a = done.attention
        grad_q, grad_k, grad_v = grads.grad_query, grads.grad_key, grads.grad_value
        if bug == "dv-uses-a":
            grad_v = a @ grad_output  # [B,T,T] @ [B,T,h]
        else:
            grad_s = scale(_softmax_reverse(a, grads.grad_attention, bug), head.d_k, None)
            if bug != "dk-uses-ds":
                grad_q = grad_s @ done.key  # [B,T,T] @ [B,T,h] -> [B,T,h]
            grad_k = (grad_s if bug == "dk-uses-ds" else _swapped(grad_s)) @ done.query
        d_model = int(x.shape[-1])
        joined = np.concatenate([grad_q, grad_k, grad_v], axis=-1).reshape(-1, 3 * head.d_k)
        grad_rows, grad_w = project_back(x.reshape(-1, d_model), joined,
                                         np.concatenate(weights, axis=1))
        h = head.d_k
        return grad_rows.reshape(x.shape), grad_w[:, :h], grad_w[:, h:2 * h], grad_w[:, 2 * h:]


SCALING_BUGS = ("unscaled", "by-d_k", "by-root-d_model", "transposed-scores")
"""The slips of the scores (before the mask)."""
MASK_BUGS = ("diagonal", "hides-past", "after-softmax", "no-mask", "always-mask")
"""The slips of the mask."""
SOFTMAX_BUGS = ("query-axis", "global-max", "unstable")
"""The slips of the softmax."""
FORWARD_BUGS = (*SCALING_BUGS, *MASK_BUGS, *SOFTMAX_BUGS)
"""The head's forward slips :func:`variant_forward` computes, in the order they are tried."""
BACKWARD_BUGS = ("no-rowsum", "rowsum-axis", "elementwise", "dv-uses-a", "dk-uses-ds",
                 "ignores-mask", "first-item", "last-item")
"""The head's backward slips :func:`variant_backward` computes, in the order they are tried."""


# --- why a result is wrong: the slips each kind's diagnosis tries -------------------------
# Each names a catalogued slip where one computes the whole result; else the relations
# that explain it (:mod:`~qkvcli.check.relate`, the ``relate_*`` functions alone).


def _named_or_related(found: Clause, related: Callable[[], Clause]) -> Clause:
    """The catalogued slip ``found`` names, unless the engine with one part changed gives
    the same results in several ways (``related``'s variants): the fixture cannot tell
    them apart, and naming one would say more than it shows (RoPE's positions read off
    the batch axis turn a query and its keys alike, as no RoPE does)."""
    if found.code != "slip-differs":
        return related()
    other = related()
    said = other.facts[0] if other.code == "relation-differs" else ()
    return other if len(said) > 1 and all(c.code == "variant" for c in said) else found


def relate_rope(run: Run, got: Bundle, expected: Bundle, index: int, mismatch: Clause,
                tolerance: float) -> Clause:
    """A wrong rotation by the relations that explain it."""
    return relate.diagnose(("rope",), got, expected, relate.rope(run), mismatch, tolerance)


def relate_rope_reverse(run: Run, got: Bundle, expected: Bundle, index: int,
                        mismatch: Clause, tolerance: float) -> Clause:
    """A wrong reverse by the relations that explain it."""
    return relate.diagnose(ROPE_REVERSE_NAMES, got, expected, relate.rope(run, reverse=True),
                           mismatch, tolerance)


def explain_rope(run: Run, got: Bundle, expected: Bundle, index: int, mismatch: Clause,
                 tolerance: float) -> Clause:
    """A wrong rotation: the slips of :data:`ROPE_BUGS` it computed, else its relations."""
    case = run.case
    return _named_or_related(slip_clause(got, ROPE_BUGS, lambda bug: (
        engine_rope(case.input, case.base, case.offset, bug),), mismatch, tolerance),
        lambda: relate_rope(run, got, expected, index, mismatch, tolerance))


def explain_rope_reverse(run: Run, got: Bundle, expected: Bundle, index: int,
                         mismatch: Clause, tolerance: float) -> Clause:
    """A wrong reverse: the slips of :data:`REVERSE_BUGS` it computed, else its relations."""
    case, upstream = run.case, run.upstream[0]
    return _named_or_related(slip_clause(got, REVERSE_BUGS, lambda bug: (
        engine_rope(upstream, case.base, case.offset, bug, reverse=True),), mismatch,
        tolerance), lambda: relate_rope_reverse(run, got, expected, index, mismatch, tolerance))


def _mha(run: Run) -> Callable[..., Bundle]:
    case, (causal, rope) = run.case, run.mode
    return lambda bug: engine_mha(case.input, case.weights, case.heads, causal, rope,
                                  case.base, case.offset, bug)


def relate_mha_forward(run: Run, got: Bundle, expected: Bundle, index: int,
                       mismatch: Clause, tolerance: float) -> Clause:
    """A wrong multi-head forward by the relations that explain it."""
    return relate.diagnose(MHA_FORWARD_NAMES, got, expected, relate.mha_forward(run),
                           mismatch, tolerance)


def relate_mha_backward(run: Run, got: Bundle, expected: Bundle, index: int,
                        mismatch: Clause, tolerance: float) -> Clause:
    """A wrong multi-head backward by the relations that explain it."""
    return relate.diagnose(MHA_BACKWARD_NAMES, got, expected, relate.mha_backward(run),
                           mismatch, tolerance)


def explain_mha_forward(run: Run, got: Bundle, expected: Bundle, index: int,
                        mismatch: Clause, tolerance: float) -> Clause:
    """A wrong multi-head forward: the slips of :data:`MHA_BUGS` it computed, else its
    relations."""
    return _named_or_related(slip_clause(got, MHA_BUGS, _mha(run), mismatch, tolerance),
                             lambda: relate_mha_forward(run, got, expected, index, mismatch,
                                                        tolerance))


def explain_mha_backward(run: Run, got: Bundle, expected: Bundle, index: int,
                         mismatch: Clause, tolerance: float) -> Clause:
    """A wrong multi-head backward: the slips of :data:`MHA_BACKWARD_BUGS` it computed,
    else its relations."""
    case, (causal, rope) = run.case, run.mode
    return _named_or_related(slip_clause(got, MHA_BACKWARD_BUGS, lambda bug: engine_mha_backward(
        case.input, case.weights, case.heads, causal, rope, case.base, case.offset,
        run.upstream[0], bug), mismatch, tolerance),
        lambda: relate_mha_backward(run, got, expected, index, mismatch, tolerance))


def relate_head_forward(run: Run, got: Bundle, expected: Bundle, index: int,
                        mismatch: Clause, tolerance: float) -> Clause:
    """A head's wrong forward by the relations that explain it."""
    return relate.diagnose(HEAD_FORWARD_NAMES, got, expected, relate.head_forward(run, variant_forward),
                           mismatch, tolerance)


def relate_head_backward(run: Run, got: Bundle, expected: Bundle, index: int,
                         mismatch: Clause, tolerance: float) -> Clause:
    """A head's wrong backward by the relations that explain it."""
    return relate.diagnose(HEAD_BACKWARD_NAMES, got, expected, relate.head_backward(run, variant_backward),
                           mismatch, tolerance)


def explain_head_forward(run: Run, got: Bundle, expected: Bundle, index: int,
                         mismatch: Clause, tolerance: float) -> Clause:
    """A head's wrong forward: the first of :data:`FORWARD_BUGS` it computed, else its
    relations."""
    x, weights = run.case.input, run.case.weights
    return _named_or_related(slip_clause(got, FORWARD_BUGS, lambda bug: variant_forward(
        x, weights, bool(run.mode), bug), mismatch, tolerance),
        lambda: relate_head_forward(run, got, expected, index, mismatch, tolerance))


def explain_head_backward(run: Run, got: Bundle, expected: Bundle, index: int,
                          mismatch: Clause, tolerance: float) -> Clause:
    """A head's wrong backward: the first of :data:`BACKWARD_BUGS` it computed, else its
    relations."""
    x, weights = run.case.input, run.case.weights
    return _named_or_related(slip_clause(got, BACKWARD_BUGS, lambda bug: variant_backward(
        x, weights, bool(run.mode), run.upstream[0], bug), mismatch, tolerance),
        lambda: relate_head_backward(run, got, expected, index, mismatch, tolerance))
