"""Files and paths: the ``SafePath`` type of every path option, reading and writing.

Path arguments: refused when click converts them if no system can open them, given as ``Path``.

A NUL byte or a name over the file system's limits makes ``os.stat`` and friends raise
``ValueError`` or ``OSError`` in places that expect neither (click itself stats a path
before any command code runs). :class:`SafePath`, the type of every path option and
argument, checks the text first, so such a path is a usage error (exit 2) naming the
option, and hands the command a :class:`LazyPath`.

The CLI's files: reading fixtures and text inputs through the one reader, writing outputs atomically.

Reading goes through :mod:`qkvcli.reading.files` (regular files only, a byte limit,
tensor paths confined to the fixture's directory); a failure is a
:class:`~qkvcli.core.errors.QkvError` naming the file, which the group prints as
``Error: FILE: ...``. Writing goes through a temporary file and a rename, so an output
is either complete or untouched.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import click

from qkvcli.cli.group import InputError, note_file

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


if TYPE_CHECKING:
    from pathlib import Path

    from qkvcli.reading.fixture import Fixture

T = TypeVar("T")
BUNDLED_LABEL = "<bundled ch26-qkv-projections.json>"
CHUNK_CHARS = 1 << 16
"""Standard output is written in pieces of about this many characters."""


def label_of(path: Path | None) -> str:
    """How messages name a fixture: its path (capped, escaped), ``<stdin>``, or the bundled one."""
    if path is None:
        return BUNDLED_LABEL
    if str(path) == "-":
        return "<stdin>"
    from qkvcli.core.text import printable

    return printable(str(path))


def labelled(label: str, read: Callable[[], T]) -> T:
    """``read()``, with any :class:`~qkvcli.core.errors.QkvError` it raises naming ``label``."""
    from qkvcli.core.errors import QkvError

    note_file(label)
    try:
        return read()
    except QkvError as error:
        raise error.in_file(label) from None


def load(path: Path | None, max_elements: int) -> Fixture:
    """Load a chapter fixture (the bundled one without ``path``); errors name the file."""
    from qkvcli.reading.load import load_fixture

    return labelled(label_of(path), lambda: load_fixture(path, max_elements=max_elements))


def read_text(path: Path, what: str) -> str:
    """A UTF-8 text input (a golden or answers file) through the one reader.

    ``what`` names the kind of file in messages (``"golden"``, ``"answer"``).
    """
    from qkvcli.reading.files import read_limited
    from qkvcli.reading.limits import MAX_FILE_BYTES

    data = labelled(label_of(path), lambda: read_limited(path, MAX_FILE_BYTES, what))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputError(f"{label_of(path)}: not UTF-8 text (byte {error.start})") from None


def write_output(text: str | Iterable[str], output: Path | None,
                 protect: Path | None = None) -> None:
    """Print ``text`` (a string, or pieces written as they come, so a large report never
    sits in memory whole), or write it to ``output`` atomically (temp file + rename).

    Refuses to write over ``protect`` (the fixture being read).
    """
    if output is None:
        for chunk in chunked([text] if isinstance(text, str) else text):
            click.echo(chunk, nl=False)
        return
    write_atomic(output, text, protect)


def chunked(pieces: Iterable[str], size: int = CHUNK_CHARS) -> Iterator[str]:
    """``pieces`` joined into strings of about ``size`` characters (a large piece alone).

    A report comes as many small pieces; writing each one costs a call (and, with
    unbuffered output, a system call), so they are gathered first. Memory stays bounded
    by ``size`` plus the largest piece.
    """
    gathered: list[str] = []
    length = 0
    for piece in pieces:
        gathered.append(piece)
        length += len(piece)
        if length >= size:
            yield "".join(gathered)
            gathered.clear()
            length = 0
    if gathered:
        yield "".join(gathered)


def write_atomic(output: Path, text: str | Iterable[str], protect: Path | None = None) -> None:
    """Write ``text`` to ``output`` as UTF-8 via a temp file and a rename: all or nothing.

    Refuses to write over ``protect``. Raises :class:`InputError` when it cannot write.
    """
    if protect is not None and output.exists() and protect.exists():
        if os.path.samefile(output, protect):
            raise InputError(f"{output}: refusing to overwrite the fixture being read")
    if output.is_dir():
        raise InputError(f"{output}: is a directory")
    tmp = write_temp_beside(output, text)
    try:
        os.replace(tmp, output)
    except BaseException:
        remove_quietly(tmp)
        raise


def write_temp_beside(output: Path, text: str | Iterable[str]) -> str:
    """A complete temporary copy of ``text`` in ``output``'s directory; returns its path.

    The file gets the mode a plain ``open(output, "w")`` would give (0666 less the
    umask), not ``mkstemp``'s private 0600. Raises :class:`InputError`.
    """
    directory = output.parent if str(output.parent) else type(output)(".")
    if not directory.is_dir():
        # The same words as the export paths' check (cli/console.py), for every writer.
        raise InputError(f"{output}: no such directory {directory}")
    import tempfile  # only when writing a file: it costs milliseconds of start-up

    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".tmp", dir=directory)
    except OSError as error:
        raise InputError(f"{output}: cannot write ({error.strerror or error})") from None
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.writelines([text] if isinstance(text, str) else text)
    except BaseException:
        remove_quietly(tmp)
        raise
    return tmp


def remove_quietly(path: str) -> None:
    """Delete ``path`` if it exists; ignore failures (used to clean up temporary files)."""
    try:
        os.unlink(path)
    except OSError:
        pass
