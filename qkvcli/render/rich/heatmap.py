"""Heat maps of a multi-head layer's attention weights, one per head (imported on rich paths only).

A line above names the layer (heads, ``d_k``, ``d_v``, K/V heads, RoPE, output projection).
A weight's level is its quarter of 1 (:func:`level`): a near-uniform row stays light and
only a weight above 0.75 is darkest; ``--shading row`` (:attr:`RichOptions.shading`)
shades against the largest weight of its query row instead, so a row's peak is darkest at
any ``T``. The glyph carries the colour's scale, so a map reads without colour too; a
legend names the levels. Up to :data:`NUMBERS_UP_TO` tokens each cell also shows the
weight (every key first, fewer only when they do not fit, elided with a note). Above that
a head is glyphs only, downsampled: queries and keys split into at most ``rows`` and
``columns`` equal blocks (``floor(i T / n)`` boundaries), each cell the largest weight of
its block, shaded against the largest of its block row; the widest grid that fits is shown.
"""

from __future__ import annotations

import math

import numpy as np
from rich import box
from rich.console import Group, RenderableType
from rich.text import Text

from qkvcli.attention.records import AttendEvidence
from qkvcli.core.arrays import Array
from qkvcli.render.attend import published_name, rope_words
from qkvcli.render.numbers import fmt_float
from qkvcli.render.rich.layout import Fitted, beside
from qkvcli.render.rich.options import RichOptions
from qkvcli.render.rich.tables import WORD, Column, column_limits, query_key_table, table

SHADES = (" ", "░", "▒", "▓", "█")
ASCII_SHADES = (" ", ".", ":", "*", "#")
COLOURS = ("", "on grey23", "on dark_blue", "on blue3", "on dodger_blue1")
NUMBERS_UP_TO = 16
"""Tokens up to which a heat map's cells show their numbers too."""
GRID_COLUMNS = (96, 64, 48, 32, 24, 16)
"""Key columns a glyph map is tried at, widest first."""
GRID_ROWS = 24
"""Query rows of a glyph map (block rows when ``T`` is larger)."""


def level(weight: float, scale: float = 1.0) -> int:
    """The shading level of ``weight`` against ``scale`` (1, or its row's largest with
    ``row`` shading): 0 for exactly 0 (a masked key), else 1 to 4 by quarters of ``scale``."""
    if not weight > 0.0:
        return 0
    if not scale > 0.0:
        return 4
    return min(4, max(1, math.ceil(4.0 * weight / scale)))


def scale_of(row: Array, options: RichOptions) -> float:
    """What a row's weights are shaded against: 1, or the row's largest (``row``)."""
    if options.shading != "row":
        return 1.0
    return float(np.max(row)) if row.size else 0.0


def legend(options: RichOptions) -> Text:
    """The glyphs and colours of the five levels, as one line."""
    shades = ASCII_SHADES if options.ascii else SHADES
    ranges = ("0", "(0,0.25]", "(0.25,0.5]", "(0.5,0.75]", "(0.75,1]")
    against = ("the largest of their row" if options.shading == "row"
               else "1 (--shading row: the largest of their row)")
    text = Text(f"weights, against {against}:\n")
    for i, (shade, label) in enumerate(zip(shades, ranges, strict=True)):
        text.append(f" {shade} ", style=COLOURS[i] or None)
        text.append(f" {label}  ")
    return text


def layer_line(evidence: AttendEvidence) -> Text:
    """What the layer is: heads, ``d_k``/``d_v``, K/V heads, RoPE, output projection (by
    the name its weight is published under: ``c_proj``, ``o_proj``, ``out_proj``...)."""
    c = evidence.config
    heads = c.heads or 1
    parts = [f"{heads} heads of d_k {c.d_k}, d_v {c.d_v}"]
    if c.kv_heads is not None:
        parts.append(f"{c.kv_heads} K/V heads" + (
            f" (each shared by {heads // c.kv_heads} query heads)" if c.kv_heads != heads
            else ""))
    if c.rope is not None:
        parts.append(f"RoPE {rope_words(c.rope)}")
    if c.out_layout is not None:
        name = published_name("w_out", c).removesuffix("_weight")
        parts.append(f"output projection {name}: concat [{heads}x{c.d_v}] -> e_out {c.e_out}")
    else:
        parts.append(f"no output projection: e_out {c.e_out} (the concat)")
    return Text("layer: " + "; ".join(parts), style="bold")


