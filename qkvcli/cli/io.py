"""Files and paths: the ``SafePath`` type of every path option, reading inputs, writing outputs.

A NUL byte or a name over the file system's limits makes ``os.stat`` and friends raise
``ValueError`` or ``OSError`` in places that expect neither (click itself stats a path
before any command code runs). :class:`SafePath`, the type of every path option and
argument, checks the text first, so such a path is a usage error (exit 2) naming the
option.

Reading goes through :mod:`qkvcli.reading.files` (regular files only, a byte limit,
tensor paths confined to the fixture's directory); a failure is a
:class:`~qkvcli.core.errors.QkvError` naming the file (``-`` is ``<stdin>``), which the
group prints as ``Error: FILE: ...``.

Writing (``-o``, ``--export-svg``/``--export-html``, ``--junit``) follows one contract
(ARCHITECTURE.md, "The command contract"): :func:`check_outputs` refuses, before any
work, an output that names a directory, a missing directory, another output or a file
the command reads; :func:`write_file` replaces a regular file atomically (a temporary
file beside it, then a rename: a failed write leaves the old file and no temporary
behind), writes a device, a FIFO or ``/dev/stdout`` through (opened for writing, never
created or replaced), and says ``qkv: wrote FILE`` on stderr. It also refuses, when it
comes to write, any file the command read (every file the one reader opened, a
fixture's ``.npy`` or checkpoint too: :func:`~qkvcli.reading.files.files_read`); files a
command writes on its own account (``--save-failures``) replace only regular files.
The temporary file's name fits wherever the output's own name fits.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click

from qkvcli.cli.group import InputError, out_of_memory
from qkvcli.core.errors import QkvError
from qkvcli.core.text import printable
from qkvcli.reading.files import STDIN, files_read, read_limited
from qkvcli.reading.fixture import FUNCTION_KEYS, INPUT_KEYS, LAYER_KEYS, Fixture
from qkvcli.reading.limits import MAX_FILE_BYTES
from qkvcli.reading.load import fixture_json
from qkvcli.reading.parse import parse_fixture
from qkvcli.reading.settings import misnamed_chapter

T = TypeVar("T")
BUNDLED_LABEL = "<bundled ch26-qkv-projections.json>"
STDIN_LABEL = "<stdin>"
CHUNK_CHARS = 1 << 16
"""Standard output is written in pieces of about this many characters."""


class SafePath(click.Path):
    """``click.Path`` that runs :func:`check_path_argument` before click looks at the file,
    giving a :class:`pathlib.Path`. Takes ``click.Path``'s keyword arguments."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("path_type", Path)
        super().__init__(**kwargs)

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if isinstance(value, str):
            try:
                check_path_argument(value)
            except click.BadParameter as error:
                self.fail(error.message, param, ctx)
        return super().convert(value, param, ctx)


CHECKPOINT_FILES = ("model.safetensors", "model.safetensors.index.json")
"""What a model folder holds, as ``save_pretrained`` writes it: one file, or a sharded index."""


class CheckpointPath(SafePath):
    """A checkpoint argument: a ``.safetensors`` file or index, or a model folder, read as
    the first of :data:`CHECKPOINT_FILES` it holds (as ``from_pretrained`` takes a folder)."""

    def __init__(self) -> None:
        super().__init__(dir_okay=False)

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if isinstance(value, str) and os.path.isdir(value):
            check_path_argument(value)
            found = [name for name in CHECKPOINT_FILES
                     if os.path.isfile(os.path.join(value, name))]
            if not found:
                self.fail(f"{printable(value)} is a folder without {' or '.join(CHECKPOINT_FILES)}"
                          f": name the checkpoint file", param, ctx)
            value = os.path.join(value, found[0])
        return super().convert(value, param, ctx)


def check_path_argument(value: str) -> None:
    """Refuse a path no system can open: a NUL byte, or a name over the system's limits.

    Raises :class:`click.BadParameter` (exit 2, the option named) before any file call
    could fail in a way the command does not expect.
    """
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


def label_of(path: Path | str | None, bundled: str = BUNDLED_LABEL) -> str:
    """How messages name an input: its path (escaped), ``<stdin>`` for ``-``, or ``bundled``."""
    if path is None:
        return bundled
    if os.fspath(path) == STDIN:
        return STDIN_LABEL
    return printable(os.fspath(path))


