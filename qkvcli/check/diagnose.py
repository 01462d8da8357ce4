"""Comparing an implementation's answers with qkv's, and naming the wrong path.

Comparing tensors: the scaled error, the first failing coordinate, and bitwise equality.

Every diagnosis is a :class:`~qkvcli.check.result.Clause` (a code and its facts),
worded by :mod:`qkvcli.render.check`.

Naming what a wrong result computed: a missing or doubled path, a borrowed weight or
branch of the projections; a known slip of any kind, by comparing with what each slip
computes (:func:`named_slips`; the slips themselves are the engine given a wrong part,
:mod:`~qkvcli.check.reference`).

The reverse pass of the chapter: ``dX = dQ W_Q^T + dK W_K^T + dV W_V^T`` (three paths
add into the shared input) while ``dW_Q = X^T dQ`` stays branch-local. A wrong dX is
compared with every combination of the three paths taken 0, 1 or 2 times, then with
one path computed with another branch's weight or upstream gradient (``dK W_Q^T``) and
with two paths that swap their weights; a wrong weight gradient with the other
branches' and with all three summed.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import product

import numpy as np

from qkvcli.check.cases import Run
from qkvcli.core.arrays import Array, close, coordinate, first_outside, mismatches
from qkvcli.core.errors import format_shape
from qkvcli.core.names import BRANCHES, GRADIENTS
from qkvcli.core.record import Record
from qkvcli.core.results import Clause
from qkvcli.gradcheck.central import scaled_error

Bundle = tuple[Array, ...]
"""The results of one call, in the operation's order."""


def first_mismatch(name: str, actual: Array, expected: Array,
                   tolerance: float) -> tuple[str, Clause] | None:
    """``(coordinate, finding)`` of the first element (row-major) outside ``tolerance``, or
    ``None``: ``value-differs`` (name, coordinate, actual, expected, scaled error,
    tolerance), or ``shape-differs`` (name, its shape, the shape expected; coordinate:
    the tensor's name)."""
    if actual.shape != expected.shape:
        return name, Clause("shape-differs", (name, format_shape(list(actual.shape)),
                                              format_shape(list(expected.shape))))
    found = first_outside(actual, expected, tolerance)
    if found is None:
        return None
    where, a, e = found
    return f"{name}{where}", Clause("value-differs",
                                    (name, where, a, e, scaled_error(a, e), tolerance))


FLOAT64_ROUNDING = 1e-12
"""The scaled error float64 arithmetic in another order stays within on qkv's fixtures
(sums of a few dozen unit-sized products): below it, only the tolerance is wrong."""
SAMPLED = 512  # elements looked at for a writer's decimals (the first ones, row-major)
FEWEST_PLACES = 3
"""The fewest decimals or digits taken for a writer's: values of one or two places
(a mask's exact 0 and 1 weights, small integers) are a head's own, not a lossy spelling."""
LOSSY = ("decimals", "digits", "float32")
"""Causes that make the implementation's forward a poor function for central differences."""


def largest_error(actual: Array, expected: Array) -> float:
    """The largest scaled error ``|a-e|/max(1,|a|,|e|)`` over the elements (0 when empty)."""
    if actual.size == 0:
        return 0.0
    with np.errstate(all="ignore"):
        magnitude = np.maximum(1.0, np.maximum(np.abs(actual), np.abs(expected)))
        return float(np.max(np.abs(actual - expected) / magnitude))


def _written(actual: Array, expected: Array) -> tuple[str, int] | None:
    """``("decimals", k)`` when every value is a decimal of ``k`` places within rounding of
    the expected one (``%.6f``), ``("digits", k)`` for ``k`` significant digits (``%g``)."""
    pairs = list(zip(actual.reshape(-1)[:SAMPLED].tolist(),
                     expected.reshape(-1)[:SAMPLED].tolist(), strict=True))
    for places in range(FEWEST_PLACES, 16):
        half = 0.5 * 10.0 ** -places * (1 + 1e-6)
        if all(a == float(f"{a:.{places}f}") and abs(a - e) <= half for a, e in pairs):
            return "decimals", places
        relative = 0.5 * 10.0 ** (1 - places) * (1 + 1e-6)
        if all(a == float(f"{a:.{places - 1}e}") and abs(a - e) <= relative * abs(e)
               for a, e in pairs):
            return "digits", places
    return None


