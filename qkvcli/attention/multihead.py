"""A multi-head attention layer: H heads on slices of the projections, concatenated, then out_proj.

Forward, for ``X [B,T,d_model]`` and full-width projections ``W_Q [d_model, H*d_k]``,
``W_K [d_model, H*d_k]``, ``W_V [d_model, H*d_v]``::

    head h: the columns h*d_k:(h+1)*d_k of W_Q and W_K, h*d_v:(h+1)*d_v of W_V
            O_h = softmax(Q_h K_h^T / sqrt(d_k)) V_h           [B,T,d_v]  (one AttentionHead)
    C = concat(O_0, ..., O_{H-1}) on the last axis              [B,T,H*d_v]
    Y = C W_O + b_O   (no output projection: Y = C)             [B,T,E_out]

exactly as ``torch.nn.MultiheadAttention`` and nanoGPT split and join heads (their
``[B,H,T,d_k]`` view is head h's slice of the last axis). The passes are the engine's
(:mod:`qkvcli.attention.engine`), for one head as for many; :attr:`MultiHeadLayer.head_slices`
gives each head alone, as an :class:`~qkvcli.attention.head.AttentionHead`, and
:meth:`MultiHeadLayer.subset` some of them as a smaller layer (the gradient check's
cheaper evaluations).

Grouped-query attention (``kv_heads`` = G < H): ``W_K`` and ``W_V`` hold G heads, and
query head h reads K/V head ``h // (H/G)``, as Hugging Face's ``repeat_kv`` repeats them
(here broadcast over the group, not copied); in the reverse pass each K/V head's
gradients are the sum over its group.

Reverse for ``dY``: ``dC = dY W_O^T``, ``dW_O = C^T dY``, ``db_O = sum dY``; every head's
reverse on its slice of ``dC`` at once. This module validates; the engine computes. No I/O.
"""

from __future__ import annotations

import math

import numpy as np

from qkvcli.attention import engine
from qkvcli.attention.engine import LayerForward, LayerGradients
from qkvcli.attention.errors import (
    HeadCountMismatch,
    KvHeadsMismatch,
    OutProjectionShapeMismatch,
    OutputGradientShapeMismatch,
    QkNormError,
    ScaleError,
    WindowError,
)
from qkvcli.attention.head import AttentionHead
from qkvcli.attention.maths import AlibiForm, QkNorm
from qkvcli.core.arrays import Array, ArrayLike, check_finite, readonly
from qkvcli.core.names import ALIBI_ROUNDINGS, QK_NORM_KINDS, QK_NORM_SPANS
from qkvcli.core.rope import Rope, check_rope