@contextmanager
def working_on(label: str) -> Iterator[None]:
    """Name ``label`` in any :class:`~qkvcli.core.errors.QkvError` or out-of-memory error
    raised inside the block (the group prints them as ``Error: LABEL: ...``)."""
    try:
        yield
    except QkvError as error:
        raise error.in_file(label) from None
    except MemoryError:
        raise InputError(out_of_memory(label)) from None


def labelled(label: str, read: Callable[[], T]) -> T:
    """``read()``, inside :func:`working_on` ``label``."""
    with working_on(label):
        return read()


def load(path: Path | None, max_elements: int) -> Fixture:
    """Load a chapter fixture (the bundled one without ``path``); errors name the file.

    A layer fixture (one with ``heads``) is refused with a pointer to ``qkv attend``
    before anything else in it is looked at: the chapter's reader would only call the
    key unknown.
    """
    label = label_of(path)
    with working_on(label):
        data, chapter, base_dir = fixture_json(path)
        misnamed = misnamed_chapter(data)
        if misnamed is not None:  # one problem, not every key of the chapter it meant
            raise misnamed
        refuse_later_chapter(data, label)  # a chapter 29 or 30 fixture has layer keys too
        refuse_layer_fixture(data, label)
        return parse_fixture(data, chapter, max_elements, base_dir)


def refuse_later_chapter(data: Any, label: str) -> None:
    """Raise :class:`InputError` when ``data`` names chapter 27 or later: chapter 26's
    reader would only call its keys unknown."""
    from qkvcli.core.names import CHAPTER_IDS, DEFAULT_CHAPTER, chapter_of_id

    number = chapter_of_id(data.get("chapter")) if isinstance(data, dict) else None
    if number is not None and number != DEFAULT_CHAPTER:
        raise InputError(f"{label}: $.chapter: a chapter {number} fixture ({CHAPTER_IDS[number]}); "
                         f"this command reads chapter 26's (qkv report {label} shows it)")


def refuse_layer_fixture(data: Any, label: str) -> None:
    """Raise :class:`InputError` when ``data`` is a layer fixture, naming ``qkv attend``."""
    if isinstance(data, dict):
        for key in LAYER_KEYS:
            if key in data:
                raise InputError(f"{label}: $.{key}: a multi-head layer fixture; "
                                 "run it with qkv attend")
        for key in (*FUNCTION_KEYS, *INPUT_KEYS):  # a real layer's: only attend computes it
            if key in data:
                raise InputError(f"{label}: $.{key}: an attention fixture's key (the "
                                 "chapter has no attention); run it with qkv attend")


def read_text(path: Path, what: str) -> str:
    """A UTF-8 text input (a golden or answers file) through the one reader.

    ``what`` says what the file is in messages (``"golden"``, ``"answer"``).
    """
    data = labelled(label_of(path), lambda: read_limited(path, MAX_FILE_BYTES, what))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputError(f"{label_of(path)}: not UTF-8 text (byte {error.start})") from None


def file_id(path: Path | str) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of the file ``path`` names (through symlinks); ``None`` if none."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    return info.st_dev, info.st_ino


def output_key(path: Path | str) -> tuple[object, ...]:
    """What ``path`` names as a file, for comparing outputs with each other and with inputs.

    An existing file is its device and inode (through symbolic links and hard links); a new
    one is its resolved parent's device and inode and its name, the parent found after
    every link and ``..`` is resolved as the kernel would (``lnk/../out`` is beside the
    link's target, not beside the link). A dangling link names the file it would create.
    """
    ident = file_id(path)
    if ident is not None:
        return ("file", *ident)
    real = os.path.realpath(path)
    parent, name = os.path.split(real)
    parent_id = file_id(parent)
    return ("new", *parent_id, name) if parent_id is not None else ("path", real)


def refuse_same_file(outputs: Sequence[Path | None]) -> None:
    """Raise :class:`InputError` when two of ``outputs`` are one file (:func:`output_key`),
    naming both spellings: the second would silently replace the first."""
    seen: dict[tuple[object, ...], Path] = {}
    for path in outputs:
        if path is None:
            continue
        key = output_key(path)
        if key in seen:
            first = seen[key]
            raise InputError(f"{path}: named twice as an output" + (
                "" if os.fspath(first) == os.fspath(path)
                else f" (the same file as {printable(os.fspath(first))})"))
        seen[key] = path


