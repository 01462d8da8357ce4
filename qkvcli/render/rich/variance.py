"""``qkv variance --format rich``: the table with a small bar per row (rich paths only)."""

from __future__ import annotations

import math

from rich import box
from rich.console import Group, RenderableType
from rich.text import Text

from qkvcli.learn.variance import VarianceResult
from qkvcli.render.rich.layout import Fitted
from qkvcli.render.rich.options import RichOptions
from qkvcli.render.rich.tables import Column, table
from qkvcli.render.variance import EXPLAIN, PRECISION, facts, variance_cells

BAR = 12
COLUMNS = ("d_k", "var(q.k)", "log2 scale", "scaled var", "0 .. 1 .. 2", "std_err", "z")
BAR_COLUMNS = ("log2 scale", "0 .. 1 .. 2")


def _table(result: VarianceResult, options: RichOptions, bars: bool) -> RenderableType:
    # the numbers as the text view spells them: d_k, var, std, scaled var, std_err, z
    spelled, found = variance_cells(result, options.precision), facts(result)["rows"].value
    grown = [math.log2(max(row["variance"].value, 1.0)) for row in found]
    top = max(grown, default=1.0) or 1.0
    rows = [(d_k, var, options.bar(log / top, BAR), scaled,
             options.bar(row["scaled_variance"].value / 2.0, BAR), error, z)
            for row, log, (d_k, var, _, scaled, error, z) in zip(found, grown, spelled, strict=True)]
    # a header may wrap, a number never does
    keep = [i for i, name in enumerate(COLUMNS) if bars or name not in BAR_COLUMNS]
    return table([Column(COLUMNS[i], "word" if COLUMNS[i] in BAR_COLUMNS else "number")
                  for i in keep], [[row[i] for i in keep] for row in rows],
                 box=box.SIMPLE_HEAVY, pad_edge=False)


def variance_renderable(
    result: VarianceResult, options: RichOptions | None = None
) -> RenderableType:
    """The table with two bars per row: var(q.k) on a log2 scale against the widest row, and
    var(q.k/sqrt(d_k)) on a linear scale whose full bar is 2 (so 1 sits at the middle).

    Takes the result and the display options: their glyphs (ASCII bars on an ASCII
    stream) and ``precision``, the decimals of every number but ``z`` (default
    :data:`~qkvcli.render.variance.PRECISION`, 4), spelled as the text view spells them.
    Too narrow a screen drops the bars before it would squeeze a number.
    """
    options = options or RichOptions(precision=PRECISION)
    return Group(Fitted([_table(result, options, bars=True), _table(result, options, bars=False)]),
                 Text(f"samples={result.samples} per row, seed={result.seed}"), Text(EXPLAIN))
