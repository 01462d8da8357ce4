"""The gradient check as a rich table: one row per checked coordinate, the worst one marked.

Pure: :func:`render_gradcheck_rich` takes a :class:`~qkvcli.gradcheck.GradcheckResult`
and display options and returns a :class:`rich.console.Group`.
"""

from __future__ import annotations

import math

from rich.console import Group
from rich.table import Table
from rich.text import Text

from qkvcli.gradcheck import CoordinateCheck, GradcheckResult, TensorCheck
from qkvcli.render.boxes import CARD
from qkvcli.render.numbers import fmt_float, fmt_shape
from qkvcli.render.rich_common import (
    FULL_HINT,
    INPUT_STYLE,
    ROLE_STYLES,
    ROLES,
    RichOptions,
    cell,
    grid,
    lines,
    status,
)

TENSOR_STYLES = {"input": INPUT_STYLE, **{f"{role}_weight": ROLE_STYLES[role]
                                            for role in ROLES}}
MAX_FAILURES_SHOWN = 20
"""Without ``--full``, failed coordinates beyond this many per tensor are elided too."""


def _sci(value: float) -> str:
    return f"{value:.3e}" if math.isfinite(value) else fmt_float(value)


def _shown_rows(tensor: TensorCheck, worst: CoordinateCheck | None,
                options: RichOptions) -> list[int]:
    """Row numbers to show: all, or a head, a tail, the failures and the worst row."""
    count = len(tensor.checks)
    if options.full or count <= options.max_checks:
        return list(range(count))
    head = options.max_checks // 2
    tail = options.max_checks - head
    keep = set(range(head)) | set(range(count - tail, count))
    failures = [i for i, check in enumerate(tensor.checks) if not check.passed]
    keep.update(failures[:MAX_FAILURES_SHOWN])
    keep.update(i for i, check in enumerate(tensor.checks) if check is worst)
    return sorted(keep)


def _table(result: GradcheckResult, options: RichOptions) -> Table:
    worst = result.worst
    symbols = options.symbols
    table = Table(box=CARD, header_style="bold", title_justify="left")
    table.add_column(cell("tensor"), no_wrap=True)
    table.add_column(cell("coordinate"), no_wrap=True)
    table.add_column(cell("analytic"), justify="right", overflow="fold")
    table.add_column(cell("numerical"), justify="right", overflow="fold")
    table.add_column(cell("scaled error"), justify="right", no_wrap=True)
    table.add_column(cell("pass"), no_wrap=True)
    table.add_column(cell("note"), overflow="fold")
    for position, tensor in enumerate(result.tensors):
        if position:
            table.add_section()
        style = TENSOR_STYLES.get(tensor.tensor)
        previous = -1
        for row in _shown_rows(tensor, worst, options):
            if row != previous + 1:
                # Never hide rows silently: say how many, and how to see them.
                table.add_row(cell(symbols.ellipsis), cell(f"{row - previous - 1} more"),
                              *(cell(symbols.ellipsis) for _ in range(4)), cell(FULL_HINT),
                              style="dim")
            previous = row
            check = tensor.checks[row]
            is_worst = check is worst
            note = " ".join(part for part in (check.note, symbols.worst if is_worst else "")
                            if part)
            table.add_row(
                Text(check.tensor, style=style or ""),
                cell(fmt_shape(check.coordinate)),
                cell(fmt_float(check.analytic, options.precision)),
                cell(fmt_float(check.numerical, options.precision)),
                cell(_sci(check.scaled_error)),
                status(check.passed),
                cell(note),
                style="bold" if is_worst else None,
            )
    return table


def _summary(result: GradcheckResult) -> Table:
    rows = []
    for tensor in result.tensors:
        within = sum(1 for check in tensor.checks if check.passed)
        rows.append((
            Text(tensor.tensor, style=TENSOR_STYLES.get(tensor.tensor, "")),
            f"shape {fmt_shape(tensor.shape)}",
            f"{within} of {len(tensor.checks)} checked coordinates within tolerance",
            status(tensor.passed),
        ))
    return grid(*rows, nowrap=(0, 3))


def gradcheck_verdict(result: GradcheckResult) -> Text:
    """``verdict: PASS (24 of 24 coordinates within tolerance)``, or FAIL."""
    within = sum(1 for tensor in result.tensors for check in tensor.checks if check.passed)
    line = Text("verdict: ", style="bold")
    line.append_text(status(result.passed))
    line.append(f" ({within} of {result.count} coordinates within tolerance)")
    return line


def render_gradcheck_rich(result: GradcheckResult, options: RichOptions | None = None) -> Group:
    """Every checked coordinate (elided beyond ``options.max_checks`` unless ``full``).

    Takes the result and display options; gives the settings, the table with the worst
    coordinate marked, a per-tensor summary and a verdict line.
    """
    options = options or RichOptions()
    worst = result.worst
    worst_line = None
    if worst is not None:
        worst_line = Text(
            f"worst: {worst.tensor}{fmt_shape(worst.coordinate)} scaled error "
            f"{_sci(worst.scaled_error)}", style="bold",
        )
    return lines(
        Text("Gradient check: analytic gradients against central differences", style="bold"),
        Text(f"step h = {result.step!r}   tolerance {options.symbols.tau} = "
             f"{result.tolerance!r}   scaled error = |a - n| / max(1, |a|, |n|)", style="dim"),
        _table(result, options),
        _summary(result),
        worst_line,
        gradcheck_verdict(result),
    )
