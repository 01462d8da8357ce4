"""Plain-text table of a gradient check, one line per checked coordinate."""

from __future__ import annotations

from qkvcli.gradcheck.records import GradcheckResult
from qkvcli.render.numbers import fmt_shape

HEADER = ("tensor", "coordinate", "analytic", "numerical", "scaled_error", "pass")


def _sci(value: float) -> str:
    return f"{value:.3e}" if value == value and abs(value) != float("inf") else str(value)


def render_gradcheck_text(result: GradcheckResult) -> str:
    """Aligned columns: tensor, coordinate, analytic, numerical, scaled error, PASS/FAIL."""
    rows = [HEADER]
    for tensor in result.tensors:
        for c in tensor.checks:
            rows.append((
                c.tensor,
                fmt_shape(c.coordinate) if c.direction is None else f"u{c.direction}",
                f"{c.analytic:.9f}",
                f"{c.numerical:.9f}",
                _sci(c.scaled_error),
                ("PASS" if c.passed else "FAIL") + (f" ({c.note})" if c.note else ""),
            ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    right = {2, 3, 4}
    lines = []
    for row in rows:
        cells = [cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
                 for i, cell in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
    counts = " ".join(f"{t.tensor}:{len(t.checks)}" for t in result.tensors)
    worst = result.worst
    lines.append("")
    if worst is not None:
        where = fmt_shape(worst.coordinate) if worst.direction is None else f"@u{worst.direction}"
        lines.append(f"worst={worst.tensor}{where} scaled_error:{_sci(worst.scaled_error)}")
    lines.append(f"mode={result.mode} ({result.summary})")
    lines.append(
        f"gradcheck={'PASS' if result.passed else 'FAIL'} checks:{result.count} {counts} "
        f"step:{result.step!r} tolerance:{result.tolerance!r}"
    )
    return "\n".join(lines) + "\n"
