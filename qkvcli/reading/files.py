"""The one reader of input files: one file policy and one confinement rule.

Every command reads fixtures, ``.npy`` tensors, golden files and answer files through
here, so every one of them gets the same policy:

* :func:`read_limited` / :func:`open_regular`: regular files only, refused *before* a
  blocking open (a FIFO or a terminal would otherwise hang the command), and at most a
  byte limit read, counted while reading rather than trusted from ``st_size``;
* ``-`` means standard input, read under the same byte limit;
* :func:`confined`: a path a fixture names (an ``npy`` tensor) is relative to the
  fixture's directory and may not leave it: absolute paths, ``..`` components, NUL
  bytes and symbolic links that resolve outside are refused.

The confinement rule keeps a promise about fixtures people download: such a fixture
cannot make qkv read outside its own directory. Only the user, on the command line,
lifts it: inside :func:`trusting_paths` (``qkv attend --trust-paths``, ``qkv validate
--trust-paths``) a fixture's path may be absolute, hold ``..`` or be a symbolic link to
anywhere, as a Hugging Face hub snapshot's ``model.safetensors`` is (a link to
``../../blobs/<sha>``). A path typed on the command line (``qkv inspect PATH``, ``qkv
init --from-safetensors PATH``) is the user's own choice and is never confined.

Every file opened here is remembered by device and inode (:func:`files_read`), so the
writers of :mod:`qkvcli.cli.io` can refuse to replace any file the command read, not
only those named on its command line (a fixture's ``.npy`` tensor, a checkpoint).
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path  # NumPy imports it before any of qkv's modules
from typing import BinaryIO, TypeAlias

from qkvcli.core.errors import QkvError
from qkvcli.core.text import printable
from qkvcli.reading.problems import FixtureError

StrPath: TypeAlias = "str | os.PathLike[str]"
STDIN = "-"
"""The path that means standard input."""
STDIN_LABEL = "<stdin>"
"""How messages name standard input."""
READ_CHUNK = 1 << 20
"""Bytes per read once a file turns out longer than it said (and of standard input)."""

_READ: set[tuple[int, int]] = set()
"""``(st_dev, st_ino)`` of every file :func:`open_regular` opened since :func:`forget_reads`."""

_FILE_TYPES = (
    (stat.S_ISDIR, "directory"),
    (stat.S_ISFIFO, "FIFO"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
)


class InputFileError(QkvError):
    """A file the reader refuses: ``path`` as given, ``problem`` says why (``no such file``).

    The message is ``"<path>: <problem>"``, the form the CLI prints after ``Error:``.
    """

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{printable(path)}: {problem}")

    def in_file(self, file: str) -> InputFileError:
        """Unchanged: the message already names the file."""
        return self


def _article(noun: str) -> str:
    return "an" if noun[:1].lower() in "aeiou" else "a"


def _refuse_special(name: str, mode: int, what: str) -> None:
    """Raise :class:`InputFileError` unless ``mode`` is a regular file's."""
    if stat.S_ISREG(mode):
        return
    found = next((label for test, label in _FILE_TYPES if test(mode)), "special file")
    raise InputFileError(name, f"is {_article(found)} {found}, not {_article(what)} {what} file")


def _os_problem(error: OSError) -> str:
    if isinstance(error, FileNotFoundError):
        return "no such file"
    if isinstance(error, PermissionError):
        return "permission denied"
    if error.errno == errno.ENAMETOOLONG:
        return "file name too long for this system"
    return f"cannot read ({error.strerror or error})"


def _missing(name: str) -> str:
    """``no such file``, or, for a symbolic link whose target is missing, where it points."""
    try:
        target = os.readlink(name)
    except (OSError, ValueError):
        return "no such file"
    return f"a symbolic link to {printable(target, 200)}, which does not exist"


def check_path_text(name: str) -> None:
    """Refuse a path no file system can hold: a NUL byte. Raises :class:`InputFileError`."""
    if "\0" in name:
        raise InputFileError(name, "a path with a NUL byte is refused")


