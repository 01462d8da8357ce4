"""Evaluations of an attention model's ``L`` that recompute only what one coordinate reaches.

The gradient check's cheaper evaluations (:mod:`qkvcli.attention.gradcheck` chooses
them for models larger than the chapter's), for every layer kind the engine runs
(:func:`~qkvcli.attention.batched.batched_forward` is the reference arithmetic): a
value-weight column changes one column of ``V`` and so the output of each query head
reading that K/V head by ``A dV``; a query-weight column changes one head's scores, a
key-weight column the scores of every query head of its K/V group (grouped-query
attention), each by a rank-one product, or with RoPE a rank-two one (the column and its
rotation partner); an input token changes one row of ``Q``, ``K`` and ``V``, turned by
RoPE at its own position; an output-projection column changes one column of ``Y``. A
given score scale multiplies the scores where the chapter divides by ``sqrt(d_k)``.
Each evaluation is a complete evaluation of ``L`` at the perturbed parameter, within
:func:`shortcut_bound` of a fresh forward's.

The softmax runs over blocks of query rows (:data:`BLOCK_ELEMENTS` scores each, so that a
block stays in cache), with a causal mask each block only up to its last unmasked key.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from qkvcli.attention.head import AttentionForward, Rope
from qkvcli.attention.multihead import LayerForward, MultiHeadLayer
from qkvcli.core.arrays import Array
from qkvcli.core.names import BRANCHES

PointObjective = Callable[[int, float], float]
"""``L`` with flat element ``index`` of the checked tensor set to ``value``."""

BLOCK_ELEMENTS = 1 << 16
"""Scores per block of query rows (512 KiB of float64): with its block of ``P``, within a
core's L2 cache, and large enough that the Python loop over blocks costs little."""

Fill = Callable[[int, int, int, Array], Array]
"""``fill(r0, r1, c1, out)``: the raw scores of query rows ``r0:r1`` and keys ``:c1``, in
``out`` (``[B, r1-r0, c1]``) or a view."""
Pick = Callable[[int, int, int], Array]
"""``pick(r0, r1, c1)``: the same block of ``P``."""


def rope_tables(rope: Rope, tokens: int) -> tuple[Array, Array]:
    """RoPE's ``cos`` and ``sin`` ``[tokens, dims/2]``, computed as :meth:`Rope.rotate`
    computes them (the same operations on the same shapes, so the same values)."""
    exponents = np.arange(0, rope.dims, 2, dtype=np.float64) / rope.dims
    inverse_frequency = 1.0 / (rope.theta ** exponents)  # [dims/2]
    angles = np.arange(tokens, dtype=np.float64)[:, None] * inverse_frequency[None, :]
    return np.cos(angles), np.sin(angles)


