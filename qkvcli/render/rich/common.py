"""Pieces the rich views share: options, symbols, number tables with elision, and layout.

Everything here builds rich renderables from plain values; nothing prints. Only the
rich path imports this module (``qkv report --format text`` never loads rich).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from rich.box import Box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from qkvcli.core.arrays import Array
from qkvcli.render.rich.boxes import CARD
from qkvcli.render.text.numbers import fmt_float, fmt_shape

FULL_HINT = "--full shows every value"
ROLES = ("query", "key", "value")
LETTERS = {"query": "Q", "key": "K", "value": "V"}
ROLE_SENTENCES = {
    "query": "Query: what should this position retrieve?",
    "key": "Key: how can this position be matched?",
    "value": "Value: what content can this position contribute?",
}
ROLE_STYLES = {"query": "cyan", "key": "magenta", "value": "yellow"}
INPUT_STYLE = "blue"
"""The branches in their declared order, their letters, the chapter's role sentences and
the colours that (only) add to their borders."""
MEASURE_WIDTH = 10_000
"""Width offered when asking how wide something *needs* to be (no clamping to the screen)."""


@dataclass(frozen=True)
class Symbols:
    """Glyphs that have an ASCII spelling, so an ASCII-only stream never sees Unicode."""

    arrow: str
    ellipsis: str
    transpose: str
    tau: str
    dash: str
    worst: str
    times: str
    dot: str


UNICODE = Symbols(arrow="→", ellipsis="…", transpose="ᵀ", tau="τ", dash="—", worst="◀ worst",
                  times="×", dot="·")  # noqa: RUF001 - the multiplication sign is meant
ASCII = Symbols(arrow="->", ellipsis="...", transpose="^T", tau="tau", dash="-", worst="<- worst",
                times="x", dot="-")


@dataclass(frozen=True)
class RichOptions:
    """How the rich views show numbers and large tensors.

    ``precision`` is the number of decimals; unless ``full``, a tensor shows at most
    ``max_rows`` rows, ``max_columns`` columns and ``max_batches`` batch items (and a
    gradient check at most ``max_checks`` rows per tensor), the rest replaced by an
    ellipsis and a note. ``ascii`` spells every glyph in ASCII (the CLI
    sets it when the output stream cannot encode Unicode).
    """

    precision: int = 6
    full: bool = False
    ascii: bool = False
    max_rows: int = 8
    max_columns: int = 6
    max_batches: int = 2
    max_checks: int = 12
    symbols: Symbols = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "symbols", ASCII if self.ascii else UNICODE)

    def safe(self, text: str) -> str:
        """``text`` as the stream can show it: non-ASCII escaped when ``ascii``."""
        if self.ascii:
            return text.encode("ascii", "backslashreplace").decode("ascii")
        return text


def status(passed: bool) -> Text:
    """The word PASS or FAIL; colour only adds to the word."""
    return Text("PASS", style="bold green") if passed else Text("FAIL", style="bold red")


def pick(count: int, limit: int, full: bool) -> list[int | None]:
    """Indices to show out of ``count``: all, or a head and a tail around one ``None`` gap."""
    if full or count <= limit:
        return list(range(count))
    head = max(1, limit // 2)
    tail = max(1, limit - head - 1)
    return [*range(head), None, *range(count - tail, count)]


def _shown(indices: Sequence[int | None]) -> int:
    return sum(1 for index in indices if index is not None)


def matrix_table(
    matrix: Array,
    corner: str,
    row_label: str,
    box: Box,
    options: RichOptions,
    what: tuple[str, str] = ("rows", "columns"),
    border_style: str | None = None,
    edge: bool = True,
) -> RenderableType:
    """A 2-D array as a right-aligned table: header ``corner | 0 1 ..``, rows ``{row_label}{i}``.

    Elided rows and columns become an ellipsis, and a note under the table says how many
    are shown and how to see them all.
    """
    rows, cols = (int(n) for n in matrix.shape)
    row_pick = pick(rows, options.max_rows, options.full)
    col_pick = pick(cols, options.max_columns, options.full)
    ellipsis = options.symbols.ellipsis
    note: Text | None = None
    if _shown(row_pick) < rows or _shown(col_pick) < cols:
        note = Text(
            f"showing {_shown(row_pick)} of {rows} {what[0]}, {_shown(col_pick)} of {cols} "
            f"{what[1]}; {FULL_HINT}", style="dim"
        )
    table = Table(
        box=box, border_style=border_style,
        header_style="bold", show_edge=edge,
    )
    table.add_column(cell(options.safe(corner)), justify="left", no_wrap=True, style="dim")
    for col in col_pick:
        # no_wrap: a number is never folded or cut; the CLI widens the view instead.
        table.add_column(cell(ellipsis if col is None else str(col)), justify="right",
                         no_wrap=True)
    for row in row_pick:
        if row is None:
            table.add_row(cell(ellipsis), *(cell(ellipsis) for _ in col_pick))
            continue
        table.add_row(
            cell(f"{row_label}{row}"),
            *(cell(ellipsis if col is None
                   else fmt_float(float(matrix[row, col]), options.precision))
              for col in col_pick),
        )
    return table if note is None else Group(table, note)


def batched_tables(
    tensor: Array,
    name: str,
    box: Box,
    options: RichOptions,
    border_style: str | None = None,
    edge: bool = True,
) -> list[RenderableType]:
    """One ``[t, feature]`` table per batch item of a ``[batch, tokens, width]`` tensor."""
    batch, tokens, _width = (int(n) for n in tensor.shape)
    if batch == 0 or tokens == 0:
        return [Text(f"{name}: no values (shape {fmt_shape(tensor.shape)})", style="dim")]
    out: list[RenderableType] = []
    batch_pick = pick(batch, options.max_batches, options.full)
    for item in batch_pick:
        if item is None:
            hidden = batch - _shown(batch_pick)
            out.append(Text(
                f"{options.symbols.ellipsis} {hidden} more batch items; {FULL_HINT}", style="dim"
            ))
            continue
        out.append(matrix_table(
            tensor[item], f"{name} b={item}", "t", box, options, ("tokens", "features"),
            border_style, edge,
        ))
    return out


@dataclass
class Part:
    """One piece of a :class:`Row`: a body, drawn in a panel when ``box`` is given."""

    body: RenderableType
    title: Text | str | None = None
    box: Box | None = CARD
    border_style: str | None = None

    def panel(self, width: int | None) -> RenderableType:
        if self.box is None:
            return self.body
        return Panel(
            self.body, box=self.box, title=self.title, title_align="left",
            border_style=self.border_style or "none", width=width, expand=width is None,
        )

    def required(self, console: Console, options: ConsoleOptions) -> int:
        """The narrowest width that shows the body without breaking a number or a name."""
        wide = options.update_width(MEASURE_WIDTH)
        need = Measurement.get(console, wide, self.body).minimum
        if self.box is not None:
            title = Text(self.title) if isinstance(self.title, str) else self.title
            need = max(need, title.cell_len + 2 if title is not None else 0) + 4
        return need


class Row:
    """Parts side by side when they all fit the width, stacked (full width) when not.

    The choice is made at render time from the width rich offers, so the same renderable
    gives the wide figure in a wide terminal and the stacked one in a narrow terminal.
    """

    def __init__(
        self, parts: Iterable[Part], gap: int = 1, stack_expand: bool = True, fill: bool = True
    ) -> None:
        self.parts = list(parts)
        self.gap = gap
        self.stack_expand = stack_expand
        self.fill = fill

    def _side_by_side(self, console: Console, options: ConsoleOptions) -> bool:
        count = len(self.parts)
        if count < 2:
            return False
        column = (options.max_width - self.gap * (count - 1)) // count
        return all(part.required(console, options) <= column for part in self.parts)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self._side_by_side(console, options):
            grid = Table.grid(padding=(0, self.gap), expand=self.fill)
            for _ in self.parts:
                grid.add_column(ratio=1 if self.fill else None)
            grid.add_row(*(part.panel(None) for part in self.parts))
            yield grid
            return
        for part in self.parts:
            yield part.panel(None if self.stack_expand else part.required(console, options))

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        widths = [part.required(console, options) for part in self.parts] or [0]
        return Measurement(min(max(widths), options.max_width), options.max_width)


def lines(*items: RenderableType | None) -> Group:
    """A group of the given renderables, skipping ``None``."""
    return Group(*(item for item in items if item is not None))


def cell(value: str | Text) -> Text:
    """A table cell as literal text: data such as ``[1,2,3]`` must never be read as markup."""
    return value if isinstance(value, Text) else Text(value)


def grid(*rows: Sequence[str | Text], nowrap: Sequence[int] = (), dim: Sequence[int] = ()) -> Table:
    """A borderless grid of literal-text rows; long cells fold instead of being cut off."""
    table = Table.grid(padding=(0, 2))
    for index in range(max((len(row) for row in rows), default=0)):
        table.add_column(no_wrap=index in nowrap, overflow="fold",
                         style="dim" if index in dim else None)
    for row in rows:
        table.add_row(*(cell(value) for value in row))
    return table


def pairs(labels: Iterable[tuple[str, str]]) -> Table:
    """A borderless two-column ``label  value`` grid, labels dimmed."""
    return grid(*labels, nowrap=(0,), dim=(0,))


def titled(title: str, passed: bool | None = None) -> Text:
    """A card title in bold, followed by its PASS/FAIL word when it stands for a check."""
    text = Text(title, style="bold")
    if passed is not None:
        text.append("  ")
        text.append_text(status(passed))
    return text