def open_regular(path: StrPath, what: str = "fixture") -> BinaryIO:
    """Open ``path`` for binary reading if, and only if, it is a regular file.

    ``what`` names the expected file in messages (``"is a directory, not a fixture
    file"``). The path is checked with ``stat`` first, then opened non-blocking and
    checked again on the open descriptor, so a FIFO or device is refused without ever
    blocking, and a swap between the check and the open is caught. Raises
    :class:`InputFileError` (missing, not a regular file, unreadable).
    """
    name = os.fspath(path)
    check_path_text(name)
    try:
        _refuse_special(name, os.stat(name).st_mode, what)
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(name, flags)
    except FileNotFoundError:
        raise InputFileError(name, _missing(name)) from None
    except OSError as error:
        raise InputFileError(name, _os_problem(error)) from None
    try:
        info = os.fstat(fd)
        _refuse_special(name, info.st_mode, what)
        if hasattr(info, "st_ino"):
            _READ.add((info.st_dev, info.st_ino))
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def files_read() -> frozenset[tuple[int, int]]:
    """``(st_dev, st_ino)`` of every file opened for reading since :func:`forget_reads`."""
    return frozenset(_READ)


def note_reads(ids: Iterable[tuple[int, int]]) -> None:
    """Add files another process read for this command (a ``--jobs`` worker's)."""
    _READ.update(ids)


def forget_reads() -> None:
    """Start a new command's record of the files it read (the group calls it)."""
    _READ.clear()


def read_limited(path: StrPath, limit: int, what: str = "fixture") -> bytes:
    """The bytes of the regular file ``path``, refused when there are more than ``limit``.

    A size ``stat`` reports over the limit is refused before anything is read; the read
    itself stops after ``limit + 1`` bytes, so a file that grows, or reports a wrong size,
    cannot make it read more. Raises :class:`InputFileError`.
    """
    name = os.fspath(path)
    if name == STDIN:
        return read_stdin(limit, what)
    with open_regular(name, what) as handle:
        try:
            size = os.fstat(handle.fileno()).st_size
            if size > limit:
                raise InputFileError(name, f"file is {size} bytes; {what}s are limited to {limit}")
            data = read_at_most(handle, limit, expected=size)
        except OSError as error:
            raise InputFileError(name, _os_problem(error)) from None
    if len(data) > limit:
        raise InputFileError(name, f"file is more than {limit} bytes; {what}s are limited to {limit}")
    return data


def read_at_most(stream: BinaryIO, limit: int, expected: int = READ_CHUNK) -> bytes:
    """``stream``'s bytes up to ``limit + 1`` of them (one more than allowed tells "too large").

    Asks first for ``expected`` bytes and one more (a file's reported size), then in
    :data:`READ_CHUNK` pieces: a single ``read(limit + 1)`` would reserve the whole limit
    (256 MiB for a fixture) however small the file.
    """
    pieces: list[bytes] = []
    total = 0
    want = min(expected, limit) + 1
    while total <= limit:
        asked = min(want, limit + 1 - total)
        piece = stream.read(asked)
        pieces.append(piece)
        total += len(piece)
        if len(piece) < asked:  # a buffered read comes back short only at the end
            break
        want = READ_CHUNK
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def read_stdin(limit: int, what: str = "fixture") -> bytes:
    """Standard input's bytes (``-``), refused when there are more than ``limit``.

    Reads at most ``limit + 1`` bytes, whatever standard input is. Raises
    :class:`InputFileError` naming ``-``.
    """
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:
        raise InputFileError(STDIN_LABEL, "standard input cannot be read")
    try:
        data = read_at_most(stream, limit)
    except (OSError, ValueError) as error:
        raise InputFileError(STDIN_LABEL, f"cannot read standard input ({error})") from None
    if len(data) > limit:
        raise InputFileError(
            STDIN_LABEL, f"standard input is more than {limit} bytes; {what}s are limited to {limit}"
        )
    return bytes(data)