class Shortcuts:
    """Point objectives that recompute only what one coordinate reaches.

    ``L`` is written as ``sum_h l_h + c`` with ``l_h = <A_h, P_h>``, ``P_h = G_h V_h^T``
    (``V_h`` the values of the K/V head query head ``h`` reads), ``G = U W_O^T`` (``U``
    without an output projection) and ``c = <b_O, sum_t U_t>``; an output-projection
    coordinate uses ``L = sum_j <Y[:,j], U[:,j]>`` instead. Each evaluation recomputes
    the perturbed column (or row) freshly from the perturbed parameter, turns it by RoPE
    as the engine does, carries it forward through what it reaches (a query or key
    column's change of the scores as the rank-one or rank-two product it is), never
    using the analytic gradient, and adds the unchanged terms, computed once. In real
    arithmetic each equals the full forward's ``L``; in floating point they agree within
    :func:`shortcut_bound` (tests/test_attend_shortcuts.py,
    tests/test_attend_shortcut_kinds.py). ``block_rows`` (default: :data:`BLOCK_ELEMENTS`
    scores a block) sets the softmax's block of query rows.
    """

    def __init__(self, layer: MultiHeadLayer, x: Array, upstream: Array, causal: bool,
                 forward: LayerForward | None = None, block_rows: int | None = None) -> None:
        """Compute the unchanged terms once; ``forward``: the layer's forward at ``x``
        when the caller has it (it is not computed again)."""
        self.layer, self.x, self.causal = layer, x, causal
        batch, tokens, d_model = x.shape
        forward = layer.forward(x, causal) if forward is None else forward
        self.heads = forward.heads
        self.concat = forward.concat
        self.output = forward.output
        self.upstream = upstream
        self.per = layer.heads // layer.kv_heads  # query heads per K/V head
        self.rows = x.reshape(batch * tokens, d_model)  # X_(BT): a 2-D product is BLAS's
        p = layer.projections
        self.rope = p.rope
        self.tables = None if p.rope is None else rope_tables(p.rope, tokens)
        self.given_scale = p.given_scale
        self.root = math.sqrt(layer.d_k)
        rows = BLOCK_ELEMENTS // max(1, batch * tokens) if block_rows is None else block_rows
        self.block_rows = max(1, min(rows, tokens))  # never more rows than the tokens
        # above the diagonal of a block's own square of keys: its only masked entries
        self.triangle = np.triu(np.ones((self.block_rows, self.block_rows), dtype=bool), k=1)
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
        self.l_batches = [[float(np.sum(r[b])) for b in range(batch)] for r in self.r]
        self.l_heads = [math.fsum(terms) for terms in self.l_batches]
        # per head and value column: <O_h[:,:,j], G_h[:,:,j]>
        self.o_columns = [np.sum(f.output * g, axis=(0, 1)) for f, g in zip(
            self.heads, self.g_heads, strict=True)]
        b_out = layer.out_bias
        self.c = 0.0 if b_out is None else float(np.dot(upstream.sum(axis=(0, 1)), b_out))
        self.y_columns = np.sum(self.output * upstream, axis=(0, 1))  # [E_out]

    def objective(self, name: str) -> PointObjective:
        """The point objective of tensor ``name`` (its cost: ``evaluation_cost`` in
        :mod:`qkvcli.attention.gradcheck`)."""
        if name == "input":
            return self._input
        if name in ("w_out", "b_out"):
            return self._out(name == "w_out")
        branch = BRANCHES.index(name[2:])
        if branch == 2:
            return self._value(name[0] == "w")
        return self._scores(branch, name[0] == "w")

    def _weighted(self, fill: Fill, pick: Pick, batch: int, first: int = 0) -> float:
        """``sum_i <softmax(z_i), p_i>`` over query rows ``i >= first``, block by block.

        ``z`` is ``fill``'s raw scores scaled (divided by ``sqrt(d_k)``, or times the given
        scale, as the engine does) and masked; the engine's softmax steps (row max
        subtracted, exp, row sum) run in place on one block at a time. With a causal mask a
        block of rows ``r0:r1`` stops at key ``r1``: the keys after it are masked in every
        row of the block, exp(-inf) = 0 exactly and -inf never wins a row's max, so leaving
        them out changes no row's max and no row's sum; the rows' sums and the dot with
        ``P`` are then summed in another order than the full forward's, and divided by the
        row sum after the dot rather than before (both within :func:`shortcut_bound`).
        """
        tokens = self.x.shape[1]
        step = self.block_rows
        scratch = np.empty(batch * min(step, tokens) * tokens)
        total = 0.0
        for r0 in range(first, tokens, step):
            r1 = min(r0 + step, tokens)
            n, c1 = r1 - r0, r1 if self.causal else tokens
            z = fill(r0, r1, c1, scratch[:batch * n * c1].reshape(batch, n, c1))
            if self.given_scale is None:  # the chapter's division, as the engine
                z /= self.root
            else:
                z *= self.given_scale
            if self.causal:
                np.copyto(z[:, :, r0:c1], -np.inf, where=self.triangle[:n, :n])
            z -= np.max(z, axis=-1, keepdims=True)
            np.exp(z, out=z)
            sums = np.sum(z, axis=-1)  # [B, n]
            # [B,n,c1] . [B,n,c1] -> [B,n]: one dot per row (a single flat BLAS dot waits for
            # the library's threads on a busy machine, measured at 15x)
            total += float(np.sum(np.vecdot(z, pick(r0, r1, c1)) / sums))
        return total

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
        batch, tokens, _ = self.x.shape
        # [BT,d_model] . [d_model] -> [BT], one dot per row (a BLAS matrix-vector product
        # waits for the library's sleeping threads between evaluations: 1.7 ms against 0.1)
        fresh = np.vecdot(self.rows, column).reshape(batch, tokens)
        return c, fresh + bias if (b is not None or not weights) else fresh

    def _turned(self, before: Array, after: Array, j: int, fresh: Array) -> list[
        tuple[int, Array]
    ]:
        """Which columns of the scores' (rotated) Q or K change, and by how much, when
        column ``j`` of ``before`` (``[B,T,d_k]``, before RoPE; ``after``: after it) takes
        the values ``fresh``: column ``j`` itself, and with RoPE its partner, both turned
        from the fresh values as :meth:`Rope.rotate` turns them."""
        if self.rope is None or self.tables is None or j >= self.rope.dims:
            return [(j, fresh - before[:, :, j])]  # no rotation reaches column j
        cos, sin = self.tables
        first, second = self.rope.pairs()
        if j in first:
            i = int(np.flatnonzero(first == j)[0])
            partner = int(second[i])
            a, b = fresh, before[:, :, partner]
            new_j, new_partner = a * cos[:, i] - b * sin[:, i], b * cos[:, i] + a * sin[:, i]
        else:
            i = int(np.flatnonzero(second == j)[0])
            partner = int(first[i])
            a, b = before[:, :, partner], fresh
            new_partner, new_j = a * cos[:, i] - b * sin[:, i], b * cos[:, i] + a * sin[:, i]
        return [(j, new_j - after[:, :, j]), (partner, new_partner - after[:, :, partner])]

    def _turn_row(self, row: Array, t: int) -> Array:
        """One head's row ``[d_k]`` at position ``t``, turned by RoPE as the engine turns it."""
        if self.rope is None or self.tables is None:
            return row
        cos, sin = self.tables[0][t], self.tables[1][t]
        first, second = self.rope.pairs()
        a, b = row[first], row[second]
        out = np.array(row, dtype=np.float64)
        out[first] = a * cos - b * sin
        out[second] = b * cos + a * sin
        return out

    def _scores(self, branch: int, weights: bool) -> PointObjective:
        per = self.per

        def point(index: int, value: float) -> float:
            with np.errstate(over="ignore", invalid="ignore"):
                c, fresh = self._column(branch, weights, index, value)
                owner, j = divmod(c, self.layer.d_k)  # a query head, or a K/V head
                # a query column reaches its head; a key column every head of its group
                reached = [owner] if branch == 0 else range(owner * per, (owner + 1) * per)
                f = self.heads[owner if branch == 0 else owner * per]
                before = f.query if branch == 0 else f.key
                changes = self._turned(before, _matched(f, branch), j, fresh)
                found = {}
                for h in reached:
                    # Only columns j (and its RoPE partner) of Q~ (or K~) changed, so
                    # S' = S + sum_c dq_c k_c^T (or q_c dk_c^T): a rank-one or rank-two
                    # change of the scores, built block by block, T^2 instead of T^2 d_k
                    # multiply-adds (within the bound: a score summed in another order)
                    other = _matched(self.heads[h], 1 - branch)
                    terms = [(delta, other[:, :, k]) if branch == 0 else (other[:, :, k], delta)
                             for k, delta in changes]
                    found[h] = self._weighted(_rank_fill(self.heads[h].scores, terms),
                                              _view(self.p[h]), self.x.shape[0])
                return self._total(found)

        return point

    def _value(self, weights: bool) -> PointObjective:
        per = self.per

        def point(index: int, value: float) -> float:
            with np.errstate(over="ignore", invalid="ignore"):
                c, fresh = self._column(2, weights, index, value)
                g, j = divmod(c, self.layer.d_v)
                found = {}
                for h in range(g * per, (g + 1) * per):  # every query head reading K/V head g
                    # [B,T,T] @ [B,T,1] -> [B,T,1]: the one output column the value column
                    # reaches in head h
                    out = (self.heads[h].attention @ fresh[:, :, None])[:, :, 0]
                    columns = self.o_columns[h].copy()
                    columns[j] = float(np.sum(out * self.g_heads[h][:, :, j]))
                    found[h] = float(np.sum(columns))
                return self._total(found)

        return point

    def _input(self, index: int, value: float) -> float:
        _, tokens, d_model = self.x.shape
        b, rest = divmod(index, tokens * d_model)
        t, i = divmod(rest, d_model)
        p = self.layer.projections
        dk, dv, per = self.layer.d_k, self.layer.d_v, self.per
        with np.errstate(over="ignore", invalid="ignore"):
            row = np.array(self.x[b, t], copy=True)
            row[i] = value
            fresh = []
            for w, bias in zip(p.weights, p.biases, strict=True):
                y = row @ w  # [d_model] @ [d_model, width] -> [width]
                fresh.append(y if bias is None else y + bias)
            # per K/V head: its perturbed key row (turned at t), the keys with it, and its
            # perturbed value row
            groups = []
            for g in range(self.layer.kv_heads):
                k_t = self._turn_row(fresh[1][g * dk:(g + 1) * dk], t)
                key = np.array(_matched(self.heads[g * per], 1)[b], copy=True)
                key[t] = k_t
                groups.append((k_t, key, fresh[2][g * dv:(g + 1) * dv]))
            # causal: rows before t never see key t (masked to weight 0), so they keep
            # their terms; the rows from t on are recomputed
            first = t if self.causal else 0
            total = 0.0
            for h, f in enumerate(self.heads):
                k_t, key, v_t = groups[h // per]
                q_t = self._turn_row(fresh[0][h * dk:(h + 1) * dk], t)
                # S' = S with row t and column t freshly computed from the perturbed rows:
                # [T-first,d_k] @ [d_k] -> [T-first], and row t, q'_t k'_j: [T,d_k] @ [d_k]
                column = _matched(f, 0)[b, first:] @ k_t
                row_t = key @ q_t
                # [T-first,d_v] @ [d_v] -> [T-first]: column t of P' = G V'^T
                p_column = self.g_heads[h][b, first:] @ v_t
                weighted = self._weighted(_token_fill(f.scores[b:b + 1], t, first, column, row_t),
                                          _token_pick(self.p[h][b:b + 1], t, first, p_column), 1,
                                          first)
                terms = list(self.l_batches[h])
                terms[b] = float(np.sum(self.r[h][b, :first])) + weighted
                total += math.fsum(terms)
            return total + self.c

    def _out(self, weights: bool) -> PointObjective:
        layer = self.layer
        assert layer.out_weight is not None
        w_out, b_out = layer.out_weight, layer.out_bias
        batch, tokens, _ = self.x.shape
        concat = self.concat.reshape(batch * tokens, layer.concat_width)

        def point(index: int, value: float) -> float:
            with np.errstate(over="ignore", invalid="ignore"):
                if weights:
                    row, j = divmod(index, w_out.shape[1])
                    column = np.array(w_out[:, j], copy=True)
                    column[row] = value
                    bias = 0.0 if b_out is None else float(b_out[j])
                else:
                    j, column, bias = index, w_out[:, index], value
                # [BT,H*d_v] @ [H*d_v] -> [BT]: column j of Y
                fresh = (concat @ column + bias).reshape(batch, tokens)
                columns = self.y_columns.copy()
                columns[j] = float(np.sum(fresh * self.upstream[:, :, j]))
                return float(np.sum(columns))

        return point

    def _total(self, changed: dict[int, float]) -> float:
        terms = list(self.l_heads)
        for head, l_head in changed.items():
            terms[head] = l_head
        return math.fsum(terms) + self.c


def _matched(f: AttentionForward, branch: int) -> Array:
    """What the scores use of head record ``f``'s query (0) or key (1): RoPE's turned one."""
    if branch == 0:
        return f.query if f.rotated_query is None else f.rotated_query
    return f.key if f.rotated_key is None else f.rotated_key


def _view(p: Array) -> Pick:
    return lambda r0, r1, c1: p[:, r0:r1, :c1]


def _rank_fill(scores: Array, terms: list[tuple[Array, Array]]) -> Fill:
    """``S + sum_k u_k v_k^T`` a block at a time (``u_k``, ``v_k``: ``[B,T]``)."""
    def fill(r0: int, r1: int, c1: int, out: Array) -> Array:
        (u, v), rest = terms[0], terms[1:]
        np.multiply(u[:, r0:r1, None], v[:, None, :c1], out=out)
        out += scores[:, r0:r1, :c1]
        for u, v in rest:
            out += u[:, r0:r1, None] * v[:, None, :c1]
        return out

    return fill


def _token_fill(scores: Array, t: int, first: int, column: Array, row: Array) -> Fill:
    """``S`` (``[1,T,T]``) with column ``t`` (rows from ``first``) and row ``t`` replaced."""
    def fill(r0: int, r1: int, c1: int, out: Array) -> Array:
        np.copyto(out, scores[:, r0:r1, :c1])
        if t < c1:
            out[0, :, t] = column[r0 - first:r1 - first]
        if r0 <= t < r1:
            out[0, t - r0] = row[:c1]
        return out

    return fill


def _token_pick(p: Array, t: int, first: int, column: Array) -> Pick:
    """``P`` (``[1,T,T]``) with column ``t`` (rows from ``first``) replaced."""
    def pick(r0: int, r1: int, c1: int) -> Array:
        block = np.array(p[:, r0:r1, :c1], copy=True)
        if t < c1:
            block[0, :, t] = column[r0 - first:r1 - first]
        return block

    return pick


def shortcut_bound(layer: MultiHeadLayer, x: Array, upstream: Array, causal: bool) -> float:
    """How far a shortcut's ``L`` may lie from the full forward's: ``n eps S``.

    ``S = sum |Y * U| + (1 + (d_k + 4) max M) sum_h sum |A_h * P_h|`` with
    ``M = s |Q~| |K~|^T`` per head (``s`` the score factor, ``1/sqrt(d_k)`` or the given
    scale; ``|Q~|`` the magnitudes of the query the scores use). The magnitudes both ways
    of summing add; a score computed in another order (the shortcut's ``S + dq k^T``
    against a fresh ``d_k``-term dot) differs by at most ``(d_k + 4) eps M_ij`` and moves
    ``A`` through the softmax by that, times ``A``. RoPE: a turned coordinate is
    ``a cos - b sin`` (or ``b cos + a sin``), at most ``|a| + |b|`` and rounded by at most
    ``3 eps (|a| + |b|)``, so ``|Q~|`` takes ``|a| + |b|`` for both coordinates of each
    pair, and the rotation and the difference of the turned column are the ``+ 4``
    roundings. ``n = T + d_model + H d_v + E_out`` is the longest chain of roundings a
    term goes through (at least 2, which covers the softmax's factor 2: a moved score
    moves its row's sum too). To first order in the perturbation: ``M`` and ``A P`` are
    taken at the unperturbed point.
    """
    f = layer.forward(x, causal)
    g = upstream if layer.out_weight is None else upstream @ layer.out_weight.T
    dv = layer.d_v
    factor = layer.projections.scale_of(layer.d_k)
    rope = layer.projections.rope
    attention_terms = 0.0
    largest = 0.0
    for h, head in enumerate(f.heads):
        p = g[:, :, h * dv:(h + 1) * dv] @ np.swapaxes(head.value, -1, -2)
        attention_terms += float(np.sum(np.abs(head.attention * p)))
        query, key = _magnitudes(head.query, rope), _magnitudes(head.key, rope)
        if head.scores.size:
            # [B,T,d_k] @ [B,d_k,T] -> [B,T,T]: every score's sum of absolute terms
            largest = max(largest, factor * float(np.max(query @ np.swapaxes(key, -1, -2))))
    s = float(np.sum(np.abs(f.output * upstream))) + (
        1.0 + (layer.d_k + 4) * largest) * attention_terms
    n = x.shape[1] + layer.d_model + layer.projections.d_v + layer.e_out
    return float(n * np.finfo(np.float64).eps * s)


def _magnitudes(values: Array, rope: Rope | None) -> Array:
    """``|values|`` (``[B,T,d_k]``, before RoPE), each turned pair as ``|a| + |b|`` twice."""
    out = np.abs(values)
    if rope is not None:
        first, second = rope.pairs()
        both = out[..., first] + out[..., second]
        out[..., first] = both
        out[..., second] = both
    return out
