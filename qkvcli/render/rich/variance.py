"""``qkv variance --format rich``: the table with a small bar per row (rich paths only)."""

from __future__ import annotations

import math

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from qkvcli.learn.variance import VarianceResult
from qkvcli.render.text.variance import EXPLAIN

BAR = 12


def _bar(fraction: float) -> str:
    filled = round(max(0.0, min(1.0, fraction)) * BAR)
    return "█" * filled + "·" * (BAR - filled)


def variance_renderable(result: VarianceResult) -> RenderableType:
    """The table with two bars per row: var(q.k) on a log2 scale against the widest row, and
    var(q.k/sqrt(d_k)) on a linear scale whose full bar is 2 (so 1 sits at the middle)."""
    table = Table(box=box.SIMPLE_HEAVY, pad_edge=False)
    for name in ("d_k", "var(q.k)", "log2 scale", "var/d_k", "scaled var", "0 .. 1 .. 2",
                 "std_err"):
        table.add_column(name, justify="left" if name[0] in "l0" else "right", no_wrap=True)
    top = max((math.log2(max(r.variance, 1.0)) for r in result.rows), default=1.0) or 1.0
    for row in result.rows:
        table.add_row(
            Text(str(row.d_k)), Text(f"{row.variance:.2f}"),
            Text(_bar(math.log2(max(row.variance, 1.0)) / top)),
            Text(f"{row.ratio:.4f}"), Text(f"{row.scaled_variance:.4f}"),
            Text(_bar(row.scaled_variance / 2.0)), Text(f"{row.std_error:.4f}"),
        )
    return Group(table, Text(f"samples={result.samples} per row, seed={result.seed}"),
                 Text(EXPLAIN))
