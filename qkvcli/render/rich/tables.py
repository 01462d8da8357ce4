"""Tables of the rich views, built one way (:func:`table`), and how they elide.

A column lays out by what it holds (:class:`Column`): a number is never cropped, wrapped
at a space or cut to an ellipsis; a view too wide for the screen is widened by the CLI, or
shown with fewer columns, elided with a note that names what is hidden (unless ``--full``).
:func:`matrix_table`, :func:`query_key_table` and :func:`batched_tables` lay out tensors,
:func:`grid` rows of words, :func:`worked` one element worked from its stage.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from rich.box import SIMPLE_HEAVY, Box
from rich.cells import cell_len
from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from qkvcli.core.arrays import Array
from qkvcli.core.record import Record
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


FEWEST_COLUMNS = 3
"""The narrowest layout still shows the first and last key (or feature) around a gap."""
MOST_COLUMNS = 16
"""The most keys (or features) a layout offers unless ``--full``: more than a 160-column
figure holds."""


def column_limits(count: int, options: RichOptions) -> list[int]:
    """Column limits to try, widest first: every column (``--full``, or up to
    :data:`MOST_COLUMNS`), then one fewer at a time down to :data:`FEWEST_COLUMNS`: the
    width of the screen, not ``max_columns``, decides how many keys are shown."""
    if options.full or count <= FEWEST_COLUMNS:
        return [count]
    return list(range(min(count, MOST_COLUMNS), FEWEST_COLUMNS - 1, -1))


def shown(indices: Sequence[int | None]) -> int:
    """How many real indices (not gaps) ``indices`` holds."""
    return sum(1 for index in indices if index is not None)


def cell(value: str | Text) -> Text:
    """A table cell as literal text: data such as ``[1,2,3]`` must never be read as markup."""
    return value if isinstance(value, Text) else Text(value)


class Column(Record):
    """A column of :func:`table`: its header and how its cells lay out (``kind``):

    - ``number``: right-aligned; a number has no space to wrap at, so it measures whole and
      the layout keeps it so; only squeezed below that width (the CLI widens instead) does
      ``fold`` carry digits to the next line (``no_wrap`` would crop it, silently or to ``…``);
    - ``line``: never wraps, and asks for its widest line (numbers side by side in one cell);
    - ``word``: never wraps (a label, a bar);
    - ``text``: wraps at spaces, never inside a word (asks for its longest word).
    """

    header: str | Text = ""
    kind: str = "text"
    justify: str | None = None
    style: str | None = None


NUMBER, WORD = Column(kind="number"), Column(kind="word")
"""Headerless columns of a number and of a word."""


def table(columns: Sequence[Column], rows: Sequence[Sequence[str | Text] | None],
          styles: Mapping[int, str] | None = None, **settings: Any) -> Table:
    """The one way the rich views build a table: ``columns`` laid out by their kind,
    ``rows`` of literal cells (``None``: a section rule), row ``i`` styled ``styles[i]``.

    ``settings`` are rich's ``Table``'s (bold headers unless given); without a ``box``
    setting, a borderless grid with two spaces between columns.
    """
    made = (Table(**{"header_style": "bold", **settings}) if "box" in settings
            else Table.grid(**{"padding": (0, 2), **settings}))
    for index, column in enumerate(columns):
        texts = [column.header, *(row[index] for row in rows
                                  if row is not None and index < len(row))]
        kind = column.kind
        made.add_column(
            cell(column.header), style=column.style,
            justify=column.justify or ("right" if kind == "number" else "left"),  # type: ignore[arg-type]
            no_wrap=kind in ("line", "word"), overflow="fold" if kind != "word" else "ellipsis",
            min_width=_widest(texts, kind == "line") if kind in ("line", "text") else None)
    for position, row in enumerate(rows):
        if row is None:
            made.add_section()
        else:
            made.add_row(*map(cell, row), style=(styles or {}).get(position))
    return made


def _widest(texts: Iterable[str | Text], lines: bool) -> int:
    """The widest line (``lines``: what a column that never wraps needs) or word (a
    narrower column splits it) of ``texts``."""
    found = (cell_len(part) for text in texts
             for part in (cell(text).plain.splitlines() if lines else cell(text).plain.split()))
    return max(found, default=1)


def index_rows(row_pick: Sequence[int | None], col_pick: Sequence[int | None],
               label: Callable[[int], str], spell: Callable[[int, int], str | Text],
               ellipsis: str, extra: Callable[[int], Sequence[str | Text]] | None = None,
               width: int = 0) -> list[list[str | Text]]:
    """The rows of a table of picked indices: ``label(i)`` then ``spell(i, j)`` for each
    picked column (an ellipsis for a gap), then ``extra(i)``; a gap row is all ellipses
    (``width`` of them for the extra cells)."""
    rows: list[list[str | Text]] = []
    for i in row_pick:
        if i is None:
            rows.append([ellipsis] * (len(col_pick) + 1 + width))
            continue
        rows.append([label(i), *(ellipsis if j is None else spell(i, j) for j in col_pick),
                     *(extra(i) if extra else ())])
    return rows


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


def summary_note(tensor: Array, name: str, options: RichOptions,
                 summaries: Summarise = summarise) -> Text | None:
    """Above :data:`~qkvcli.render.tensors.SUMMARY_THRESHOLD` elements (unless ``full``) the
    text form's summary, ``name: shape [..] count N min .. max .. mean .. l2 .. sha256 <hex>``
    at the view's precision, folded (never cut) where a word is wider than the screen."""
    if options.full or tensor.size <= SUMMARY_THRESHOLD:
        return None
    s = summaries(tensor)
    stats = " ".join(f"{word} {fmt_float(value, options.precision)}" for word, value in
                     (("min", s.minimum), ("max", s.maximum), ("mean", s.mean), ("l2", s.l2_norm)))
    return Text(f"{options.safe(name)}: shape {fmt_shape(s.shape)} count {s.count} {stats} "
                f"sha256 {s.sha256}", style="dim", overflow="fold")


