"""The rich path of the CLI: display options, building the Console, printing, exporting, progress.

rich is imported only inside these functions, so ``qkv report --format text`` never
loads it. The Console is built inside the command (never at import time) so that
``NO_COLOR``, ``FORCE_COLOR``, ``TTY_COMPATIBLE``, ``TERM=dumb`` and ``COLUMNS`` are read
when the command runs.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from io import StringIO
from typing import TYPE_CHECKING, Any, TypeVar

import click

from qkvcli.cli.io import write_file
from qkvcli.cli.options import ViewSettings

if TYPE_CHECKING:
    from pathlib import Path

    from rich.console import Console, RenderableType
    from rich.progress import Progress, TaskID

    from qkvcli.render.rich.options import RichOptions

F = TypeVar("F", bound=Callable[..., Any])

MEASURE_WIDTH = 10_000
"""Width offered when measuring how wide a view must be (no clamping to the screen)."""
MAX_FIGURE_WIDTH = 160
"""The widest layout a rich view gets: wider boxes only stretch empty space across the screen."""
PROGRESS_DELAY = 0.5
"""Seconds a gradient check runs before its progress bar appears (quick checks never show one)."""


def make_console(
    view: ViewSettings,
    file: Any = None,
    record: bool = False,
    stderr: bool = False,
    plain: bool = False,
) -> Console:
    """A Console for this command, honouring the environment and the view options.

    ``plain`` writes no escape codes at all (for ``-o FILE``). ``NO_COLOR`` and
    ``FORCE_COLOR`` are read by rich itself; ``--no-color`` adds to ``NO_COLOR``.
    """
    from rich.console import Console

    width = view.width
    columns = os.environ.get("COLUMNS", "")
    if width is None and columns.isdigit() and int(columns) > 0:
        width = int(columns)
    height = None
    if width is not None:
        # rich ignores a width on a TERM=dumb terminal unless the height is known too.
        lines = os.environ.get("LINES", "")
        height = int(lines) if lines.isdigit() and int(lines) > 0 else 25
    extra: dict[str, Any] = {}
    if plain:
        extra = {"force_terminal": False, "color_system": None}
    return Console(
        file=file, width=width, height=height, record=record, stderr=stderr,
        no_color=True if view.no_color else None, markup=False, emoji=False,
        highlight=False, **extra,
    )


def rich_options(view: ViewSettings, console: Console, default_precision: int) -> RichOptions:
    """Display options for ``console``: ASCII glyphs when its stream cannot encode Unicode."""
    from qkvcli.render.rich.options import RichOptions

    precision = default_precision if view.precision is None else view.precision
    return RichOptions(precision=precision, full=view.full, ascii=console.options.ascii_only,
                       shading=view.shading)


def show_rich(
    build: Callable[[RichOptions], RenderableType],
    view: ViewSettings,
    output: Path | None,
    default_precision: int,
    title: str,
) -> None:
    """Print the view built by ``build`` (or write it to ``output``), then export it."""
    record = bool(view.exports)
    if output is None:
        console = make_console(view, record=record)
        print_fitted(console, build(rich_options(view, console, default_precision)))
    else:
        buffer = StringIO()
        console = make_console(view, file=buffer, record=record, plain=True)
        # A file has no screen to be too narrow for: widen without a word.
        print_fitted(console, build(rich_options(view, console, default_precision)),
                     quiet=True)
        write_file(output, buffer.getvalue())
    if record:
        _write_exports(console, view, title)


def screen_width(err: bool = False) -> int | None:
    """The width of the screen standard output (``err``: standard error) is shown on:
    ``COLUMNS`` when set, the terminal's when the stream is one, else ``None`` (a pipe or
    a file, whose lines are never wrapped)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    stream = sys.stderr if err else sys.stdout
    try:
        if not stream.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    import shutil

    return shutil.get_terminal_size().columns


def echo_wrapped(text: str, err: bool = True, width: int | None = None) -> None:
    """Print each line of ``text`` wrapped at word boundaries to ``width`` (default: the
    stream's :func:`screen_width`, no wrapping without one)."""
    from qkvcli.render.wrap import wrap_line

    width = width or screen_width(err)
    for line in text.split("\n"):
        for part in wrap_line(line, width) if width else [line]:
            click.echo(part, err=err)


def narrow_screen(
    build: Callable[[RichOptions], RenderableType], view: ViewSettings, default_precision: int
) -> int | None:
    """The screen's width when the view does not fit it (show text wrapped to it), else
    ``None`` (show the view).

    Laid out wider than the screen, every box would break where the terminal wraps its
    lines (at 40 columns the chapter's figure needs 57); the text report, wrapped at word
    boundaries, reads better there. stderr says so, and how to get the figure anyway.
    """
    from qkvcli.cli.options import stdout_is_terminal

    columns = os.environ.get("COLUMNS", "")
    if view.width is None and not columns.isdigit() and not stdout_is_terminal():
        return None  # no screen: a pipe or a file gets the view laid out as wide as it needs
    console = make_console(view)
    width = min(console.width, MAX_FIGURE_WIDTH)
    need = needed_width(console, build(rich_options(view, console, default_precision)))
    if need <= width:
        return None
    echo_wrapped(f"qkv: the rich view needs {need} columns, the screen has {console.width}; "
                 f"showing text wrapped to {console.width} (--width {need} shows the view)",
                 width=screen_width(err=True) or console.width)
    return console.width