def _is_float32(values: Array) -> bool:
    with np.errstate(all="ignore"):
        return bool(np.all(values.astype(np.float32).astype(np.float64) == values))


class Precision(Record):
    """A wrong tensor that is right but for its precision: the ``cause`` (``decimals`` or
    ``digits``: a writer's lossy spelling, ``float32``: every value a float32,
    ``float64``: within float64 rounding, the tolerance is below what it can promise),
    the measured largest scaled ``error``, and the ``places`` a writer kept."""

    cause: str
    error: float
    places: int = 0


def precision(actual: Array, expected: Array) -> Precision | None:
    """The measured precision fault of ``actual`` (same shape), or ``None`` when the
    error is the maths'."""
    error = largest_error(actual, expected)
    if error <= FLOAT64_ROUNDING:
        return Precision("float64", error)
    written = _written(actual, expected)
    if written is not None:
        return Precision(written[0], error, written[1])
    if _is_float32(actual) and not _is_float32(expected) and error <= 1e-4:
        return Precision("float32", error)
    return None


def precision_clause(names: list[str], fault: Precision, tolerance: float) -> Clause:
    """``precision``: ``names`` sharing one precision fault (the largest error given), and
    the tolerance asked for."""
    return Clause("precision", (tuple(names), fault, tolerance))


def precision_clauses(faults: list[tuple[str, Precision]], tolerance: float) -> list[Clause]:
    """One :func:`precision_clause` per cause, in the order the causes first come: the
    names of the tensors sharing it, with the largest error among them."""
    causes: dict[str, tuple[list[str], Precision]] = {}
    for name, fault in faults:
        names, worst = causes.get(fault.cause, ([], fault))
        causes[fault.cause] = ([*names, name], max(worst, fault, key=lambda f: f.error))
    return [precision_clause(names, worst, tolerance) for names, worst in causes.values()]


def precision_faults(names: tuple[str, ...], actual: tuple[Array, ...],
                     expected: tuple[Array, ...],
                     tolerance: float) -> list[tuple[str, Precision]] | None:
    """Each tensor outside ``tolerance`` with its :func:`precision` fault, when every one of
    them is right but for its precision; ``None`` when one is wrong by the maths or its
    shape, or none is outside."""
    faults = []
    for name, got, wanted in zip(names, actual, expected, strict=True):
        if close(got, wanted, tolerance):
            continue
        fault = precision(got, wanted) if got.shape == wanted.shape else None
        if fault is None:
            return None
        faults.append((name, fault))
    return faults or None


def first_precision_fault(names: tuple[str, ...], actual: tuple[Array, ...],
                          expected: tuple[Array, ...],
                          tolerance: float) -> list[tuple[str, Precision]] | None:
    """:func:`precision_faults` of the first tensor outside ``tolerance`` alone: for
    results computed apart (the projections' outputs), each is judged on its own."""
    for index, (got, wanted) in enumerate(zip(actual, expected, strict=True)):
        if not close(got, wanted, tolerance):
            return precision_faults(names[index:index + 1], (got,), (wanted,), tolerance)
    return None


def _path_counts(grad_input: Array, paths: list[Array], tolerance: float) -> Clause | None:
    """``path-counts`` (the branches whose path is missing, those counted twice) when
    that fits."""
    # Fewest changes from (1, 1, 1) first: one missing path is the likeliest slip.
    combos = sorted(product((0, 1, 2), repeat=3), key=lambda c: sum(v != 1 for v in c))
    for combo in combos[1:]:
        candidate = sum((c * p for c, p in zip(combo, paths, strict=True)),
                        np.zeros_like(grad_input))
        if close(grad_input, candidate, tolerance):
            missing = tuple(BRANCHES[i] for i, c in enumerate(combo) if c == 0)
            doubled = tuple(BRANCHES[i] for i, c in enumerate(combo) if c == 2)
            return Clause("path-counts", (missing, doubled))
    return None


