"""A stage's description applied: its formula and one element in a report's names, at an index.

:data:`~qkvcli.stages.table.STAGES` writes each stage with generic letters (``Y = X W (+ b)``,
``Y[b,t,j] = Σ_i X[b,t,i] * W[i,j] (+ b[j])``). A figure names the tensors as its chapter
does (``Q = X W_Q``) and works one element (``Q[0,1,0] = Σ_i X[0,1,i] * W_Q[i,0]``);
:func:`formula_in` and :func:`element_at` spell a description so, and :func:`fewer` cuts a
derivation's terms to what a figure has room for, the others summed exactly.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np

from qkvcli.stages.table import Stage
from qkvcli.stages.terms import Derivation, Step, exact_sum

_OPTIONAL = re.compile(r"\s*\(\+ [^()]*\)")
_BRACKETS = re.compile(r"(\[[^\]]*\])")
_OUTPUT = re.compile(r"\s*[^\s\[=]+\[([^\]]*)\]")
_OTHERS = re.compile(r"the other (\d+) together")


def named(text: str, names: Mapping[str, str], index: Mapping[str, int] | None = None,
          optional: bool = True) -> str:
    """``text`` with each tensor letter outside brackets replaced by ``names``' name for it,
    each index letter inside brackets by ``index``' value for it, and (unless
    ``optional``) every optional part ``(+ …)`` left out."""
    if not optional:
        text = _OPTIONAL.sub("", text)
    index = index or {}
    letters = sorted(names, key=len, reverse=True)
    word = re.compile(r"(?<!\w)(" + "|".join(map(re.escape, letters)) + r")(?!\w)") if letters else None
    pieces = []
    for piece in _BRACKETS.split(text):
        if piece.startswith("["):
            piece = "[" + ",".join(str(index.get(a.strip(), a.strip()))
                                   for a in piece[1:-1].split(",")) + "]"
        elif word is not None:
            piece = word.sub(lambda m: names[m.group(1)], piece)
        pieces.append(piece)
    return "".join(pieces)


def formula_in(stage: Stage, names: Mapping[str, str], optional: bool = True) -> str:
    """The stage's whole-tensor formula in a report's names: ``Q = X W_Q``."""
    return named(stage.formula, names, optional=optional)


def element_at(stage: Stage, index: Sequence[int], names: Mapping[str, str],
               optional: bool = True) -> str:
    """The stage's element formula at one output coordinate ``index`` (in the order of the
    output's index letters, as the element names them): ``Q[0,1,0] = Σ_i X[0,1,i] * W_Q[i,0]``.

    Raises ValueError when ``index`` does not give one value per index letter.
    """
    found = _OUTPUT.match(stage.element)
    letters = [a.strip() for a in found.group(1).split(",")] if found else []
    if len(letters) != len(index):
        raise ValueError(f"{stage.name}: {len(letters)} index letters, got {len(index)} values")
    return named(stage.element, names, dict(zip(letters, (int(i) for i in index), strict=True)),
                 optional)


def fewer(derivation: Derivation, limit: int) -> Derivation:
    """``derivation`` with at most ``limit`` term rows, the largest by magnitude in their
    own order; the others (and any row that already summed others) become one row
    ``the other N together`` holding their exact sum, so the shown rows still add up."""
    terms = [row for row in derivation.rows if row.part == "term"]
    if len(terms) <= limit:
        return derivation
    sizes = np.abs(np.asarray([float(row.value) for row in terms], dtype=np.float64))
    kept = {int(i) for i in np.argsort(-sizes, kind="stable")[:limit]}
    dropped = [row for i, row in enumerate(terms) if i not in kept]
    summed = [row for row in derivation.rows if row.part == "rest"]
    count = len(dropped) + sum(int(m.group(1)) for row in summed
                               if (m := _OTHERS.fullmatch(row.label)))
    rest = Step(f"the other {count} together",
                exact_sum(float(row.value) for row in (*dropped, *summed)), "rest")
    others = tuple(row for row in derivation.rows if row.part not in ("term", "rest"))
    shown = tuple(row for i, row in enumerate(terms) if i in kept)
    return derivation._replace(rows=(*shown, rest, *others))
