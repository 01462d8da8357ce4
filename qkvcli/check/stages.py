"""Multi-head attention stage by stage, with one stage given a wrong part: what the
relation finder compares a wrong layer with when no relation of its tensors explains
it (:mod:`~qkvcli.check.relate`).

The stages are the engine's maths (:mod:`qkvcli.attention.maths`: the rotation, the
scale, the mask, the softmax and its reverse; :func:`~qkvcli.core.projections.project`
and its reverse; the head split and merge of :mod:`qkvcli.attention.engine`) composed
in the chapter's order: project, split, RoPE, scores, scale, mask, softmax, mixture,
merge, output projection, and back. A :class:`WrongPart` changes one of them: the softmax
over another axis, RoPE on one of Q and K, RoPE before the split, RoPE's angles times a
factor or its positions read along another axis, a reverse stage with an operand not
transposed. With no part changed the stages give the engine's layer (a test holds
them to it).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from qkvcli.attention.engine import heads_axis, merge_heads
from qkvcli.attention.maths import causal_mask, rotate, scale, softmax, softmax_backward
from qkvcli.core.arrays import Array
from qkvcli.core.projections import project, project_back
from qkvcli.core.record import Record
from qkvcli.core.rope import Rope, inverse_frequencies


class WrongPart(Record):
    """One wrong part of the stages (the defaults: none). ``softmax_axis``: the axis of
    ``[B,H,T,T]`` the softmax normalises; ``turned``: which of ``query``, ``key`` RoPE
    turns; ``rope_first``: RoPE on the ``[B,T,d]`` projections before the split;
    ``angle``: RoPE's angles times it; ``positions``: the axis of ``[B,H,T,d_h]`` whose
    index is the position; ``untransposed``: the reverse stage (``grad_value``,
    ``grad_key``, ``grad_input``: its weights) whose transposed operand is taken as it
    is; ``hidden``: the keys a
    causal mask hides (``later``, ``diagonal``: the later ones and the diagonal,
    ``earlier``; ``from:m``: the keys ``m`` or more positions ahead alone, a mask that
    leaks the nearer later ones; ``after-softmax``: the later ones' weights zeroed after an unmasked softmax,
    the rows not normalised again); ``rowsum``: whether the softmax's reverse keeps its row-sum term;
    ``softmax_reverse``: whether the reverse goes through the softmax at all (``dZ = dA``);
    ``swapped``: ``dQ`` and ``dK`` each made with the other's operand (``dS Q``, ``dSᵀ K``);
    ``from_zero``: RoPE's positions start at 0 whatever the offset; ``back_only``: the
    RoPE parts change the reverse's turn back alone (the forward turns as the engine does);
    ``divisor``: what the scores are divided by (``root``: the engine's ``√d_h``; ``d_h``,
    ``d_model``, ``root d_model``, ``none``; ``d_h/2`` and ``2 d_h``: Python's
    ``d_h ** 1/2`` as a scale and inline); ``merge``: how the heads' columns are laid side
    by side (``blocked``: head ``h``'s column ``j`` at ``h d_h + j``; ``strided``: at
    ``j H + h``; the forward's alone); ``fill``: what a hidden score becomes
    (``-inf``, or a learner's large finite negative, :data:`FINITE_FILL`: a softmax over
    scores all hidden is then uniform, not 0/0); ``split_back``: how the reverse splits
    ``dC`` into the heads (``blocked``: as the forward splits; ``reshaped``: ``[B,T,W]``
    reshaped to ``[B,H,T,d_h]`` with no transpose); ``through``: the branch (0, 1, 2:
    query, key, value) whose weight every path of ``grad_input`` goes back through
    (``-1``: each its own); ``shift``: added to every RoPE position (1: counted from 1);
    ``hidden`` ``own``: each query's own key hidden too but the first's (a cache step
    that reads the earlier keys alone, the first step its own); ``rowsum_axis``: the axis
    the softmax reverse's row-sum term sums over; ``max_axis``: the axis whose maximum the
    softmax subtracts; ``scale_after``: the weights divided by ``√d_h`` after an unscaled
    softmax; ``value_unmasked``: the mixture made from the unmasked softmax (the weights
    returned masked); ``w_output_from_input``: ``dW_O = Xᵀ dY``; ``value_skips_w_output``:
    ``dV`` from the heads of ``dY``, not of ``dY W_Oᵀ`` (the forward's alone for the
    first four)."""

    softmax_axis: int = -1
    turned: tuple[str, ...] = ("query", "key")
    rope_first: bool = False
    angle: float = 1.0
    positions: int = 2
    untransposed: str = ""
    hidden: str = "later"
    rowsum: bool = True
    softmax_reverse: bool = True
    swapped: bool = False
    from_zero: bool = False
    back_only: bool = False
    divisor: str = "root"
    merge: str = "blocked"
    fill: float = -np.inf
    split_back: str = "blocked"
    through: int = -1
    shift: int = 0
    rowsum_axis: int = -1
    max_axis: int = -1
    scale_after: bool = False
    value_unmasked: bool = False
    w_output_from_input: bool = False
    value_skips_w_output: bool = False


FINITE_FILL = -1e300
"""A hidden score as a learner's ``-1e9`` hides it: finite, so a softmax over hidden
scores alone is uniform; any visible score outweighs it to exactly 0 (``exp(-1e300)``
underflows as ``exp(-1e9)`` does)."""
PLAIN = WrongPart()
"""No part changed: the engine's stages."""
Turn = Callable[[Array, bool], Array]


def rope_turn(base: float, offset: int, width: int, part: WrongPart) -> Turn:
    """RoPE as ``part`` turns ``[..., T, width]`` (``inverse``: back)."""
    offset = (0 if part.from_zero else offset) + part.shift
    rope = Rope(base, width, "interleaved", offset)
    if part.angle != 1.0:
        frequencies = inverse_frequencies(rope) * part.angle
        rope = Rope(None, width, "interleaved", offset,
                    frequencies=tuple(float(f) for f in frequencies))

    def turn(values: Array, inverse: bool) -> Array:
        axis = part.positions if not part.rope_first else 1
        if axis in (values.ndim - 2, -2):
            return rotate(values, rope, inverse=inverse)
        moved = np.swapaxes(values, axis, -2)
        return np.swapaxes(rotate(moved, rope, inverse=inverse), axis, -2)

    return turn


def _given_scale(part: WrongPart, size: int, x: Array) -> float | None:
    """The scale :func:`~qkvcli.attention.maths.scale` is given for ``part.divisor``
    (``None``: the engine's own, ``1/√d_h``)."""
    width = int(x.shape[-1])
    return {"d_h": 1.0 / size, "d_model": 1.0 / width, "root d_model": 1.0 / width ** 0.5,
            "none": 1.0, "d_h/2": 2.0 / size, "2 d_h": 0.5 / size}.get(part.divisor)


def _softmax_over(z: Array, axis: int) -> Array:
    moved = np.moveaxis(z, axis, -1)
    return np.moveaxis(softmax(moved), -1, axis)


def _softmax_back_over(a: Array, grad_a: Array, axis: int) -> Array:
    moved = softmax_backward(np.moveaxis(a, axis, -1), np.moveaxis(grad_a, axis, -1))
    return np.moveaxis(moved, -1, axis)


class Pass(Record):
    """What the reverse needs of a staged forward: the heads' rotated queries and keys,
    values and weights ``[B,H,T,d_h]``/``[B,H,T,T]``, the merged heads and the output;
    and the scaled scores before the mask ``[B,H,T,T]`` (a head's published scores)."""

    query: Array
    key: Array
    value: Array
    weights: Array
    merged: Array
    output: Array
    scores: Array


def forward(x: Array, weights: tuple[Array, ...], heads: int, causal: bool, rope: bool,
            base: float, offset: int, part: WrongPart = PLAIN) -> Pass:
    """The stages on ``x [B,T,d]`` with ``W_Q, W_K, W_V, W_O``, one part as ``part`` says."""
    w_query, w_key, w_value, w_output = weights
    width = int(w_query.shape[1])
    size = width // heads
    turning = PLAIN if part.back_only else part  # RoPE's parts in the forward
    with np.errstate(all="ignore"):
        # [B,T,d] @ [d,3W] -> [B,T,3W]: the three projections at once
        projected = project(x, np.concatenate([w_query, w_key, w_value], axis=1))
        flat = {"query": projected[..., :width], "key": projected[..., width:2 * width],
                "value": projected[..., 2 * width:]}
        if rope and turning.rope_first:
            turn = rope_turn(base, offset, width, turning)
            flat = {name: turn(values, False) if name in turning.turned else values
                    for name, values in flat.items()}
        split = {name: np.array(heads_axis(values, heads)) for name, values in flat.items()}
        if rope and not turning.rope_first:
            turn = rope_turn(base, offset, size, turning)
            split = {name: turn(values, False) if name in turning.turned else values
                     for name, values in split.items()}
        query, key, value = split["query"], split["key"], split["value"]
        # [B,H,T,d_h] @ [B,H,d_h,T] -> [B,H,T,T]
        z = scale(query @ np.swapaxes(key, -1, -2), size,
                  1.0 if part.scale_after else _given_scale(part, size, x))
        scores = z
        if causal:
            hidden = causal_mask(z.shape[-1])
            if part.hidden == "diagonal":
                hidden = hidden | np.eye(z.shape[-1], dtype=bool)
            elif part.hidden == "own":
                hidden = hidden | np.eye(z.shape[-1], dtype=bool)
                hidden[0, 0] = False
            elif part.hidden == "earlier":
                hidden = hidden.T
            elif part.hidden.startswith("from:"):  # the keys m or more ahead alone
                hidden = np.triu(np.ones(hidden.shape, dtype=bool),
                                 k=int(part.hidden.removeprefix("from:")))
            if part.hidden != "after-softmax":
                z = np.where(hidden, part.fill, z)
        if part.max_axis != -1 and z.size:  # each row's softmax of z - max over another axis
            attention = softmax(z - np.max(z, axis=part.max_axis, keepdims=True))
        else:
            attention = _softmax_over(z, part.softmax_axis) if z.size else np.zeros(z.shape)
        if causal and part.hidden == "after-softmax":
            attention = np.where(hidden, 0.0, attention)
        if part.scale_after:
            attention = attention / size ** 0.5
        mixing = attention
        if causal and part.value_unmasked and scores.size:
            mixing = _softmax_over(scores, -1)
        mixed = mixing @ value  # [B,H,T,T] @ [B,H,T,d_h] -> [B,H,T,d_h]
        if part.merge == "strided":  # [B,T,d_h,H]: head h's column j at j H + h
            batch, count, tokens, each = mixed.shape
            merged = np.ascontiguousarray(mixed.transpose(0, 2, 3, 1)).reshape(
                batch, tokens, each * count)
        else:
            merged = merge_heads(mixed)
        return Pass(query, key, value, attention, merged, merged @ w_output, scores)


def branch_gradients(x: Array, weights: tuple[Array, ...], heads: int, causal: bool,
                     rope: bool, base: float, offset: int, grad_output: Array,
                     done: Pass, part: WrongPart = PLAIN) -> tuple[Array, Array, Array]:
    """``dQ``, ``dK``, ``dV`` ``[B,T,W]`` (the heads merged, RoPE turned back) of the
    stages' pass ``done``, one part as ``part`` says."""
    w_output = weights[3]
    width = int(weights[0].shape[1])
    size = width // heads
    with np.errstate(all="ignore"):
        # [B,T,d] @ [d,d] -> dC, split into the heads' dO
        grad_merged = grad_output @ w_output.T
        if part.split_back == "reshaped":  # [B,T,W] read as [B,H,T,d_h]
            batch, tokens, _ = grad_merged.shape
            grad_heads = grad_merged.reshape(batch, heads, tokens, size)
        else:
            grad_heads = np.array(heads_axis(grad_merged, heads))
        grad_a = grad_heads @ np.swapaxes(done.value, -1, -2)
        a_t = np.swapaxes(done.weights, -1, -2)
        into_value = (np.array(heads_axis(grad_output, heads)) if part.value_skips_w_output
                      else grad_heads)
        grad_value = (done.weights if part.untransposed == "grad_value" else a_t) @ into_value
        if not part.softmax_reverse:
            grad_s = grad_a
        elif part.rowsum_axis != -1:  # A (dA - Σ dA A), the sum over another axis
            grad_s = done.weights * (grad_a - np.sum(grad_a * done.weights,
                                                     axis=part.rowsum_axis, keepdims=True))
        elif part.rowsum:
            grad_s = _softmax_back_over(done.weights, grad_a, part.softmax_axis)
        else:
            grad_s = done.weights * grad_a
        grad_z = scale(grad_s, size, _given_scale(part, size, x))
        query, key = (done.key, done.query) if part.swapped else (done.query, done.key)
        grad_query = grad_z @ key
        grad_key = (grad_z if part.untransposed == "grad_key"
                    else np.swapaxes(grad_z, -1, -2)) @ query
        merged = {"query": merge_heads(grad_query), "key": merge_heads(grad_key),
                  "value": merge_heads(grad_value)}
        if rope:
            if part.rope_first:
                turn = rope_turn(base, offset, width, part)
                merged = {n: turn(g, True) if n in part.turned else g for n, g in merged.items()}
            else:
                turn = rope_turn(base, offset, size, part)
                merged = {n: merge_heads(turn(np.array(heads_axis(g, heads)), True))
                          if n in part.turned else g for n, g in merged.items()}
    return merged["query"], merged["key"], merged["value"]


def backward(x: Array, weights: tuple[Array, ...], heads: int, causal: bool, rope: bool,
             base: float, offset: int, grad_output: Array,
             part: WrongPart = PLAIN) -> tuple[Array, ...]:
    """``(grad_input, grad_w_query, grad_w_key, grad_w_value, grad_w_output)`` of the
    stages, forward and back, one part as ``part`` says."""
    w_query, w_key, w_value, _ = weights
    batch, tokens, d_model = x.shape
    width = int(w_query.shape[1])
    done = forward(x, weights, heads, causal, rope, base, offset, part)
    grads = branch_gradients(x, weights, heads, causal, rope, base, offset, grad_output, done,
                             part)
    rows = batch * tokens
    with np.errstate(all="ignore"):
        # [d,BT] @ [BT,d] -> dW_O
        given_rows = x if part.w_output_from_input else done.merged
        grad_w_output = (given_rows.reshape(rows, int(given_rows.shape[-1])).T
                         @ grad_output.reshape(rows, grad_output.shape[-1]))
        joined = np.concatenate(grads, axis=-1)
        given = (w_query, w_key, w_value)
        if part.untransposed == "grad_input":  # dX = dQ W_Q + ...: square weights alone
            given = tuple(w.T for w in given)
        if part.through >= 0:  # dX = (dQ + dK + dV) W^T of one branch's W
            given = (given[part.through],) * 3
        # [BT,3W] @ [3W,d] -> dX; [d,BT] @ [BT,3W] -> [dW_Q|dW_K|dW_V]
        grad_rows, grad_w = project_back(x.reshape(rows, d_model), joined.reshape(rows, 3 * width),
                                         np.concatenate(given, axis=1))
    return (grad_rows.reshape(x.shape), grad_w[:, :width], grad_w[:, width:2 * width],
            grad_w[:, 2 * width:], grad_w_output)
