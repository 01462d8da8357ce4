"""Run an attention head or layer on its fixture and gather the evidence (no I/O, no wording).

A head is run as the layer of one head it is: one engine, one set of checks. Checks, in
order: forward (shapes, finite), attention (non-negative, rows sum to 1; published as
``weights``), mask (causal only: nothing above the diagonal), hull (each output row is a
convex combination of the value rows), reverse (finite, shaped), shapes (empty batch and
token axes), replay (bitwise), gradcheck. Attention rows, mask and hull are found per
head (:class:`~qkvcli.attention.records.HeadEvidence`) and pass when every head passes.
Notes are a teacher's remarks on the parameters, never failures. Tensors are held by
vocabulary name (:mod:`qkvcli.attention.records`), each weight and its gradient in the
layout the fixture gave them in; a head's hold no heads axis.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import cached_property
from typing import Any

import numpy as np

from qkvcli.attention import engine
from qkvcli.attention.decode import check_decodable, decode_evidence
from qkvcli.attention.engine import AttentionForward, LayerForward, LayerGradients
from qkvcli.attention.fixture import layer_of
from qkvcli.attention.gradcheck import gradcheck_attention, plan_check
from qkvcli.attention.head import AttentionHead, scale_probe
from qkvcli.attention.maths import causal_mask, rotate
from qkvcli.attention.multihead import MultiHeadLayer, layer_loss
from qkvcli.attention.records import (
    AttendConfig,
    AttendEvidence,
    AttendPrimary,
    HeadEvidence,
    HullEvidence,
    Note,
    OtherMask,
    TokenRow,
)
from qkvcli.check.behaviour import check_prefix, check_replay
from qkvcli.check.boundaries import check_single_token, probed
from qkvcli.check.cases import Case
from qkvcli.check.kinds import HEADS_LAYER, LAYER, PASS_LAYER, WEIGHED_LAYER, Probe
from qkvcli.check.multihead import check_head_isolation
from qkvcli.check.plans import ATTEND, PLANS
from qkvcli.check.rotary import check_position_zero
from qkvcli.check.session import Session
from qkvcli.check.values import finite_and_shaped
from qkvcli.core.arrays import Array, readonly
from qkvcli.core.invariants import FutureZero, HeadLayout, RowSums, future_zero, row_sums
from qkvcli.core.names import BRANCHES
from qkvcli.core.record import Record
from qkvcli.core.results import ShapeProbe, judge_plan
from qkvcli.core.rope import attention_factor
from qkvcli.protocol.python import PythonImplementation
from qkvcli.protocol.wire import LAYER_GRADIENT_RECORDS, LAYER_RECORDS
from qkvcli.reading.attend import AttendFixture, relative_sources
from qkvcli.reading.layouts import CODEGEN_BLOCKS

EPSILON = float(np.finfo(np.float64).eps)
ROWS_LIMIT = 4096
"""Largest attention matrix (elements) whose per-token rows the evidence lists."""
PLAN_KEYS = ("mode", "directions", "limit", "reached")
"""The gradient-check settings its budget depends on (checked before any work)."""


class LayerParts(Record):
    """The engine's layer and the layouts its tensors are shown in (the given ones)."""

    layer: MultiHeadLayer
    branch_layouts: tuple[str, str, str]  # "qkv" or "torch" per branch
    packed: str | None  # "in_proj", "c_attn", "query_key_value" or None
    out_layout: str | None  # "out_proj", "c_proj" or None


def layer_parts(fixture: AttendFixture, layer: MultiHeadLayer | None = None) -> LayerParts:
    """The fixture's layer (``layer``, already built from it; ``None``: built here by
    :func:`~qkvcli.attention.fixture.layer_of`) and the layouts its parameters were given
    in; a head is a layer of one head, shown in our layout with nothing packed."""
    layer, p = layer_of(fixture) if layer is None else layer, fixture.parameters
    if fixture.function.heads is None:
        return LayerParts(layer, ("qkv", "qkv", "qkv"), None, None)
    return LayerParts(layer, p.branch_layouts, p.packed, p.out_layout)


def _given(array: Array, layout: str) -> Array:
    return array.T if layout == "torch" else array


def _packed(parts: LayerParts, branches: tuple[Array, ...]) -> Array:
    """The three branches (our ``[d_model, W]`` layout) in the packed layout given:
    ``in_proj`` and ``qkv_proj`` stack torch rows, ``c_attn`` puts Conv1D columns side
    by side, ``query_key_value`` interleaves torch rows per K/V head (``[G, H/G + 2,
    d_head]``, GPT-NeoX's ``[H, 3, d_head]`` when G = H)."""
    if parts.packed == "c_attn":
        return np.concatenate([_given(w, parts.branch_layouts[0]) for w in branches], axis=1)
    rows = [w.T for w in branches]  # torch [W, d_model] each
    if parts.packed in ("in_proj", "qkv_proj"):
        return np.concatenate(rows, axis=0)
    if parts.packed == "codegen_qkv_proj":  # [4, 3, W/4]: query, value, key per block
        per_block = [r.reshape(CODEGEN_BLOCKS, 1, -1, r.shape[-1]) for r in rows]
        return np.concatenate([per_block[0], per_block[2], per_block[1]], axis=1).reshape(
            -1, rows[0].shape[-1])
    # per K/V head g: its query heads' rows, its key's, its value's ([G, H/G + 2, d_head])
    kv = parts.layer.kv_heads
    per_group = [r.reshape(kv, -1, parts.layer.d_k, r.shape[-1]) for r in rows]
    return np.concatenate(per_group, axis=1).reshape(-1, rows[0].shape[-1])