def matrix_table(matrix: Array, corner: str, row_label: str, box: Box, options: RichOptions,
                 what: tuple[str, str] = ("rows", "columns"), border_style: str | None = None,
                 edge: bool = True, summary: bool = True, summaries: Summarise = summarise,
                 marks: Collection[tuple[int, ...]] = ()) -> RenderableType:
    """A 2-D array as a right-aligned table: header ``corner | 0 1 ..``, rows ``{row_label}{i}``,
    elided rows and columns an ellipsis and named in a note (:func:`elision_note`), with
    its :func:`summary_note` unless ``summary`` is false (a slice, summarised whole).

    Each ``(row, column)`` of ``marks`` (a value that differs from the fixture's ``expect``)
    is shown even where elision would hide it, reversed and followed by the mark glyph (it
    reads without colour), and a note says what the mark means. More than
    :data:`GRID_FROM_CELLS` cells are drawn by :class:`NumberGrid`.
    """
    rows, cols = (int(n) for n in matrix.shape)
    row_pick = pick(rows, options.max_rows, options.full, [mark[0] for mark in marks])
    col_pick = pick(cols, options.max_columns, options.full, [mark[1] for mark in marks])
    ellipsis, mark = options.symbols.ellipsis, options.symbols.mark
    notes = (elision_note((what[0], row_label, row_pick, rows), (what[1], "", col_pick, cols)),
             summary_note(matrix, corner, options, summaries) if summary else None,
             Text(f"{mark} differs from the fixture's expect (the Checks card says by how "
                  "much)", style="bold") if marks else None)
    header = [options.safe(corner), *(ellipsis if j is None else str(j) for j in col_pick)]
    columns = [j for j in col_pick if j is not None]
    spelled = {i: dict(zip(columns, _spelled(matrix[i, columns], options.precision),
                           strict=True)) for i in row_pick if i is not None}
    large = (len(row_pick) + 1) * (len(col_pick) + 1) > GRID_FROM_CELLS

    def spell(i: int, j: int) -> str | Text:
        if (i, j) not in marks:
            return spelled[i][j]
        return f"{spelled[i][j]} {mark}" if large else Text(f"{spelled[i][j]} {mark}",
                                                            style="bold reverse")

    body = index_rows(row_pick, col_pick, lambda i: f"{row_label}{i}", spell, ellipsis)
    if large:
        marked = frozenset((r, c) for r, i in enumerate(row_pick) for c, j in enumerate(col_pick)
                           if (i, j) in marks)
        return noted(NumberGrid(header, [list(map(str, row)) for row in body], box,
                                border_style, edge, marked=marked), *notes)
    return noted(table([Column(header[0], "line", style="dim"),
                        *(Column(text, "number") for text in header[1:])], body,
                       box=box, border_style=border_style, show_edge=edge), *notes)


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
    columns = [Column(corner, "word", justify="left" if label else "right"),  # an index: a number
               *(Column(ellipsis if j is None else f"k {label}{j}" if label else str(j), "number")
                 for j in keys),
               *(Column(header, "number" if number else "word") for header, _, number in extra)]
    body = index_rows(queries, keys, lambda i: f"{label}{i}",
                      spell or (lambda i, j: fmt_float(float(matrix[i, j]), options.precision)),
                      ellipsis, lambda i: [text(matrix[i]) for _, text, _ in extra], len(extra))
    # one space of padding: eight keys of nine-character scores fit 100 columns
    made = table(columns, body, box=box, title=title, title_justify="left", caption=caption,
                 caption_justify="left", padding=(0, 0, 0, 1), header_style=None)
    return noted(made, elision_note(("queries", label, queries, queries_count),
                                    ("keys", label, keys, keys_count)))