def _borrowed(grad_input: Array, weights: tuple[Array, ...], upstream: tuple[Array, ...],
              paths: list[Array], tolerance: float) -> Clause | None:
    """``borrowed-weight`` or ``borrowed-gradient`` (the path's branch, the branch it
    borrowed from) when one path borrows another's weight or upstream gradient,
    ``swapped-weights`` (two branches) when two paths swap their weights,
    ``through-weight`` (the branch) when every path goes back through one branch's
    weight (``(dQ + dK + dV) W_Q^T``); else ``None``."""
    total = paths[0] + paths[1] + paths[2]
    for branch in range(3):
        for grad in range(3):
            for weight in range(3):
                if (grad, weight) == (branch, branch) or branch not in (grad, weight):
                    continue  # the right path, or a missing/doubled one (_path_counts)
                # [B,T,h] @ [h,d] -> [B,T,d]: this path computed with a borrowed factor.
                candidate = total - paths[branch] + upstream[grad] @ weights[weight].T
                if not close(grad_input, candidate, tolerance):
                    continue
                if weight != branch:
                    return Clause("borrowed-weight", (BRANCHES[branch], BRANCHES[weight]))
                return Clause("borrowed-gradient", (BRANCHES[branch], BRANCHES[grad]))
    for first, second in ((0, 1), (0, 2), (1, 2)):
        swapped = (total - paths[first] - paths[second]
                   + upstream[first] @ weights[second].T + upstream[second] @ weights[first].T)
        if close(grad_input, swapped, tolerance):
            return Clause("swapped-weights", (BRANCHES[first], BRANCHES[second]))
    summed = upstream[0] + upstream[1] + upstream[2]
    for weight in range(3):  # [B,T,h] @ [h,d]: every path back through one branch's W
        if close(grad_input, summed @ weights[weight].T, tolerance):
            return Clause("through-weight", (BRANCHES[weight],))
    return None


def input_gradient(grad_input: Array, weights: tuple[Array, ...], upstream: tuple[Array, ...],
                   tolerance: float) -> Clause:
    """What a wrong ``grad_input`` computed (see :func:`_path_counts`, :func:`_borrowed`);
    ``not-three-paths`` when nothing fits."""
    # [B,T,h] @ [h,d] -> [B,T,d]: each branch's path into the shared input.
    paths = [g @ w.T for g, w in zip(upstream, weights, strict=True)]
    counted = _path_counts(grad_input, paths, tolerance)
    if counted is not None:
        return counted
    borrowed = _borrowed(grad_input, weights, upstream, paths, tolerance)
    return borrowed if borrowed is not None else Clause("not-three-paths")


def weight_gradient(index: int, grad_w: Array, x: Array, upstream: tuple[Array, ...],
                    tolerance: float) -> Clause:
    """What a wrong weight gradient of branch ``index`` computed: ``other-branch-gradient``
    (its branch, the other), ``summed-paths`` or ``not-branch-local`` (its branch)."""
    branch = BRANCHES[index]
    d_model = x.shape[-1]
    rows = x.reshape(-1, d_model)
    # Not reshape(rows, -1): with no rows (an empty batch) -1 has no single meaning.
    flat = [g.reshape(rows.shape[0], g.shape[-1]) for g in upstream]
    for other in range(3):
        # [d,BT] @ [BT,h] -> [d,h]
        if other != index and close(grad_w, rows.T @ flat[other], tolerance):
            return Clause("other-branch-gradient", (branch, BRANCHES[other]))
    if close(grad_w, rows.T @ (flat[0] + flat[1] + flat[2]), tolerance):
        return Clause("summed-paths", (branch,))
    return Clause("not-branch-local", (branch,))


def output(index: int, actual: Array, x: Array, weights: tuple[Array, ...],
           tolerance: float) -> Clause | None:
    """``computed-with`` (the output's branch, the branch whose weight it used) when output
    ``index`` equals ``X`` times another branch's weight, else ``None``."""
    for other in range(3):
        if other != index and close(actual, x @ weights[other], tolerance):
            return Clause("computed-with", (BRANCHES[index], BRANCHES[other]))
    return None


