"""The stages of attention's data flow, each described once as data: operands, output, formula.

A :class:`Stage` names what a stage reads and makes, each tensor with its axes named
(``[batch, query, key]``, never a bare shape), its formula in the chapters' notation and
how one element of its output is made from operand elements. :data:`STAGES` holds every
stage of the forward pass in the order data flows through it, then every reverse step in
the order the reverse pass takes them. :mod:`qkvcli.stages.terms` computes the terms a
description names at one coordinate.
"""

from __future__ import annotations

from qkvcli.core.record import Record


class Tensor(Record):
    """A stage's operand or output: its letter in the chapters' notation and its axes."""

    letter: str
    axes: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.letter} [{', '.join(self.axes)}]"


class Stage(Record):
    """One stage: ``formula`` (the whole tensor), ``element`` (one output element from
    operand elements), its ``operands`` and ``output``; ``reverse`` for a reverse step."""

    name: str
    formula: str
    element: str
    operands: tuple[Tensor, ...]
    output: Tensor
    reverse: bool = False

    def axes_text(self) -> str:
        """``Q [batch, query, d_k], K [batch, key, d_k] -> S [batch, query, key]``."""
        return ", ".join(str(t) for t in self.operands) + f" \u2192 {self.output}"


def _t(letter: str, *axes: str) -> Tensor:
    return Tensor(letter, axes)