def _packed_bias(parts: LayerParts, biases: tuple[Array, ...]) -> Array:
    if parts.packed == "codegen_qkv_proj":
        q, k, v = (b.reshape(CODEGEN_BLOCKS, 1, -1) for b in biases)
        return np.concatenate([q, v, k], axis=1).reshape(-1)
    if parts.packed != "query_key_value":
        return np.concatenate(biases)
    kv = parts.layer.kv_heads
    return np.concatenate([b.reshape(kv, -1, parts.layer.d_k) for b in biases],
                          axis=1).reshape(-1)


def layer_tensors(fixture: AttendFixture, parts: LayerParts, f: LayerForward,
                  g: LayerGradients) -> dict[str, Array]:
    """Every tensor of the layer by vocabulary name, in report order, each weight (and its
    gradient) in the layout the fixture gave it in; a packed projection adds ``w_packed``
    (and ``b_packed``), an output projection ``w_out`` and ``b_out``."""
    return dict(layer_tensor_items(fixture, parts, f, g))


def layer_tensor_items(fixture: AttendFixture, parts: LayerParts, f: LayerForward,
                       g: LayerGradients) -> Iterator[tuple[str, Any]]:
    """:func:`layer_tensors`' items one at a time: a stacked ``[B,H,T,T]`` tensor is built
    only when its turn comes."""
    layer = parts.layer
    p = layer.projections
    single = fixture.function.heads is None  # a head: its tensors have no heads axis
    named: list[tuple[str, Array | Callable[[], Array] | None]] = [("input", fixture.input)]
    grads_w = (g.grad_w_query, g.grad_w_key, g.grad_w_value)
    grads_b = (g.grad_b_query, g.grad_b_key, g.grad_b_value)
    weights = [(f"w_{branch}", _given(p.weights[i], parts.branch_layouts[i]))
               for i, branch in enumerate(BRANCHES)]
    biases = [(f"b_{branch}", p.biases[i]) for i, branch in enumerate(BRANCHES)]
    # a head lists its weights, then its biases; a layer each weight beside its bias
    named += [*weights, *biases] if single else [
        item for pair in zip(weights, biases, strict=True) for item in pair]
    if parts.packed is not None:
        named.append(("w_packed", _packed(parts, p.weights)))
        if all(b is not None for b in p.biases):
            named.append(("b_packed", _packed_bias(parts, tuple(
                b for b in p.biases if b is not None))))
    out = parts.out_layout
    if out is not None and layer.out_weight is not None:
        named.append(("w_out", _given(layer.out_weight, "torch" if out == "out_proj" else "qkv")))
        named.append(("b_out", layer.out_bias))
    norm = layer.qk_norm
    if norm is not None:
        named += [("norm_query", norm.query), ("norm_key", norm.key),
                  ("norm_query_bias", norm.query_bias), ("norm_key_bias", norm.key_bias)]

    def stacked(name: str, source: tuple[object, ...]) -> Callable[[], Array]:
        # the engine's [B,H,T,T] array is the tensor itself, its heads views of it
        whole = {**f.stacked, **g.stacked}.get(name)
        if single and whole is not None:
            whole = whole[:, 0]
        return _Stacked([getattr(item, name) for item in source], 1, whole, single)

    def joined(name: str, source: tuple[object, ...]) -> Callable[[], Array]:
        return lambda: np.concatenate([getattr(item, name) for item in source], axis=-1)

    named += [
        ("query", joined("query", f.heads)), ("key", joined("key", f.heads)),
        ("value", joined("value", f.heads)), ("scores", stacked("scores", f.heads)),
        ("scaled_scores", stacked("scaled_scores", f.heads)),
        ("attention", stacked("attention", f.heads)),
        ("concat", f.concat if out is not None else None), ("output", f.output),
        ("grad_output", fixture.upstream),
        ("grad_concat", g.grad_concat if out is not None else None),
        ("grad_attention", stacked("grad_attention", g.heads)),
        ("grad_scaled_scores", stacked("grad_scaled_scores", g.heads)),
        ("grad_scores", stacked("grad_scores", g.heads)),
        ("grad_query", joined("grad_query", g.heads)),
        ("grad_key", joined("grad_key", g.heads)),
        ("grad_value", joined("grad_value", g.heads)),
        ("grad_input", g.grad_input),
    ]
    for i, branch in enumerate(BRANCHES):
        named.append((f"grad_w_{branch}", _given(grads_w[i], parts.branch_layouts[i])))
    for i, branch in enumerate(BRANCHES):
        named.append((f"grad_b_{branch}", grads_b[i]))
    if parts.packed is not None:
        named.append(("grad_w_packed", _packed(parts, grads_w)))
        if all(b is not None for b in grads_b):
            named.append(("grad_b_packed", _packed_bias(parts, tuple(
                b for b in grads_b if b is not None))))
    if out is not None and g.grad_out_weight is not None:
        named.append(("grad_w_out", _given(
            g.grad_out_weight, "torch" if out == "out_proj" else "qkv")))
        named.append(("grad_b_out", g.grad_out_bias))
    named += [("grad_norm_query", g.grad_norm_query), ("grad_norm_key", g.grad_norm_key),
              ("grad_norm_query_bias", g.grad_norm_query_bias),
              ("grad_norm_key_bias", g.grad_norm_key_bias)]
    for name, value in named:
        if callable(value):  # a new array of its own: frozen, not copied again
            built = np.ascontiguousarray(value())
            built.flags.writeable = False
            yield name, built
        elif value is not None:
            # the fixture's own arrays are the caller's: copied, never frozen in place
            given = value is fixture.input or value is fixture.upstream
            yield name, readonly(value) if given else _frozen(value)