def named_slips(got: Bundle, bugs: tuple[str, ...], compute: Callable[[str], Bundle],
                tolerance: float) -> tuple[str, ...]:
    """Every one of ``bugs`` whose results ``got`` equals (and the right ones do not), in
    order: more than one when the fixture cannot tell them apart (``by-d_k`` and
    ``by-root-d_model`` where ``d_model = d_k²``); empty when none fits."""
    right = compute("")
    found = []
    for bug in bugs:
        candidate = compute(bug)
        if all(close(g, c, tolerance) for g, c in zip(got, candidate, strict=True)) and not all(
                close(r, c, tolerance) for r, c in zip(right, candidate, strict=True)):
            found.append(bug)
    return tuple(found)


def agreed(found: list[tuple[str, ...]]) -> tuple[str, ...]:
    """The slips every one of ``found`` names, in the first's order (each entry: the
    slips one wrong result matches, empty when it matches none). A slip is named only
    when it fits every fixture the result is wrong on, not where numbers merely happen
    to match it: a softmax that forgets ``keepdims`` is the softmax over the query axis
    on symmetric scores alone."""
    if not found:
        return ()
    return tuple(slip for slip in found[0] if all(slip in others for others in found[1:]))


def kept(clause: Clause, agree: tuple[str, ...]) -> Clause:
    """``clause`` (``slip-differs``: the slips, the mismatch) naming only the slips of
    ``agree``, or its mismatch alone when none is left; any other clause as it is."""
    if clause.code != "slip-differs":
        return clause
    slips, mismatch = clause.facts
    left = tuple(slip for slip in slips if slip in agree)
    return Clause("slip-differs", (left, mismatch)) if left else mismatch


def mask_positions(weights: Array, expected: Array, causal: bool,
                   tolerance: float) -> tuple[Clause, ...]:
    """What a head's mask did, position by position, on ``[B,T,T]`` weights (same shape as
    the engine's): keys it gives exactly 0 that the engine lets the query see (earlier
    positions: ``hides-earlier``, the diagonal: ``hides-diagonal``, later ones with
    causal=false: ``hides-later``), later keys that keep weight with causal=true
    (``leaks-future``, with the offset ``m`` where the zeros are a mask hiding only the
    keys ``m`` or more ahead: :func:`_band`), and, when exactly the later keys get 0, a
    row that no longer sums to 1 (``masked-after-softmax``). Each with its first coordinate
    ``[b,i,j]``, the query ``i`` and the key ``j``; empty when every position is right."""
    tokens = weights.shape[-1]
    query, key = np.indices((tokens, tokens))
    zero, seen = weights == 0, expected != 0
    found = []
    for code, where in (("hides-earlier", zero & seen & (key < query)),
                        ("hides-diagonal", zero & seen & (key == query)),
                        ("hides-later", zero & seen & (key > query) & (not causal)),
                        ("leaks-future", ~zero & (key > query) & causal)):
        if where.any():
            flat = int(np.argmax(where.reshape(-1)))
            b, i, j = (int(v) for v in np.unravel_index(flat, where.shape))
            found.append(Clause(code, (coordinate(where.shape, flat), i, j,
                                       float(weights[b, i, j]),
                                       *_band(weights) * (code == "leaks-future"))))
    if not found and causal and weights.size:
        sums = weights.sum(axis=-1)
        off = mismatches(sums, np.ones_like(sums), tolerance * 16).reshape(-1)
        if off.any():
            flat = int(np.argmax(off))
            found.append(Clause("masked-after-softmax", (coordinate(sums.shape, flat),
                                                  float(sums.reshape(-1)[flat]))))
    return tuple(found)