STAGES: dict[str, Stage] = {stage.name: stage for stage in (
    Stage("projection", "Y = X W (+ b)", "Y[b,t,j] = \u03a3_i X[b,t,i] \u00d7 W[i,j] (+ b[j])",
          (_t("X", "batch", "token", "d_in"), _t("W", "d_in", "d_out"), _t("b", "d_out")),
          _t("Y", "batch", "token", "d_out")),
    Stage("head split", "Q_h = split(Q)", "Q_h[b,h,t,c] = Q[b,t,h\u00b7d_head + c]",
          (_t("Q", "batch", "token", "heads\u00b7d_head"),),
          _t("Q_h", "batch", "head", "token", "d_head")),
    Stage("rope frequency", "\u03c9_i = base^(\u22122i/d)", "\u03c9_i = base^(\u22122i/d) for pair i",
          (), _t("\u03c9", "pair")),
    Stage("rope angle", "\u03b8 = p \u00d7 \u03c9", "\u03b8[p,i] = position p \u00d7 \u03c9_i",
          (_t("\u03c9", "pair"),), _t("\u03b8", "position", "pair")),
    Stage("rope", "x' = R(\u03b8) x, pair by pair",
          "(x'_a, x'_b) = (x_a cos\u03b8 \u2212 x_b sin\u03b8, x_b cos\u03b8 + x_a sin\u03b8) "
          "for the pair (a, b) of i",
          (_t("x", "token", "d_head"), _t("cos\u03b8", "position", "pair"),
           _t("sin\u03b8", "position", "pair")), _t("x'", "token", "d_head")),
    Stage("cache append", "K_cache[:, :, t] = R_t K_h; V_cache[:, :, t] = V_h; length t \u2192 t+1",
          "K_cache[b,h,j,c] = the key of step j turned at position j (the cache's length "
          "then); V_cache[b,h,j,c] = the value of step j, unturned",
          (_t("RK_h", "batch", "head", "new token", "d_head"),
           _t("V_h", "batch", "head", "new token", "d_head")),
          _t("K_cache", "batch", "head", "length", "d_head")),
    Stage("scores", "S = Q K\u1d40", "S[b,q,k] = \u03a3_c Q[b,q,c] \u00d7 K[b,k,c]",
          (_t("Q", "batch", "query", "d_k"), _t("K", "batch", "key", "d_k")),
          _t("S", "batch", "query", "key")),
    Stage("scale", "Z = S \u00d7 scale", "Z[b,q,k] = S[b,q,k] \u00d7 scale (1/\u221ad_k)",
          (_t("S", "batch", "query", "key"),), _t("Z", "batch", "query", "key")),
    Stage("mask", "Z\u0303 = Z + M", "Z\u0303[b,q,k] = Z[b,q,k] where key k \u2264 query q, "
          "\u2212\u221e after it", (_t("Z", "batch", "query", "key"), _t("M", "query", "key")),
          _t("Z\u0303", "batch", "query", "key")),
    Stage("softmax", "A = softmax(Z\u0303) over the keys",
          "A[b,q,k] = exp(z_k \u2212 max) / \u03a3_j exp(z_j \u2212 max) over row q",
          (_t("Z\u0303", "batch", "query", "key"),), _t("A", "batch", "query", "key")),
    Stage("row sum", "\u03a3_k A", "\u03a3_k A[b,q,k]: 1 for every row",
          (_t("A", "batch", "query", "key"),), _t("\u03a3A", "batch", "query")),
    Stage("mixture", "O = A V", "O[b,q,c] = \u03a3_k A[b,q,k] \u00d7 V[b,k,c]",
          (_t("A", "batch", "query", "key"), _t("V", "batch", "key", "d_v")),
          _t("O", "batch", "query", "d_v")),
    Stage("mixture term", "A[q,k] V[k,c]", "term[q,k,c] = A[q,k] \u00d7 V[k,c]: key k's "
          "share of O[q,c]", (_t("A", "query", "key"), _t("V", "key", "d_v")),
          _t("A\u00b7V", "query", "key", "d_v")),
    Stage("head merge", "C = merge(O_h)", "C[b,t,h\u00b7d_head + c] = O_h[b,h,t,c]",
          (_t("O_h", "batch", "head", "token", "d_head"),),
          _t("C", "batch", "token", "heads\u00b7d_head")),
    Stage("output projection", "Y = C W_O (+ b_O)",
          "Y[b,t,j] = \u03a3_i C[b,t,i] \u00d7 W_O[i,j] (+ b_O[j])",
          (_t("C", "batch", "token", "heads\u00b7d_head"), _t("W_O", "heads\u00b7d_head", "d_out")),
          _t("Y", "batch", "token", "d_out")),
    # --- the reverse pass: L = <Y, U>, each step carries a gradient one stage back
    Stage("loss", "L = \u27e8O, U\u27e9", "L = \u03a3 O[...] \u00d7 U[...] over every coordinate of "
          "the output O: the seed U is dL/dO", (_t("O", "batch", "token", "d_out"),
                                                _t("U", "batch", "token", "d_out")), _t("L", ), True),
    Stage("mixture reverse (weights)", "dA = U V\u1d40",
          "dA[b,q,k] = \u03a3_c U[b,q,c] \u00d7 V[b,k,c]",
          (_t("U", "batch", "query", "d_v"), _t("V", "batch", "key", "d_v")),
          _t("dA", "batch", "query", "key"), True),
    Stage("mixture reverse (values)", "dV = A\u1d40 U",
          "dV[b,k,c] = \u03a3_q A[b,q,k] \u00d7 U[b,q,c]",
          (_t("A", "batch", "query", "key"), _t("U", "batch", "query", "d_v")),
          _t("dV", "batch", "key", "d_v"), True),
    Stage("softmax reverse", "dZ = A \u2299 (dA \u2212 \u03a3_j A_j dA_j)",
          "dZ[b,q,k] = A[b,q,k] \u00d7 dA[b,q,k] \u2212 A[b,q,k] \u00d7 \u03a3_j A[b,q,j] dA[b,q,j]",
          (_t("A", "batch", "query", "key"), _t("dA", "batch", "query", "key")),
          _t("dZ", "batch", "query", "key"), True),
    Stage("scale reverse", "dS = dZ \u00d7 scale", "dS[b,q,k] = dZ[b,q,k] \u00d7 scale "
          "(a masked key's dZ is 0)", (_t("dZ", "batch", "query", "key"),),
          _t("dS", "batch", "query", "key"), True),
    Stage("scores reverse (queries)", "dQ = dS K", "dQ[b,q,c] = \u03a3_k dS[b,q,k] \u00d7 K[b,k,c]",
          (_t("dS", "batch", "query", "key"), _t("K", "batch", "key", "d_k")),
          _t("dQ", "batch", "query", "d_k"), True),
    Stage("scores reverse (keys)", "dK = dS\u1d40 Q", "dK[b,k,c] = \u03a3_q dS[b,q,k] \u00d7 Q[b,q,c]",
          (_t("dS", "batch", "query", "key"), _t("Q", "batch", "query", "d_k")),
          _t("dK", "batch", "key", "d_k"), True),
    Stage("rope reverse", "g = R(\u2212\u03b8) g', pair by pair",
          "(g_a, g_b) = (g'_a cos\u03b8 + g'_b sin\u03b8, g'_b cos\u03b8 \u2212 g'_a sin\u03b8)",
          (_t("g'", "token", "d_head"), _t("cos\u03b8", "position", "pair"),
           _t("sin\u03b8", "position", "pair")), _t("g", "token", "d_head"), True),
    Stage("head merge reverse", "dO_h = split(dC)", "dO_h[b,h,t,c] = dC[b,t,h\u00b7d_head + c]",
          (_t("dC", "batch", "token", "heads\u00b7d_head"),),
          _t("dO_h", "batch", "head", "token", "d_head"), True),
    Stage("projection reverse (input)", "dX = U_Q W_Q\u1d40 + U_K W_K\u1d40 + U_V W_V\u1d40",
          "dX[b,t,i] = \u03a3_branch \u03a3_j U[b,t,j] \u00d7 W[i,j]: the query, key and value "
          "paths add", (_t("U", "batch", "token", "d_out"), _t("W", "d_in", "d_out")),
          _t("dX", "batch", "token", "d_in"), True),
    Stage("projection reverse (weight)", "dW = X\u1d40 U",
          "dW[i,j] = \u03a3_b \u03a3_t X[b,t,i] \u00d7 U[b,t,j]: this branch only",
          (_t("X", "batch", "token", "d_in"), _t("U", "batch", "token", "d_out")),
          _t("dW", "d_in", "d_out"), True),
    Stage("projection reverse (bias)", "db = \u03a3 U", "db[j] = \u03a3_b \u03a3_t U[b,t,j]",
          (_t("U", "batch", "token", "d_out"),), _t("db", "d_out"), True),
    Stage("central difference", "(L(x+h) \u2212 L(x\u2212h)) / 2h",
          "the loss at one coordinate moved by \u00b1h, against the reverse pass",
          (_t("L", ),), _t("dL/dx", "coordinate"), True),
)}
"""Every stage by name: the forward in data-flow order, then the reverse steps."""

