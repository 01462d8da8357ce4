"""``qkv gradcheck``: the check as a plain-text table, one line per coordinate, and as JSON."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from qkvcli.gradcheck.records import GradcheckResult
from qkvcli.render.document import dumps, gradcheck_json, head
from qkvcli.render.numbers import fmt_error, fmt_float, fmt_shape
from qkvcli.render.views import Asked
from qkvcli.render.wording import verdict

HEADER = ("tensor", "coordinate", "analytic", "numerical", "scaled_error", "pass")


def within(result: GradcheckResult) -> int:
    """How many checked coordinates (or directions) are within the tolerance."""
    return sum(1 for tensor in result.tensors for check in tensor.checks if check.passed)


def render_gradcheck_text(result: GradcheckResult) -> str:
    """Aligned columns: tensor, coordinate, analytic, numerical, scaled error, PASS/FAIL;
    then the worst coordinate, the mode, the counts and settings, and the verdict line."""
    rows = [HEADER]
    for tensor in result.tensors:
        for c in tensor.checks:
            rows.append((
                c.tensor,
                fmt_shape(c.coordinate) if c.direction is None else f"u{c.direction}",
                fmt_float(c.analytic, 9),
                fmt_float(c.numerical, 9),
                fmt_error(c.scaled_error),
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
        lines.append(f"worst={worst.tensor}{where} scaled_error:{fmt_error(worst.scaled_error)}")
    lines.append(f"mode={result.mode} ({result.summary})")
    lines.append(
        f"gradcheck=checks:{result.count} {counts} "
        f"step:{result.step!r} tolerance:{result.tolerance!r}"
    )
    lines.append(verdict(result.passed, within(result), result.count))
    return "\n".join(lines) + "\n"


def gradcheck_document(result: GradcheckResult, **extra: Any) -> dict[str, Any]:
    """``qkv gradcheck --format json``: the head (``report``: ``gradcheck``), the check
    (``gradcheck_json``'s keys) and ``extra`` keys (the CLI adds ``dtype``)."""
    return head("gradcheck", **gradcheck_json(result), **extra)


def render_gradcheck_json(result: GradcheckResult, **extra: Any) -> str:
    """:func:`gradcheck_document` as deterministic JSON text with a trailing newline."""
    return dumps(gradcheck_document(result, **extra))


def pieces(result: GradcheckResult, fmt: str, asked: Asked) -> Iterator[str]:
    """The table (``text``, naming a ``dtype`` other than float64) or the document
    (``json``, with it)."""
    if fmt == "json":
        return iter([render_gradcheck_json(result, dtype=asked.dtype)])
    text = render_gradcheck_text(result)
    if asked.dtype != "float64":
        text += f"dtype={asked.dtype} (analytic gradients; central differences in float64)\n"
    return iter([text])
