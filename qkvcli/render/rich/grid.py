"""A large table of numbers drawn line by line: what rich's ``Table`` draws, without its
per-cell layout.

rich lays out every cell of a ``Table`` as a renderable (padding, wrapping, measuring each
column twice), about 0.1 ms a cell: ``--full`` on a ``[2,64,128]`` fixture drew 160,000
cells at 15 times the text report's time. A cell of a table of numbers is one line and
every column as wide as its widest cell, so :class:`NumberGrid` draws the very lines a
``Table(box=..., show_edge=..., header_style="bold")`` with one padding space each side
draws (``tests/test_cli_newcomer.py`` compares them), at a fixed width;
:func:`~qkvcli.render.rich.tables.matrix_table` uses it above :data:`GRID_FROM_CELLS` cells.
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

    The header is bold, the first column dim, the ``(row, column)`` cells of ``marked``
    bold and reversed, the box in ``border_style``.
    """

    def __init__(self, header: Sequence[str], rows: Sequence[Sequence[str]], box: Box,
                 border_style: str | None = None, edge: bool = True,
                 marked: frozenset[tuple[int, int]] = frozenset()) -> None:
        self.header = list(header)
        self.rows = [list(row) for row in rows]
        self.box = box
        self.edge = edge
        self.border_style = border_style
        self.marked = marked
        self.widths = [max([cell_len(self.header[i])] + [cell_len(row[i]) for row in self.rows])
                       for i in range(len(self.header))]

    def width(self) -> int:
        """Columns the grid takes: every cell with its two padding spaces, and the box."""
        inner = len(self.widths) - 1
        return sum(self.widths) + 2 * len(self.widths) + inner + (2 if self.edge else 0)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(self.width(), self.width())

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        box = self.box.substitute(options, safe=console.safe_box)
        # Without colour (rich drops styles there) each line is one unstyled segment: the
        # same text at a fraction of the segments.
        plain = console.color_system is None and not console.record

        def style(name: str | None) -> Style | None:
            return None if plain else console.get_style(name) if name else Style()

        border, bold, first, marked = (style(self.border_style), style("bold"), style("dim"),
                                       style("bold reverse"))

        def row(cells: Sequence[str], left: str, middle: str, right: str,
                index: int | None) -> list[Segment]:
            """A line of cells (``index`` ``None``: the header), between the box's glyphs."""
            line = [Segment(left, border)] if self.edge else []
            for column, text in enumerate(cells):
                if column:
                    line.append(Segment(middle, border))
                if index is not None and (index, column - 1) in self.marked:
                    line += [Segment(" " * (self.widths[column] - cell_len(text) + 1)),
                             Segment(text, marked), Segment(" ")]
                else:
                    width = self.widths[column]
                    line.append(Segment(f" {text:<{width}} " if column == 0 else f" {text:>{width}} ",
                                        bold if index is None else first if column == 0 else None))
            return line + ([Segment(right, border)] if self.edge else [])

        def rule(left: str, fill: str, cross: str, right: str) -> list[Segment]:
            line = cross.join(fill * (width + 2) for width in self.widths)
            return [Segment(f"{left}{line}{right}" if self.edge else line, border)]

        drawn = [
            *([rule(box.top_left, box.top, box.top_divider, box.top_right)] if self.edge else []),
            row(self.header, box.head_left, box.head_vertical, box.head_right, None),
            rule(box.head_row_left, box.head_row_horizontal, box.head_row_cross,
                 box.head_row_right),
            *(row(cells, box.mid_left, box.mid_vertical, box.mid_right, index)
              for index, cells in enumerate(self.rows)),
            *([rule(box.bottom_left, box.bottom, box.bottom_divider, box.bottom_right)]
              if self.edge else []),
        ]
        new_line = Segment.line()
        for line in drawn:
            yield from [Segment("".join(part.text for part in line))] if plain else line
            yield new_line
