"""One element of a stage's output, made from its operands' elements: the terms.

Each function takes the engine's arrays (its results and the tensors it was given), one
coordinate and the engine's own number there, and gives a :class:`Derivation`: the rows
a reader reads (the terms, in the order the stage's element formula names them, and the
facts beside them) and the value they make, which is the engine's number. Nothing here
recomputes a tensor: a term is one element-wise product of two operand elements
(``X[b,t,i] * W[i,j]``), a rotation pair two products, a softmax weight its row's
exponentials (the engine's own, :func:`qkvcli.attention.maths.exponentials`). Each
derivation names its stage (:data:`qkvcli.stages.table.STAGES`).

Long sums are cut to the :data:`MAX_TERMS` largest terms (by magnitude, in their own
order); the rest are one row, ``the other N together``, with their exact sum, so the
shown rows still add up to the value. Labels name operands by the letters the caller
gives (the chapter's notation).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from qkvcli.attention.maths import exponentials, softmax_backward
from qkvcli.core.arrays import Array
from qkvcli.core.record import Record

MAX_TERMS = 16
"""Terms a derivation lists one by one; more are summed into one row."""

Index = tuple[int, ...]
TIMES, MINUS = "\u00d7", "\u2212"


def exact_sum(values: Iterable[float]) -> float:
    """The correctly rounded sum of ``values`` (``math.fsum``); where partial sums pass
    the largest float, the float sum that says so (``inf``), and ``nan`` where an
    infinity meets its opposite."""
    numbers = [float(value) for value in values]
    try:
        return math.fsum(numbers)
    except OverflowError:  # finite terms whose exact sum is beyond the largest float
        return float(np.sum(np.asarray(numbers, dtype=np.float64)))
    except ValueError:  # inf + -inf
        return math.nan


class Step(Record):
    """One line of a derivation: a label and a number (or words), and its part.

    ``part``: ``term`` (adds up to the value), ``rest`` (the other terms, summed),
    ``fact`` (a number beside the sum: a scale, a row's maximum) or ``text``.
    """

    label: str
    value: float | str  # an int where the number is a count
    part: str = "term"
    operands: tuple[float, ...] = ()  # the operand values a product term multiplies


class Derivation(Record):
    """How one number was made: a formula, its rows, the value they give, its stage.

    ``value`` is the engine's number itself; ``terms_total`` how the rows combine
    (``sum``: the term and rest rows add up to it; ``none``: the rows are facts);
    ``stage`` names the stage's description (``""``: none, a finding of a check).
    """

    formula: str
    rows: tuple[Step, ...]
    value: float
    terms_total: str = "sum"
    stage: str = ""

    def term_sum(self) -> float:
        """The exact sum of the term and rest rows (what ``value`` should be)."""
        return exact_sum(float(row.value) for row in self.rows
                         if row.part in ("term", "rest") and not isinstance(row.value, str))


def listed(labels: Sequence[str], values: Array, limit: int = MAX_TERMS,
           part: str = "term", operands: Sequence[Array] = ()) -> list[Step]:
    """``values`` as rows labelled ``labels`` (each with its ``operands``' values: the
    vectors whose element-wise product ``values`` is); past ``limit``, the ``limit``
    largest by magnitude (in their own order) and one row holding the others' sum
    (``rest`` for terms, a ``fact`` otherwise)."""
    flat = np.asarray(values, dtype=np.float64).reshape(-1)
    columns = [_vector(o) for o in operands]

    def step(i: int) -> Step:
        return Step(labels[i], float(flat[i]), part, tuple(float(c[i]) for c in columns))

    if flat.size <= limit:
        return [step(i) for i in range(flat.size)]
    keep = np.sort(np.argsort(-np.abs(flat), kind="stable")[:limit])
    others = np.ones(flat.size, dtype=bool)
    others[keep] = False
    rows = [step(int(i)) for i in keep]
    rows.append(Step(f"the other {int(others.sum())} together", exact_sum(flat[others]),
                     "rest" if part == "term" else "fact"))
    return rows


def coordinate(index: Sequence[int]) -> str:
    """``[0,1,2]``: how a label writes an index."""
    return "[" + ",".join(str(int(i)) for i in index) + "]"


def _at(lead: Sequence[int], *rest: int | str) -> str:
    return "[" + ",".join(str(i) for i in (*lead, *rest)) + "]"


def _get(array: Array, *where: Any) -> Any:
    """``array[where]`` (a coordinate built from a unpacked lead and more)."""
    return array[tuple(where)]


def _vector(values: Array) -> Array:
    return np.asarray(values, dtype=np.float64).reshape(-1)


def contraction(stage: str, formula: str, left: Array, right: Array, labels: Sequence[str],
                value: float) -> Derivation:
    """A sum of products ``Σ_r left[r] * right[r]``: one term per ``r``."""
    return Derivation(formula, tuple(listed(labels, _vector(left) * _vector(right),
                                            operands=(left, right))), value,
                      stage=stage)


def facts(stage: str, formula: str, rows: Sequence[tuple[str, float | str]],
          value: float) -> Derivation:
    """A number made from a few facts (a product, a copy, a power): the rows beside it."""
    return Derivation(formula, tuple(Step(label, v if isinstance(v, str) or _integer(v)
                                          else float(v), "text" if isinstance(v, str) else "fact")
                                     for label, v in rows), value, "none", stage)


def _integer(value: object) -> bool:
    """A count (a Python ``int``, not a flag): kept whole, so the page writes it so."""
    return isinstance(value, int) and not isinstance(value, bool)


# --- the projections and their reverse -----------------------------------------------------


def projection(x: Array, weight: Array, bias: Array | None, index: Index, value: float,
               names: tuple[str, str, str], stage: str = "projection") -> Derivation:
    """``Y[b,t,j] = Σ_i X[b,t,i] W[i,j] (+ bias[j])``: row times column.

    ``weight`` in the ``[in, out]`` layout; ``names`` = (input, weight, bias) letters.
    """
    b, t, j = index
    row, column = _vector(x[b, t]), _vector(weight[:, j])
    x_name, w_name, b_name = names
    labels = [f"{x_name}[{b},{t},{i}] {TIMES} {w_name}[{i},{j}]" for i in range(row.size)]
    rows = listed(labels, row * column, operands=(row, column))
    formula = f"row {t} of {x_name} (batch {b}) times column {j} of {w_name}"
    if bias is not None:
        rows.append(Step(f"{b_name}[{j}]", float(bias[j])))
        formula += f", plus {b_name}[{j}]"
    return Derivation(formula, tuple(rows), value, stage=stage)


def input_paths(upstreams: Sequence[Array], weights: Sequence[Array], index: Index,
                value: float, upstream_names: Sequence[str] = ("U_Q", "U_K", "U_V"),
                weight_names: Sequence[str] = ("W_Q", "W_K", "W_V")) -> Derivation:
    """``dX[b,t,i] = Σ_branch (U W^T)[b,t,i]``: one term a branch, each a gradient row
    times a weight row (weights ``[d_model, out]``); each path's own products follow as
    facts. ``upstream_names``: what each branch's incoming gradient is called."""
    b, t, i = index
    paths, products = [], []
    for u_name, w_name, upstream, weight in zip(upstream_names, weight_names, upstreams,
                                                 weights, strict=True):
        grads, weight_row = _vector(upstream[b, t]), _vector(weight[i])
        path = grads * weight_row
        paths.append(Step(f"({u_name} {w_name}\u1d40){coordinate(index)}", exact_sum(path)))
        labels = [f"  {w_name[-1]} path: {u_name}[{b},{t},{j}] {TIMES} {w_name}[{i},{j}]"
                  for j in range(path.size)]
        products += listed(labels, path, part="fact", operands=(grads, weight_row))
    branches = ", ".join(name[-1] for name in weight_names)
    return Derivation(f"the {len(paths)} paths back to X ({branches}) add; below, each "
                      "path's products", tuple(paths + products), value,
                      stage="projection reverse (input)")


def weight_gradient(x: Array, upstream: Array, index: tuple[int, int], value: float,
                    upstream_name: str, x_name: str = "X") -> Derivation:
    """``dW[i,j] = sum over batch b and tokens t of X[b,t,i] U[b,t,j]``."""
    i, j = index
    inputs = np.asarray(x[:, :, i], dtype=np.float64)
    grads = np.asarray(upstream[:, :, j], dtype=np.float64)
    products = inputs * grads
    batch, tokens = products.shape
    labels = [f"b{b} t{t}: {x_name}[{b},{t},{i}] {TIMES} {upstream_name}[{b},{t},{j}]"
              for b in range(batch) for t in range(tokens)]
    return Derivation(f"the sum over {batch} batch items and {tokens} tokens",
                      tuple(listed(labels, products, operands=(inputs, grads))), value,
                      stage="projection reverse (weight)")


def bias_gradient(upstream: Array, j: int, value: float, upstream_name: str) -> Derivation:
    """``db[j] = sum over batch b and tokens t of U[b,t,j]``."""
    column = np.asarray(upstream[:, :, j], dtype=np.float64)
    batch, tokens = column.shape
    labels = [f"b{b} t{t}: {upstream_name}[{b},{t},{j}]"
              for b in range(batch) for t in range(tokens)]
    return Derivation(f"the sum over {batch} batch items and {tokens} tokens",
                      tuple(listed(labels, column)), value, stage="projection reverse (bias)")


def copied(stage: str, source: str, index: Index, value: float) -> Derivation:
    """A head split or merge (or its reverse): the same number at another place."""
    return facts(stage, f"the same number as {source}{coordinate(index)}",
                 [(f"{source}{coordinate(index)}", value)], value)


# --- RoPE -----------------------------------------------------------------------------


def pair_of(c: int, dims: int, layout: str) -> tuple[int, int, int]:
    """Coordinate ``c``'s pair ``i`` and the pair's two coordinates ``(a, b)``:
    ``interleaved`` (the chapter's ``adjacent``) pairs ``2i`` with ``2i+1``, ``half``
    pairs ``i`` with ``i + dims/2``."""
    half = dims // 2
    if layout == "half":
        i = c % half
        return i, i, i + half
    return c // 2, c - c % 2, c - c % 2 + 1


def rotation(x: Array, cos: Array, sin: Array, index: Index, value: float, layout: str,
             names: tuple[str, str] = ("x", "x'"), inverse: bool = False,
             position: int | None = None) -> Derivation:
    """One turned coordinate of ``x [..., T, d]``: its pair's two products with the cosine
    and sine of token ``t``'s angle (``cos``, ``sin``: ``[T, pairs]``, row ``t``);
    ``inverse``: the reverse step, turned back by ``-θ``."""
    *lead, t, c = index
    dims = 2 * int(cos.shape[-1])
    i, a, b = pair_of(c, dims, layout)
    cosine, sine = float(cos[t, i]), float(sin[t, i])
    xa, xb = float(_get(x, *lead, t, a)), float(_get(x, *lead, t, b))
    name, out = names
    la, lb = f"{name}{_at(lead, t, a)}", f"{name}{_at(lead, t, b)}"
    if (c == a) != inverse:  # x'_a = x_a cos - x_b sin; reverse g_b = g'_b cos - g'_a sin
        first, second = (la, xa, "cos\u03b8", cosine), (lb, xb, f"{MINUS}sin\u03b8", -sine)
        if inverse:
            first, second = (lb, xb, "cos\u03b8", cosine), (la, xa, f"{MINUS}sin\u03b8", -sine)
    else:  # x'_b = x_b cos + x_a sin; reverse g_a = g'_a cos + g'_b sin
        first, second = (lb, xb, "cos\u03b8", cosine), (la, xa, "sin\u03b8", sine)
        if inverse:
            first, second = (la, xa, "cos\u03b8", cosine), (lb, xb, "sin\u03b8", sine)
    where = f"position {t if position is None else position}"
    rows = (Step(f"{first[0]} {TIMES} {first[2]}", first[1] * first[3], "term",
                 (first[1], first[3])),
            Step(f"{second[0]} {TIMES} {second[2]}", second[1] * second[3], "term",
                 (second[1], second[3])),
            Step(f"cos\u03b8 (pair {i}, {where})", cosine, "fact"),
            Step(f"sin\u03b8 (pair {i}, {where})", sine, "fact"))
    turn = "turned back by \u2212\u03b8" if inverse else "turned by \u03b8"
    return Derivation(f"{out}{_at(lead, t, c)}: coordinates {a} and {b} of token {t} are "
                      f"one pair, {turn}", rows, value,
                      stage="rope reverse" if inverse else "rope")


# --- scores, scale, mask, softmax, mixture --------------------------------------------------


def scores(q: Array, k: Array, index: Index, value: float,
           names: tuple[str, str] = ("Q", "K"), stage: str = "scores") -> Derivation:
    """``S[..., i, j] = Σ_c Q[..., i, c] * K[..., j, c]``: query row times key row."""
    *lead, i, j = index
    row, key = _vector(_get(q, *lead, i)), _vector(_get(k, *lead, j))
    labels = [f"{names[0]}{_at(lead, i, c)} {TIMES} {names[1]}{_at(lead, j, c)}"
              for c in range(row.size)]
    return contraction(stage, f"query row {i} times key row {j}", row, key, labels, value)


def scaled(raw: float, factor: float, value: float, name: str = "S", stage: str = "scale",
           hidden: bool = False) -> Derivation:
    """``Z = S * scale`` at one coordinate (``hidden``: a report whose scaled scores hold
    the mask too, ``-inf`` where the key is after the query)."""
    rows: list[tuple[str, float | str]] = [(name, raw), ("scale", factor)]
    if hidden:
        rows.append(("mask", "\u2212\u221e: the key is after the query"))
        return facts(stage, f"{name} {TIMES} scale, then the mask: \u2212\u221e", rows, value)
    return facts(stage, f"{name} {TIMES} scale", rows, value)


def masked(score: float, hidden: bool, value: float) -> Derivation:
    """``Z̃ = Z`` where the key is visible, ``-inf`` where it comes after the query."""
    return facts("mask", "\u2212\u221e: the key is after the query" if hidden
                 else "Z itself: the key is not after the query",
                 [("Z (scaled score)", score),
                  ("mask M", "\u2212\u221e (hidden)" if hidden else "0 (visible)")], value)


def mask_entry(hidden: bool, q: int, k: int, value: float) -> Derivation:
    """The mask ``M[q,k]``: 0 where key ``k`` is visible from query ``q``, ``-inf`` after."""
    return facts("mask", f"key {k} {'after' if hidden else 'not after'} query {q}",
                 [("query", str(q)), ("key", str(k))], value)


def attention_weight(raw: Array | None, scaled_scores: Array, softmax_input: Array,
                     weights: Array, index: Index, factor: float,
                     keys: bool = True, score: Derivation | None = None) -> Derivation:
    """An attention weight ``A[..., q, k]`` from its raw score, its scaled score, the mask
    and its row's softmax: the row's maximum, the exponentials ``exp(z_j - max)`` of the
    keys it sees, their sum, and ``exp(z_k - max) / sum``.

    ``softmax_input`` is what the softmax read (the scaled scores, ``-inf`` where masked);
    ``keys``: list the row's exponentials (up to :data:`MAX_TERMS`); without, only this
    key's. ``score``: the raw score's own terms (:func:`scores`), listed under it.
    """
    *lead, q, k = index
    together = softmax_input is scaled_scores  # a report whose scaled scores hold the mask
    z_row = np.asarray(_get(softmax_input, *lead, q), dtype=np.float64)  # [T]
    seen = np.isfinite(z_row)
    value = float(weights[index])
    hidden = not bool(seen[k])
    top = float(np.max(z_row[seen])) if seen.any() else math.nan
    exps = exponentials(z_row) if seen.any() else np.zeros_like(z_row)
    total = exact_sum(exps[seen])
    rows = [Step("raw score S = q\u00b7k", float(raw[index]), "fact")] if raw is not None else []
    if score is not None:  # indented: a detail of the raw score, not beside the weight
        rows += [row._replace(label=f"  {row.label}", part="fact") for row in score.rows]
    rows += [
        Step("scale", factor, "fact"),
        Step(f"scaled score S {TIMES} scale" + (" (then masked)" if together else ""),
             float(scaled_scores[index]), "fact"),
        Step("masked (yes: z = \u2212\u221e; no: z = the scaled score)", "yes" if hidden else "no",
             "text"),
        Step("the row's maximum z", top, "fact"),
        Step(f"exp(z {MINUS} max) of this key", float(exps[k]), "fact"),
        Step("keys the row sees (not masked)", str(int(seen.sum())), "text"),
        Step("sum of the row's exponentials", total, "fact"),
    ]
    if keys:
        seen_keys = np.flatnonzero(seen)
        labels = [f"key {j}: exp(z {MINUS} max)" for j in seen_keys]
        rows += listed(labels, exps[seen_keys], part="fact")
    formula = ("0: the key is after the query (masked before the softmax)" if hidden
               else f"exp(z {MINUS} max) / sum of the row's exponentials")
    return Derivation(formula, tuple(rows), value, "none", "softmax")


def row_sum(weights: Array, index: Index, value: float, name: str = "A") -> Derivation:
    """``Σ_k A[..., q, k]``: the row's weights."""
    row = _vector(weights[index])
    labels = [f"{name}{_at(index, k)}" for k in range(row.size)]
    return Derivation(f"the weights of row {index[-1]}", tuple(listed(labels, row)), value,
                      stage="row sum")


def mixture_term(weights: Array, values: Array, index: Index, value: float,
                 lead: Index = (0,)) -> Derivation:
    """``A[q,k] * V[k,c]``: key ``k``'s share of output ``O[q,c]`` (of batch item
    ``lead``)."""
    q, k, c = index
    return facts("mixture term", f"A[q,k] {TIMES} V[k,c]: key {k}'s share of O{_at(lead, q, c)}",
                 [(f"A{_at(lead, q, k)}", float(_get(weights, *lead, q, k))),
                  (f"V{_at(lead, k, c)}", float(_get(values, *lead, k, c)))], value)


def mixture(weights: Array, values: Array, index: Index, value: float,
            head: int | None = None, names: tuple[str, str] = ("A", "V"),
            limit: int = MAX_TERMS) -> Derivation:
    """``O[b,t,c] = Σ_j A[b,(h,)t,j] V[b,j,c]``: row ``t``'s weights times the value
    rows' coordinate ``c`` (``head``: the head of a layer whose slice of the concatenation
    holds ``c``, with ``values`` per query head ``[B,T,H*d_v]``; else ``values`` may be
    ``[B,H,T,d]`` with ``index`` ``[b,h,t,c]``). Keys the row does not see (weight 0
    after the query) are left out; past ``limit`` terms, the others in one row."""
    if head is None and len(index) == 4:
        b, h, t, c = index
        lead: Index = (b, h)
        column = _vector(values[b, h, :, c])
        v_lead: Index = (b, h)
    else:
        b, t, c = index
        lead = (b,) if head is None else (b, head)
        column = _vector(values[b, :, c])
        v_lead = (b,)
    a_row = _vector(_get(weights, *lead, t))
    seen = [j for j in range(a_row.size) if a_row[j] != 0.0 or j <= t]
    a_name, v_name = names
    labels = [f"{a_name}{_at(lead, t, j)} {TIMES} {v_name}{_at(v_lead, j, c)}" for j in seen]
    formula = (f"a mixture of the value rows: row {t}'s weights"
               + (f" (head {head})" if head is not None else "")
               + f" times coordinate {c} of each value row"
               + (f"; the {a_row.size - len(seen)} keys after {t} weigh 0"
                  if len(seen) < a_row.size else ""))
    return Derivation(formula, tuple(listed(labels, a_row[seen] * column[seen], limit,
                                            operands=(a_row[seen], column[seen]))), value,
                      stage="mixture")


# --- the attention's reverse ------------------------------------------------------------


def attention_reverse(weights: Array, values: Array, upstream: Array,
                      factor: float) -> tuple[Array, Array, Array]:
    """The reverse of a head's mixture, softmax and scale as whole arrays, from the
    weights ``A``, the values ``V`` and the output's gradient ``U``: ``dA = U V^T``, ``dZ``
    (the engine's softmax reverse) and ``dS = dZ * scale``; the operands of ``dQ`` and
    ``dK``'s terms where a report publishes only the ends of the pass."""
    grad_weights = np.asarray(upstream, dtype=np.float64) @ np.swapaxes(values, -1, -2)
    grad_z = softmax_backward(weights, grad_weights)
    return grad_weights, grad_z, grad_z * factor


def softmax_reverse(weights: Array, grad_weights: Array, index: Index, value: float,
                    names: tuple[str, str] = ("A", "dA")) -> Derivation:
    """``dZ[..., q, k] = A[q,k] dA[q,k] - A[q,k] Σ_j A[q,j] dA[q,j]``: two terms, the
    row's products ``A_j dA_j`` listed beside them."""
    *lead, q, k = index
    a_row, g_row = _vector(_get(weights, *lead, q)), _vector(_get(grad_weights, *lead, q))
    a, g = float(a_row[k]), float(g_row[k])
    products = a_row * g_row
    inner = exact_sum(products)
    a_name, g_name = names
    rows = [Step(f"{a_name}{_at(lead, q, k)} {TIMES} {g_name}{_at(lead, q, k)}", a * g),
            Step(f"{MINUS}{a_name}{_at(lead, q, k)} {TIMES} \u03a3_j {a_name}_j {g_name}_j",
                 -a * inner),
            Step(f"{a_name}{_at(lead, q, k)}", a, "fact"),
            Step(f"{g_name}{_at(lead, q, k)}", g, "fact"),
            Step(f"\u03a3_j {a_name}_j {g_name}_j over row {q}", inner, "fact")]
    rows += listed([f"  key {j}: {a_name} {TIMES} {g_name}" for j in range(a_row.size)],
                   products, part="fact", operands=(a_row, g_row))
    return Derivation(f"the softmax's reverse on row {q}", tuple(rows), value,
                      stage="softmax reverse")


def grad_weights(upstream: Array, values: Array, index: Index, value: float,
                 names: tuple[str, str] = ("U", "V")) -> Derivation:
    """``dA[..., q, k] = Σ_c U[..., q, c] * V[..., k, c]``."""
    return scores(upstream, values, index, value, names, "mixture reverse (weights)")


def grad_values(weights: Array, upstream: Array, index: Index, value: float,
                names: tuple[str, str] = ("A", "U")) -> Derivation:
    """``dV[..., k, c] = Σ_q A[..., q, k] * U[..., q, c]``."""
    *lead, k, c = index
    column = _vector(_get(weights, *lead, slice(None), k))
    grads = _vector(_get(upstream, *lead, slice(None), c))
    labels = [f"{names[0]}{_at(lead, q, k)} {TIMES} {names[1]}{_at(lead, q, c)}"
              for q in range(column.size)]
    return contraction("mixture reverse (values)", f"every query's weight on key {k} times "
                       f"its gradient's coordinate {c}", column, grads, labels, value)


def grad_queries(grad_scores: Array, keys: Array, index: Index, value: float,
                 names: tuple[str, str] = ("dS", "K")) -> Derivation:
    """``dQ[..., q, c] = Σ_k dS[..., q, k] * K[..., k, c]``."""
    *lead, q, c = index
    row, column = _vector(_get(grad_scores, *lead, q)), _vector(_get(keys, *lead, slice(None), c))
    labels = [f"{names[0]}{_at(lead, q, k)} {TIMES} {names[1]}{_at(lead, k, c)}"
              for k in range(row.size)]
    return contraction("scores reverse (queries)", f"row {q} of {names[0]} times column {c} "
                       f"of {names[1]}", row, column, labels, value)


def grad_keys(grad_scores: Array, queries: Array, index: Index, value: float,
              names: tuple[str, str] = ("dS", "Q")) -> Derivation:
    """``dK[..., k, c] = Σ_q dS[..., q, k] * Q[..., q, c]``."""
    *lead, k, c = index
    column = _vector(_get(grad_scores, *lead, slice(None), k))
    others = _vector(_get(queries, *lead, slice(None), c))
    labels = [f"{names[0]}{_at(lead, q, k)} {TIMES} {names[1]}{_at(lead, q, c)}"
              for q in range(column.size)]
    return contraction("scores reverse (keys)", f"column {k} of {names[0]} times column {c} "
                       f"of {names[1]}", column, others, labels, value)


# --- chapter 37's comparisons and counts ------------------------------------------------------


def largest_difference(a: Array, b: Array, value: float, tolerance: float,
                       names: tuple[str, str]) -> Derivation:
    """``max |a - b|`` over every coordinate of two arrays of one shape: where it is
    largest, the two values there, and each coordinate's difference, against
    ``tolerance``."""
    gaps = np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))
    at = tuple(int(i) for i in np.unravel_index(int(np.argmax(gaps)), gaps.shape))
    first, second = names
    rows = [Step(f"{first}{coordinate(at)}", float(a[at]), "fact"),
            Step(f"{second}{coordinate(at)}", float(b[at]), "fact"),
            Step(f"|{first} {MINUS} {second}| there", float(gaps[at]), "fact"),
            Step("tolerance", tolerance, "fact"),
            Step("within the tolerance", "yes" if value <= tolerance else "no", "text")]
    labels = [f"  |{first} {MINUS} {second}| at {coordinate(i)}"
              for i in np.ndindex(*gaps.shape)]
    rows += listed(labels, gaps, part="fact")
    return Derivation(f"the largest |{first} {MINUS} {second}| over every coordinate",
                      tuple(rows), value, "none")