def check_outputs(outputs: Sequence[Path | None], reads: Sequence[Path | str | None] = ()) -> None:
    """Refuse unusable output paths before any work. Raises :class:`InputError`.

    ``outputs`` (``None`` entries skipped) must each name a file in an existing directory,
    not a directory, no two the same file, and none a file in ``reads`` (the fixtures,
    checkpoint, implementation... the command reads; ``-`` and ``None`` skipped). Files
    are compared as files (:func:`output_key`): through symbolic links, hard links and
    ``..`` after a link, so two spellings of one file are named twice.
    """
    read_ids = {ident for ident in (file_id(p) for p in reads
                                    if p is not None and os.fspath(p) != STDIN) if ident}
    refuse_same_file(outputs)
    for path in outputs:
        if path is None:
            continue
        if path.is_dir():
            raise InputError(f"{path}: is a directory")
        parent = path.parent if str(path.parent) else Path(".")
        if not parent.is_dir():
            raise InputError(f"{path}: no such directory {parent}")
        ident = file_id(path)
        if ident is not None and ident in read_ids:
            raise InputError(f"{path}: refusing to overwrite a file this command reads")


def write_output(text: str | Iterable[str], output: Path | None) -> None:
    """Print ``text`` (a string, or pieces written as they come, so a large report never
    sits in memory whole), or :func:`write_file` it to ``output``."""
    if output is None:
        for chunk in chunked([text] if isinstance(text, str) else text):
            click.echo(chunk, nl=False)
        sys.stdout.flush()  # a failing device (/dev/full) says so here, not at exit
        return
    write_file(output, text)


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


def write_file(output: Path, text: str | Iterable[str], *, new_only: bool = False,
               regular_only: bool = False) -> None:
    """Write ``text`` to ``output`` as UTF-8, then say ``qkv: wrote OUTPUT`` on stderr.

    A regular file (or a new one) is replaced atomically through a temporary file beside
    it; a symlink to one keeps the link and replaces its target. A device, a FIFO or a
    descriptor link (``/dev/stdout``, ``/dev/fd/N``) is written through, never replaced.
    ``new_only`` refuses an existing ``output`` (``qkv init`` without ``--force``);
    ``regular_only`` refuses anything in ``output``'s place but a regular file (a file
    the user did not name, such as a saved failure). Any file the command read is
    refused. Raises :class:`InputError` when it cannot or may not write.
    """
    if new_only and (output.exists() or output.is_symlink()):
        raise InputError(f"{output}: already exists (use --force to overwrite it)")
    ident = file_id(output)
    if ident is not None and ident in files_read():
        raise InputError(f"{output}: refusing to overwrite a file this command reads")
    if regular_only:
        refuse_irregular(output)
    if written_through(output):
        write_through(output, text)
    else:
        target = Path(os.path.realpath(output)) if output.is_symlink() else output
        if target.is_dir():
            raise InputError(f"{output}: is a directory")
        replace_atomically(target, text, new_only)
    click.echo(f"qkv: wrote {printable(str(output))}", err=True)