_TRUSTED: ContextVar[bool] = ContextVar("qkv_trusted_paths", default=False)


@contextmanager
def trusting_paths(trusted: bool = True) -> Iterator[None]:
    """Within the block, :func:`confined` follows a fixture's paths out of its directory
    (the user said so on the command line); ``trusted=False`` changes nothing."""
    token = _TRUSTED.set(trusted or _TRUSTED.get())
    try:
        yield
    finally:
        _TRUSTED.reset(token)


def paths_trusted() -> bool:
    """Whether the command line lifted the confinement rule (:func:`trusting_paths`)."""
    return _TRUSTED.get()


def confined(base_dir: StrPath | None, raw: object, location: str) -> Path:
    """The existing file a fixture names by ``raw``, resolved inside ``base_dir``.

    ``base_dir`` is the fixture's directory (``None``: the current directory, for a
    fixture given as data). ``raw`` must be a non-empty relative path without ``..``
    components or NUL bytes; the resolved file (symbolic links followed) must lie inside
    ``base_dir``. Inside :func:`trusting_paths` any path but an empty one or one with a
    NUL byte is followed (still relative to ``base_dir`` unless absolute). Raises
    :class:`~qkvcli.reading.problems.FixtureError` at ``location``.
    """
    if _TRUSTED.get() and isinstance(raw, str) and raw and "\0" not in raw:
        relative = Path(raw)
    else:
        relative = relative_path(raw, location)
    shown = printable(str(raw))
    base = Path(os.getcwd() if base_dir is None else base_dir).resolve()
    try:
        resolved = (base / relative).resolve(strict=True)
    except FileNotFoundError:
        raise FixtureError(location, f"no such file: {shown}") from None
    except OSError as error:
        raise FixtureError(location, f"{shown}: {_os_problem(error)}") from None
    except RuntimeError:
        raise FixtureError(location, f"{shown}: symbolic link loop") from None
    if not resolved.is_relative_to(base) and not _TRUSTED.get():
        raise FixtureError(location, f"{shown} resolves outside the fixture's directory; refused")
    return resolved


def relative_path(raw: object, location: str) -> Path:
    """``raw`` as a relative path that stays inside its base: no NUL, not absolute, no ``..``.

    The rule :func:`confined` applies to every path a fixture names, and ``qkv init``
    to every path it writes. Raises :class:`FixtureError` at ``location``.
    """
    if not isinstance(raw, str) or not raw:
        raise FixtureError(location, "expected a non-empty relative path string")
    if "\0" in raw:
        raise FixtureError(location, "a path with a NUL byte is refused")
    shown = printable(raw)
    relative = Path(raw)
    if relative.is_absolute() or relative.anchor:
        raise FixtureError(
            location,
            f"absolute path {shown} refused; give a path relative to the fixture's directory",
        )
    if ".." in relative.parts:
        raise FixtureError(
            location, f"{shown}: '..' is refused; give a path inside the fixture's directory"
        )
    return relative


def confined_target(base_dir: StrPath, raw: str, location: str) -> Path:
    """Where to *write* ``raw`` inside ``base_dir``: :func:`relative_path`'s rule, and the
    existing part of the path (symbolic links followed) may not lead outside ``base_dir``.

    The file itself may not exist yet; a symbolic link in its place is replaced, never
    written through, by the atomic writers. Raises :class:`FixtureError` at ``location``.
    """
    relative = relative_path(raw, location)
    base = Path(base_dir).resolve()
    try:
        resolved = (base / relative).parent.resolve() / relative.name
    except (OSError, RuntimeError) as error:
        raise FixtureError(location, f"{printable(raw)}: cannot resolve ({error})") from None
    if not resolved.parent.is_relative_to(base):
        raise FixtureError(
            location, f"{printable(raw)} leads outside the fixture's directory (through a "
            "symbolic link); refused"
        )
    return base / relative
