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
from qkvcli.render.rich.tables import Noted, grid
from qkvcli.render.wording import VERDICT, verdict_counts

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


def verdict_line(passed: bool, done: int, total: int) -> Text:
    """``verdict: PASS (8 of 8 checks passed)``: the last line of every figure, the text
    report's words (:func:`~qkvcli.render.wording.verdict`) in bold and colour."""
    line = Text(VERDICT, style="bold")
    line.append_text(status(passed))
    line.append(" " + verdict_counts(done, total))
    return line


def card(title: str | Text, passed: bool | None, *items: RenderableType | None,
         box: Box = CARD, style: str | None = None) -> Part:
    """A section of a view drawn as a panel: its title (bold, with PASS/FAIL when the
    section stands for a check) over its items (``None`` items skipped)."""
    shown = [item for item in items if item is not None]
    title = titled(title, passed) if isinstance(title, str) else title
    return Part(shown[0] if len(shown) == 1 else Group(*shown), title, box, style)


def beside(bodies: Iterable[RenderableType], gap: int = 2) -> Row:
    """Bodies side by side, each as wide as it needs, stacked when they do not all fit."""
    return Row([Part(body, box=None) for body in bodies], gap=gap, stack_expand=False,
               fill=False)


def verdicts(rows: Iterable[tuple[bool, str | Text, str | Text]]) -> Table:
    """Each check's PASS/FAIL word, name and evidence, one a row."""
    return grid(*((status(ok), name, detail) for ok, name, detail in rows), nowrap=(0, 1))


class Part:
    """One piece of a :class:`Row`: a body, drawn in a panel when ``box`` is given; it keeps
    its measured widths per console (a nested view asks for them at every level)."""

    __slots__ = ("body", "border_style", "box", "title", "widths")

    def __init__(self, body: RenderableType, title: Text | str | None = None,
                 box: Box | None = CARD, border_style: str | None = None) -> None:
        self.body = body
        self.title = title
        self.box = box
        self.border_style = border_style
        self.widths: dict[tuple[object, ...], tuple[Console, int, int]] = {}

    def panel(self, width: int | None) -> RenderableType:
        if self.box is None:
            return self.body
        return Panel(
            self.body, box=self.box, title=self.title, title_align="left",
            border_style=self.border_style or "none", width=width, expand=width is None,
        )

    def measure(self, console: Console, options: ConsoleOptions) -> tuple[int, int]:
        """The narrowest width that shows the body without breaking a number or a name
        (a :class:`Fitted` body: its widest layout, so parts stack before any is elided),
        and the width it takes when nothing limits it."""
        wide = options.update_width(MEASURE_WIDTH)
        # Measuring walks every cell below, asked again at every level of nesting. At this
        # fixed width it depends on the console and the stream alone, not on what a
        # container changes on the way down (height, justify, overflow, highlight).
        key = (id(console), wide.encoding, wide.legacy_windows, wide.is_terminal)
        known = self.widths.get(key)
        if known is not None and known[0] is console:
            return known[1], known[2]
        body = self.body.layouts[0] if isinstance(self.body, Fitted) else self.body
        found = Measurement.get(console, wide, body)
        need, natural = found.minimum, found.maximum
        if self.box is not None:
            title = Text(self.title) if isinstance(self.title, str) else self.title
            least = title.cell_len + 2 if title is not None else 0
            need, natural = max(need, least) + 4, max(natural, least) + 4
        self.widths[key] = (console, need, natural)
        return need, natural

    def required(self, console: Console, options: ConsoleOptions) -> int:
        """The narrowest width that shows the body without breaking a number or a name."""
        if isinstance(self.body, Fitted):
            return Measurement.get(console, options.update_width(MEASURE_WIDTH), self.body).minimum
        return self.measure(console, options)[0]


class Row:
    """Parts side by side when they all fit the width rich offers, stacked when not.

    ``fill`` parts share the width equally; the others each get what they need, then what
    they would take, in order, each drawn at exactly that width (a :class:`Fitted` part
    picks its layout for it), so no number is ever squeezed. Side by side, the parts'
    :class:`Noted` notes go under the row, one a line, so they never interleave.
    """

    def __init__(
        self, parts: Iterable[Part], gap: int = 1, stack_expand: bool = True, fill: bool = True
    ) -> None:
        self.parts = list(parts)
        self.gap = gap
        self.stack_expand = stack_expand
        self.fill = fill

    def _widths(self, console: Console, options: ConsoleOptions) -> list[int] | None:
        """Each part's width side by side, or ``None`` to stack them."""
        count = len(self.parts)
        if count < 2:
            return None
        room = options.max_width - self.gap * (count - 1)
        measured = [part.measure(console, options) for part in self.parts]
        if self.fill:
            column = room // count
            return [column] * count if all(need <= column for need, _ in measured) else None
        spare = room - sum(need for need, _ in measured)
        if spare < 0:
            return None
        widths = []
        for need, natural in measured:
            more = min(spare, max(0, natural - need))
            widths.append(need + more)
            spare -= more
        return widths

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        widths = self._widths(console, options)
        if widths is None:
            for part in self.parts:
                yield part.panel(None if self.stack_expand else part.required(console, options))
            return
        grid = Table.grid(padding=(0, self.gap), expand=self.fill)
        cells: list[RenderableType] = []
        notes: list[Text] = []
        for part, width in zip(self.parts, widths, strict=True):
            grid.add_column(ratio=1 if self.fill else None, width=None if self.fill else width)
            body = part.panel(None)
            if part.box is None:
                body = resolved(body, console, options.update_width(width))
            body, found = unnoted(body)
            notes.extend(n for n in found if n.plain not in {m.plain for m in notes})
            cells.append(body)
        grid.add_row(*cells)
        yield grid
        yield from notes

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        widths = [part.required(console, options) for part in self.parts] or [0]
        return Measurement(min(max(widths), options.max_width), options.max_width)


def unnoted(body: RenderableType) -> tuple[RenderableType, list[Text]]:
    """``body`` without the notes of the :class:`Noted` in it (in it or its groups), and
    those notes."""
    if isinstance(body, Noted):
        return body.body, body.notes
    if isinstance(body, Group):
        parts = [unnoted(item) for item in body.renderables]
        return Group(*(item for item, _ in parts)), [n for _, found in parts for n in found]
    return body, []


def resolved(body: RenderableType, console: Console, options: ConsoleOptions) -> RenderableType:
    """What ``body`` draws at ``options``' width: a :class:`Fitted` body's chosen layout."""
    while isinstance(body, Fitted):
        body = body.choose(console, options)
    return body


class Fitted:
    """The first of several layouts, widest first, that fits the width; the last if none does.

    Lets a view show fewer columns (elided with a note) rather than squeeze a number.
    Measured as its narrowest layout, so the CLI widens the screen only when even that
    one does not fit.
    """

    def __init__(self, layouts: Sequence[RenderableType]) -> None:
        self.layouts = list(layouts)

    def choose(self, console: Console, options: ConsoleOptions) -> RenderableType:
        """The widest layout that fits ``options.max_width`` (else the narrowest)."""
        wide = options.update_width(MEASURE_WIDTH)
        for layout in self.layouts[:-1]:
            if Measurement.get(console, wide, layout).minimum <= options.max_width:
                return layout
        return self.layouts[-1]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.choose(console, options)

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
