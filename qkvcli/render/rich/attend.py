"""``qkv attend --format rich``: the head's evidence as rich tables (imported on rich paths only).

Pure: builds renderables from the evidence; the command owns the ``Console``. Nothing
here relies on colour alone: PASS/FAIL and note labels are words.
"""

from __future__ import annotations

from rich import box
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from qkvcli.attention.records import AttendEvidence
from qkvcli.render.text.attend import FORMULA
from qkvcli.render.text.numbers import fmt_shape

BAR_WIDTH = 10


def _bar(weight: float) -> str:
    """A weight in [0, 1] as a row of at most ``BAR_WIDTH`` blocks."""
    filled = round(max(0.0, min(1.0, weight)) * BAR_WIDTH)
    return "█" * filled + "·" * (BAR_WIDTH - filled)


def _weights_table(evidence: AttendEvidence, batch: int) -> Table:
    c = evidence.config
    table = Table(title=f"batch {batch}: weights A (rows: queries, columns: keys) and output O",
                  box=box.SIMPLE_HEAVY, title_justify="left")
    table.add_column("query", no_wrap=True)
    for j in range(c.tokens):
        table.add_column(f"k t{j}", justify="right", no_wrap=True)
    table.add_column("sum", justify="right", no_wrap=True)
    table.add_column("largest", no_wrap=True)
    table.add_column("output", no_wrap=True)
    for row in (r for r in evidence.rows if r.batch == batch):
        largest = max(row.weights) if row.weights else 0.0
        # Text cells: rich would read "[...]" in a plain string as markup.
        table.add_row(
            Text(f"t{row.token}"),
            *(Text(f"{w:.4f}") for w in row.weights),
            Text(f"{row.weight_sum:.6f}"),
            Text(_bar(largest)),
            Text("[" + ", ".join(f"{v:.4f}" for v in row.output) + "]"),
        )
    return table


def attend_renderable(evidence: AttendEvidence) -> RenderableType:
    """Everything a learner reads first: setup, weights per batch, checks and notes."""
    c = evidence.config
    bias = ", ".join(b for b, flag in zip(("query", "key", "value"), c.bias, strict=True) if flag)
    header = Text.assemble(
        (f"{FORMULA}\n", "bold"),
        f"X {fmt_shape((c.batch, c.tokens, c.d_model))}  d_k {c.d_k}  d_v {c.d_v}  "
        f"scale 1/sqrt({c.d_k}) = {c.scale:.6f}  causal {'yes' if c.causal else 'no'}\n",
        f"layout {c.layout}: {c.layout_description}\n",
        f"value width {c.value_width}; bias on {bias or 'no branch'}; "
        f"{c.parameter_count} parameters",
    )
    parts: list[RenderableType] = [Panel(header, title=Text(f"attend: {evidence.chapter}"),
                                         title_align="left", box=box.ROUNDED)]
    parts.extend(_weights_table(evidence, b) for b in range(c.batch))
    checks = Table(title="checks", box=box.SIMPLE_HEAVY, title_justify="left")
    checks.add_column("check", no_wrap=True)
    checks.add_column("verdict", no_wrap=True)
    checks.add_column("evidence")
    for check in evidence.checks:
        checks.add_row(Text(check.name),
                       Text("PASS", "green") if check.passed else Text("FAIL", "red"),
                       Text(check.detail))
    parts.append(checks)
    for note in evidence.notes:
        parts.append(Panel(Text(note.text), title=f"note: {note.code}", title_align="left",
                           box=box.ROUNDED, border_style="yellow"))
    parts.append(Text(f"attend: {'PASS' if evidence.passed else 'FAIL'}",
                      style="bold green" if evidence.passed else "bold red"))
    return Group(*parts)
