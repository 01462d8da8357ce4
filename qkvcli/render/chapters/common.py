"""What chapters 27 and 28's renderers share: the course's number spellings, JSON pieces, the figure.

The course prints a zero as ``0.000000`` whatever its sign, so :func:`vec` folds ``-0.0``
into ``0.0`` before :func:`~qkvcli.render.numbers.fmt_vector` spells it (``-inf``
stays). :func:`head_figure` is the rich figure of a head chapter, in chapter 26's visual
language: query solid, key dashed, value double (:mod:`qkvcli.render.rich.boxes`);
probabilities as a heat table; the checks as a card; rich imported only when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from qkvcli.core.results import FamilyCheck
from qkvcli.render.numbers import fmt_shape, fmt_vector

if TYPE_CHECKING:
    from rich.console import RenderableType

    from qkvcli.chapters.head_pass import GradientCheck
    from qkvcli.render.rich.options import RichOptions


def vec(values: Any) -> str:
    """``[v,v,...]`` at six decimals, every value flat, a zero unsigned."""
    return fmt_vector(np.asarray(values, dtype=np.float64) + 0.0)


def tensor(values: Any, sep: str = " ") -> str:
    """``shape:[1,2,2] values:[...]`` (``sep="|"``: the trace's ``shape=[..]|values=[..]``)."""
    array = np.asarray(values, dtype=np.float64)
    if sep == " ":
        return f"shape:{fmt_shape(array.shape)} values:{vec(array)}"
    return f"shape={fmt_shape(array.shape)}{sep}values={vec(array)}"


def mixture_terms(terms: Any) -> str:
    """One query's terms ``A[i,j] V[j]`` (``[T,d_v]``) as ``[[..],[..]]``."""
    return "[" + ",".join(vec(row) for row in np.asarray(terms)) + "]"


def case_facts(fields: tuple[tuple[str, object], ...], names: dict[str, str] | None = None) -> str:
    """A rejected case's facts as the trace writes them: ``|operand=query|rank=2``."""
    names = names or {}
    return "".join(f"|{names.get(key, key)}={value}" for key, value in fields)


def checks_json(checks: tuple[FamilyCheck, ...]) -> list[dict[str, Any]]:
    """Each family's name and verdict."""
    return [{"name": check.name, "passed": check.passed, "outcome": check.outcome}
            for check in checks]


def gradcheck_summary_json(check: GradientCheck) -> dict[str, Any]:
    """The gradient check's settings, counts, verdict and every coordinate."""
    from qkvcli.render.report import coordinate_json

    return {
        "passed": check.passed,
        "step": check.step,
        "tolerance": check.tolerance,
        "tensors": [{"tensor": t.tensor, "shape": list(t.shape), "checked": len(t.checks),
                     "passed": t.passed, "checks": [coordinate_json(c) for c in t.checks]}
                    for t in check.tensors],
    }


CHECK_TITLES = {
    "row_sums": "rows sum to 1", "scale_probe": "scale softens the focus",
    "single_token": "one token: probability 1, no Q/K gradient",
    "batch_isolation": "batch items isolated", "empty_batch": "empty batch, narrow value",
    "gradcheck": "gradient check", "rejected_inputs": "bad inputs rejected",
    "replay": "replays bit for bit", "prefix_invariance": "a later token leaves earlier outputs",
    "suffix_gradient": "no gradient to unseen positions",
    "masked_rows": "future keys weigh exactly 0", "tape_finite": "reverse pass finite",
}
"""How the figure's checks card names each family."""


def head_figure(evidence: Any, width: int, title: str, masked: bool,
                options: RichOptions | None = None) -> RenderableType:
    """A head chapter's figure for its first batch item: Q, K, V in their borders, the
    probability rows (masked keys shown blocked), the output, and the checks card."""
    from rich.console import Group
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    from qkvcli.render.numbers import fmt_float
    from qkvcli.render.rich import boxes
    from qkvcli.render.rich.layout import status, titled
    from qkvcli.render.rich.options import RichOptions
    from qkvcli.render.rich.tables import matrix_table

    options = options or RichOptions()
    p = evidence.primary
    batch = p.query.shape[0]
    parts: list[Any] = [titled(f"{title} ({'causal mask' if masked else 'no mask'}, "
                               f"scale {fmt_float(p.scale, options.precision)})", evidence.passed)]
    if batch:
        row = Table.grid(padding=(0, 2))
        cells = []
        for name, box, data in (("query", boxes.QUERY, p.query), ("key", boxes.KEY, p.key),
                                ("value", boxes.VALUE, p.value)):
            cells.append(matrix_table(np.asarray(data[0]), name[0].upper(), "t", box, options,
                                      border_style=boxes.ROLE_STYLES[name]))
        for _ in cells:
            row.add_column()
        row.add_row(*cells)
        parts.append(row)
        probabilities = Table(box=boxes.CARD if hasattr(boxes, "CARD") else None,
                              header_style="bold", title="A = softmax(Q K^T / sqrt(d_k))")
        tokens = p.query.shape[1]
        probabilities.add_column("query", style="dim")
        shown = range(tokens) if options.full else range(min(tokens, options.max_rows))
        keys = range(tokens) if options.full else range(min(tokens, options.max_columns))
        for j in keys:
            probabilities.add_column(f"k{j}", justify="right")
        probabilities.add_column("output", justify="left")
        for i in shown:
            row_cells = []
            for j in keys:
                blocked = masked and bool(np.isneginf(p.mask[i, j]))
                row_cells.append(Text(options.symbols.ellipsis if False else "blocked",
                                      style="dim") if blocked else Text(fmt_float(
                                          float(p.probabilities[0, i, j]), options.precision)))
            probabilities.add_row(f"q{i}", *row_cells, vec(p.output[0, i]))
        parts.append(probabilities)
    card = Table.grid(padding=(0, 2))
    card.add_column()
    card.add_column()
    for check in evidence.checks:
        card.add_row(status(check.passed), CHECK_TITLES.get(check.name, check.name))
    parts.append(Panel(card, title="checks", box=boxes.CARD if hasattr(boxes, "CARD") else
                       Panel(card).box, expand=False))
    return Group(*parts)
