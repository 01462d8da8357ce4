"""A multi-head attention layer: H heads on slices of the projections, concatenated, then out_proj.

Forward, for ``X [B,T,d_model]`` and full-width projections ``W_Q [d_model, H*d_k]``,
``W_K [d_model, H*d_k]``, ``W_V [d_model, H*d_v]``::

    head h: the columns h*d_k:(h+1)*d_k of W_Q and W_K, h*d_v:(h+1)*d_v of W_V
            O_h = softmax(Q_h K_h^T / sqrt(d_k)) V_h           [B,T,d_v]  (one AttentionHead)
    C = concat(O_0, ..., O_{H-1}) on the last axis              [B,T,H*d_v]
    Y = C W_O + b_O   (no output projection: Y = C)             [B,T,E_out]

exactly as ``torch.nn.MultiheadAttention`` and nanoGPT split and join heads (their
``[B,H,T,d_k]`` view is head h's slice of the last axis). Each head *is* an
:class:`~qkvcli.attention.head.AttentionHead` on its slices, so one head (H = 1, no
output projection) runs the very same arithmetic as ``qkv attend`` always has.

Grouped-query attention (``kv_heads`` = G < H): ``W_K`` and ``W_V`` hold G heads, and
query head h reads K/V head ``h // (H/G)``, as Hugging Face's ``repeat_kv`` repeats them;
in the reverse pass each K/V head's weight and bias gradients are the sum over its group.

Reverse for ``dY``: ``dC = dY W_O^T``, ``dW_O = C^T dY``, ``db_O = sum dY``; each head's
reverse on its slice of ``dC``; ``dX`` adds every head's three paths, and each head's
weight gradients fill its columns of ``dW_Q``, ``dW_K``, ``dW_V``. No I/O.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qkvcli.attention.errors import (
    HeadCountMismatch,
    KvHeadsMismatch,
    OutProjectionShapeMismatch,
    OutputGradientShapeMismatch,
)
from qkvcli.attention.head import AttentionForward, AttentionGradients, AttentionHead, check_rope
from qkvcli.core.arrays import Array, ArrayLike, check_finite, readonly
from qkvcli.core.names import BRANCHES
from qkvcli.core.record import Record


class LayerForward(Record):
    """Every head's forward pass, their concatenation ``C`` and the final output ``Y``."""

    heads: tuple[AttentionForward, ...]
    concat: Array
    output: Array

    @property
    def attention(self) -> Array:
        """The attention matrix of every head, ``[B,H,T,T]``."""
        return np.stack([f.attention for f in self.heads], axis=1)


class LayerGradients(Record):
    """The reverse pass: per head, then the layer's input and full-width parameters."""

    heads: tuple[AttentionGradients, ...]
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


