"""Fitting the rich views to the width: parts side by side or stacked, cards with PASS/FAIL titles.

Everything here builds renderables from plain values; nothing prints. Only the rich path
imports this module (``qkv report --format text`` never loads rich).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.box import Box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from qkvcli.render.rich.boxes import CARD

MEASURE_WIDTH = 10_000
"""Width offered when asking how wide something *needs* to be (no clamping to the screen)."""


def status(passed: bool) -> Text:
    """The word PASS or FAIL; colour only adds to the word."""
    return Text("PASS", style="bold green") if passed else Text("FAIL", style="bold red")


def titled(title: str, passed: bool | None = None) -> Text:
    """A card title in bold, followed by its PASS/FAIL word when it stands for a check."""
    text = Text(title, style="bold")
    if passed is not None:
        text.append("  ")
        text.append_text(status(passed))
    return text


def lines(*items: RenderableType | None) -> Group:
    """A group of the given renderables, skipping ``None``."""
    return Group(*(item for item in items if item is not None))


class Part:
    """One piece of a :class:`Row`: a body, drawn in a panel when ``box`` is given.

    An object, not a record: it keeps ``widths``, :meth:`required` per console and
    options (a nested view asks for it at every level).
    """

    __slots__ = ("body", "border_style", "box", "title", "widths")

    def __init__(self, body: RenderableType, title: Text | str | None = None,
                 box: Box | None = CARD, border_style: str | None = None) -> None:
        self.body = body
        self.title = title
        self.box = box
        self.border_style = border_style
        self.widths: dict[tuple[object, ...], tuple[Console, int]] = {}

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
        # Measuring walks every cell below, and the same answer is asked for again and again
        # (the CLI's width check, then each Row's choice at every level of nesting). At this
        # fixed width a measurement depends on the console and the stream, not on what a
        # container changes on the way down (height, justify, overflow, highlight).
        key = (id(console), wide.encoding, wide.legacy_windows, wide.is_terminal)
        known = self.widths.get(key)
        if known is not None and known[0] is console:
            return known[1]
        need = Measurement.get(console, wide, self.body).minimum
        if self.box is not None:
            title = Text(self.title) if isinstance(self.title, str) else self.title
            need = max(need, title.cell_len + 2 if title is not None else 0) + 4
        self.widths[key] = (console, need)
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


class Fitted:
    """The first of several layouts, widest first, that fits the width; the last if none does.

    Lets a view show fewer columns (elided with a note) rather than squeeze a number.
    Measured as its narrowest layout, so the CLI widens the screen only when even that
    one does not fit.
    """

    def __init__(self, layouts: Sequence[RenderableType]) -> None:
        self.layouts = list(layouts)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        wide = options.update_width(MEASURE_WIDTH)
        for layout in self.layouts[:-1]:
            if Measurement.get(console, wide, layout).minimum <= options.max_width:
                yield layout
                return
        yield self.layouts[-1]

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        # As narrow as the narrowest layout, as wide as the widest: measured as the narrowest
        # alone, a table cell would offer only that much and every key column became ``…``.
        narrowest = Measurement.get(console, options, self.layouts[-1])
        widest = Measurement.get(console, options, self.layouts[0])
        return Measurement(narrowest.minimum, max(narrowest.maximum, widest.maximum))


class Foldable:
    """Text that may fold inside a long word (a path, a module name), so that it never
    makes a view wider than :data:`FOLD_AT` columns; numbers are never given to it."""

    def __init__(self, text: Text) -> None:
        self.text = text
        self.text.overflow = "fold"

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.text

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        found = Measurement.get(console, options, self.text)
        return Measurement(min(found.minimum, FOLD_AT), found.maximum)


FOLD_AT = 20
"""The widest a :class:`Foldable` text asks a view to be before folding a word."""


class Flow:
    """Items on one line, wrapped only *between* items: a legend entry never splits.

    ``Text`` wraps at any space, which parts a border sample (``══``) from its label
    (``value (double)``) at 60 columns; here each item moves to the next line whole.
    """

    def __init__(self, items: Sequence[Text], gap: int = 2) -> None:
        self.items = list(items)
        self.gap = gap

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        line = Text()
        for item in self.items:
            if line.cell_len and line.cell_len + self.gap + item.cell_len > options.max_width:
                yield line
                line = Text()
            if line.cell_len:
                line.append(" " * self.gap)
            line.append_text(item)
        yield line

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        widths = [item.cell_len for item in self.items] or [0]
        total = sum(widths) + self.gap * (len(widths) - 1)
        return Measurement(max(widths), total)
