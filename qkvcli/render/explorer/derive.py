"""How each shown number was made: its terms, computed from the engine's own arrays.

Every function here takes the evidence's arrays (the engine's results and the tensors it
was given) and one coordinate, and gives a :class:`Derivation`: the rows a learner reads
(the terms, in the order the formula names them, and the facts beside them) and the
value they make, which is the engine's own number at that coordinate. Nothing here
recomputes a tensor: a term is one element-wise product of two of the engine's arrays
(``X[b,t,i] * W[i,j]``), a path is the dot product of a gradient row with a weight row,
and a weight's softmax row shows the exponentials ``exp(z - max)`` whose ratio is the
engine's weight. ``tests/test_explorer.py`` holds every derivation's terms against the
engine's value.

Long sums are cut to the :data:`MAX_TERMS` largest terms (by magnitude, in their own
order); the rest are one row, ``the other N terms``, with their exact sum, so the shown
rows still add up to the value. No I/O, no wording beyond labels of terms (the page's
prose is :mod:`qkvcli.render.explorer.page`'s).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from qkvcli.attention.maths import exponentials
from qkvcli.core.arrays import Array
from qkvcli.core.record import Record

MAX_TERMS = 16
"""Terms a derivation lists one by one; more are summed into one row."""

Index = tuple[int, ...]



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
    value: float | str
    part: str = "term"


class Derivation(Record):
    """How one number was made: a formula, its rows, and the value they give.

    ``value`` is the engine's number itself; ``terms_total`` how the rows combine
    (``sum``: the term and rest rows add up to it; ``none``: the rows are facts).
    """

    formula: str
    rows: tuple[Step, ...]
    value: float
    terms_total: str = "sum"

    def term_sum(self) -> float:
        """The exact sum of the term and rest rows (what ``value`` should be)."""
        return exact_sum(float(row.value) for row in self.rows
                         if row.part in ("term", "rest") and not isinstance(row.value, str))


def listed(labels: Sequence[str], values: Array, limit: int = MAX_TERMS,
           part: str = "term") -> list[Step]:
    """``values`` as rows labelled ``labels``; past ``limit``, the ``limit`` largest by
    magnitude (in their own order) and one row holding the others' sum (``rest`` for
    terms, a ``fact`` otherwise)."""
    flat = np.asarray(values, dtype=np.float64).reshape(-1)
    if flat.size <= limit:
        return [Step(label, float(v), part) for label, v in zip(labels, flat, strict=True)]
    keep = np.sort(np.argsort(-np.abs(flat), kind="stable")[:limit])
    others = np.ones(flat.size, dtype=bool)
    others[keep] = False
    rows = [Step(labels[i], float(flat[i]), part) for i in keep]
    rows.append(Step(f"the other {int(others.sum())} together", exact_sum(flat[others]),
                    "rest" if part == "term" else "fact"))
    return rows


def coordinate(index: Sequence[int]) -> str:
    """``[0,1,2]``: how a label writes an index."""
    return "[" + ",".join(str(i) for i in index) + "]"


def projection(x: Array, weight: Array, bias: Array | None, index: Index, value: float,
               names: tuple[str, str, str]) -> Derivation:
    """``Y[b,t,j] = sum_i X[b,t,i] W[i,j] (+ bias[j])``: row times column.

    ``weight`` in the ``[in, out]`` layout; ``names`` = (input, weight, bias) letters.
    """
    b, t, j = index
    row = np.asarray(x[b, t], dtype=np.float64)  # [d_in]
    column = np.asarray(weight[:, j], dtype=np.float64)  # [d_in]
    x_name, w_name, b_name = names
    labels = [f"{x_name}[{b},{t},{i}] \u00d7 {w_name}[{i},{j}]" for i in range(row.size)]
    rows = listed(labels, row * column)
    formula = f"row {t} of {x_name} (batch {b}) times column {j} of {w_name}"
    if bias is not None:
        rows.append(Step(f"{b_name}[{j}]", float(bias[j])))
        formula += f", plus {b_name}[{j}]"
    return Derivation(formula, tuple(rows), value)


def input_paths(upstreams: tuple[Array, Array, Array], weights: tuple[Array, Array, Array],
                index: Index, value: float) -> Derivation:
    """``dX[b,t,i] = (U_Q W_Q^T) + (U_K W_K^T) + (U_V W_V^T)`` at ``[b,t,i]``: one term a
    branch, each a gradient row times a weight row (weights ``[d_model, out]``); each
    path's own products follow as facts."""
    b, t, i = index
    paths, products = [], []
    for letter, upstream, weight in zip("QKV", upstreams, weights, strict=True):
        path = np.asarray(upstream[b, t], dtype=np.float64) * np.asarray(weight[i],
                                                                          dtype=np.float64)
        paths.append(Step(f"(U_{letter} W_{letter}\u1d40){coordinate(index)}", exact_sum(path)))
        labels = [f"  {letter} path: U_{letter}[{b},{t},{j}] \u00d7 W_{letter}[{i},{j}]"
                  for j in range(path.size)]
        products += listed(labels, path, part="fact")
    return Derivation("the three paths back to X: query, key and value; below, each "
                      "path's products", tuple(paths + products), value)