class MultiHeadLayer:
    """``heads`` attention heads on the projections of ``projections``, and an optional out_proj.

    Build one with :meth:`build`; instances are immutable.
    """

    __slots__ = ("_alibi", "_alibi_form", "_clip", "_heads", "_kv_heads", "_out_bias",
                 "_out_weight", "_projections", "_qk_norm", "_slices", "_softcap", "_window")

    def __init__(self, projections: AttentionHead, heads: int, out_weight: Array | None,
                 out_bias: Array | None, kv_heads: int | None = None,
                 window: int | None = None, softcap: float | None = None,
                 alibi: Array | None = None, clip: float | None = None,
                 qk_norm: QkNorm | None = None,
                 alibi_form: AlibiForm | None = None) -> None:
        # Private: build validates first.
        self._projections = projections
        self._heads = heads
        self._kv_heads = heads if kv_heads is None else kv_heads
        self._out_weight = out_weight
        self._out_bias = out_bias
        self._window = window
        self._softcap = softcap
        self._alibi = alibi
        self._clip = clip
        self._qk_norm = qk_norm
        self._alibi_form = AlibiForm() if alibi_form is None else alibi_form
        # each head alone, built when first asked for (the batched engine never needs them,
        # and a gradient check builds a layer per probe)
        self._slices: tuple[AttentionHead, ...] | None = None

    @classmethod
    def build(cls, projections: AttentionHead, heads: int, out_weight: ArrayLike | None = None,
              out_bias: ArrayLike | None = None, kv_heads: int | None = None,
              window: int | None = None, softcap: float | None = None,
              alibi: ArrayLike | None = None, clip: float | None = None,
              qk_norm: QkNorm | None = None,
              alibi_form: AlibiForm | None = None) -> MultiHeadLayer:
        """Validate and build. ``out_weight`` is ``[H*d_v, E_out]`` (our layout, ``Y = C W``).

        ``kv_heads`` (default ``heads``) K/V heads are shared by groups of
        ``heads / kv_heads`` consecutive query heads (grouped-query attention; 1 is
        multi-query attention); the projections must then be built with
        ``kv_groups = heads / kv_heads``. ``window``: a causal mask sees only the
        ``window`` latest keys (a sliding window); without the causal mask a query sees
        the keys less than ``window`` positions away on either side (two-sided).
        ``softcap``: the scaled scores become ``softcap * tanh(Z / softcap)`` (Gemma 2).
        ``alibi``: one ALiBi slope per query head, ``slope_h * j`` added to the scaled
        scores (BLOOM), or as ``alibi_form`` says (Falcon: added before the scale,
        rounded to bfloat16; :class:`~qkvcli.attention.maths.AlibiForm`). ``clip``: the
        projections are clamped to ``[-clip, clip]`` (OLMo).
        ``qk_norm``: Q and K are normalised with learned weights (RMSNorm: Qwen3, OLMo 2,
        Gemma 3; LayerNorm: Phi, Persimmon, StableLM, Cohere;
        :class:`~qkvcli.attention.maths.QkNorm`), checked last (:class:`QkNormError`).

        Order (first failure wins): ``kv_heads`` divides ``heads`` and matches the
        projections' groups (:class:`KvHeadsMismatch`); head count divides both widths
        (:class:`HeadCountMismatch`); RoPE fits a head; finite out_proj; its shapes
        (:class:`OutProjectionShapeMismatch`); the window, a positive integer
        (:class:`WindowError`).
        """
        groups = 1
        if kv_heads is not None:
            if kv_heads < 1 or heads % kv_heads:
                raise KvHeadsMismatch(f"kv_heads must be at least 1 and divide heads {heads}, "
                                      f"got {kv_heads}")
            groups = heads // kv_heads
        if projections.kv_groups != groups:
            raise KvHeadsMismatch(
                f"the projections are grouped {projections.kv_groups} query heads per K/V head, "
                f"heads {heads} and kv_heads {kv_heads or heads} make {groups}")
        width_qk, width_v = projections.d_k, projections.d_v
        if heads < 1 or width_qk % heads or (groups == 1 and width_v % heads):
            raise HeadCountMismatch(heads, width_qk, width_v)
        kv = heads // groups
        if groups > 1 and ((projections.d_k // groups) % kv or width_v % kv):
            raise KvHeadsMismatch(
                f"kv_heads {kv} must divide the key width "
                f"{projections.d_k // groups} and the value width {width_v}")
        if projections.rope is not None:
            check_rope(projections.rope, width_qk // heads)
        width_v *= groups  # the concatenated heads: H*d_v
        weight = None if out_weight is None else readonly(out_weight)
        bias = None if out_bias is None else readonly(out_bias)
        for array in (weight, bias):
            if array is not None:
                check_finite(array, "parameter")
        if bias is not None and weight is None:
            raise OutProjectionShapeMismatch("out_proj bias needs an out_proj weight")
        if weight is not None:
            if weight.ndim != 2 or weight.shape[0] != width_v or weight.shape[1] == 0:
                raise OutProjectionShapeMismatch(
                    f"out_proj weight must be [{width_v},E_out] (H*d_v rows), got "
                    f"[{','.join(map(str, weight.shape))}]")
            if bias is not None and bias.shape != (weight.shape[1],):
                raise OutProjectionShapeMismatch(
                    f"out_proj bias must be [{weight.shape[1]}] (E_out), got "
                    f"[{','.join(map(str, bias.shape))}]")
        if window is not None and (isinstance(window, bool) or not isinstance(window, int)
                                   or window < 1):
            raise WindowError(window)
        if softcap is not None and not (math.isfinite(softcap) and softcap > 0.0):
            raise ScaleError(softcap)
        slopes = None
        if alibi is not None:
            slopes = readonly(alibi)
            if slopes.shape != (heads,):
                raise KvHeadsMismatch(f"alibi must give one slope per head, {heads}, got "
                                      f"{slopes.size}")
            check_finite(slopes, "parameter")
        if alibi_form is not None and alibi_form.rounding not in (None, *ALIBI_ROUNDINGS):
            raise KvHeadsMismatch(f"alibi rounding must be \"bfloat16\" or none, got "
                                  f"{alibi_form.rounding!r}")
        if clip is not None and not (math.isfinite(clip) and clip > 0.0):
            raise ScaleError(clip)
        norm = None if qk_norm is None else _checked_norm(qk_norm, heads, kv, width_qk // heads)
        return cls(projections, heads, weight, bias, kv_heads, window, softcap, slopes, clip,
                   norm, alibi_form)

    def _slice(self, h: int) -> AttentionHead:
        if self._heads == 1:
            return self._projections
        p = self._projections
        dk, dv = self.d_k, self.d_v
        g = self.group_of(h)  # the K/V head this query head reads
        cols = (slice(h * dk, (h + 1) * dk), slice(g * dk, (g + 1) * dk), slice(g * dv, (g + 1) * dv))
        weights = [np.ascontiguousarray(w[:, c]) for w, c in zip(p.weights, cols, strict=True)]
        biases = [None if b is None else np.ascontiguousarray(b[c])
                  for b, c in zip(p.biases, cols, strict=True)]
        return p.sliced(weights, biases)

    def group_of(self, head: int) -> int:
        """The K/V head that query head ``head`` shares (HF's ``repeat_kv``: consecutive)."""
        return head // (self._heads // self._kv_heads)

    # --- properties ---------------------------------------------------------------------

    @property
    def projections(self) -> AttentionHead:
        """The full-width projections: weights ``[d_model, H*d_k]`` ... as one head would hold."""
        return self._projections

    @property
    def heads(self) -> int:
        return self._heads

    @property
    def kv_heads(self) -> int:
        return self._kv_heads

    @property
    def window(self) -> int | None:
        """The sliding window: of a causal mask, the latest keys; else two-sided
        (``None``: none)."""
        return self._window

    @property
    def softcap(self) -> float | None:
        """The scores' soft-cap (``None``: none)."""
        return self._softcap

    @property
    def alibi(self) -> Array | None:
        """One ALiBi slope per query head (``None``: no ALiBi)."""
        return self._alibi

    @property
    def alibi_form(self) -> AlibiForm:
        """Where and how the ALiBi bias enters the scores."""
        return self._alibi_form

    @property
    def clip(self) -> float | None:
        """The bound the projections are clamped to (``None``: none)."""
        return self._clip

    @property
    def qk_norm(self) -> QkNorm | None:
        """The learned norm of Q and K (``None``: none)."""
        return self._qk_norm

    @property
    def head_slices(self) -> tuple[AttentionHead, ...]:
        """Each head alone, an :class:`AttentionHead` on its columns (copies, made once)."""
        if self._slices is None:
            self._slices = tuple(self._slice(h) for h in range(self._heads))
        return self._slices

    @property
    def out_weight(self) -> Array | None:
        return self._out_weight

    @property
    def out_bias(self) -> Array | None:
        return self._out_bias

    @property
    def d_model(self) -> int:
        return self._projections.d_model

    @property
    def d_k(self) -> int:
        return self._projections.d_k // self._heads

    @property
    def d_v(self) -> int:
        return self._projections.d_v // self._kv_heads

    @property
    def e_out(self) -> int:
        return self.concat_width if self._out_weight is None else int(self._out_weight.shape[1])

    @property
    def concat_width(self) -> int:
        """``H*d_v``: the width of the concatenated heads."""
        return self._heads * self.d_v

    @property
    def parameter_count(self) -> int:
        n = self._qk_norm
        norm = () if n is None else (n.query, n.key, n.query_bias, n.key_bias)
        extra = sum(int(a.size) for a in (self._out_weight, self._out_bias, *norm)
                    if a is not None)
        return self._projections.parameter_count + extra

    def with_parameters(self, weights: list[Array], biases: list[Array | None],
                        out_weight: Array | None, out_bias: Array | None) -> MultiHeadLayer:
        """The same layer with other parameter values of the same shapes, unvalidated."""
        return MultiHeadLayer(self._projections.with_parameters(weights, biases), self._heads,
                              out_weight, out_bias, self._kv_heads, self._window,
                              self._softcap, self._alibi, self._clip, self._qk_norm,
                              self._alibi_form)

    def with_rope(self, rope: Rope) -> MultiHeadLayer:
        """The same layer, its parameter arrays themselves, each head turned by ``rope``
        (``dims`` at most a head's width). Raises a ``RopeError``."""
        check_rope(rope, self.d_k)
        return MultiHeadLayer(self._projections.with_rope(rope), self._heads, self._out_weight,
                              self._out_bias, self._kv_heads, self._window, self._softcap,
                              self._alibi, self._clip, self._qk_norm, self._alibi_form)

    def with_qk_norm(self, query: Array, key: Array, query_bias: Array | None = None,
                     key_bias: Array | None = None) -> MultiHeadLayer:
        """The same layer with other norm weights and biases (``None``: the layer's own)
        of the same shapes, unvalidated."""
        norm = self._qk_norm
        assert norm is not None
        return MultiHeadLayer(self._projections, self._heads, self._out_weight,
                              self._out_bias, self._kv_heads, self._window, self._softcap,
                              self._alibi, self._clip, norm._replace(
                                  query=query, key=key,
                                  query_bias=norm.query_bias if query_bias is None else query_bias,
                                  key_bias=norm.key_bias if key_bias is None else key_bias),
                              self._alibi_form)

    @property
    def rope(self) -> Rope | None:
        return self._projections.rope

    @property
    def given_scale(self) -> float | None:
        return self._projections.given_scale

    @property
    def branch_biases(self) -> tuple[bool, bool, bool]:
        return self._projections.branch_biases

    def packed(self) -> tuple[Array, Array | None]:
        """``[W_Q|W_K|W_V]`` (``[d_model, H*d_k + 2 G*d_k]``) and the packed bias, built once."""
        return self._projections.packed()

    def input_columns(self) -> tuple[slice, slice, slice]:
        """The columns of the input each branch reads (the projections')."""
        return self._projections.input_columns()

    def subset(self, first: int, count: int) -> MultiHeadLayer:
        """The query heads ``first .. first+count-1`` and the K/V heads they read, without
        the output projection: what a change to those heads' parameters reaches. ``first``
        and ``count`` cover whole K/V groups when the heads are grouped. A norm over the
        layer's whole width spans every head: such a layer's subset is all of it."""
        p = self._projections
        per_kv = self._heads // self._kv_heads
        kv_first, kv_count = first // per_kv, max(1, count // per_kv)
        dk, dv = self.d_k, self.d_v
        cols = (slice(first * dk, (first + count) * dk),
                slice(kv_first * dk, (kv_first + kv_count) * dk),
                slice(kv_first * dv, (kv_first + kv_count) * dv))
        weights = [w[:, c] for w, c in zip(p.weights, cols, strict=True)]
        biases = [None if b is None else b[c] for b, c in zip(p.biases, cols, strict=True)]
        projections = p.sliced(weights, biases, count // kv_count)
        alibi = None if self._alibi is None else self._alibi[first:first + count]
        norm = self._qk_norm
        if norm is not None and norm.span == "layer" and count != self._heads:
            raise ValueError("a norm over the layer's width has no subset of its heads")
        if norm is not None and norm.query.ndim == 2:  # a weight per head: those heads' rows
            rows_q, rows_k = slice(first, first + count), slice(kv_first, kv_first + kv_count)
            norm = norm._replace(
                query=norm.query[rows_q], key=norm.key[rows_k],
                query_bias=None if norm.query_bias is None else norm.query_bias[rows_q],
                key_bias=None if norm.key_bias is None else norm.key_bias[rows_k])
        return MultiHeadLayer(projections, count, None, None, kv_count, self._window,
                              self._softcap, alibi, self._clip, norm, self._alibi_form)

    # --- computation --------------------------------------------------------------------

    def forward(self, x: ArrayLike, causal: bool = False) -> LayerForward:
        """Every head, the concatenation and the output projection. Raises the input errors."""
        x = self._projections.check_input(x)
        with np.errstate(over="ignore", invalid="ignore"):
            return engine.forward(self, x, causal)

    def project_out(self, concat: Array) -> Array:
        """``Y = C W_O + b_O``, or ``C`` itself without an output projection."""
        return engine.project_out(self, concat)

    def backward(self, x: ArrayLike, forward: LayerForward, grad_output: ArrayLike) -> LayerGradients:
        """Reverse pass for ``grad_output`` (``[B,T,E_out]``). Raises the input errors, then
        :class:`~qkvcli.attention.errors.OutputGradientShapeMismatch`."""
        x = self._projections.check_input(x)
        batch, tokens, _ = x.shape
        upstream = np.asarray(grad_output, dtype=np.float64)
        if upstream.shape != (batch, tokens, self.e_out):
            raise OutputGradientShapeMismatch((batch, tokens, self.e_out), tuple(upstream.shape))
        with np.errstate(over="ignore", invalid="ignore"):
            return engine.backward(self, x, forward, upstream)


def _checked_norm(norm: QkNorm, heads: int, kv_heads: int, d_k: int) -> QkNorm:
    """``norm`` with read-only weights and biases, or :class:`QkNormError`: its kind, its
    span (``"head"`` after RoPE), then eps (finite and positive), the offset (finite), the weights' shapes
    (``[d_k]`` each for a norm per head, or ``[H, d_k]`` and ``[G, d_k]``, a weight per
    head; ``[H*d_k]`` and ``[G*d_k]`` over the layer's width), their values finite, then
    the biases (a LayerNorm's only, both or neither, each shaped like its weight)."""
    if norm.kind not in QK_NORM_KINDS:
        raise QkNormError(f"qk_norm kind must be \"rms\" or \"layer\", got {norm.kind!r}")
    if norm.span not in QK_NORM_SPANS:
        raise QkNormError(f"qk_norm span must be \"head\" or \"layer\", got {norm.span!r}")
    if norm.after_rope and norm.span != "head":
        raise QkNormError("qk_norm after RoPE normalises each rotated head alone: its span "
                          "must be \"head\"")
    if not (math.isfinite(norm.eps) and norm.eps > 0.0):
        raise QkNormError(f"qk_norm eps must be finite and positive, got {norm.eps!r}")
    if not math.isfinite(norm.offset):
        raise QkNormError(f"qk_norm offset must be finite, got {norm.offset!r}")
    query, key = readonly(norm.query), readonly(norm.key)
    for branch, weight, rows in (("query", query, heads), ("key", key, kv_heads)):
        if norm.span == "head":
            allowed = {(d_k,): "shared by the heads", (rows, d_k): "a row per head"}
        else:
            allowed = {(rows * d_k,): "a norm over the layer"}
        if weight.shape not in allowed:
            spelled = " or ".join(f"[{','.join(map(str, shape))}] ({what})"
                                  for shape, what in allowed.items())
            raise QkNormError(f"qk_norm {branch} weight must be {spelled}, got "
                              f"[{','.join(map(str, weight.shape))}]")
        if not np.all(np.isfinite(weight)):
            raise QkNormError(f"qk_norm {branch} weight must be finite")
    biases = [None if b is None else readonly(b) for b in (norm.query_bias, norm.key_bias)]
    if any(b is not None for b in biases):
        if norm.kind != "layer":
            raise QkNormError("qk_norm biases need kind \"layer\" (an RMSNorm has none)")
        for branch, bias, weight in zip(("query", "key"), biases, (query, key), strict=True):
            if bias is None or bias.shape != weight.shape:
                raise QkNormError(
                    f"qk_norm {branch} bias must be [{','.join(map(str, weight.shape))}] (its "
                    "weight's shape), got "
                    + ("none" if bias is None else f"[{','.join(map(str, bias.shape))}]"))
            if not np.all(np.isfinite(bias)):
                raise QkNormError(f"qk_norm {branch} bias must be finite")
    return norm._replace(query=query, key=key, query_bias=biases[0], key_bias=biases[1])


def layer_loss(forward: LayerForward, upstream: Array) -> float:
    """``L = <Y, U>``: the scalar whose gradient :meth:`MultiHeadLayer.backward` gives."""
    return engine.loss(forward, upstream)
