"""Option decorators and small helpers that every evidence command needs at start-up.

Kept apart from ``console.py`` (rich output) and ``batch.py`` (several fixtures) so that
``qkv report --format text`` loads neither: start-up time is part of the product.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

from qkvcli.cli.common import LazyPath

if TYPE_CHECKING:
    from pathlib import Path

F = TypeVar("F", bound=Callable[..., Any])


class ViewSettings:
    """The rich view's command-line options (plain data; not a dataclass, to start quickly)."""

    __slots__ = ("export_html", "export_svg", "full", "no_color", "precision", "width")

    def __init__(
        self, no_color: bool = False, width: int | None = None, precision: int | None = None,
        full: bool = False, export_svg: Path | None = None, export_html: Path | None = None,
    ) -> None:
        self.no_color = no_color
        self.width = width
        self.precision = precision
        self.full = full
        self.export_svg = export_svg
        self.export_html = export_html

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ViewSettings) and all(
            getattr(self, name) == getattr(other, name) for name in self.__slots__
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"ViewSettings({fields})"

    @property
    def exports(self) -> list[tuple[str, Path]]:
        """``(kind, path)`` for each export asked for, SVG first."""
        out = []
        if self.export_svg is not None:
            out.append(("svg", self.export_svg))
        if self.export_html is not None:
            out.append(("html", self.export_html))
        return out


def view_options(func: F) -> F:
    """Add the rich view's options and hand them to ``func`` as one ``view`` argument."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        kwargs["view"] = ViewSettings(
            no_color=kwargs.pop("no_color"),
            width=kwargs.pop("width"),
            precision=kwargs.pop("precision"),
            full=kwargs.pop("full"),
            export_svg=kwargs.pop("export_svg"),
            export_html=kwargs.pop("export_html"),
        )
        return func(*args, **kwargs)

    path = click.Path(path_type=LazyPath, dir_okay=False)
    options = [
        click.option("--export-html", type=path, metavar="FILE",
                     help="Also write the rich view as HTML to FILE (atomically)."),
        click.option("--export-svg", type=path, metavar="FILE",
                     help="Also write the rich view as SVG to FILE (atomically)."),
        click.option("--full", is_flag=True,
                     help="Rich view: show every value of large tensors instead of eliding."),
        click.option("--precision", type=click.IntRange(0, 17), default=None,
                     help="Rich view: decimals for values (default 6; gradcheck 9)."),
        click.option("--width", type=click.IntRange(min=20), default=None,
                     help="Rich view: columns to lay out for (default: the terminal's, "
                          "or COLUMNS)."),
        click.option("--no-color", is_flag=True,
                     help="Rich view: no colour (as NO_COLOR does); borders and words remain."),
    ]
    result: Any = wrapper
    for option in options:
        result = option(result)
    return result  # type: ignore[no-any-return]


def stdout_is_terminal() -> bool:
    """Whether standard output is a terminal (what ``--format auto`` looks at)."""
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def resolve_format(fmt: str, output: Path | None) -> str:
    """``auto`` becomes ``rich`` on a terminal and ``text`` otherwise (pipes, files, CI)."""
    if fmt != "auto":
        return fmt
    return "rich" if output is None and stdout_is_terminal() else "text"



def batch_options(func: F) -> F:
    """``--expect GOLDEN`` and ``--junit FILE`` for ``qkv run``."""
    func = click.option(
        "--junit", type=click.Path(path_type=LazyPath, dir_okay=False), default=None,
        help="Also write a JUnit XML report to FILE (atomically), for CI systems.",
    )(func)
    func = click.option(
        "--expect", "golden", type=click.Path(path_type=LazyPath, dir_okay=False), default=None,
        metavar="GOLDEN",
        help="Compare the rendered report with the golden file GOLDEN instead of printing it; "
        "show a unified diff and exit 1 when they differ. One fixture only.",
    )(func)
    return func


def is_batch(fixtures: Sequence[Path], junit: Path | None) -> bool:
    """Whether ``qkv run`` runs in batch mode: several arguments, a directory, or ``--junit``."""
    return len(fixtures) > 1 or junit is not None or any(path.is_dir() for path in fixtures)
