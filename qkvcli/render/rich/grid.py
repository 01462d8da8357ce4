"""A large table of numbers drawn line by line: what rich's ``Table`` draws, without its
per-cell layout.

rich lays out every cell of a ``Table`` as a renderable of its own (padding, wrapping,
measuring each column twice), about 0.1 ms a cell: ``qkv run --format rich --full`` on a
``[2,64,128]`` fixture draws about 160,000 cells and took 15 times as long as the text
report. A table of numbers needs none of it: each cell is one line, every column as wide
as its widest cell. :class:`NumberGrid` draws exactly the lines a ``Table(box=...,
show_edge=..., header_style="bold")`` with one padding space each side would draw
(``tests/test_cli_newcomer.py`` compares them), measuring as its own fixed width;
:func:`qkvcli.render.rich.tables.matrix_table` uses it for tables of more than
:data:`GRID_FROM_CELLS` cells, whose layout never varies with the screen.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.box import Box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.style import Style

GRID_FROM_CELLS = 256
"""Tables of more cells than this are drawn by :class:`NumberGrid`."""


class NumberGrid:
    """A header row and rows of one-line cells, left-justified in the first column and
    right-justified elsewhere, in ``box`` (its ASCII substitute where rich would swap it).

    ``marked`` holds the ``(row, column)`` cells drawn in ``marked_style``; the first
    column is drawn in ``first_style``, the header in bold, the box in ``border_style``.
    """

    def __init__(self, header: Sequence[str], rows: Sequence[Sequence[str]], box: Box,
                 border_style: str | None = None, edge: bool = True,
                 first_style: str = "dim", marked: frozenset[tuple[int, int]] = frozenset(),
                 marked_style: str = "bold reverse") -> None:
        self.header = list(header)
        self.rows = [list(row) for row in rows]
        self.box = box
        self.edge = edge
        self.border_style = border_style
        self.first_style = first_style
        self.marked = marked
        self.marked_style = marked_style
        self.widths = [max([cell_len(self.header[i])] + [cell_len(row[i]) for row in self.rows])
                       for i in range(len(self.header))]

    def width(self) -> int:
        """Columns the grid takes: every cell with its two padding spaces, and the box."""
        inner = len(self.widths) - 1
        return sum(self.widths) + 2 * len(self.widths) + inner + (2 if self.edge else 0)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(self.width(), self.width())

    def _rule(self, left: str, fill: str, cross: str, right: str) -> str:
        line = cross.join(fill * (width + 2) for width in self.widths)
        return f"{left}{line}{right}" if self.edge else line

    def _cell(self, text: str, column: int) -> str:
        width = self.widths[column]
        return f" {text:<{width}} " if column == 0 else f" {text:>{width}} "

    def _plain_lines(self, box: Box) -> RenderResult:
        """Every line as one unstyled segment: what a console without colour shows (rich
        drops styles there), at a fraction of the segments."""
        new_line = Segment.line()

        def joined(cells: Sequence[str], left: str, middle: str, right: str) -> Segment:
            line = middle.join(self._cell(text, column) for column, text in enumerate(cells))
            return Segment(f"{left}{line}{right}" if self.edge else line)

        if self.edge:
            yield Segment(self._rule(box.top_left, box.top, box.top_divider, box.top_right))
            yield new_line
        yield joined(self.header, box.head_left, box.head_vertical, box.head_right)
        yield new_line
        yield Segment(self._rule(box.head_row_left, box.head_row_horizontal,
                                 box.head_row_cross, box.head_row_right))
        yield new_line
        for cells in self.rows:
            yield joined(cells, box.mid_left, box.mid_vertical, box.mid_right)
            yield new_line
        if self.edge:
            yield Segment(self._rule(box.bottom_left, box.bottom, box.bottom_divider,
                                     box.bottom_right))
            yield new_line

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        box = self.box.substitute(options, safe=console.safe_box)
        if console.color_system is None and not console.record:
            yield from self._plain_lines(box)
            return
        border = console.get_style(self.border_style) if self.border_style else Style()
        bold, first = console.get_style("bold"), console.get_style(self.first_style)
        marked = console.get_style(self.marked_style)
        new_line = Segment.line()

        def row(cells: Sequence[str], left: str, middle: str, right: str,
                header: bool, index: int) -> RenderResult:
            if self.edge:
                yield Segment(left, border)
            for column, text in enumerate(cells):
                if column:
                    yield Segment(middle, border)
                if header:
                    yield Segment(self._cell(text, column), bold)
                elif column == 0:
                    yield Segment(self._cell(text, column), first)
                elif (index, column - 1) in self.marked:
                    yield Segment(" " * (self.widths[column] - cell_len(text) + 1))
                    yield Segment(text, marked)
                    yield Segment(" ")
                else:
                    yield Segment(self._cell(text, column))
            if self.edge:
                yield Segment(right, border)
            yield new_line

        if self.edge:
            yield Segment(self._rule(box.top_left, box.top, box.top_divider, box.top_right),
                          border)
            yield new_line
        yield from row(self.header, box.head_left, box.head_vertical, box.head_right, True, -1)
        yield Segment(self._rule(box.head_row_left, box.head_row_horizontal,
                                 box.head_row_cross, box.head_row_right), border)
        yield new_line
        for index, cells in enumerate(self.rows):
            yield from row(cells, box.mid_left, box.mid_vertical, box.mid_right, False, index)
        if self.edge:
            yield Segment(self._rule(box.bottom_left, box.bottom, box.bottom_divider,
                                     box.bottom_right), border)
            yield new_line