def _spelled(values: Array, precision: int) -> list[str]:
    """:func:`fmt_float` of each of ``values``, the fixed spellings made for the whole row
    at once (:func:`~qkvcli.render.numbers.format_chunk`)."""
    spelled = format_chunk(np.ascontiguousarray(values, dtype=np.float64), precision).split(",")
    # fmt_float differs from the fixed spelling only where that reads as zero
    return [fmt_float(float(value), precision) if not text.strip("-0.") else text
            for value, text in zip(values.tolist(), spelled, strict=True)]


def batched_tables(tensor: Array, name: str, box: Box, options: RichOptions,
                   border_style: str | None = None, edge: bool = True,
                   summaries: Summarise = summarise,
                   marks: Collection[tuple[int, ...]] = ()) -> list[RenderableType]:
    """One ``[t, feature]`` table per batch item of a ``[batch, tokens, width]`` tensor;
    ``marks`` are ``(batch, token, feature)`` coordinates to mark (:func:`matrix_table`)."""
    batch, tokens, _width = (int(n) for n in tensor.shape)
    if batch == 0 or tokens == 0:
        return [Text(f"{name}: no values (shape {fmt_shape(tensor.shape)})", style="dim")]
    batch_pick = pick(batch, options.max_batches, options.full, [mark[0] for mark in marks])
    out: list[RenderableType | None] = [
        Text(f"{options.symbols.ellipsis} {batch - shown(batch_pick)} more batch items; "
             f"{FULL_HINT}", style="dim") if item is None else
        matrix_table(tensor[item], f"{name} b={item}", "t", box, options, ("tokens", "features"),
                     border_style, edge, summary=False,
                     marks={mark[1:] for mark in marks if mark[0] == item})
        for item in batch_pick]
    out.append(summary_note(tensor, name, options, summaries))
    return [part for part in out if part is not None]


def grid(*rows: Sequence[str | Text], nowrap: Sequence[int] = (), dim: Sequence[int] = ()) -> Table:
    """A borderless grid of literal-text rows (:func:`table` without a box): ``nowrap``
    columns never wrap, the others wrap at spaces, never inside a word, so the grid
    measures as wide as it truly needs (a row of cards then stacks, or the CLI widens,
    instead of rich splitting ``[1,2,2]`` or a word in two); ``dim`` columns are dimmed."""
    count = max((len(row) for row in rows), default=0)
    return table([Column(kind="line" if i in nowrap else "text",
                         style="dim" if i in dim else None) for i in range(count)], rows)


def worked(element: str, derivation: Derivation, options: RichOptions) -> RenderableType:
    """One element worked from its stage's description: the element formula applied to its
    index (:func:`qkvcli.stages.applied.element_at`), then each term with the operand
    values it multiplies, and the element itself, the engine's number, which they add up to."""
    rows: list[tuple[str, ...]] = []
    for row in derivation.rows:
        if row.part in ("term", "rest"):
            spelled = [fmt_float(v, options.precision) for v in row.operands]
            product = ((spelled[0], options.symbols.times, spelled[1], "=")
                       if len(spelled) == 2 else ("", "", "", ""))
            rows.append((options.math(row.label.strip()), *product,
                         fmt_float(float(row.value), options.precision)))
    rows.append((options.math(element.split(" = ")[0]), "", "", "", "",
                 fmt_float(derivation.value, options.precision)))
    terms = table([Column(), NUMBER, WORD, NUMBER, WORD, NUMBER], rows, padding=(0, 1))
    return Group(Text(options.math(element)), Padding(terms, (0, 0, 0, 2)))
