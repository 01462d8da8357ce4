"""``qkv variance --format rich``: the table with a small bar per row (rich paths only)."""

from __future__ import annotations

import math
from functools import partial

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from qkvcli.learn.variance import VarianceResult
from qkvcli.render.numbers import fmt_float
from qkvcli.render.rich.layout import Fitted
from qkvcli.render.rich.options import RichOptions
from qkvcli.render.rich.tables import add_number_column
from qkvcli.render.variance import EXPLAIN, PRECISION

BAR = 12
COLUMNS = ("d_k", "var(q.k)", "log2 scale", "scaled var", "0 .. 1 .. 2", "std_err", "z")
BAR_COLUMNS = ("log2 scale", "0 .. 1 .. 2")


def _table(result: VarianceResult, options: RichOptions, bars: bool) -> Table:
    bar = partial(options.bar, width=BAR)
    table = Table(box=box.SIMPLE_HEAVY, pad_edge=False)
    columns = [name for name in COLUMNS if bars or name not in BAR_COLUMNS]
    for name in columns:
        if name in BAR_COLUMNS:
            table.add_column(name, no_wrap=True)
        else:
            # Headers must not set the width: a header wraps, a number never does.
            add_number_column(table, name)
    top = max((math.log2(max(r.variance, 1.0)) for r in result.rows), default=1.0) or 1.0
    for row in result.rows:
        cells = {
            "d_k": str(row.d_k),
            "var(q.k)": fmt_float(row.variance, 2),
            "log2 scale": bar(math.log2(max(row.variance, 1.0)) / top),
            "scaled var": fmt_float(row.scaled_variance, options.precision),
            "0 .. 1 .. 2": bar(row.scaled_variance / 2.0),
            "std_err": fmt_float(row.std_error, options.precision),
            "z": f"{row.z:+.2f}",
        }
        table.add_row(*(Text(cells[name]) for name in columns))
    return table


def variance_renderable(
    result: VarianceResult, options: RichOptions | None = None
) -> RenderableType:
    """The table with two bars per row: var(q.k) on a log2 scale against the widest row, and
    var(q.k/sqrt(d_k)) on a linear scale whose full bar is 2 (so 1 sits at the middle).

    Takes the result and the display options: their glyphs (ASCII bars on an ASCII
    stream) and ``precision``, the decimals of the scaled variance and the standard error
    (default :data:`~qkvcli.render.variance.PRECISION`, 4, as in the text view;
    ``var(q.k)`` keeps two, ``z`` two). Too narrow a screen drops the bars before it
    would squeeze a number.
    """
    options = options or RichOptions(precision=PRECISION)
    table = Fitted([_table(result, options, bars=True), _table(result, options, bars=False)])
    return Group(table, Text(f"samples={result.samples} per row, seed={result.seed}"),
                 Text(EXPLAIN))