BETWEEN: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "scores"): ("projection", "scores", "scale"),  # a head's scores: scaled, unmasked
    ("scores", "weights"): ("mask", "softmax"),
    ("scores", "scaled_scores"): ("scale",),
    ("scaled_scores", "masked_scores"): ("mask",),
    ("masked_scores", "weights"): ("softmax",),
    ("weights", "output"): ("mixture",),
    ("", "weights"): ("projection", "head split", "rope", "scores", "scale", "mask", "softmax"),
    ("weights", "merged"): ("mixture", "head merge"),
    ("merged", "output"): ("output projection",),
}
"""The stages that make an operation's published result from the result before it
(``""``: from the operation's inputs), by their names in :data:`STAGES`: what a
diagnosis names when a result is the first that differs."""


PLAIN = str.maketrans({"\u03a3": "sum", "\u00d7": "*", "\u00b7": "*", "\u03c9": "omega",
                       "\u03b8": "theta", "\u2212": "-", "\u1d40": "^T", "\u221a": "sqrt",
                       "\u221e": "inf", "\u0303": "~", "\u2264": "<=", "\u2192": "->",
                       "\u2299": "(*)", "\u27e8": "<", "\u27e9": ">"})
"""The notation's symbols in ASCII, for a stream that cannot encode them."""


def plain(text: str) -> str:
    """``text`` (a formula of :data:`STAGES`) in ASCII: ``S = Q K^T``, ``sum_c``, ``sqrt``."""
    return text.translate(PLAIN).encode("ascii", "backslashreplace").decode("ascii")


def between(before: str, result: str) -> tuple[Stage, ...]:
    """The stages from ``before`` to ``result`` (none where the pair is not listed)."""
    return tuple(STAGES[name] for name in BETWEEN.get((before, result), ()))
