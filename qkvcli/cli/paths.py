"""Path arguments: refused when click converts them if no system can open them, given as ``Path``.

A NUL byte or a name over the file system's limits makes ``os.stat`` and friends raise
``ValueError`` or ``OSError`` in places that expect neither (click itself stats a path
before any command code runs). :class:`SafePath`, the type of every path option and
argument, checks the text first, so such a path is a usage error (exit 2) naming the
option, and hands the command a :class:`LazyPath`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from pathlib import Path


class LazyPath:
    """A click ``path_type`` that gives a :class:`pathlib.Path`.

    A start-up measure: pathlib (with urllib.parse and ipaddress behind it) costs about
    7 ms to import, a large share of a report's whole run; this imports it only once a
    path is given.
    """

    def __new__(cls, value: str) -> Path:  # type: ignore[misc]
        from pathlib import Path

        return Path(value)


class SafePath(click.Path):
    """``click.Path`` that runs :func:`check_path_argument` before click looks at the file.

    Takes ``click.Path``'s keyword arguments; ``path_type`` defaults to :class:`LazyPath`.
    """

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("path_type", LazyPath)
        super().__init__(**kwargs)

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if isinstance(value, str):
            try:
                check_path_argument(value)
            except click.BadParameter as error:
                self.fail(error.message, param, ctx)
        return super().convert(value, param, ctx)


def check_path_argument(value: str) -> None:
    """Refuse a path no system can open: a NUL byte, or a name over the system's limits.

    Raises :class:`click.BadParameter` (exit 2, the option named) before any file call
    could fail in a way the command does not expect.
    """
    from qkvcli.core.text import printable

    if "\0" in value:
        raise click.BadParameter(f"{printable(value)}: a path with a NUL byte is refused")
    try:
        encoded = os.fsencode(value)
    except UnicodeEncodeError:
        raise click.BadParameter(f"{printable(value)}: not a valid file name here") from None
    name_max, path_max = path_limits()
    if len(encoded) > path_max:
        raise click.BadParameter(
            f"{printable(value)}: path is longer than this system's limit of {path_max} bytes"
        )
    longest = max((len(os.fsencode(part)) for part in value.split(os.sep)), default=0)
    if longest > name_max:
        raise click.BadParameter(
            f"{printable(value)}: a file name is longer than this system's limit of "
            f"{name_max} bytes"
        )


def path_limits() -> tuple[int, int]:
    """``(NAME_MAX, PATH_MAX)`` of the current directory's file system (255, 4096 if unknown)."""
    try:
        return os.pathconf(".", "PC_NAME_MAX"), os.pathconf(".", "PC_PATH_MAX")
    except (OSError, ValueError, AttributeError):
        return 255, 4096
