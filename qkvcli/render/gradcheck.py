"""``qkv gradcheck``: the check's facts, as a plain-text table (one line per coordinate) and
as JSON."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from qkvcli.gradcheck.records import GradcheckResult
from qkvcli.render.document import dumps, gradcheck_facts, head
from qkvcli.render.facts import columns, json_of
from qkvcli.render.numbers import fmt_error, fmt_exact, fmt_float, fmt_shape
from qkvcli.render.views import Asked
from qkvcli.render.wording import verdict

HEADER = ("tensor", "coordinate", "analytic", "numerical", "scaled_error", "pass")


def within(result: GradcheckResult) -> int:
    """How many checked coordinates (or directions) are within the tolerance."""
    return sum(1 for tensor in result.tensors for check in tensor.checks if check.passed)


def _where(check: dict[str, Any]) -> str:
    """A coordinate ``[0,1]``, or a direction ``u3``."""
    return f"u{check['direction']}" if "direction" in check else fmt_shape(check["coordinate"].value)


def _row(check: dict[str, Any]) -> tuple[str, ...]:
    return (check["tensor"], _where(check), fmt_float(check["analytic"].value, 9),
            fmt_float(check["numerical"].value, 9), fmt_error(check["scaled_error"].value),
            ("PASS" if check["passed"].value else "FAIL")
            + (f" ({check['note']})" if "note" in check else ""))


def render_gradcheck_text(result: GradcheckResult) -> str:
    """Aligned columns: tensor, coordinate, analytic, numerical, scaled error, PASS/FAIL;
    then the worst coordinate, the mode, the counts and settings, and the verdict line."""
    found = gradcheck_facts(result)
    tensors = found["tensors"].value
    lines = [*columns([HEADER, *(_row(c) for t in tensors for c in t["checks"].value)], {2, 3, 4}),
             ""]
    if found["worst"] is not None:
        worst = found["worst"].value
        lines.append(f"worst={worst['tensor']}{'@' if 'direction' in worst else ''}"
                     f"{_where(worst)} scaled_error:{fmt_error(worst['scaled_error'].value)}")
    counts = " ".join(f"{t['tensor']}:{t['checked']}" for t in tensors)
    lines += [f"mode={found['mode']} ({result.summary})",
              f"gradcheck=checks:{found['count']} {counts} step:{fmt_exact(found['step'])} "
              f"tolerance:{fmt_exact(found['tolerance'])}",
              verdict(result.passed, within(result), result.count)]
    return "\n".join(lines) + "\n"


def gradcheck_document(result: GradcheckResult, **extra: Any) -> dict[str, Any]:
    """``qkv gradcheck --format json``: the head (``report``: ``gradcheck``), the check
    (``gradcheck_json``'s keys) and ``extra`` keys (the CLI adds ``dtype``)."""
    return head("gradcheck", **json_of(gradcheck_facts(result)), **extra)


def pieces(result: GradcheckResult, fmt: str, asked: Asked) -> Iterator[str]:
    """The table (``text``, naming a ``dtype`` other than float64) or the document
    (``json``, with it)."""
    if fmt == "json":
        return iter([dumps(gradcheck_document(result, dtype=asked.dtype))])
    text = render_gradcheck_text(result)
    if asked.dtype != "float64":
        text += f"dtype={asked.dtype} (analytic gradients; central differences in float64)\n"
    return iter([text])