def _frozen(value: Array) -> Array:
    """``value`` as the evidence holds it: read-only float64, never aliasing anything
    writable. A frozen array (the layer's weights) is shared as it is, an engine result
    that owns its memory is frozen in place, and so is the array a torch-layout weight or
    gradient is the transpose of (shared as that ``[out,in]`` view); anything else is
    copied (a layer's parameters and their gradients would otherwise be held twice)."""
    if value.dtype != np.float64:
        return readonly(value)
    whole = value
    if not value.flags.c_contiguous and value.ndim == 2 and isinstance(value.base, np.ndarray):
        whole = value.base  # a transposed view: share what it views
        if whole.ndim != 2 or whole.shape != value.shape[::-1] or not whole.flags.c_contiguous:
            return readonly(value)
    elif not value.flags.c_contiguous:
        return readonly(value)
    if whole.flags.writeable and whole.flags.owndata:
        whole.flags.writeable = False
    elif whole.flags.writeable or whole.base is not None:
        return readonly(value)
    if value.flags.writeable:  # a view made before its array was frozen
        value = value.view()
        value.flags.writeable = False
    return value


class _Stacked:
    """The heads' arrays of one tensor, stacked on ``axis`` when called (``whole``: the
    stacked array already made, which the parts are views of, given as it is; ``single``:
    a head's one array, no heads axis)."""

    def __init__(self, parts: list[Array], axis: int, whole: Array | None = None,
                 single: bool = False) -> None:
        self.parts, self.axis, self.whole, self.single = parts, axis, whole, single

    def __call__(self) -> Array:
        if self.whole is not None:
            return self.whole
        return self.parts[0] if self.single else np.stack(self.parts, axis=self.axis)


def head_evidence(f: LayerForward, tokens: int, causal: bool) -> tuple[HeadEvidence, ...]:
    """Row sums (within ``4 T eps``), mask (above the diagonal, outside a window) and
    convex hull of each head, in head order (:mod:`qkvcli.core.invariants`' claims)."""
    hidden = causal_mask(tokens, f.window, causal) if causal or f.window is not None else None
    return tuple(HeadEvidence(h, row_sums(head.attention, 4.0 * max(tokens, 1) * EPSILON),
                              future_zero(head.attention, hidden),
                              hull_evidence(head, tokens, causal))
                 for h, head in enumerate(f.heads))


def hull_evidence(f: AttentionForward, tokens: int, causal: bool = False) -> HullEvidence:
    """Recompute ``O`` term by term and test each output row against the value rows' box.

    ``causal``: key ``j`` reaches only the rows from ``j`` on (above the diagonal ``A`` is
    exactly 0, and adding its ``+-0`` terms to a sum that is never ``-0`` changes nothing),
    so those terms are left out: the same sums in half the work."""
    value = f.value
    # Rounding in a sum of T products, each at most max|v|, stays below a few T eps max|v|.
    scale = float(np.max(np.abs(value))) if value.size else 0.0
    tolerance = 4.0 * max(tokens, 1) * EPSILON * max(scale, 1.0)
    recomputed = np.zeros_like(f.output)
    term = np.empty_like(f.output)
    for j in range(tokens):  # term by term, independently of the matrix product
        rows = j if causal else 0
        part = term[:, rows:]
        np.multiply(f.attention[:, rows:, j:j + 1], value[:, j:j + 1, :], out=part)
        recomputed[:, rows:] += part
    residual = float(np.max(np.abs(recomputed - f.output))) if f.output.size else 0.0
    violations = 0
    if value.size:
        low = value.min(axis=1, keepdims=True)  # [B,1,d_v]: the box around the value rows
        high = value.max(axis=1, keepdims=True)
        outside = (f.output < low - tolerance) | (f.output > high + tolerance)
        violations = int(np.count_nonzero(outside))
    return HullEvidence(residual, violations, tolerance)