def weight_gradient(x: Array, upstream: Array, index: tuple[int, int], value: float,
                    letter: str) -> Derivation:
    """``dW[i,j] = sum over batch b and tokens t of X[b,t,i] U[b,t,j]``."""
    i, j = index
    products = np.asarray(x[:, :, i], dtype=np.float64) * np.asarray(upstream[:, :, j],
                                                                     dtype=np.float64)
    batch, tokens = products.shape
    labels = [f"b{b} t{t}: X[{b},{t},{i}] \u00d7 U_{letter}[{b},{t},{j}]"
              for b in range(batch) for t in range(tokens)]
    return Derivation(f"the sum over {batch} batch items and {tokens} tokens",
                      tuple(listed(labels, products)), value)


def bias_gradient(upstream: Array, j: int, value: float, letter: str) -> Derivation:
    """``db[j] = sum over batch b and tokens t of U[b,t,j]``."""
    column = np.asarray(upstream[:, :, j], dtype=np.float64)
    batch, tokens = column.shape
    labels = [f"b{b} t{t}: U_{letter}[{b},{t},{j}]" for b in range(batch) for t in range(tokens)]
    return Derivation(f"the sum over {batch} batch items and {tokens} tokens",
                      tuple(listed(labels, column)), value)


def attention_weight(scores: Array, scaled: Array, weights: Array, index: Index,
                     factor: float, keys: bool = True) -> Derivation:
    """An attention weight ``A[..., q, k]`` from its raw score, its scaled score and its
    row's softmax: the row's maximum, the exponentials ``exp(z_j - max)`` of the keys
    it sees, their sum, and ``exp(z_k - max) / sum``.

    ``scores``, ``scaled``, ``weights`` hold the row's arrays ``[..., T, T]``; a masked key
    (``-inf`` scaled score) weighs 0. ``keys``: list the row's exponentials (up to
    :data:`MAX_TERMS` of them); without, only this key's.
    """
    *lead, q, k = index
    row_at = (*lead, q)
    z_row = np.asarray(scaled[row_at], dtype=np.float64)  # [T]
    seen = np.isfinite(z_row)
    value = float(weights[index])
    masked = not bool(seen[k])
    top = float(np.max(z_row[seen])) if seen.any() else math.nan
    # the engine's own numerators; a row with no key seen has none
    exps = exponentials(z_row) if seen.any() else np.zeros_like(z_row)
    total = exact_sum(exps[seen])
    rows = [
        Step("raw score S = q·k", float(scores[index]), "fact"),
        Step("scale", factor, "fact"),
        Step("scaled score z = S \u00d7 scale", float(scaled[index]), "fact"),
        Step("masked", "yes" if masked else "no", "text"),
        Step("the row's maximum z", top, "fact"),
        Step("exp(z \u2212 max) of this key", float(exps[k]), "fact"),
        Step("keys the row sees (not masked)", str(int(seen.sum())), "text"),
        Step("sum of the row's exponentials", total, "fact"),
    ]
    if keys:
        seen_keys = np.flatnonzero(seen)
        labels = [f"key {j}: exp(z \u2212 max)" for j in seen_keys]
        rows += listed(labels, exps[seen_keys], part="fact")
    formula = ("0: the key is after the query (masked before the softmax)" if masked
               else "exp(z \u2212 max) / sum of the row's exponentials")
    return Derivation(formula, tuple(rows), value, "none")


def mixture(weights: Array, values: Array, index: Index, value: float, head: int | None,
            causal: bool) -> Derivation:
    """``O[b,t,c] = sum_j A[b,(h,)t,j] V[b,j,c]``: row ``t``'s weights times the value rows'
    coordinate ``c`` (``head``: the head of a layer whose slice of the concatenation
    holds ``c``; ``values`` per query head, ``[B,T,H*d_v]``)."""
    b, t, c = index
    lead = (b,) if head is None else (b, head)
    row_at = (*lead, t)
    a_row = np.asarray(weights[row_at], dtype=np.float64)  # [T]
    column = np.asarray(values[b, :, c], dtype=np.float64)  # [T]
    end = t + 1 if causal else a_row.size
    a_name = "A[" + ",".join(str(i) for i in (*lead, t))
    labels = [f"{a_name},{j}] \u00d7 V[{b},{j},{c}]" for j in range(end)]
    formula = (f"a mixture of the value rows: row {t}'s weights"
               + (f" (head {head})" if head is not None else "")
               + f" times coordinate {c} of each value row"
               + (f"; keys after {t} are masked and weigh 0" if end < a_row.size else ""))
    return Derivation(formula, tuple(listed(labels, a_row[:end] * column[:end])), value)


def gradcheck_point(analytic: float, numerical: float, step: float, scaled_error: float,
                    tolerance: float, passed: bool) -> Derivation:
    """A gradient-check coordinate: the analytic value against the central difference."""
    rows = (
        Step("analytic (the reverse pass)", analytic, "fact"),
        Step("numerical (L(x+h) \u2212 L(x\u2212h)) / 2h", numerical, "fact"),
        Step("step h", step, "fact"),
        Step("|analytic \u2212 numerical|", abs(analytic - numerical), "fact"),
        Step("scaled error |a\u2212n| / max(1,|a|,|n|)", scaled_error, "fact"),
        Step("tolerance", tolerance, "fact"),
        Step("passed", "yes" if passed else "no", "text"),
    )
    return Derivation("central difference against the reverse pass", rows, analytic, "none")