def refuse_irregular(path: Path) -> None:
    """Raise :class:`InputError` when something other than a regular file (a symbolic
    link, a device, a FIFO, a directory) is in ``path``'s place; nothing there is fine."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as error:
        raise InputError(f"{path}: cannot write ({error.strerror or error})") from None
    if not stat.S_ISREG(mode):
        found = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
        raise InputError(f"{path}: is {found}; qkv replaces only a regular file there")


def written_through(path: Path) -> bool:
    """Whether ``path`` is written through (opened for writing) rather than replaced:
    it names an existing file that is not regular, or leads through ``/proc`` (a
    descriptor link such as ``/dev/stdout``, whatever the descriptor is)."""
    try:
        info = os.stat(path)
    except OSError:
        return False
    if not stat.S_ISREG(info.st_mode):
        return True
    hop = os.fspath(path)
    for _ in range(40):  # as the kernel's own limit on symlinks followed
        if os.path.realpath(os.path.dirname(os.path.abspath(hop))).startswith("/proc/"):
            return True
        if not os.path.islink(hop):
            return False
        hop = os.path.join(os.path.dirname(hop), os.readlink(hop))
    return False


def write_through(output: Path, text: str | Iterable[str]) -> None:
    """Write ``text`` into the existing non-regular file ``output`` without creating,
    truncating or replacing it. A FIFO nobody reads is refused rather than waited on.
    Raises :class:`InputError`."""
    flags = os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        if stat.S_ISREG(os.stat(output).st_mode):
            flags |= os.O_APPEND  # a descriptor link to a file: after what is there
        fd = os.open(output, flags)
    except OSError as error:
        if error.errno == 6:  # ENXIO: a FIFO without a reader
            raise InputError(f"{output}: a FIFO with no reader; start the reader first") from None
        raise InputError(f"{output}: cannot write ({error.strerror or error})") from None
    try:
        os.set_blocking(fd, True)
        for chunk in chunked([text] if isinstance(text, str) else text):
            data = memoryview(chunk.encode("utf-8"))
            while data:
                data = data[os.write(fd, data):]
    except OSError as error:
        raise InputError(f"{output}: cannot write ({error.strerror or error})") from None
    finally:
        close_after_signals(fd)


def close_after_signals(fd: int) -> None:
    """Close ``fd``. A function of its own, called, not inlined: a SIGPIPE the last write
    raised is handled on entry here (cli/group.py), while the pipe is still open to show
    that its reader went away, so it is not taken for a request to stop."""
    os.close(fd)


def replace_atomically(output: Path, text: str | Iterable[str], new_only: bool = False) -> None:
    """``text`` into a temporary file beside ``output``, then renamed (``new_only``:
    hard-linked, so a file that appeared meanwhile is never replaced) over it."""
    tmp = write_temp_beside(output, text)
    try:
        if not new_only:
            os.replace(tmp, output)
            return
        try:
            os.link(tmp, output)
        except FileExistsError:
            raise InputError(f"{output}: already exists (use --force to overwrite it)") from None
        except OSError:
            # Some file systems have no hard links; the existence check must do.
            if output.exists():
                raise InputError(
                    f"{output}: already exists (use --force to overwrite it)") from None
            os.replace(tmp, output)
    except OSError as error:
        raise InputError(f"{output}: cannot write ({error.strerror or error})") from None
    finally:
        remove_quietly(tmp)


def write_temp_beside(output: Path, text: str | Iterable[str]) -> str:
    """A complete temporary copy of ``text`` in ``output``'s directory; returns its path.

    The file gets the mode a plain ``open(output, "w")`` would give (0666 less the
    umask), not ``mkstemp``'s private 0600. Raises :class:`InputError`; leaves no
    temporary file behind when it does.
    """
    directory = output.parent if str(output.parent) else Path(".")
    if not directory.is_dir():
        raise InputError(f"{output}: no such directory {directory}")
    import tempfile  # only when writing a file: it costs milliseconds of start-up

    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{temp_stem(output.name, directory)}.",
                                   suffix=".tmp", dir=directory)
    except OSError as error:
        raise InputError(f"{output}: cannot write ({error.strerror or error})") from None
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.writelines([text] if isinstance(text, str) else text)
    except OSError as error:
        remove_quietly(tmp)
        raise InputError(f"{output}: cannot write ({error.strerror or error})") from None
    except BaseException:
        remove_quietly(tmp)
        raise
    return tmp


TEMP_EXTRA = len(". .12345678.tmp") - 1
"""Bytes ``mkstemp`` adds around the stem: the dot, a dot, eight random characters, ``.tmp``."""


def temp_stem(name: str, directory: Path) -> str:
    """``name``, shortened (at a character boundary) so the temporary file's name fits
    the directory's file-name limit wherever ``name`` itself fits."""
    try:
        name_max = os.pathconf(directory, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    encoded = os.fsencode(name)
    room = max(1, name_max - TEMP_EXTRA)
    if len(encoded) <= room:
        return name
    cut = encoded[:room]
    while cut:
        try:
            return cut.decode("utf-8")
        except UnicodeDecodeError as error:
            if error.start < len(cut) - 3:  # not only a character cut short: not UTF-8
                return os.fsdecode(cut)
            cut = cut[:-1]
    return "qkv"


def remove_quietly(path: str) -> None:
    """Delete ``path`` if it exists; ignore failures (used to clean up temporary files)."""
    try:
        os.unlink(path)
    except OSError:
        pass