def _reached_size(layer: MultiHeadLayer) -> int:
    """How many parameters only the scores reach: the query's and the key's weights,
    biases and norm."""
    p, norm = layer.projections, layer.qk_norm
    found = [p.weights[0], p.weights[1], p.biases[0], p.biases[1]]
    if norm is not None:
        found += [norm.query, norm.key, norm.query_bias, norm.key_bias]
    return sum(int(a.size) for a in found if a is not None)


def shape_probes(session: Session, layer: MultiHeadLayer,
                 single: bool) -> tuple[ShapeProbe, ShapeProbe]:
    """qkv check's shape probes (:func:`~qkvcli.check.boundaries.probed`) on the layer as
    an implementation (:data:`~qkvcli.check.kinds.WEIGHED_LAYER`): an empty batch and no
    tokens through the layer and back, the weights ``[B,(H,)T,T]``, the output
    ``[B,T,e_out]`` and ``dX`` (the input's shape) each with the shape the layer's rule
    gives (a head's weights have no heads axis)."""
    reached = _reached_size(layer)

    def rule(x: Array, weights: tuple[Array, ...]) -> tuple[tuple[int, ...], ...]:
        batch, tokens = (int(d) for d in x.shape[:2])
        square = (batch, tokens, tokens) if single else (batch, layer.heads, tokens, tokens)
        return square, (batch, tokens, layer.e_out), tuple(int(d) for d in x.shape), (reached,)

    kind = WEIGHED_LAYER._replace(shape_rule=rule)
    case = session.cases[0]
    batch, tokens, d_model = case.input.shape
    empty, none = (probed(session, kind, kind.run(case), Probe(what, what, np.zeros(shape), (
        np.zeros((*shape[:2], layer.e_out)),)), True) for what, shape in (
            ("empty batch", (0, tokens, d_model)), ("no tokens", (max(batch, 1), 0, d_model))))
    return empty._replace(results=empty.results[:3]), none._replace(results=none.results[:3])


def worst(heads: tuple[HeadEvidence, ...]) -> tuple[RowSums, FutureZero, HullEvidence]:
    """The layer's attention rows, mask and hull, each the worst of any head's: the least
    weight and the worst row sum; the largest weight any head gives a hidden key; the
    worst residual, every violation, the loosest tolerance."""
    w, m, u = [h.attention for h in heads], [h.mask for h in heads], [h.hull for h in heads]
    return (RowSums(min(x.min_attention for x in w), max(x.max_row_deviation for x in w),
                    w[0].tolerance),
            FutureZero(m[0].applicable, max(x.max_masked_attention for x in m)),
            HullEvidence(max(x.barycentric_residual for x in u),
                         sum(x.box_violations for x in u), max(x.tolerance for x in u)))


def _same(head: AttentionHead, i: int, j: int) -> bool:
    """Whether branches ``i`` and ``j`` have equal weights and equal (or no) biases."""
    w, b = head.weights, head.biases
    bi, bj = b[i], b[j]
    biases_equal = (bi is None and bj is None) or (
        bi is not None and bj is not None and np.array_equal(bi, bj)
    )
    return w[i].shape == w[j].shape and np.array_equal(w[i], w[j]) and biases_equal


def notes_of(head: AttentionHead) -> tuple[Note, ...]:
    """A teacher's remarks on ``head``: collapsed or symmetric roles, a distinct ``d_v``.

    Takes the head (for a layer, its full-width projections); gives the notes in a
    fixed order, as data (:mod:`qkvcli.render.attend` words them).
    """
    notes = []
    if _same(head, 0, 1) and _same(head, 0, 2):
        notes.append(Note("collapsed-roles", head.d_k, head.d_v))
    elif _same(head, 0, 1):
        notes.append(Note("symmetric-matching", head.d_k, head.d_v))
    if head.d_v != head.d_k:
        notes.append(Note("independent-value-width", head.d_k, head.d_v))
    return tuple(notes)


def _layer_notes(layer: MultiHeadLayer) -> tuple[Note, ...]:
    """The projections' notes; grouped K/V projections are narrower than the query's by
    design, so their width note speaks of one head's widths."""
    notes = notes_of(layer.projections)
    if layer.kv_heads == layer.heads:
        return notes
    kept = tuple(n for n in notes if n.code != "independent-value-width")
    if layer.d_v != layer.d_k:
        kept += (Note("independent-value-width", layer.d_k, layer.d_v),)
    return kept


ABSENT = np.empty(0)
"""What the layer's pass gives for a record the layer has not (no bias, no RoPE)."""