def blocks(count: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` (at most ``count``) consecutive ranges covering ``0..count``:
    ``[floor(i count / parts), floor((i+1) count / parts))``."""
    parts = max(1, min(parts, count))
    return [(i * count // parts, (i + 1) * count // parts) for i in range(parts)]


def block_max(attention: Array, rows: int, columns: int) -> tuple[Array, list[tuple[int, int]]]:
    """The largest weight of each block of ``attention`` ``[T,T]``, ``[rows', columns']``,
    and the query ranges of the block rows."""
    tokens = int(attention.shape[0])
    query_blocks, key_blocks = blocks(tokens, rows), blocks(tokens, columns)
    starts = [start for start, _ in key_blocks]
    # [T, columns']: each key block's largest weight per query, then per query block
    per_key = np.maximum.reduceat(attention, starts, axis=1)
    grid = np.stack([per_key[start:end].max(axis=0) for start, end in query_blocks])
    return grid, query_blocks


def shaded(weight: float, scale: float, options: RichOptions, number: bool = False) -> Text:
    """``weight``'s glyph against ``scale`` in its level's colour, then (``number``) the
    weight: glyph and number one word, so a table measures it whole and never folds it."""
    shade = level(weight, scale)
    glyph = (ASCII_SHADES if options.ascii else SHADES)[shade]
    return Text(glyph + (fmt_float(weight, options.precision) if number else ""),
                style=COLOURS[shade])


def _numbered(tokens: int, options: RichOptions) -> bool:
    """Whether the maps show numbers (up to :data:`NUMBERS_UP_TO` tokens; ``--full``: 4x)."""
    return tokens <= NUMBERS_UP_TO or (options.full and tokens <= NUMBERS_UP_TO * 4)


def head_layouts(attention: Array, title: str, options: RichOptions) -> list[RenderableType]:
    """One head's map of ``attention`` ``[T,T]`` at each layout, widest first: up to
    :data:`NUMBERS_UP_TO` tokens each cell's glyph and weight, every key then fewer; else
    glyphs only, downsampled to at most :data:`GRID_ROWS` rows and ever fewer columns."""
    tokens = int(attention.shape[0])
    if _numbered(tokens, options):
        return [query_key_table(attention, title, options, limit, label="", corner="q\\k",
                                box=box.SIMPLE, rows=max(options.max_rows, NUMBERS_UP_TO),
                                spell=lambda q, k: shaded(float(attention[q, k]), scale_of(
                                    attention[q], options), options, number=True))
                for limit in column_limits(tokens, options)]
    layouts: list[RenderableType] = []
    for columns in sorted({min(tokens, w) for w in GRID_COLUMNS}, reverse=True):
        grid, query_blocks = block_max(attention, tokens if options.full else GRID_ROWS, columns)
        rows = [(str(start), Text.assemble(*(shaded(float(v), largest, options) for v in values)))
                for (start, _), values, largest in zip(query_blocks, grid, (
                    scale_of(values, options) for values in grid), strict=True)]
        # two columns that never wrap: a row of glyphs (spaces for masked keys) is never
        # folded, and the layout measures it whole
        layouts.append(table([Column(kind="word", justify="right"), WORD], rows, box=None,
                             show_header=False, title=f"{title}: {grid.shape[0]}x"
                             f"{grid.shape[1]} of {tokens}x{tokens}", title_justify="left",
                             padding=(0, 1, 0, 0)))
    return layouts


def heatmaps(evidence: AttendEvidence, options: RichOptions) -> RenderableType:
    """The layer's line, every head's heat map for the first ``max_batches`` batch items,
    and the legend (with the downsampling rule when a map is downsampled)."""
    c = evidence.config
    heads = c.heads or 1
    parts: list[RenderableType] = [layer_line(evidence)]
    batches = range(c.batch) if options.full else range(min(c.batch, options.max_batches))
    for b in batches:
        # Every head at one layout, widest first: the heads stack before any key is
        # elided (a row of heads side by side only when they fit at that layout).
        per_head = [head_layouts(np.asarray(evidence.primary["attention"][b, h]),
                                 f"batch {b}, head {h}", options) for h in range(heads)]
        parts.append(Fitted([beside(layouts[i] for layouts in per_head)
                             for i in range(len(per_head[0]))]))
    if c.batch > len(batches):
        parts.append(Text(f"showing {len(batches)} of {c.batch} batch items; --full shows "
                          "every one", style="dim"))
    parts.append(legend(options))
    if not _numbered(c.tokens, options):
        parts.append(Text("each cell: the largest weight of its block of queries x keys "
                          "(equal blocks, floor(i T / n) boundaries; row label: the block's "
                          "first query), shaded as the legend says",
                          style="dim"))
    return Group(*parts)
