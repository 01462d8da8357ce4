"""The gradient check as a rich table: one row per checked coordinate, the worst one marked.

Pure: :func:`render_gradcheck_rich` draws :func:`~qkvcli.render.document.gradcheck_facts`
(the text's and the JSON's facts) and returns a :class:`rich.console.Group`.
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
# the two-line header keeps the table within 80 columns for the chapter's fixture
COLUMNS = (Column("tensor", "word"), Column("coordinate", "word"), Column("analytic", "number"),
           Column("numerical", "number"), Column("scaled\nerror", "number"), Column("pass", "word"))


def _table(found: Facts, worst: CoordinateCheck | None,
           options: RichOptions) -> tuple[Table, list[Text]]:
    """The per-coordinate table of a gradient check's facts (a head and a tail of
    ``max_checks`` per tensor, and every failure up to :data:`MAX_FAILURES_SHOWN` and the
    worst row between them), and the lines under it (what is elided, the notes)."""
    symbols = options.symbols
    rows: list[list[str | Text] | None] = []
    styles: dict[int, str] = {}
    below: list[Text] = []
    hidden = 0
    marked = None if worst is None else (worst.tensor, None if worst.direction is not None
                                         else worst.flat_index, worst.direction)
    for tensor in found["tensors"].value:
        style, checks = TENSOR_STYLES.get(tensor["tensor"], ""), tensor["checks"].value
        rows += [None] if rows and checks else []
        is_worst = [(c["tensor"], c.get("flat_index"), c.get("direction")) == marked
                    for c in checks]
        keep = [*[i for i, c in enumerate(checks) if not c["passed"].value][:MAX_FAILURES_SHOWN],
                *(i for i, worst_here in enumerate(is_worst) if worst_here)]
        picked = pick(len(checks), options.max_checks + 1, options.full, keep)
        for index, row in enumerate(picked):
            if row is None:
                # Never hide rows silently: say how many here, and how to see them below.
                before, after = picked[index - 1], picked[index + 1]
                assert before is not None and after is not None
                hidden += after - before - 1
                styles[len(rows)] = "dim"
                rows.append([symbols.ellipsis, f"{after - before - 1} more",
                             *[symbols.ellipsis] * 4])
                continue
            check = checks[row]
            name = Text(check["tensor"], style=style)
            where = (f"u{check['direction']}" if "direction" in check
                     else cell_of(check["coordinate"], options))
            if is_worst[row]:
                # On the row itself: a mark on a line of its own reads as one more coordinate.
                name.append(f" {symbols.mark}", style="bold")
                styles[len(rows)] = "bold"
            if "note" in check:
                below.append(Text(f"note: {check['tensor']}{where}: {check['note']}"))
            rows.append([name, where, cell_of(check["analytic"], options),
                         cell_of(check["numerical"], options),
                         fmt_error(check["scaled_error"].value), status(check["passed"].value)])
    if hidden:
        below.insert(0, Text(f"{symbols.ellipsis} {hidden} coordinates not shown; "
                             "--full shows every coordinate", style="dim"))
    return table(COLUMNS, rows, styles, box=CARD), below


def render_gradcheck_rich(result: GradcheckResult, options: RichOptions | None = None) -> Group:
    """The settings, every checked coordinate (elided beyond ``options.max_checks`` unless
    ``full``) with the worst marked, a per-tensor summary and the verdict line."""
    options = options or RichOptions()
    found, worst = gradcheck_facts(result), result.worst
    rows, below = _table(found, worst, options)
    where = "" if worst is None else (fmt_shape(worst.coordinate) if worst.direction is None
                                      else f"@u{worst.direction}")
    return lines(
        Text("Gradient check: analytic gradients against central differences", style="bold"),
        Text(f"step h = {result.step!r}   tolerance {options.symbols.tau} = "
             f"{result.tolerance!r}   scaled error = |a - n| / max(1, |a|, |n|)", style="dim"),
        rows,
        *below,
        listed(found["tensors"].value, lambda t: Text(t["tensor"], style=TENSOR_STYLES.get(
            t["tensor"], "")), lambda t: f"shape {fmt_shape(t['shape'].value)}, "
            f"{sum(c['passed'].value for c in t['checks'].value)} of {t['checked']} checked "
            "coordinates within tolerance"),
        None if worst is None else Text(f"{options.symbols.worst}: {worst.tensor}{where} "
                                        f"scaled error {fmt_error(worst.scaled_error)}",
                                        style="bold"),
        verdict_line(result.passed, within(result), result.count),
    )