class LayerImplementation(PythonImplementation):
    """The layer (its mask ``causal``) as the engine-only kinds' implementation:
    ``layer_forward`` (:data:`~qkvcli.check.kinds.LAYER`), ``layer_weighed`` and
    ``layer_backward`` (:data:`~qkvcli.check.kinds.WEIGHED_LAYER`), ``layer_pass`` and
    ``layer_pass_backward`` (:data:`~qkvcli.check.kinds.PASS_LAYER`). It keeps its first
    whole pass and its gradients (the engine's records, whose arrays the session's first
    results are); a reverse reads the pass made just before it on the same input (as a
    training step does), and computes a pass of its own otherwise."""

    fresh = True  # the engine's own new arrays

    def __init__(self, layer: MultiHeadLayer, causal: bool, single: bool = False) -> None:
        super().__init__("the layer", None, layer_forward=self.layer_forward,
                         layer_weighed=self.layer_weighed, layer_backward=self.layer_backward,
                         layer_pass=self.layer_pass,
                         layer_pass_backward=self.layer_pass_backward)
        self.layer, self.causal, self.single = layer, causal, single
        self.first: tuple[Array, LayerForward] | None = None
        self.latest: tuple[Array, LayerForward] | None = None
        self.grads: LayerGradients | None = None

    def layer_forward(self, x: Array) -> Array:  # Y alone: no [B,H,T,T] array is made
        with np.errstate(over="ignore", invalid="ignore"):
            return engine.forward(self.layer, x, self.causal, records=False).output

    def layer_weighed(self, x: Array) -> tuple[Array, Array]:
        forward = self.layer.forward(x, self.causal)
        # a head's weights have no heads axis
        return forward.attention[:, 0] if self.single else forward.attention, forward.output

    def layer_backward(self, x: Array, upstream: Array) -> tuple[Array, Array]:
        grads = self.layer.backward(x, self.layer.forward(x, self.causal), upstream)
        reached = [g.reshape(-1) for g in (
            grads.grad_w_query, grads.grad_w_key, grads.grad_b_query, grads.grad_b_key,
            grads.grad_norm_query, grads.grad_norm_key, grads.grad_norm_query_bias,
            grads.grad_norm_key_bias) if g is not None]
        return grads.grad_input, np.concatenate(reached)

    def layer_pass(self, x: Array) -> tuple[Array, ...]:
        forward = self.layer.forward(x, self.causal)
        if self.first is None:
            self.first = (x, forward)
            self.latest = (x, forward)
        else:  # kept for the reverse on the same input: only what it reads (S and Z
            # dropped, two [B,H,T,T] arrays fewer held; a soft-capped layer's reads Z)
            self.latest = (x, self._pruned(forward))
        found = {**forward.stacked, "concat": forward.concat, "output": forward.output}
        return tuple(found.get(name, ABSENT) for name in LAYER_RECORDS)

    def _pruned(self, forward: LayerForward) -> LayerForward:
        dropped = ("scores",) if self.layer.softcap is not None else ("scores", "scaled_scores")
        return forward._replace(heads=(), stacked={
            k: v for k, v in forward.stacked.items() if k not in dropped})

    def layer_pass_backward(self, x: Array, upstream: Array) -> tuple[Array, ...]:
        # the reverse of the pass just made on the same input reads that pass, any other
        # a pass of its own
        latest, self.latest = self.latest, None
        forward = (latest[1] if latest is not None and latest[0] is x
                   else self._pruned(self.layer.forward(x, self.causal)))
        grads = self.layer.backward(x, forward, upstream)
        if self.grads is None:
            self.grads = grads
        found = {**grads.stacked, **{name: getattr(grads, name) for name in
                                     LAYER_GRADIENT_RECORDS if hasattr(grads, name)}}
        return tuple(ABSENT if found.get(name) is None else found[name]
                     for name in LAYER_GRADIENT_RECORDS)


def pass_shapes(layer: MultiHeadLayer) -> Callable[[Array, tuple[Array, ...]], tuple[
        tuple[int, ...], ...]]:
    """The shapes of every array of the layer's pass and reverse on an input ``x``
    (:data:`~qkvcli.check.kinds.PASS_LAYER`'s results, ``[0]`` for a record the layer has
    not): the projections ``[B,T,H d_k + G d_k + G d_v]``, ``Q`` ``[B,H,T,d_k]``, ``K``,
    ``V`` ``[B,G,T,d]``, the scores and weights ``[B,H,T,T]``, the merged heads, the
    output ``[B,T,e_out]``; each gradient its tensor's shape."""
    p, norm = layer.projections, layer.qk_norm
    heads, kv, d_k, d_v = layer.heads, layer.kv_heads, layer.d_k, layer.d_v
    none = (0,)

    def shape(values: Array | None) -> tuple[int, ...]:
        return none if values is None else tuple(int(d) for d in values.shape)

    def rule(x: Array, weights: tuple[Array, ...]) -> tuple[tuple[int, ...], ...]:
        batch, tokens = (int(d) for d in x.shape[:2])
        query, key = (batch, heads, tokens, d_k), (batch, kv, tokens, d_k)
        square, merged = (batch, heads, tokens, tokens), (batch, tokens, heads * d_v)
        turned = (query, key) if layer.rope is not None else (none, none)
        normed = (query, key) if norm is not None and norm.after_rope else (none, none)
        norms = (none,) * 4 if norm is None else tuple(
            shape(a) for a in (norm.query, norm.key, norm.query_bias, norm.key_bias))
        return ((batch, tokens, heads * d_k + kv * d_k + kv * d_v), query, key,
                (batch, kv, tokens, d_v), *turned, *normed, square, square, square, merged,
                (batch, tokens, layer.e_out),
                shape(x), *(shape(w) for w in p.weights), *(shape(b) for b in p.biases), merged,
                shape(layer.out_weight), shape(layer.out_bias), square, square, square, *norms)

    return rule