def counted(formula: str, labels: Sequence[str], counts: Sequence[int], value: int,
            stage: str = "") -> Derivation:
    """A count made by adding counts (rows over the steps, keys and values): one term
    each, integers; past :data:`MAX_TERMS`, the others' sum in one row."""
    rows = [Step(label, int(count)) for label, count in zip(labels, counts, strict=True)]
    if len(rows) > MAX_TERMS:
        rest = sum(int(count) for count in counts[MAX_TERMS:])
        rows = [*rows[:MAX_TERMS],
                Step(f"the other {len(rows) - MAX_TERMS} together", rest, "rest")]
    return Derivation(formula, tuple(rows), value, stage=stage)


def gradcheck_point(analytic: float, numerical: float, step: float, scaled_error: float,
                    tolerance: float, passed: bool) -> Derivation:
    """A gradient-check coordinate: the analytic value against the central difference."""
    rows = (
        Step("analytic (the reverse pass)", analytic, "fact"),
        Step(f"numerical (L(x+h) {MINUS} L(x{MINUS}h)) / 2h", numerical, "fact"),
        Step("step h", repr(float(step)), "text"),  # as the fixture or option gave it
        Step(f"|analytic {MINUS} numerical|", f"{abs(analytic - numerical):.3e}", "text"),
        Step(f"scaled error |a{MINUS}n| / max(1,|a|,|n|)", f"{scaled_error:.3e}", "text"),
        Step("tolerance", repr(float(tolerance)), "text"),
        Step("passed", "yes" if passed else "no", "text"),
    )
    return Derivation("central difference against the reverse pass", rows, analytic, "none",
                      "central difference")
