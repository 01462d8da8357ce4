"""Path arguments no system can open: refused when click converts them, before any file call.

A NUL byte or a name over the file system's limits makes ``os.stat`` and friends raise
``ValueError`` or ``OSError`` in places that expect neither; checked here, they become a
usage error (exit 2) naming the option.
"""

from __future__ import annotations

import os

import click


def check_path_argument(value: str) -> None:
    """Refuse a path no system can open: a NUL byte, or a name over the system's limits.

    Raises :class:`click.BadParameter` (exit 2, the option named) before any file call
    could fail in a way the command does not expect.
    """
    from qkvcli.core.text import printable

    if "\0" in value:
        raise click.BadParameter(f"{printable(value)}: a path with a NUL byte is refused")
    name_max, path_max = path_limits()
    if len(os.fsencode(value)) > path_max:
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