def layer_session(layer: MultiHeadLayer, x: Array, upstream: Array, causal: bool,
                  single: bool = False) -> Session:
    """The layer as an implementation of the engine-only kinds
    (:class:`LayerImplementation`; its mask ``causal``; ``single``: a head, whose weights
    have no heads axis), ``x`` and ``upstream`` the one case of a session on it."""
    case = Case("fixture", x, (), (upstream,), 0.0, 0.0)
    return Session(LayerImplementation(layer, causal, single), [case], 0.0, isolated=False,
                   given_only=True)


ISOLATION_TOKENS = 16
"""The tokens the isolation probes read: the input's first ones. The claim holds for any
input, and under the causal mask these tokens' results are the full pass's own; the
probes then cost three passes of a few rows, whatever the sequence's length."""


def heads_isolated(layer: MultiHeadLayer, x: Array, causal: bool) -> bool | None:
    """qkv check's head-isolation family
    (:func:`~qkvcli.check.multihead.check_head_isolation`) on the layer as an
    implementation (:data:`~qkvcli.check.kinds.HEADS_LAYER`, its heads split as the
    layer splits them) and the input's first :data:`ISOLATION_TOKENS` tokens, within
    the rounding of a row of them; ``None`` where the claim does not apply: one head, no
    batch item or token, or a q/k norm over the whole layer's width (OLMo 2's), which
    joins the heads by design."""
    norm = layer.qk_norm
    if layer.heads < 2 or not x.shape[0] or not x.shape[1] or (
            norm is not None and norm.span == "layer"):
        return None
    part = x[:, :ISOLATION_TOKENS]
    p = layer.projections

    def layer_heads(given: Array, w_query: Array, w_key: Array,
                    w_value: Array) -> tuple[Array, Array]:
        moved = layer.with_parameters([w_query, w_key, w_value], list(p.biases),
                                      layer.out_weight, layer.out_bias)
        with np.errstate(over="ignore", invalid="ignore"):
            done = moved.forward(given, causal)
        return done.attention, done.concat

    implementation = PythonImplementation("the layer", None, layer_heads=layer_heads)
    implementation.fresh = True  # the engine's own new arrays
    layout = HeadLayout(layer.heads, layer.kv_heads, layer.d_k, layer.d_v)
    kind = HEADS_LAYER._replace(modes=(causal,), layout=lambda case: layout)
    session = Session(implementation, [Case("fixture", part, p.weights, (), 0.0, 0.0)],
                      4.0 * part.shape[1] * EPSILON, isolated=False, given_only=True)
    return check_head_isolation(session, kind)[0].passed


def turned_from_zero(layer: MultiHeadLayer, forward: LayerForward) -> bool | None:
    """qkv check's position-zero family (:func:`~qkvcli.check.rotary.check_position_zero`)
    on the layer's rotation as an implementation of ``rope``, given the first token of
    each of the layer's query and key heads: turned from position zero, each is its own
    (a scaling's attention factor times the turned coordinates: ``cos 0`` is the
    factor, ``sin 0`` is 0); ``None`` without RoPE or a token."""
    rope = layer.rope
    query, key = forward.stacked.get("query"), forward.stacked.get("key")
    if rope is None or query is None or key is None or not query.shape[-2]:
        return None
    factor = 1.0 if rope.scaling is None else attention_factor(rope.scaling)
    width = int(query.shape[-1])
    rows = np.concatenate([given[..., :1, :].reshape(-1, 1, width) for given in (query, key)])

    def layer_rope(values: Array, base: float, offset: int) -> Array:
        return rotate(values, rope._replace(offset=offset))

    def at_zero(given: Array) -> Array:
        first = np.array(given)
        first[..., :rope.dims] *= factor
        return first

    implementation = PythonImplementation("the layer's rotation", None, rope=layer_rope)
    implementation.fresh = True
    session = Session(implementation, [Case("fixture", rows, (), (rows,), 0.0, 0.0)], 0.0,
                      isolated=False, given_only=True)
    return check_position_zero(session, at_zero)[0].passed


