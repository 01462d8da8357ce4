"""Tables of numbers for the rich views: literal cells that never cut a number, and elision.

A number is never folded, wrapped or cut to an ellipsis: number columns are ``no_wrap``
and a view too wide for the screen is widened by the CLI (or shown with fewer columns,
elided with a note, unless ``--full``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence

import numpy as np
from rich.box import SIMPLE_HEAVY, Box
from rich.cells import cell_len
from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from qkvcli.core.arrays import Array
from qkvcli.render.numbers import fmt_float, fmt_shape, format_chunk
from qkvcli.render.rich.grid import GRID_FROM_CELLS, NumberGrid
from qkvcli.render.rich.options import RichOptions
from qkvcli.render.tensors import SUMMARY_THRESHOLD, TensorSummary, summarise
from qkvcli.stages.terms import Derivation

FULL_HINT = "--full shows every value"
Summarise = Callable[[Array], TensorSummary]
"""How a view gets a tensor's summary: :func:`summarise`, or summaries computed ahead."""


class Noted(Group):
    """A body and the notes under it (what it elides and how to see it). Side by side in a
    :class:`Row`, the notes go under the whole row, one a line, so two parts' notes never
    interleave; alone or stacked, under the body."""

    def __init__(self, body: RenderableType, notes: Iterable[Text | None]) -> None:
        self.body = body
        self.notes = [note for note in notes if note is not None]
        super().__init__(body, *self.notes)


def noted(body: RenderableType, *notes: Text | None) -> RenderableType:
    """``body`` with its notes (:class:`Noted`), or ``body`` alone when there are none."""
    return Noted(body, notes) if any(note is not None for note in notes) else body


