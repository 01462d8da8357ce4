"""The gradient check as a rich table: one row per checked coordinate, the worst one marked.

Pure: :func:`render_gradcheck_rich` takes a :class:`~qkvcli.gradcheck.records.GradcheckResult`
and display options and returns a :class:`rich.console.Group`.
"""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from qkvcli.gradcheck.records import CoordinateCheck, GradcheckResult
from qkvcli.render.document import gradcheck_facts
from qkvcli.render.facts import Facts
from qkvcli.render.gradcheck import within
from qkvcli.render.numbers import fmt_error, fmt_shape
from qkvcli.render.rich.boxes import CARD, INPUT_STYLE, ROLE_STYLES, ROLES
from qkvcli.render.rich.drawn import cell_of, listed
from qkvcli.render.rich.layout import lines, status, verdict_line
from qkvcli.render.rich.options import RichOptions
from qkvcli.render.rich.tables import Column, pick, table

TENSOR_STYLES = {"input": INPUT_STYLE, **{f"{role}_weight": ROLE_STYLES[role]
                                            for role in ROLES}}
MAX_FAILURES_SHOWN = 20
"""Without ``--full``, failed coordinates beyond this many per tensor are elided too."""


def _table(found: Facts, worst: CoordinateCheck | None,
           options: RichOptions) -> tuple[Table, list[Text]]:
    """The per-coordinate table of a gradient check's facts, and the lines to print under
    it (elision, notes)."""
    symbols = options.symbols
    rows: list[list[str | Text] | None] = []
    styles: dict[int, str] = {}
    below: list[Text] = []
    hidden = 0

    def is_worst(check: Facts) -> bool:
        return worst is not None and (check["tensor"], check.get("flat_index"),
                                      check.get("direction")) == (
            worst.tensor, None if worst.direction is not None else worst.flat_index,
            worst.direction)

    for position, tensor in enumerate(found["tensors"].value):
        rows += [None] if position else []
        style, checks = TENSOR_STYLES.get(tensor["tensor"], ""), tensor["checks"].value
        # a head and a tail of max_checks, and every failure (up to MAX_FAILURES_SHOWN) and
        # the worst row between them
        failures = [i for i, check in enumerate(checks) if not check["passed"].value]
        keep = [*failures[:MAX_FAILURES_SHOWN], *(i for i, c in enumerate(checks) if is_worst(c))]
        picked = pick(len(checks), options.max_checks + 1, options.full, keep)
        for previous, row, following in zip([-1, *picked[:-1]], picked, [*picked[1:], None],
                                            strict=True):
            if row is None:
                # Never hide rows silently: say how many here, and how to see them below.
                assert previous is not None and following is not None
                gap = following - previous - 1
                hidden += gap
                styles[len(rows)] = "dim"
                rows.append([symbols.ellipsis, f"{gap} more", *[symbols.ellipsis] * 4])
                continue
            check = checks[row]
            name = Text(check["tensor"], style=style)
            where = (f"u{check['direction']}" if "direction" in check
                     else cell_of(check["coordinate"], options))
            if is_worst(check):
                # On the row itself: a mark on a line of its own reads as one more coordinate.
                name.append(f" {symbols.mark}", style="bold")
                styles[len(rows)] = "bold"
            if "note" in check:
                below.append(Text(f"note: {check['tensor']}{where}: {check['note']}"))
            rows.append([name, where, *(cell_of(check[key], options) for key in (
                "analytic", "numerical")), fmt_error(check["scaled_error"].value),
                status(check["passed"].value)])
    if hidden:
        below.insert(0, Text(f"{symbols.ellipsis} {hidden} coordinates not shown; "
                             "--full shows every coordinate", style="dim"))
    # the two-line header keeps the table within 80 columns for the chapter's fixture
    columns = [Column("tensor", "word"), Column("coordinate", "word"), Column("analytic", "number"),
               Column("numerical", "number"), Column("scaled\nerror", "number"),
               Column("pass", "word")]
    return table(columns, rows, styles, box=CARD), below


def render_gradcheck_rich(result: GradcheckResult, options: RichOptions | None = None) -> Group:
    """Every checked coordinate (elided beyond ``options.max_checks`` unless ``full``).

    Takes the result and display options; gives the settings, the table with the worst
    coordinate marked, a per-tensor summary and a verdict line.
    """
    options = options or RichOptions()
    found, worst = gradcheck_facts(result), result.worst
    table, below = _table(found, worst, options)
    worst_line = None
    if worst is not None:
        where = fmt_shape(worst.coordinate) if worst.direction is None else f"@u{worst.direction}"
        worst_line = Text(f"{options.symbols.worst}: {worst.tensor}{where} scaled error "
                          f"{fmt_error(worst.scaled_error)}", style="bold")
    return lines(
        Text("Gradient check: analytic gradients against central differences", style="bold"),
        Text(f"step h = {result.step!r}   tolerance {options.symbols.tau} = "
             f"{result.tolerance!r}   scaled error = |a - n| / max(1, |a|, |n|)", style="dim"),
        table,
        *below,
        listed(found["tensors"].value, lambda t: Text(t["tensor"], style=TENSOR_STYLES.get(
            t["tensor"], "")), lambda t: f"shape {fmt_shape(t['shape'].value)}, "
            f"{sum(c['passed'].value for c in t['checks'].value)} of {t['checked']} checked "
            "coordinates within tolerance"),
        worst_line,
        verdict_line(result.passed, within(result), result.count),
    )