def _band(weights: Array) -> tuple[int, ...]:
    """``(m,)`` where the weights' zeros are a causal mask hiding only the keys ``m`` or
    more ahead and at least one of them (:func:`~qkvcli.check.relations.leaked_band`),
    else ``()``."""
    from qkvcli.check.relations import leaked_band

    offset = leaked_band(weights)
    return (offset,) if offset is not None and offset < weights.shape[-1] else ()


# --- why a result is wrong, for each kind: the slips its diagnosis tries ------------------
# Each takes the run, the implementation's results and the engine's, the position and
# the finding of the first mismatch, and the tolerance; the values families have already
# said it when the results are right but for their precision.

Explain = Callable[[Run, Bundle, Bundle, int, Clause, float], Clause]


def related(name: str, actual: Array, wanted: Array, parts: tuple[tuple[str, Array], ...],
            run: Run, otherwise: Clause | None, tolerance: float) -> Clause | None:
    """``relations`` (the relations that explain a wrong tensor of the projections,
    :mod:`~qkvcli.check.relations`, and ``otherwise``: what is said where the fixtures do
    not agree on them), or ``None`` when none does."""
    from qkvcli.check.relate import axes_of
    from qkvcli.check.relations import constants, every, relations

    batch, tokens, d_model, d_head = run.case.shape
    arguments = (name, actual, wanted, constants(d_k=d_head, d_model=d_model, B=batch,
                                                 T=tokens),
                 axes_of(name, wanted.ndim), tolerance, (parts,) if parts else ())
    found = relations(*arguments)
    return Clause("relations", (found, otherwise, every(*arguments))) if found else None


def explain_outputs(run: Run, got: Bundle, expected: Bundle, index: int, mismatch: Clause,
                    tolerance: float) -> Clause:
    """``forward-differs``: the projections' first wrong output, and the branch whose
    weight it was computed with when that fits (:func:`output`), else the relations that
    explain it (:func:`related`)."""
    case = run.case
    why = output(index, got[index], case.input, case.weights, tolerance)
    if why is None:
        why = related(BRANCHES[index], got[index], expected[index], (), run, None, tolerance)
    return Clause("forward-differs", (mismatch, why))


def explain_gradients(run: Run, got: Bundle, expected: Bundle, index: int, mismatch: Clause,
                      tolerance: float) -> Clause:
    """``reverse-differs``: what each wrong gradient of the projections computed (its wrong
    shape, :func:`input_gradient`, :func:`weight_gradient`; precision faults once per
    cause, after the others), then the first mismatch."""
    case, whys, faults = run.case, [], []
    for position, (name, actual, wanted) in enumerate(zip(GRADIENTS, got, expected,
                                                          strict=True)):
        if close(actual, wanted, tolerance):
            continue
        if actual.shape != wanted.shape:
            shaped = Clause("wrong-shape", (name,))
            whys.append(related(name, actual, wanted, (), run, shaped, tolerance) or shaped)
        elif (low := precision(actual, wanted)) is not None:
            faults.append((name, low))
        elif position == 0:
            why = input_gradient(actual, case.weights, run.upstream, tolerance)
            whys.append((related(name, actual, wanted, (), run, why, tolerance) or why)
                        if why.code == "not-three-paths" else why)
        else:
            why = weight_gradient(position - 1, actual, case.input, run.upstream, tolerance)
            x, upstream = case.input, run.upstream[position - 1]
            # [d,T] @ [T,h] -> [d,h]: item b's part of X^T dY
            items = tuple((f"item:{b}", x[b].T @ upstream[b]) for b in range(x.shape[0]))
            whys.append((related(name, actual, wanted, items, run, why, tolerance) or why)
                        if why.code == "not-branch-local" else why)
    return Clause("reverse-differs", ((*whys, *precision_clauses(faults, tolerance)), mismatch))


def slip_clause(got: Bundle, bugs: tuple[str, ...], compute: Callable[[str], Bundle],
                mismatch: Clause, tolerance: float) -> Clause:
    """``slip-differs`` (the slips, the mismatch) for the known slips ``got`` computed,
    else the mismatch alone."""
    found = named_slips(got, bugs, compute, tolerance)
    return Clause("slip-differs", (found, mismatch)) if found else mismatch
