"""Evaluations of an attention model's ``L`` that recompute only what one coordinate reaches.

The gradient check's cheaper evaluations (:mod:`qkvcli.attention.gradcheck` chooses
them for models larger than the chapter's): a value-weight column changes one column of
``V`` and so the output by ``A dV``; a query- or key-weight column changes one head's
scores; an input token changes one row of ``Q``, ``K`` and ``V``; an output-projection
column changes one column of ``Y``. Each evaluation is a complete evaluation of ``L`` at
the perturbed parameter, within :func:`shortcut_bound` of a fresh forward's.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from qkvcli.attention.head import causal_mask
from qkvcli.attention.multihead import LayerForward, MultiHeadLayer
from qkvcli.core.arrays import Array
from qkvcli.core.names import BRANCHES

PointObjective = Callable[[int, float], float]
"""``L`` with flat element ``index`` of the checked tensor set to ``value``."""


class Shortcuts:
    """Point objectives that recompute only what one coordinate reaches.

    ``L`` is written as ``sum_h l_h + c`` with ``l_h = <A_h, P_h>``, ``P_h = G_h V_h^T``,
    ``G = U W_O^T`` (``U`` without an output projection) and ``c = <b_O, sum_t U_t>``;
    an output-projection coordinate uses ``L = sum_j <Y[:,j], U[:,j]>`` instead. Each
    evaluation recomputes the perturbed column (or row) freshly from the perturbed
    parameter, carries it forward through what it reaches (a query or key column's
    change of the scores as the rank-one product it is), never using the analytic
    gradient, and adds the unchanged terms, computed once. In real arithmetic each equals
    the full forward's ``L``; in floating point they agree within :func:`shortcut_bound`
    (tests/test_attend_shortcuts.py).
    """

    def __init__(self, layer: MultiHeadLayer, x: Array, upstream: Array, causal: bool,
                 forward: LayerForward | None = None) -> None:
        """Compute the unchanged terms once; ``forward``: the layer's forward at ``x``
        when the caller has it (it is not computed again)."""
        self.layer, self.x, self.causal = layer, x, causal
        forward = layer.forward(x, causal) if forward is None else forward
        self.heads = forward.heads
        self.output = forward.output
        self.upstream = upstream
        w_out = layer.out_weight
        # [B,T,E_out] @ [E_out,H*d_v] -> [B,T,H*d_v]: what each head's output is weighed by
        self.g = upstream if w_out is None else upstream @ w_out.T
        dv = layer.d_v
        self.g_heads = [np.ascontiguousarray(self.g[:, :, h * dv:(h + 1) * dv])
                        for h in range(layer.heads)]
        # [B,T,d_v] @ [B,d_v,T] -> [B,T,T]
        self.p = [g @ np.swapaxes(f.value, -1, -2) for g, f in zip(self.g_heads, self.heads,
                                                                    strict=True)]
        # <A_h, P_h> per query row ([B,T]): an input token reaches rows, a causal one only
        # the rows at and after it; per batch item, and their sum per head
        self.r = [np.sum(f.attention * p, axis=-1) for f, p in zip(self.heads, self.p,
                                                                  strict=True)]
        self.l_batches = [[float(np.sum(r[b])) for b in range(x.shape[0])] for r in self.r]
        self.l_heads = [math.fsum(terms) for terms in self.l_batches]
        # per head and value column: <O_h[:,:,j], G_h[:,:,j]>
        self.o_columns = [np.sum(f.output * g, axis=(0, 1)) for f, g in zip(
            self.heads, self.g_heads, strict=True)]
        b_out = layer.out_bias
        self.c = 0.0 if b_out is None else float(np.dot(upstream.sum(axis=(0, 1)), b_out))
        self.y_columns = np.sum(self.output * upstream, axis=(0, 1))  # [E_out]
        self.mask = causal_mask(x.shape[1]) if causal else None

    def objective(self, name: str) -> PointObjective:
        """The point objective of tensor ``name`` (its cost: :func:`evaluation_cost`)."""
        if name == "input":
            return self._input
        if name in ("w_out", "b_out"):
            return self._out(name == "w_out")
        branch = BRANCHES.index(name[2:])
        if branch == 2:
            return self._value(name[0] == "w")
        return self._scores(branch, name[0] == "w")

    def _weighted(self, scores: Array, p: Array, mask: Array | None) -> float:
        """``<softmax(scores / sqrt(d_k)), p>``, ``scores`` overwritten on the way.

        The engine's steps (scale, mask, row max subtracted, exp, row sums) in place: one
        buffer instead of five, the same arithmetic as
        :func:`~qkvcli.attention.head.stable_softmax`.
        """
        scores /= math.sqrt(self.layer.d_k)
        if mask is not None:
            np.copyto(scores, -np.inf, where=mask)
        if scores.size == 0:
            return 0.0
        scores -= np.max(scores, axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= np.sum(scores, axis=-1, keepdims=True)
        # one pass over the terms, summed by BLAS (the bound covers any order)
        return float(np.dot(scores.reshape(-1), p.reshape(-1)))

    def _column(self, branch: int, weights: bool, index: int, value: float) -> tuple[int, Array]:
        """The perturbed full-width column ``c`` of branch ``branch`` and its fresh values."""
        p = self.layer.projections
        width = p.weights[branch].shape[1]
        w = p.weights[branch]
        b = p.biases[branch]
        if weights:
            row, c = divmod(index, width)
            column = np.array(w[:, c], copy=True)
            column[row] = value
            bias = 0.0 if b is None else float(b[c])
        else:
            c, column, bias = index, np.array(w[:, index], copy=True), value
        fresh = self.x @ column  # [B,T,d_model] @ [d_model] -> [B,T]
        return c, fresh + bias if (b is not None or not weights) else fresh

    def _scores(self, branch: int, weights: bool) -> PointObjective:
        def point(index: int, value: float) -> float:
            with np.errstate(over="ignore", invalid="ignore"):
                c, fresh = self._column(branch, weights, index, value)
                h, j = divmod(c, self.layer.d_k)
                f = self.heads[h]
                # Only column j of Q (or K) changed, so S' = S + dq_j k_j^T (or q_j dk_j^T):
                # a rank-one change of the scores, T^2 instead of T^2 d_k multiply-adds,
                # from the column's fresh values (within the bound: a score summed in
                # another order)
                if branch == 0:
                    change = (fresh - f.query[:, :, j])[:, :, None] * f.key[:, None, :, j]
                else:
                    change = f.query[:, :, None, j] * (fresh - f.key[:, :, j])[:, None, :]
                scores = f.scores + change  # [B,T,T]
                return self._total(h, self._weighted(scores, self.p[h], self.mask))

        return point

    def _value(self, weights: bool) -> PointObjective:
        def point(index: int, value: float) -> float:
            with np.errstate(over="ignore", invalid="ignore"):
                c, fresh = self._column(2, weights, index, value)
                h, j = divmod(c, self.layer.d_v)
                f = self.heads[h]
                # [B,T,T] @ [B,T,1] -> [B,T,1]: the one output column the value column reaches
                out = (f.attention @ fresh[:, :, None])[:, :, 0]
                columns = self.o_columns[h].copy()
                columns[j] = float(np.sum(out * self.g_heads[h][:, :, j]))
                return self._total(h, float(np.sum(columns)))

        return point

    def _input(self, index: int, value: float) -> float:
        _, tokens, d_model = self.x.shape
        b, rest = divmod(index, tokens * d_model)
        t, i = divmod(rest, d_model)
        p = self.layer.projections
        with np.errstate(over="ignore", invalid="ignore"):
            row = np.array(self.x[b, t], copy=True)
            row[i] = value
            fresh = []
            for w, bias in zip(p.weights, p.biases, strict=True):
                y = row @ w  # [d_model] @ [d_model, width] -> [width]
                fresh.append(y if bias is None else y + bias)
            dk, dv = self.layer.d_k, self.layer.d_v
            # causal: rows before t never see key t (masked to weight 0), so they keep
            # their terms; the rows from t on are recomputed
            first = t if self.causal else 0
            total = 0.0
            for h, f in enumerate(self.heads):
                q_t = fresh[0][h * dk:(h + 1) * dk]
                k_t = fresh[1][h * dk:(h + 1) * dk]
                key = np.array(f.key[b], copy=True)
                key[t] = k_t
                query = f.query[b, first:]  # [T-first, d_k]
                # S' = S with row t and column t freshly computed from the perturbed rows
                scores = np.array(f.scores[b, first:], copy=True)  # [T-first, T]
                scores[:, t] = query @ k_t  # [T-first,d_k] @ [d_k] -> [T-first]
                scores[t - first] = key @ q_t  # [T,d_k] @ [d_k] -> [T]: row t, q'_t k'_j
                pb = np.array(self.p[h][b, first:], copy=True)
                # [T-first,d_v] @ [d_v] -> [T-first]: column t of P' = G V'^T
                pb[:, t] = self.g_heads[h][b, first:] @ fresh[2][h * dv:(h + 1) * dv]
                mask = None if self.mask is None else self.mask[first:]
                terms = list(self.l_batches[h])
                terms[b] = float(np.sum(self.r[h][b, :first])) + self._weighted(scores, pb,
                                                                                mask)
                total += math.fsum(terms)
            return total + self.c

    def _out(self, weights: bool) -> PointObjective:
        layer = self.layer
        assert layer.out_weight is not None
        w_out, b_out = layer.out_weight, layer.out_bias
        concat = np.concatenate([f.output for f in self.heads], axis=-1)

        def point(index: int, value: float) -> float:
            with np.errstate(over="ignore", invalid="ignore"):
                if weights:
                    row, j = divmod(index, w_out.shape[1])
                    column = np.array(w_out[:, j], copy=True)
                    column[row] = value
                    bias = 0.0 if b_out is None else float(b_out[j])
                else:
                    j, column, bias = index, w_out[:, index], value
                fresh = concat @ column + bias  # [B,T,H*d_v] @ [H*d_v] -> [B,T]: column j of Y
                columns = self.y_columns.copy()
                columns[j] = float(np.sum(fresh * self.upstream[:, :, j]))
                return float(np.sum(columns))

        return point

    def _total(self, head: int, l_head: float) -> float:
        terms = list(self.l_heads)
        terms[head] = l_head
        return math.fsum(terms) + self.c


def shortcut_bound(layer: MultiHeadLayer, x: Array, upstream: Array, causal: bool) -> float:
    """How far a shortcut's ``L`` may lie from the full forward's: ``n eps S``.

    ``S = sum |Y * U| + (1 + d_k max|Z|) sum_h sum |A_h * P_h|``: the magnitudes both ways
    of summing add, and a score computed in another order moves ``A`` through the
    softmax by up to its own rounding, ``d_k eps max|q_i k_j|``, times ``A``; ``n = T +
    d_model + H d_v + E_out`` is the longest chain of roundings a term goes through.
    """
    f = layer.forward(x, causal)
    g = upstream if layer.out_weight is None else upstream @ layer.out_weight.T
    dv = layer.d_v
    attention_terms = 0.0
    largest = 0.0
    for h, head in enumerate(f.heads):
        p = g[:, :, h * dv:(h + 1) * dv] @ np.swapaxes(head.value, -1, -2)
        attention_terms += float(np.sum(np.abs(head.attention * p)))
        if head.scores.size:
            largest = max(largest, float(np.max(np.abs(head.scores))) / math.sqrt(layer.d_k))
    s = float(np.sum(np.abs(f.output * upstream))) + (
        1.0 + layer.d_k * largest) * attention_terms
    n = x.shape[1] + layer.d_model + layer.projections.d_v + layer.e_out
    return float(n * np.finfo(np.float64).eps * s)