def pick(count: int, limit: int, full: bool,
         keep: Iterable[int] = ()) -> list[int | None]:
    """Indices to show out of ``count``: all, or a head and a tail around ``None`` gaps,
    with each index of ``keep`` (a marked value) shown too."""
    if full or count <= limit:
        return list(range(count))
    head = max(1, limit // 2)
    tail = max(1, limit - head - 1)
    wanted = sorted({*range(head), *range(count - tail, count),
                     *(index for index in keep if 0 <= index < count)})
    picked: list[int | None] = []
    for index in wanted:
        if picked and picked[-1] is not None and index != picked[-1] + 1:
            picked.append(None)
        picked.append(index)
    return picked


def _number(value: float, marked: bool, options: RichOptions) -> Text:
    """A value's cell; a marked one in reverse video with the mark glyph after it."""
    text = fmt_float(value, options.precision)
    if not marked:
        return Text(text)
    return Text(f"{text} {options.symbols.mark}", style="bold reverse")


def shown(indices: Sequence[int | None]) -> int:
    """How many real indices (not gaps) ``indices`` holds."""
    return sum(1 for index in indices if index is not None)


def cell(value: str | Text) -> Text:
    """A table cell as literal text: data such as ``[1,2,3]`` must never be read as markup."""
    return value if isinstance(value, Text) else Text(value)


def add_number_column(table: Table, header: str | Text) -> None:
    """A right-aligned number column whose numbers are never cut.

    A number has no space to wrap at, so it measures as wide as it is and the layout
    keeps it whole; only if a view is squeezed below the width it measured (the CLI widens
    instead) does ``fold`` carry the remaining digits to the next line. (``no_wrap`` is
    left off on purpose: with it rich crops an over-long cell, silently or to ``…``.)
    """
    table.add_column(cell(header), justify="right", overflow="fold")


Axis = tuple[str, str, Sequence[int | None], int]
"""An axis a table may elide: its word (``keys``), its label prefix (``t``), the indices
:func:`pick` chose and how many there are."""


def hidden(indices: Sequence[int | None], count: int, prefix: str) -> str:
    """The indices ``indices`` skips, as ranges: ``t3..t5, t9``."""
    present = [index for index in indices if index is not None]
    ranges = [(a + 1, b - 1) for a, b in zip([-1, *present], [*present, count], strict=True)
              if b - a > 1]
    return ", ".join(f"{prefix}{a}" if a == b else f"{prefix}{a}..{prefix}{b}" for a, b in ranges)


def elision_note(*axes: Axis) -> Text | None:
    """``showing 5 of 8 keys; --full shows every value (hidden: keys t3..t5)``: what each
    elided axis shows, exactly which indices it hides and how to see them; ``None`` when
    every index is shown."""
    cut = [(word, prefix, picked, count) for word, prefix, picked, count in axes
           if shown(picked) < count]
    if not cut:
        return None
    showing = ", ".join(f"{shown(picked)} of {count} {word}" for word, _, picked, count in cut)
    which = ", ".join(f"{word} {hidden(picked, count, prefix)}"
                      for word, prefix, picked, count in cut)
    return Text(f"showing {showing}; {FULL_HINT} (hidden: {which})", style="dim")


def summary_note(
    tensor: Array, name: str, options: RichOptions, summaries: Summarise = summarise
) -> Text | None:
    """The text form's summary of a tensor too large to show whole, or ``None``.

    Above :data:`~qkvcli.render.tensors.SUMMARY_THRESHOLD` elements (and unless ``full``):
    ``name: shape [..] count N min .. max .. mean .. l2 .. sha256 <hex>``, the statistics
    at the view's precision and the exact digest of every value. The line wraps at spaces
    and folds (never cuts) a word wider than the screen, so no number or digest is lost.
    """
    if options.full or tensor.size <= SUMMARY_THRESHOLD:
        return None
    s = summaries(tensor)

    def num(value: float) -> str:
        return fmt_float(value, options.precision)

    return Text(
        f"{options.safe(name)}: shape {fmt_shape(s.shape)} count {s.count} "
        f"min {num(s.minimum)} max {num(s.maximum)} mean {num(s.mean)} "
        f"l2 {num(s.l2_norm)} sha256 {s.sha256}",
        style="dim", overflow="fold",
    )


def matrix_table(
    matrix: Array,
    corner: str,
    row_label: str,
    box: Box,
    options: RichOptions,
    what: tuple[str, str] = ("rows", "columns"),
    border_style: str | None = None,
    edge: bool = True,
    summary: bool = True,
    summaries: Summarise = summarise,
    marks: Collection[tuple[int, ...]] = (),
) -> RenderableType:
    """A 2-D array as a right-aligned table: header ``corner | 0 1 ..``, rows ``{row_label}{i}``.

    Elided rows and columns become an ellipsis, and a note under the table says how many
    are shown and how to see them all; a large matrix also gets its :func:`summary_note`
    (unless ``summary`` is false: a slice of a larger tensor, summarised whole instead).
    Each ``(row, column)`` of ``marks`` (a value that differs from the fixture's
    ``expect``) is shown even when elision would hide it, in reverse video and followed
    by the mark glyph, so it reads without colour too, and a note says what the mark means.
    """
    rows, cols = (int(n) for n in matrix.shape)
    row_pick = pick(rows, options.max_rows, options.full, [mark[0] for mark in marks])
    col_pick = pick(cols, options.max_columns, options.full, [mark[1] for mark in marks])
    ellipsis = options.symbols.ellipsis
    note = elision_note((what[0], row_label, row_pick, rows), (what[1], "", col_pick, cols))
    whole = summary_note(matrix, corner, options, summaries) if summary else None
    marked = (Text(f"{options.symbols.mark} differs from the fixture's expect (the Checks "
                   "card says by how much)", style="bold") if marks else None)
    notes = (note, whole, marked)
    if (len(row_pick) + 1) * (len(col_pick) + 1) > GRID_FROM_CELLS:
        grid = _number_grid(matrix, corner, row_label, box, options, row_pick, col_pick,
                            border_style, edge, marks)
        return noted(grid, *notes)
    table = Table(
        box=box, border_style=border_style,
        header_style="bold", show_edge=edge,
    )
    # min_width: a no_wrap header still measures as its longest word ("U_Q" of "U_Q b=0"),
    # so a row of tables would be laid out too narrow and fold the numbers
    corner_text = cell(options.safe(corner))
    table.add_column(corner_text, justify="left", no_wrap=True, style="dim",
                     min_width=corner_text.cell_len)
    for col in col_pick:
        add_number_column(table, ellipsis if col is None else str(col))
    for row in row_pick:
        if row is None:
            table.add_row(cell(ellipsis), *(cell(ellipsis) for _ in col_pick))
            continue
        table.add_row(
            cell(f"{row_label}{row}"),
            *(cell(ellipsis) if col is None
              else _number(float(matrix[row, col]), (row, col) in marks, options)
              for col in col_pick),
        )
    return noted(table, *notes)


Extra = tuple[str, Callable[[Array], str], bool]
"""A column after the keys: its header, its cell from the query's row, whether it holds a number."""


def query_key_table(matrix: Array, title: str, options: RichOptions, limit: int,
                    caption: str | None = None, extra: Sequence[Extra] = (), *,
                    label: str = "t", corner: str = "query", box: Box = SIMPLE_HEAVY,
                    rows: int | None = None,
                    spell: Callable[[int, int], Text] | None = None) -> RenderableType:
    """A ``[queries, keys]`` matrix: rows ``t0 ..``, columns ``k t0 ..`` (``label`` ``""``:
    ``0 ..`` both), at most ``limit`` keys and ``rows`` (default ``max_rows``) queries,
    each value ``[i, j]`` spelled by ``spell(i, j)`` (default: at the precision), then the ``extra``
    columns; a note says which are hidden."""
    queries_count, keys_count = (int(n) for n in matrix.shape)
    keys = pick(keys_count, limit, options.full)
    queries = pick(queries_count, rows or options.max_rows, options.full)
    ellipsis = options.symbols.ellipsis
    # one space of padding: eight keys of nine-character scores fit 100 columns
    table = Table(title=title, box=box, title_justify="left", caption=caption,
                  caption_justify="left", padding=(0, 0, 0, 1))
    # a row label is a word; an index (label "") right-aligned, as a number
    table.add_column(cell(corner), no_wrap=True, justify="left" if label else "right")
    for j in keys:
        add_number_column(table, ellipsis if j is None else f"k {label}{j}" if label else str(j))
    for header, _, number in extra:
        if number:
            add_number_column(table, header)
        else:
            table.add_column(header, no_wrap=True)
    for i in queries:
        if i is None:
            table.add_row(*(cell(ellipsis) for _ in range(len(keys) + len(extra) + 1)))
            continue
        table.add_row(cell(f"{label}{i}"), *(
            cell(ellipsis) if j is None else spell(i, j) if spell
            else cell(fmt_float(float(matrix[i, j]), options.precision)) for j in keys),
            *(cell(text(matrix[i])) for _, text, _ in extra))
    return noted(table, elision_note(("queries", label, queries, queries_count),
                                     ("keys", label, keys, keys_count)))


def _spelled(values: Array, precision: int) -> list[str]:
    """:func:`fmt_float` of each of ``values``, the fixed spellings made for the whole row
    at once (:func:`~qkvcli.render.numbers.format_chunk`)."""
    spelled = format_chunk(np.ascontiguousarray(values, dtype=np.float64), precision).split(",")
    # fmt_float differs from the fixed spelling only where that reads as zero
    return [fmt_float(float(value), precision) if not text.strip("-0.") else text
            for value, text in zip(values.tolist(), spelled, strict=True)]


def _number_grid(
    matrix: Array, corner: str, row_label: str, box: Box, options: RichOptions,
    row_pick: Sequence[int | None], col_pick: Sequence[int | None],
    border_style: str | None, edge: bool, marks: Collection[tuple[int, ...]],
) -> NumberGrid:
    """The same table as :func:`matrix_table`'s, drawn by :class:`NumberGrid` (large)."""
    ellipsis = options.symbols.ellipsis
    header = [options.safe(corner), *(ellipsis if col is None else str(col)
                                       for col in col_pick)]
    rows: list[list[str]] = []
    marked: set[tuple[int, int]] = set()
    columns = [col for col in col_pick if col is not None]
    for row in row_pick:
        if row is None:
            rows.append([ellipsis] * (len(col_pick) + 1))
            continue
        values = iter(_spelled(matrix[row, columns], options.precision))
        cells = [f"{row_label}{row}"]
        for index, col in enumerate(col_pick):
            if col is None:
                cells.append(ellipsis)
                continue
            text = next(values)
            if (row, col) in marks:
                marked.add((len(rows), index))
                text = f"{text} {options.symbols.mark}"
            cells.append(text)
        rows.append(cells)
    return NumberGrid(header, rows, box, border_style, edge, marked=frozenset(marked))


def batched_tables(
    tensor: Array,
    name: str,
    box: Box,
    options: RichOptions,
    border_style: str | None = None,
    edge: bool = True,
    summaries: Summarise = summarise,
    marks: Collection[tuple[int, ...]] = (),
) -> list[RenderableType]:
    """One ``[t, feature]`` table per batch item of a ``[batch, tokens, width]`` tensor;
    ``marks`` are ``(batch, token, feature)`` coordinates to mark (:func:`matrix_table`)."""
    batch, tokens, _width = (int(n) for n in tensor.shape)
    if batch == 0 or tokens == 0:
        return [Text(f"{name}: no values (shape {fmt_shape(tensor.shape)})", style="dim")]
    out: list[RenderableType] = []
    batch_pick = pick(batch, options.max_batches, options.full, [mark[0] for mark in marks])
    for item in batch_pick:
        if item is None:
            hidden = batch - shown(batch_pick)
            out.append(Text(
                f"{options.symbols.ellipsis} {hidden} more batch items; {FULL_HINT}", style="dim"
            ))
            continue
        out.append(matrix_table(
            tensor[item], f"{name} b={item}", "t", box, options, ("tokens", "features"),
            border_style, edge, summary=False,
            marks={mark[1:] for mark in marks if mark[0] == item},
        ))
    whole = summary_note(tensor, name, options, summaries)
    if whole is not None:
        out.append(whole)
    return out


def longest_word(texts: Iterable[str | Text]) -> int:
    """The widest word (run of non-spaces) in ``texts``: a column narrower than it splits a word."""
    words = (word for text in texts for word in cell(text).plain.split())
    return max((cell_len(word) for word in words), default=1)


def widest_line(texts: Iterable[str | Text]) -> int:
    """The widest line in ``texts``: what a column that never wraps needs."""
    found = (cell_len(line) for text in texts for line in cell(text).plain.splitlines())
    return max(found, default=1)


def grid(*rows: Sequence[str | Text], nowrap: Sequence[int] = (), dim: Sequence[int] = ()) -> Table:
    """A borderless grid of literal-text rows; long cells wrap at spaces, never inside a word.

    Each column's minimum width is its widest word (or, for ``nowrap`` columns, its widest
    line), so the grid measures as wide as it truly needs: a side-by-side row of cards then
    stacks, or the CLI widens, instead of rich splitting ``[1,2,2]`` or a word in two.
    """
    table = Table.grid(padding=(0, 2))
    for index in range(max((len(row) for row in rows), default=0)):
        column = [row[index] for row in rows if index < len(row)]
        least = widest_line(column) if index in nowrap else longest_word(column)
        table.add_column(no_wrap=index in nowrap, overflow="fold", min_width=least,
                         style="dim" if index in dim else None)
    for row in rows:
        table.add_row(*(cell(value) for value in row))
    return table


def pairs(labels: Iterable[tuple[str, str]]) -> Table:
    """A borderless two-column ``label  value`` grid, labels dimmed."""
    return grid(*labels, nowrap=(0,), dim=(0,))


def worked(element: str, derivation: Derivation, options: RichOptions) -> RenderableType:
    """One element worked from its stage's description: the element formula applied to its
    index (:func:`qkvcli.stages.applied.element_at`), then each term with the operand
    values it multiplies, and the element itself, the engine's number, which they add up to."""
    times = f" {options.symbols.times} "
    rows = [(options.math(row.label.strip()),
             times.join(fmt_float(v, options.precision) for v in row.operands),
             fmt_float(float(row.value), options.precision))
            for row in derivation.rows if row.part in ("term", "rest")]
    rows.append((options.math(element.split(" = ")[0]), "",
                 fmt_float(derivation.value, options.precision)))
    table = Table.grid(padding=(0, 2))
    table.add_column(overflow="fold", min_width=longest_word(row[0] for row in rows))
    # the operands are numbers: a column that never wraps, measured whole, so never cut
    table.add_column(no_wrap=True, justify="right", min_width=widest_line(r[1] for r in rows))
    add_number_column(table, "")
    for row in rows:
        table.add_row(*map(cell, row))
    return Group(Text(options.math(element)), Padding(table, (0, 0, 0, 2)))