def _token_rows(forward: AttentionForward) -> tuple[TokenRow, ...]:
    """Each query position of a head: its attention, their sum and its output. Only while
    ``A`` is small enough to show whole (a T=1024 head would hold a million Python floats
    twice)."""
    a, o = forward.attention, forward.output
    if a.size > ROWS_LIMIT:
        return ()
    return tuple(TokenRow(b, t, tuple(float(v) for v in a[b, t]), float(np.sum(a[b, t])),
                          tuple(float(v) for v in o[b, t]))
                 for b in range(a.shape[0]) for t in range(a.shape[1]))


def other_mask(fixture: AttendFixture, layer: MultiHeadLayer, causal: bool,
               within: tuple[int, int]) -> OtherMask | None:
    """The weights under the other mask (the engine's forward with ``not causal``), when
    the fixture has at most ``within[0]`` tokens and its weights at most ``within[1]``
    elements; else ``None``."""
    batch, tokens = fixture.input.shape[:2]
    tokens_limit, cells_limit = within
    if tokens > tokens_limit or batch * (fixture.function.heads or 1) * tokens ** 2 > cells_limit:
        return None
    forward = layer.forward(fixture.input, not causal)
    single = fixture.function.heads is None  # a head's tensors have no heads axis
    scores, scaled, attention = (forward.stacked[name][:, 0] if single else forward.stacked[name]
                                 for name in ("scores", "scaled_scores", "attention"))
    return OtherMask(not causal, scores, scaled, attention)


class LayerRun:
    """attend's plan run on one layer: the fixture, its layer as an implementation in a
    session of the fixture alone (:func:`layer_session`), the gradient check's settings,
    and what each family has found so far, by id (:data:`FAMILIES` fill it in order).

    The layer's first whole pass and reverse are the session's first results (the
    engine's records of them, :class:`LayerImplementation` keeps them): the report's
    tensors are theirs, and every later family makes passes of its own."""

    def __init__(self, fixture: AttendFixture, parts: LayerParts, causal: bool,
                 gradcheck: dict[str, Any], decode: float | None = None) -> None:
        self.fixture, self.parts, self.causal, self.gradcheck = fixture, parts, causal, gradcheck
        self.decode = decode  # the tolerance of a decode step by step; None: not asked
        self.layer, self.x = parts.layer, fixture.input
        self.single = fixture.function.heads is None
        self.session = layer_session(self.layer, self.x, fixture.upstream, causal, self.single)
        self.kind = PASS_LAYER._replace(shape_rule=pass_shapes(self.layer))
        implementation = self.session.implementation
        assert isinstance(implementation, LayerImplementation)
        self.implementation = implementation
        self.found: dict[str, Any] = {}

    @property
    def forward(self) -> LayerForward:
        """The layer's first whole pass (the forward family makes it)."""
        assert self.implementation.first is not None
        return self.implementation.first[1]

    @property
    def grads(self) -> LayerGradients:
        """The layer's first reverse (the reverse family makes it)."""
        assert self.implementation.grads is not None
        return self.implementation.grads

    @cached_property
    def heads(self) -> tuple[HeadEvidence, ...]:
        """Row sums, mask and hull of each head of the first pass."""
        return head_evidence(self.forward, int(self.x.shape[1]), self.causal)

    def passed(self, backward: bool = False) -> bool:
        """The first pass's (``backward``: its reverse's) claim: every array finite and
        shaped by the layer's rule (:func:`~qkvcli.check.values.finite_and_shaped`)."""
        found = self.session.answered(self.kind, self.kind.run(self.session.cases[0]), backward)
        return finite_and_shaped(self.kind, self.x, (), found, backward=backward)

    def primary(self) -> AttendPrimary:
        """The report's tensors of the first pass and reverse, and the loss."""
        return AttendPrimary(layer_tensors(self.fixture, self.parts, self.forward, self.grads),
                             layer_loss(self.forward, self.fixture.upstream))


def _gradcheck(run: LayerRun) -> Any:
    f = run.fixture
    return gradcheck_attention(run.layer, run.x, f.upstream, run.grads, run.causal, f.step,
                               f.tolerance, f.samples, forward=run.forward, **run.gradcheck)


FAMILIES: tuple[tuple[str, Callable[[LayerRun], Any]], ...] = (
    ("forward", LayerRun.passed),
    ("reverse", lambda run: run.passed(backward=True)),
    ("attention", lambda run: worst(run.heads)[0]),
    ("mask", lambda run: worst(run.heads)[1]),
    ("hull", lambda run: worst(run.heads)[2]),
    ("rows", lambda run: _token_rows(run.forward.heads[0]) if run.single else ()),
    ("shapes", lambda run: shape_probes(run.session, run.layer, run.single)),
    ("gradcheck", _gradcheck),
    ("primary", LayerRun.primary),
    ("replay", lambda run: check_replay(run.session, run.kind)[0].passed),
    ("position_zero", lambda run: turned_from_zero(run.layer, run.forward)),
    ("single_token", lambda run: check_single_token(run.session, WEIGHED_LAYER)[0].passed),
    ("scale_probe", lambda run: scale_probe(run.layer.d_k, run.layer.given_scale).holds),
    ("prefix", lambda run: check_prefix(run.session, LAYER)[0].passed if run.causal else None),
    ("head_isolation", lambda run: heads_isolated(run.layer, run.x, run.causal)),
    ("decode", lambda run: None if run.decode is None else decode_evidence(
        run.layer, run.x, run.forward, run.decode)),
)
"""attend's steps in the order they are computed, each a function of the run that gives
what it found (``None``: the family does not apply): the families of the plan
(:data:`~qkvcli.check.plans.PLANS`, which reads each verdict and orders them for the
report), and the report's token rows and tensors. The first pass and reverse come
first, and every family that reads them before the replay's passes."""