class MultiHeadLayer:
    """``heads`` attention heads on the projections of ``projections``, and an optional out_proj.

    Build one with :meth:`build`; instances are immutable.
    """

    __slots__ = ("_heads", "_kv_heads", "_out_bias", "_out_weight", "_projections", "_slices")

    def __init__(self, projections: AttentionHead, heads: int, out_weight: Array | None,
                 out_bias: Array | None, kv_heads: int | None = None) -> None:
        # Private: build validates first.
        self._projections = projections
        self._heads = heads
        self._kv_heads = heads if kv_heads is None else kv_heads
        self._out_weight = out_weight
        self._out_bias = out_bias
        self._slices = tuple(self._slice(h) for h in range(heads))

    @classmethod
    def build(cls, projections: AttentionHead, heads: int, out_weight: ArrayLike | None = None,
              out_bias: ArrayLike | None = None, kv_heads: int | None = None) -> MultiHeadLayer:
        """Validate and build. ``out_weight`` is ``[H*d_v, E_out]`` (our layout, ``Y = C W``).

        ``kv_heads`` (default ``heads``) K/V heads are shared by groups of
        ``heads / kv_heads`` consecutive query heads (grouped-query attention; 1 is
        multi-query attention); the projections must then be built with
        ``kv_groups = heads / kv_heads``.

        Order (first failure wins): ``kv_heads`` divides ``heads`` and matches the
        projections' groups (:class:`KvHeadsMismatch`); head count divides both widths
        (:class:`HeadCountMismatch`); RoPE fits a head; finite out_proj; its shapes
        (:class:`OutProjectionShapeMismatch`).
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
        return cls(projections, heads, weight, bias, kv_heads)

    def _slice(self, h: int) -> AttentionHead:
        if self._heads == 1:
            return self._projections  # one head: today's head, untouched
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
    def head_slices(self) -> tuple[AttentionHead, ...]:
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
        extra = sum(int(a.size) for a in (self._out_weight, self._out_bias) if a is not None)
        return self._projections.parameter_count + extra

    def with_parameters(self, weights: list[Array], biases: list[Array | None],
                        out_weight: Array | None, out_bias: Array | None) -> MultiHeadLayer:
        """The same layer with other parameter values of the same shapes, unvalidated."""
        return MultiHeadLayer(self._projections.with_parameters(weights, biases), self._heads,
                              out_weight, out_bias, self._kv_heads)

    def _grouped(self, grads: list[Any], branch: int) -> list[Any]:
        """Per-head gradients of ``branch``, with key and value summed over each group."""
        if branch == 0 or self._kv_heads == self._heads:
            return grads
        per = self._heads // self._kv_heads
        summed: list[Any] = []
        for g in range(self._kv_heads):
            group = grads[g * per:(g + 1) * per]
            if any(grad is None for grad in group):
                summed.append(None)
                continue
            total = group[0].copy()
            for grad in group[1:]:
                total += grad
            summed.append(total)
        return summed

    # --- computation --------------------------------------------------------------------

    def forward(self, x: ArrayLike, causal: bool = False) -> LayerForward:
        """Every head, the concatenation and the output projection. Raises the input errors."""
        x = self._projections.check_input(x)
        heads = tuple(head.forward(x, causal) for head in self._slices)
        # H heads of [B,T,d_v] -> [B,T,H*d_v]; one head is its own output (no copy)
        concat = heads[0].output if self._heads == 1 else np.concatenate(
            [f.output for f in heads], axis=-1)
        output = concat
        if self._out_weight is not None:
            with np.errstate(over="ignore", invalid="ignore"):
                output = concat @ self._out_weight  # [B,T,H*d_v] @ [H*d_v,E_out] -> [B,T,E_out]
                if self._out_bias is not None:
                    output = output + self._out_bias
        return LayerForward(heads, concat, output)

    def backward(self, x: ArrayLike, forward: LayerForward, grad_output: ArrayLike) -> LayerGradients:
        """Reverse pass for ``grad_output`` (``[B,T,E_out]``). Raises the input errors, then
        :class:`~qkvcli.attention.errors.OutputGradientShapeMismatch`."""
        x = self._projections.check_input(x)
        batch, tokens, _ = x.shape
        upstream = np.asarray(grad_output, dtype=np.float64)
        if upstream.shape != (batch, tokens, self.e_out):
            raise OutputGradientShapeMismatch((batch, tokens, self.e_out), tuple(upstream.shape))
        grad_out_weight = grad_out_bias = None
        grad_concat = upstream
        if self._out_weight is not None:
            with np.errstate(over="ignore", invalid="ignore"):
                rows = forward.concat.reshape(batch * tokens, self.concat_width)  # C: [BT,H*d_v]
                flat = upstream.reshape(batch * tokens, self.e_out)  # dY_(BT): [BT, E_out]
                grad_concat = upstream @ self._out_weight.T  # [B,T,E_out] @ [E_out,H*d_v]
                grad_out_weight = rows.T @ flat  # [H*d_v,BT] @ [BT,E_out] -> [H*d_v,E_out]
                grad_out_bias = None if self._out_bias is None else flat.sum(axis=0)
        dv = self.d_v
        heads = tuple(
            head.backward(x, f, grad_concat[:, :, h * dv:(h + 1) * dv])
            for h, (head, f) in enumerate(zip(self._slices, forward.heads, strict=True))
        )
        if self._heads == 1:
            g = heads[0]
            return LayerGradients(heads, grad_concat, g.grad_input, g.grad_w_query, g.grad_w_key,
                                  g.grad_w_value, g.grad_b_query, g.grad_b_key, g.grad_b_value,
                                  grad_out_weight, grad_out_bias)
        grad_input = np.zeros_like(x)
        for g in heads:
            grad_input += g.grad_input  # dX adds every head's three paths

        def joined(grads: list[Array | None]) -> Array | None:
            if any(grad is None for grad in grads):
                return None
            return np.concatenate([grad for grad in grads if grad is not None], axis=-1)

        # each head's weight gradients fill its own columns, in head order; a K/V head
        # shared by a group of query heads gathers the sum of the group's gradients
        w = [np.concatenate(self._grouped([getattr(g, f"grad_w_{branch}") for g in heads], i),
                            axis=-1) for i, branch in enumerate(BRANCHES)]
        b = [joined(self._grouped([getattr(g, f"grad_b_{branch}") for g in heads], i))
             for i, branch in enumerate(BRANCHES)]
        return LayerGradients(heads, grad_concat, grad_input, w[0], w[1], w[2], b[0], b[1], b[2],
                              grad_out_weight, grad_out_bias)


def layer_loss(forward: LayerForward, upstream: Array) -> float:
    """``L = <Y, U>``: the scalar whose gradient :meth:`MultiHeadLayer.backward` gives."""
    with np.errstate(over="ignore", invalid="ignore"):
        return float(np.sum(forward.output * upstream))