def export_only(
    build: Callable[[RichOptions], RenderableType],
    view: ViewSettings,
    default_precision: int,
    title: str,
) -> None:
    """Render the rich view off screen only to export it (the shown format was not rich)."""
    if not view.exports:
        return
    console = make_console(view, file=StringIO(), record=True)
    print_fitted(console, build(rich_options(view, console, default_precision)), quiet=True)
    _write_exports(console, view, title)


def needed_width(console: Console, renderable: RenderableType) -> int:
    """The fewest columns that show ``renderable`` with every number and name whole."""
    from rich.measure import Measurement

    wide = console.options.update_width(MEASURE_WIDTH)
    return Measurement.get(console, wide, renderable).minimum


def print_fitted(console: Console, renderable: RenderableType, quiet: bool = False) -> None:
    """Print at most :data:`MAX_FIGURE_WIDTH` wide, widening if the screen is too narrow.

    rich would otherwise squeeze columns until numbers are cut or vanish; lines longer
    than the terminal are the lesser harm, and stderr says why, before the view and again
    after it (a long view scrolls the first notice away).
    """
    if console.width > MAX_FIGURE_WIDTH:
        console.size = (MAX_FIGURE_WIDTH, console.height)
    need = needed_width(console, renderable)
    hint = ""
    if need > console.width:
        hint = (f"qkv: the rich view needs {need} columns to show every number whole; "
                f"laid out for {need} instead of {console.width} "
                "(--format text suits a narrow screen)")
        if not quiet:
            click.echo(hint, err=True)
        console.size = (need, console.height)
    console.print(renderable)
    if hint and not quiet:
        click.echo(hint, err=True)


def _write_exports(console: Console, view: ViewSettings, title: str) -> None:
    from html import escape

    for form, path in view.exports:
        if form == "svg":
            text = console.export_svg(title=title, clear=False)
        else:
            # rich's page has no <title>: a browser tab and a bookmark should name the view.
            text = console.export_html(clear=False).replace(
                "<head>", f"<head>\n<title>{escape(title)}</title>", 1)
        write_file(path, text)


class ProgressBar:
    """A transient progress bar on stderr (``title``, the bar, ``done/total``, then an
    estimate of the time left or the caller's description), drawn only once the work has
    run ``delay`` seconds; use it as a context manager so the bar is always removed."""

    def __init__(self, console: Console, title: str, eta: bool = False,
                 delay: float = PROGRESS_DELAY) -> None:
        self.console, self.title, self.eta, self.delay = console, title, eta, delay
        self.started = time.monotonic()
        self.progress: Progress | None = None
        self.task: TaskID | None = None

    def update(self, done: int, total: int, description: str = "") -> None:
        """Show ``done`` of ``total`` (the bar appears once ``delay`` has passed)."""
        if self.progress is None:
            if time.monotonic() - self.started < self.delay:
                return
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
            )

            tail = ((TextColumn("eta"), TimeRemainingColumn()) if self.eta
                    else (TextColumn("{task.description}"),))
            self.progress = Progress(TextColumn(self.title), BarColumn(), MofNCompleteColumn(),
                                     *tail, console=self.console, transient=True)
            self.progress.start()
            self.task = self.progress.add_task(self.title if self.eta else "", total=total)
        assert self.task is not None
        self.progress.update(self.task, completed=done, total=total, description=description
                             or (self.title if self.eta else ""))

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()


class GradcheckProgress(ProgressBar):
    """The gradient check's bar: call it as ``progress(done, total)`` (the core's callback)."""

    def __init__(self, console: Console, delay: float = PROGRESS_DELAY) -> None:
        super().__init__(console, "gradcheck", eta=True, delay=delay)

    def __call__(self, done: int, total: int) -> None:
        self.update(done, total)


class CheckProgress(ProgressBar):
    """``qkv check``'s bar: called as ``progress(family, done, total, calls)``, it shows
    the families done, the one running and the calls so far, once the check has run a
    second."""

    def __init__(self, console: Console, delay: float = 1.0) -> None:
        super().__init__(console, "qkv check", delay=delay)

    def __call__(self, family: str, done: int, total: int, calls: int) -> None:
        self.update(done, total, f"{family}, {calls} calls")


def stderr_console(view: ViewSettings) -> Console | None:
    """A console on stderr when it is an interactive terminal (where a bar can be drawn),
    else ``None``."""
    try:
        if not sys.stderr.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    console = make_console(view, stderr=True)
    return console if console.is_interactive else None


def gradcheck_progress(fmt: str, view: ViewSettings) -> GradcheckProgress | None:
    """A progress reporter when the view is rich and stderr is an interactive terminal."""
    console = stderr_console(view) if fmt == "rich" else None
    return None if console is None else GradcheckProgress(console)