def build_attend_evidence(fixture: AttendFixture, causal: bool | None = None,
                          other_mask_within: tuple[int, int] | None = None,
                          layer: MultiHeadLayer | None = None,
                          decode: float | None = None, **gradcheck: Any) -> AttendEvidence:
    """Run the head or layer on ``fixture`` and gather every check.

    Takes the fixture, the mask flag (default: the fixture's ``causal``), the bounds
    ``(tokens, weights)`` within which the weights under the other mask are computed too
    (for the page's causal toggle: :func:`other_mask`; ``None``: never), the fixture's
    layer if the caller judged it already (:func:`~qkvcli.attention.fixture.layer_of`;
    ``None``: judged here), ``decode``, the tolerance of each step of the layer decoded
    one token at a time with a KV cache against its full pass
    (:func:`~qkvcli.attention.decode.decode_evidence`; ``None``: no decode), and the
    gradient check's settings
    (:func:`~qkvcli.attention.gradcheck.gradcheck_attention`'s keywords: ``mode``,
    ``directions``, ``limit``, ``progress``...); gives the evidence (no wording).
    Raises :class:`~qkvcli.reading.problems.FixtureError` for a fixture the engine
    refuses, the input errors and, for unusable settings or a check over its budget
    (before any work), :class:`~qkvcli.gradcheck.settings.GradcheckSettingError`; a
    decode a KV cache cannot serve, before any work,
    :class:`~qkvcli.attention.errors.DecodeRefusal`.
    """
    causal = fixture.function.causal if causal is None else causal
    parts = layer_parts(fixture, layer)
    if decode is not None:
        check_decodable(parts.layer, causal, *(int(d) for d in fixture.input.shape[:2]))
    plan_check(parts.layer, fixture.input, fixture.step, fixture.tolerance, fixture.samples,
               causal=causal, **{k: v for k, v in gradcheck.items() if k in PLAN_KEYS})
    run = LayerRun(fixture, parts, causal, gradcheck, decode)
    for name, family in FAMILIES:
        run.found[name] = family(run)
    return _evidence(run, other_mask_within)


def _evidence(run: LayerRun, other_mask_within: tuple[int, int] | None) -> AttendEvidence:
    """The evidence of a run whose families have all been computed."""
    fixture, layer, parts, found = run.fixture, run.layer, run.parts, run.found
    batch, tokens, d_model = run.x.shape
    p, single = layer.projections, run.single
    config = AttendConfig(
        batch=batch, tokens=tokens, d_model=d_model, d_k=layer.d_k, d_v=layer.d_v,
        causal=run.causal, bias=p.branch_biases, value_width=fixture.function.value_width,
        layout=fixture.parameters.layout,
        layout_description=fixture.parameters.layout_description, scale=p.scale_of(layer.d_k),
        parameter_count=layer.parameter_count, names=p.names,
        heads=None if single else layer.heads, e_out=None if single else layer.e_out,
        out_layout=parts.out_layout, packed=parts.packed,
        kv_heads=None if layer.kv_heads == layer.heads else layer.kv_heads, rope=p.rope,
        scale_given=p.given_scale is not None, architecture=fixture.function.architecture,
        sources=relative_sources(fixture.parameters.sources), window=layer.window,
        softcap=layer.softcap,
        alibi=None if layer.alibi is None else tuple(float(v) for v in layer.alibi),
        alibi_scaled=layer.alibi_form.scaled, alibi_rounding=layer.alibi_form.rounding,
        clip_qkv=layer.clip, qk_norm=fixture.function.qk_norm,
    )
    return AttendEvidence(
        chapter=fixture.chapter, seed=fixture.seed, config=config, primary=found["primary"],
        rows=found["rows"], attention=found["attention"], mask=found["mask"],
        hull=found["hull"], probes=found["shapes"], notes=_layer_notes(layer),
        replay_bitwise=found["replay"], gradcheck=found["gradcheck"],
        checks=judge_plan(PLANS[ATTEND], found), heads=() if single else run.heads,
        upstream_given=fixture.upstream_given,
        other_mask=None if other_mask_within is None else other_mask(
            fixture, layer, run.causal, other_mask_within),
        decode=found["decode"],
    )
