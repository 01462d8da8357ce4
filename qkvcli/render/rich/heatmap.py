"""Heat maps of a multi-head layer's attention weights, one per head (imported on rich paths only).

Each cell shows a shading glyph and the weight at ``--precision`` decimals on a
background whose colour deepens with the weight. The glyph carries the same scale, so
the map reads without colour (``NO_COLOR``, a pipe) too; a legend names the levels. Heads
sit side by side when they fit the width and stack when not; keys beyond the options'
limits are elided with a note, and a number is never cut.
"""

from __future__ import annotations

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from qkvcli.attention.records import AttendEvidence
from qkvcli.render.rich.layout import Fitted, Part, Row
from qkvcli.render.rich.options import RichOptions
from qkvcli.render.rich.tables import add_number_column, cell, elision_note, pick, shown

# Level i covers weights in (i-1)/4, i/4]; level 0 is exactly 0 (a masked key).
SHADES = (" ", "░", "▒", "▓", "█")
ASCII_SHADES = (" ", ".", ":", "*", "#")
COLOURS = ("", "on grey23", "on dark_blue", "on blue3", "on dodger_blue1")


def level(weight: float) -> int:
    """The shading level of a weight in [0, 1]: 0 for exactly 0, else 1 to 4 by quarters."""
    if not weight > 0.0:
        return 0
    return min(4, max(1, int(-(-weight * 4 // 1))))


def legend(options: RichOptions) -> Text:
    """The glyphs and colours of the five levels, as one line."""
    shades = ASCII_SHADES if options.ascii else SHADES
    ranges = ("0", "(0,0.25]", "(0.25,0.5]", "(0.5,0.75]", "(0.75,1]")
    text = Text("weights: ")
    for i, (shade, label) in enumerate(zip(shades, ranges, strict=True)):
        text.append(f" {shade} ", style=COLOURS[i] or None)
        text.append(f" {label}  ")
    return text


def head_table(evidence: AttendEvidence, batch: int, head: int, options: RichOptions,
               limit: int) -> RenderableType:
    """One head's attention for one batch item: queries down, keys across, ``limit`` keys."""
    attention = evidence.primary["attention"][batch, head]  # [T,T]
    tokens = int(attention.shape[0])
    shades = ASCII_SHADES if options.ascii else SHADES
    keys = pick(tokens, limit, options.full)
    queries = pick(tokens, options.max_rows, options.full)
    table = Table(title=f"batch {batch}, head {head}", box=box.SIMPLE, title_justify="left",
                  padding=(0, 0, 0, 1))
    table.add_column(cell("q\\k"), justify="right")
    for key in keys:
        add_number_column(table, options.symbols.ellipsis if key is None else str(key))
    for query in queries:
        if query is None:
            table.add_row(cell(options.symbols.ellipsis), *(cell("") for _ in keys))
            continue
        row: list[Text] = [cell(str(query))]
        for key in keys:
            if key is None:
                row.append(cell(options.symbols.ellipsis))
                continue
            value = float(attention[query, key])
            shade = level(value)
            # glyph and number form one word, so the table measures it whole and never folds it
            row.append(Text(f"{shades[shade]}{value:.{options.precision}f}",
                            style=COLOURS[shade] or ""))
        table.add_row(*row)
    if shown(keys) == tokens and shown(queries) == tokens:
        return table
    return Group(table, elision_note(("queries", "keys"), (shown(queries), tokens),
                                     (shown(keys), tokens)))


def heatmaps(evidence: AttendEvidence, options: RichOptions) -> RenderableType:
    """Every head's heat map for the first ``max_batches`` batch items, and the legend."""
    c = evidence.config
    heads = c.heads or 1
    limits = ([c.tokens] if options.full or c.tokens <= 3
              else list(range(min(c.tokens, options.max_columns), 2, -1)))
    parts: list[RenderableType] = []
    batches = range(c.batch) if options.full else range(min(c.batch, options.max_batches))
    for b in batches:
        maps = [Part(Fitted([head_table(evidence, b, h, options, limit) for limit in limits]),
                     box=None) for h in range(heads)]
        parts.append(Row(maps, gap=2, stack_expand=False, fill=False))
    parts.append(legend(options))
    return Group(*parts)
