"""Naming a wrong tensor by the relation that explains it: any tensor ``G`` an
implementation gave against the engine's ``E``, of any operation.

Relations are tried cheapest first, and a class names a tensor only when one of its
relations holds exactly, to the tolerance (never one that only nearly holds):

1. a constant factor ``G = c E`` (``c`` named when it is one of the sizes given:
   ``root d_k``, ``1/(B*T)``, ``H``, ``2``, ``-1`` ...);
2. two axes exchanged (``G = Eᵀ``, heads for tokens);
3. one index of an axis standing for all (every batch item is item 0's);
4. a sum of parts taken with other counts (a missing path of ``grad_input``, one batch
   item's gradient instead of the sum over the batch): ``G = Σ cᵢ Pᵢ`` where ``E = Σ Pᵢ``,
   each ``cᵢ`` a named count;
5. another tensor of the run (a stage's input: the output is the merged heads);
6. float32 rounding (every value a float32, tiny values underflowed to 0): before the
   next, which a float32 softmax of a causal row can also meet;
7. differences confined to the diagonal, or to the cells above or below it; a causal
   mask's zeros confined to the keys two or more ahead (:func:`leaked_band`: the mask
   leaks the nearer later keys, which the engine with that mask then confirms).

Each relation found is a :class:`~qkvcli.core.results.Clause` whose facts are strings
(the tensor, what relates it), so that the relations of several fixtures can be
intersected (:func:`agreed`): a relation is named only where it holds on every fixture
the tensor is wrong on. Several relations of one class on one tensor are the fixture's
"either ... or ...".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from itertools import product

import numpy as np

from qkvcli.core.arrays import Array, close, mismatches
from qkvcli.core.results import Clause

Named = tuple[tuple[str, float], ...]
"""Constants a factor or a count may be, by name: ``(("root d_k", 1.41...), ...)``."""

FEWEST = 4
"""The fewest non-zero elements a tensor needs before a fitted factor or count means
anything (a factor of one number always fits)."""
SPARE = 2
"""How many more elements than parts a tensor needs before its parts' counts are fitted:
the fit must then hold on equations it was not solved from."""
DEPENDENT = 6
"""The most parts that are not independent whose counts are each tried (``3**6`` ways)."""
FLOAT32_ERROR = 1e-4
"""The largest scaled error of a result computed in float32 (every value a float32), as
:func:`qkvcli.check.diagnose.precision` takes it."""


def constants(**sizes: float) -> Named:
    """The named constants of a run from its sizes (``d_k``, ``d_model``, ``B``, ``T``,
    ``H``; a size of 0 or less is left out): each size, its root, their inverses, ``B*T``,
    and ``2``, ``1/2``, ``-1``, ``pi/180`` and ``180/pi``."""
    found: list[tuple[str, float]] = []
    batch, tokens = sizes.get("B", 0), sizes.get("T", 0)
    if batch > 0 and tokens > 0:
        sizes = {**sizes, "B*T": batch * tokens}
    for name, size in sizes.items():
        if size <= 0:
            continue
        inverse = f"1/({name})" if "*" in name else f"1/{name}"
        found += [(name, size), (inverse, 1.0 / size)]
        if name in ("d_k", "d_model"):
            root = size ** 0.5
            found += [(f"root {name}", root), (f"1/root {name}", 1 / root)]
    found += [("2", 2.0), ("1/2", 0.5), ("-1", -1.0), ("0", 0.0), ("pi/180", math.pi / 180),
              ("180/pi", 180 / math.pi)]
    return tuple(found)


def names_of(value: float, named: Named, tolerance: float) -> tuple[str, ...]:
    """Every name in ``named`` whose constant is ``value`` (to ``tolerance``, scaled)."""
    return tuple(name for name, constant in named
                 if abs(value - constant) <= tolerance * max(1.0, abs(constant)))


def _nonzero(values: Array) -> int:
    return int(np.count_nonzero(values))


def factor(name: str, got: Array, expected: Array, named: Named,
           tolerance: float) -> tuple[Clause, ...]:
    """``factor`` (the tensor, a name of ``c``): ``got = c expected``, one clause per name
    ``c`` has; ``("factor", (name, "c"))`` for a constant that has none."""
    if got.shape != expected.shape or _nonzero(expected) < FEWEST:
        return ()
    flat_e, flat_g = expected.reshape(-1), got.reshape(-1)
    with np.errstate(all="ignore"):
        c = float(flat_g @ flat_e / (flat_e @ flat_e))
        if not math.isfinite(c) or not close(got, c * expected, tolerance):
            return ()
    # The fit is exact to rounding: name c when it is a named constant to 1e-9.
    said = names_of(c, named, max(tolerance, 1e-9))
    return tuple(Clause("factor", (name, said_name)) for said_name in said) or (
        Clause("factor", (name, "c")),)


def _axis_words(names: Sequence[str], first: int, second: int) -> str:
    return f"{names[first]}/{names[second]}"


def exchanged(name: str, got: Array, expected: Array, axes: Sequence[str],
              tolerance: float) -> tuple[Clause, ...]:
    """``exchanged`` (the tensor, ``"row/column"``): ``got`` is ``expected`` with two axes
    exchanged (a matrix transposed), for every pair of axes that fits."""
    found = []
    for first in range(expected.ndim):
        for second in range(first + 1, expected.ndim):
            swapped = np.swapaxes(expected, first, second)
            if expected.shape[first] == expected.shape[second] == 1:
                continue
            if close(got, swapped, tolerance) and not close(swapped, expected, tolerance):
                found.append(Clause("exchanged", (name, _axis_words(axes, first, second))))
    return tuple(found)


def one_for_all(name: str, got: Array, expected: Array, axes: Sequence[str],
                tolerance: float) -> tuple[Clause, ...]:
    """``one-for-all`` (the tensor, the axis, ``"first"`` or ``"last"``): every index of an
    axis holds what the engine gives at its first (or last) index."""
    if got.shape != expected.shape:
        return ()
    found = []
    for axis in range(expected.ndim):
        size = expected.shape[axis]
        if size < 2:
            continue
        for index, which in ((0, "first"), (size - 1, "last")):
            one = np.broadcast_to(np.take(expected, [index], axis=axis), expected.shape)
            if close(got, one, tolerance):
                found.append(Clause("one-for-all", (name, axes[axis], which)))
    return tuple(found)


def counted_parts(name: str, got: Array, parts: Sequence[tuple[str, Array]], named: Named,
                  tolerance: float) -> tuple[Clause, ...]:
    """``parts`` (the tensor, then ``part=count`` for each part not counted once): ``got``
    is the sum of the engine's ``parts`` (which sum to its tensor) each taken a named
    number of times, at least one of them not once. Only where the parts are independent
    and outnumbered by the elements, and every count is named (``0``, ``2``,
    ``root d_k``...): a fit with a free count would always be found."""
    if len(parts) < 2 or any(p.shape != got.shape for _, p in parts):
        return ()
    # A part that is zero on this fixture (a query's one key: no score gradient) adds
    # nothing whatever its count: the others are fitted alone, it counted once.
    parts = [(label, p) for label, p in parts if np.any(p)]
    if not parts:
        return ()
    basis = np.stack([p.reshape(-1) for _, p in parts], axis=1)
    if basis.shape[0] < len(parts) + SPARE or not np.isfinite(basis).all():
        return ()
    if np.linalg.matrix_rank(basis) < len(parts):
        return _dependent_parts(name, got, parts, basis, tolerance)
    with np.errstate(all="ignore"):
        counts, *_ = np.linalg.lstsq(basis, got.reshape(-1), rcond=None)
        if not np.isfinite(counts).all():
            return ()
    said: list[str] = []
    for (label, _), count in zip(parts, counts.tolist(), strict=True):
        names = ("1",) if abs(count - 1.0) <= 1e-9 else names_of(count, named, 1e-9)
        if not names:
            return ()
        said.append(f"{label}={names[0]}")
    rounded = [1.0 if s.endswith("=1") else dict(named)[s.split("=", 1)[1]] for s in said]
    if all(s.endswith("=1") for s in said) or not close(
            got, (basis @ np.array(rounded)).reshape(got.shape), tolerance):
        return ()
    return (Clause("parts", (name, *(s for s in said if not s.endswith("=1")))),)


def _dependent_parts(name: str, got: Array, parts: Sequence[tuple[str, Array]], basis: Array,
                     tolerance: float) -> tuple[Clause, ...]:
    """``parts`` clauses for parts that are not independent (batch items alike): the
    counts are not one fit, so every way of taking each part 0, 1 or 2 times that gives
    ``got`` is said (the fixture cannot tell them apart), none where there are more than
    :data:`DEPENDENT` parts."""
    if len(parts) > DEPENDENT:
        return ()
    found = []
    for counts in product((1, 0, 2), repeat=len(parts)):
        if all(count == 1 for count in counts) or not close(
                got, (basis @ np.array(counts, dtype=float)).reshape(got.shape), tolerance):
            continue
        found.append(Clause("parts", (name, *(f"{label}={count}" for (label, _), count
                                              in zip(parts, counts, strict=True)
                                              if count != 1))))
    return tuple(found)


def equals_other(name: str, got: Array, others: Sequence[tuple[str, Array]],
                 tolerance: float) -> tuple[Clause, ...]:
    """``equals`` (the tensor, the other's name): ``got`` is another tensor of the run (a
    stage's input or output), for each that fits."""
    return tuple(Clause("equals", (name, label)) for label, other in others
                 if close(got, other, tolerance))


def confined(name: str, got: Array, expected: Array, tolerance: float) -> tuple[Clause, ...]:
    """``confined`` (the tensor, ``diagonal``, ``above`` or ``below``): on a tensor whose
    last two axes are ``[T,T]`` (``T >= 2``), every element outside the tolerance lies on
    the diagonal, or above it (the later keys), or below it; the rest exactly right."""
    if got.shape != expected.shape or got.ndim < 2 or got.shape[-1] != got.shape[-2] or \
            got.shape[-1] < 2:
        return ()
    wrong = mismatches(got, expected, tolerance)
    if not wrong.any():
        return ()
    tokens = got.shape[-1]
    query, key = np.indices((tokens, tokens))
    for region, where in (("diagonal", query == key), ("above", key > query),
                          ("below", key < query)):
        if not (wrong & ~where).any():
            return (Clause("confined", (name, region)),)
    return ()


def leaked_band(weights: Array) -> int | None:
    """The offset ``m >= 2`` of a causal mask that leaks, from weights ``[..., T, T]``
    (``T >= 2``): the cells they hold as exactly 0 are the keys ``m`` or more positions
    ahead of their query, alike in every leading index (``m = T``: none is 0), where
    qkv's mask hides every later key; ``None`` for any other pattern of zeros."""
    if weights.ndim < 2 or weights.shape[-1] != weights.shape[-2] or weights.shape[-1] < 2:
        return None
    tokens = weights.shape[-1]
    zero = (weights == 0).reshape(-1, tokens, tokens)
    if not zero.size or not (zero == zero[:1]).all():
        return None
    return next((offset for offset in range(2, tokens + 1) if np.array_equal(
        zero[0], np.triu(np.ones((tokens, tokens), dtype=bool), k=offset))), None)


def float32_rounded(name: str, got: Array, expected: Array) -> tuple[Clause, ...]:
    """``float32`` (the tensor): every value of ``got`` is a float32 (the engine's are not) and
    within :data:`FLOAT32_ERROR` of the engine's, as a scaled error: float32 arithmetic
    (its rounding grows through exp, so the bound is not one float32 unit)."""
    if got.shape != expected.shape or not got.size:
        return ()
    with np.errstate(all="ignore"):
        if not np.all(got.astype(np.float32).astype(np.float64) == got) or np.all(
                expected.astype(np.float32).astype(np.float64) == expected):
            return ()
        scaled = np.abs(got - expected) / np.maximum(1.0, np.maximum(np.abs(got),
                                                                     np.abs(expected)))
    if not np.all(scaled <= FLOAT32_ERROR):
        return ()
    return (Clause("float32", (name,)),)


def _tries(name: str, got: Array, expected: Array, named: Named, axes: Sequence[str],
           tolerance: float, parts: Sequence[Sequence[tuple[str, Array]]],
           others: Sequence[tuple[str, Array]]) -> tuple[Callable[[], tuple[Clause, ...]], ...]:
    """Each class of relation as a search, cheapest first."""
    def split_parts() -> tuple[Clause, ...]:
        for split in parts:
            found = counted_parts(name, got, split, named, tolerance)
            if found:
                return found
        return ()

    def factor_or_parts() -> tuple[Clause, ...]:
        # all zeros is also its non-zero parts each counted 0 (a fixture where the other
        # paths are zero): said both ways, so that the fixtures agree on the parts
        found = factor(name, got, expected, named, tolerance)
        zero = Clause("factor", (name, "0")) in found
        return found + split_parts() if zero else found

    return (
        factor_or_parts,
        lambda: exchanged(name, got, expected, axes, tolerance),
        lambda: one_for_all(name, got, expected, axes, tolerance),
        split_parts,
        lambda: equals_other(name, got, others, tolerance),
        lambda: float32_rounded(name, got, expected),
        lambda: confined(name, got, expected, tolerance))


def relations(name: str, got: Array, expected: Array, named: Named, axes: Sequence[str],
              tolerance: float, parts: Sequence[Sequence[tuple[str, Array]]] = (),
              others: Sequence[tuple[str, Array]] = ()) -> tuple[Clause, ...]:
    """The relations of the first class, cheapest first, that explain ``got`` against
    ``expected`` exactly: a factor, axes exchanged, one index for all, counted ``parts``
    (each a decomposition of ``expected``: its paths, its batch items), another tensor
    of the run (``others``), float32 rounding, differences confined to a region; empty
    when none holds."""
    if not (np.isfinite(got).all() and np.isfinite(expected).all()):
        return ()  # no relation is measured on infinities
    with np.errstate(all="ignore"):
        for attempt in _tries(name, got, expected, named, axes, tolerance, parts, others):
            found = attempt()
            if found:
                return found
    return ()


def every(name: str, got: Array, expected: Array, named: Named, axes: Sequence[str],
          tolerance: float, parts: Sequence[Sequence[tuple[str, Array]]] = (),
          others: Sequence[tuple[str, Array]] = ()) -> tuple[Clause, ...]:
    """Every relation of every class that holds (:func:`relations` stops at the first
    class): what :func:`agreed` asks of a fixture whose cheapest relation is another
    (two batch items alike make one item for all a factor 1/2 too)."""
    if not (np.isfinite(got).all() and np.isfinite(expected).all()):
        return ()
    found: list[Clause] = []
    with np.errstate(all="ignore"):
        for attempt in _tries(name, got, expected, named, axes, tolerance, parts, others):
            found += attempt()
        for split in parts[1:]:  # split_parts stops at the first split that fits
            found += counted_parts(name, got, split, named, tolerance)
    return tuple(dict.fromkeys(found))


def unexplained(name: str) -> Clause:
    """The marker of a wrong tensor no relation explains (kept for :func:`agreed`)."""
    return Clause("unexplained", (name,))


def agreed(found: Iterable[tuple[Clause, ...]],
           held: Sequence[tuple[Clause, ...]] = ()) -> tuple[tuple[Clause, ...], ...]:
    """Each run's relations, keeping a tensor's relation only where it holds on every
    run that tensor is wrong on (a tensor no relation explains on one run is named on
    none): the name the fixtures agree on. ``held``: each run's every relation that
    holds (:func:`every`, beside the ones ``found`` names); a run whose own relations of
    a tensor are not agreed on names those of its ``held`` that are (a relation of a
    dearer class there, the cheaper one holding on that fixture alone)."""
    runs = [tuple(relations) for relations in found]
    helds = [tuple(h) for h in held] if held else [()] * len(runs)
    by_tensor: dict[str, list[set[Clause]]] = {}
    for relations, also in zip(runs, helds, strict=True):
        tensors: dict[str, set[Clause]] = {}
        for clause in relations:
            tensors.setdefault(clause.facts[0], set()).add(clause)
        for clause in also:
            if clause.facts[0] in tensors:
                tensors[clause.facts[0]].add(clause)
        for tensor, clauses in tensors.items():
            by_tensor.setdefault(tensor, []).append(clauses)
    common = {tensor: set.intersection(*sets) for tensor, sets in by_tensor.items()}
    kept = []
    for relations, also in zip(runs, helds, strict=True):
        mine = [clause for clause in relations
                if clause.code != "unexplained" and clause in common[clause.facts[0]]]
        said, wrong = {clause.facts[0] for clause in mine}, {c.facts[0] for c in relations}
        mine += [clause for clause in also if clause.code != "unexplained"
                 and clause.facts[0] in wrong - said and clause in common[clause.facts[0]]]
        kept.append(tuple(mine))
    return tuple(kept)
