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

Writing (``-o``, ``--html``, ``--export-svg``/``--export-html``, ``--junit``) follows one
contract (ARCHITECTURE.md, "The command contract"). Every output option has the type
:class:`OutputPath`, which refuses, as the option is read, a path no output can take
(:func:`output_problem`: a directory, a missing or unwritable directory, a block device,
a socket) in one line naming the option, the path and why (``Error: --html adir: is a
directory, not a file to write``; exit 2, never click's usage block, which stays for
real usage errors). :func:`check_outputs` then refuses, before any work, an output that
names another output or a file the command reads, and a FIFO nobody reads (whose
writing end it then holds open until the write, so its reader sees the report and not
an early end of file). The null device is a sink: it may be named by several outputs
and be an input too. :func:`write_file` replaces a regular file atomically (a temporary
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
from typing import TYPE_CHECKING, Any, TypeVar

import click

from qkvcli.cli.group import InputError, held_outputs, out_of_memory
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


if TYPE_CHECKING:
    ConcretePath = Path
else:
    ConcretePath = type(Path())  # PosixPath or WindowsPath: a subclass must name one


class OutputFile(ConcretePath):
    """A path given to an output option, remembering the option (``--html``) so that
    every message about it names both (:func:`shown`). Paths derived from it name none."""

    option: str = ""


def shown(path: Path | str) -> str:
    """How messages name an output: ``OPTION PATH`` when an option gave it, else the path."""
    option = getattr(path, "option", "")
    return f"{option} {path}" if option else str(path)


class OutputPath(SafePath):
    """The type of every output option (``-o``, ``--html``, ``--junit``, the exports).

    After :func:`check_path_argument`, a path :func:`output_problem` finds unusable is
    an :class:`InputError` naming the option: one line, exit 2, before any work (click's
    own ``dir_okay=False`` check would print the usage block). Gives an
    :class:`OutputFile`.
    """

    def __init__(self) -> None:
        super().__init__(dir_okay=False)  # FILE in help, files in completion; checked here

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        path = output_file(value, param)
        problem = output_problem(path)
        if problem is not None:
            raise InputError(f"{shown(path)}: {problem}")
        return path


def output_file(value: Any, param: click.Parameter | None) -> OutputFile:
    """``value`` as the :class:`OutputFile` of option ``param``; a name no system can
    open (:func:`check_path_argument`) is an :class:`InputError` naming the option."""
    option = "/".join(param.opts) if param is not None else ""
    if isinstance(value, str):
        try:
            check_path_argument(value)
        except click.BadParameter as error:
            raise InputError(f"{option} {error.message}" if option else error.message) from None
    path = OutputFile(value)
    path.option = option
    return path


class OutputFolder(SafePath):
    """The type of an option naming a folder qkv writes files into (``--save-failures
    DIR``, made if missing): refused as :class:`OutputPath` refuses a file, when
    :func:`folder_problem` finds it unusable."""

    def __init__(self) -> None:
        super().__init__(file_okay=False)  # folders in completion; checked here

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        path = output_file(value, param)
        problem = folder_problem(path)
        if problem is not None:
            raise InputError(f"{shown(path)}: {problem}")
        return path


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


def output_problem(path: Path) -> str | None:
    """Why ``path`` cannot be an output (the words after ``PATH:``), or ``None``.

    Refused: a directory; a block device or a socket (qkv writes a regular file, which it
    replaces, or a terminal, the null device, a FIFO or a descriptor such as
    ``/dev/stdout``, which it writes through); a file it may not write; for a file it
    would replace or create, a directory that is missing, not a directory, or one it may
    not write in (the new file is made there, then renamed over the old one).
    """
    try:
        info: os.stat_result | None = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        info = None  # a new file (or a dangling link's target): its directory decides
    except OSError as error:
        return f"cannot write ({error.strerror or error})"
    if info is not None:
        kind = irregular_kind(info.st_mode)
        if kind is not None:
            return kind
        if written_through(path):  # a device, a FIFO, /dev/stdout: opened, never replaced
            return None if os.access(path, os.W_OK) else "cannot write (permission denied)"
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.exists():
        return f"no such directory {directory}"
    if not directory.is_dir():
        return f"{directory} is not a directory"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"cannot write in {directory} (permission denied)"
    if read_only_file_system(directory):
        return f"cannot write in {directory} (read-only file system)"
    return None


def folder_problem(folder: Path) -> str | None:
    """Why qkv cannot write files into ``folder`` (making it if missing), or ``None``."""
    if folder.is_dir():
        if not os.access(folder, os.W_OK | os.X_OK):
            return "cannot write in it (permission denied)"
        return "cannot write in it (read-only file system)" if read_only_file_system(
            folder) else None
    if folder.exists() or folder.is_symlink():
        return "is not a directory"
    return output_problem(folder)  # a new one: made in its parent


def irregular_kind(mode: int) -> str | None:
    """What refuses a file of ``mode`` as an output whatever its permissions, or ``None``."""
    if stat.S_ISDIR(mode):
        return "is a directory, not a file to write"
    if stat.S_ISBLK(mode):
        return "is a block device; qkv writes only a file, a terminal, a FIFO or the null device"
    if stat.S_ISSOCK(mode):
        return "is a socket; qkv writes only a file, a terminal, a FIFO or the null device"
    return None


def read_only_file_system(directory: Path) -> bool:
    """Whether ``directory`` is on a file system mounted read-only (``os.access`` says
    nothing of it to root)."""
    try:
        return bool(os.statvfs(directory).f_flag & getattr(os, "ST_RDONLY", 0))
    except (OSError, AttributeError):
        return False


def is_null_device(path: Path | str) -> bool:
    """Whether ``path`` names the null device (``/dev/null``, through any link): a sink,
    which every output may name and which loses nothing read from or written twice."""
    try:
        info, null = os.stat(path), os.stat(os.devnull)
    except (OSError, ValueError):
        return False
    return stat.S_ISCHR(info.st_mode) and info.st_rdev == null.st_rdev


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
    naming both spellings and options: the second would silently replace the first. The
    null device may be named any number of times (what it is given is lost anyway)."""
    seen: dict[tuple[object, ...], Path] = {}
    for path in outputs:
        if path is None or is_null_device(path):
            continue
        key = output_key(path)
        if key in seen:
            first = seen[key]
            if os.fspath(first) != os.fspath(path):
                also = f" (the same file as {printable(shown(first))})"
            else:
                option = getattr(first, "option", "")
                also = f" (also by {option})" if option else ""
            raise InputError(f"{shown(path)}: named twice as an output{also}")
        seen[key] = path


def check_outputs(outputs: Sequence[Path | None], reads: Sequence[Path | str | None] = (),
                  regular_only: Sequence[Path] = ()) -> None:
    """Refuse unusable output paths before any work. Raises :class:`InputError`.

    ``outputs`` (``None`` entries skipped) must each pass :func:`output_problem` (as
    their options did when read), no two be the same file, and none be a file in
    ``reads`` (the fixtures, checkpoint, implementation... the command reads; ``-`` and
    ``None`` skipped). Files are compared as files (:func:`output_key`): through symbolic
    links, hard links and ``..`` after a link, so two spellings of one file are named
    twice. The null device is exempt from both comparisons. Of ``regular_only`` (files
    the user did not name), only a regular file may be in the way (:func:`refuse_irregular`).
    A FIFO must have a reader now: its writing end is opened and held (:func:`hold_fifo`).
    """
    read_ids = {ident for ident in (file_id(p) for p in reads
                                    if p is not None and os.fspath(p) != STDIN) if ident}
    for path in outputs:
        if path is not None:
            problem = output_problem(path)
            if problem is not None:
                raise InputError(f"{shown(path)}: {problem}")
    refuse_same_file(outputs)
    for path in outputs:
        if path is None or is_null_device(path):
            continue
        ident = file_id(path)
        if ident is not None and ident in read_ids:
            raise InputError(f"{shown(path)}: refusing to overwrite a file this command reads")
    for path in regular_only:
        refuse_irregular(path)
    for path in outputs:
        if path is not None:
            hold_fifo(path)


def hold_fifo(path: Path) -> None:
    """When ``path`` is a FIFO, open its writing end now and keep it (in
    :data:`~qkvcli.cli.group.held_outputs`, closed when the command ends) for
    :func:`write_through`. Raises :class:`InputError` when nobody reads the FIFO.

    Only opening tells whether a FIFO has a reader, and closing what was opened would
    give that reader its end of file before the report: so the end stays open.
    """
    try:
        info = os.stat(path)
    except OSError:
        return
    key = (info.st_dev, info.st_ino)
    if not stat.S_ISFIFO(info.st_mode) or key in held_outputs:
        return
    flags = os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        held_outputs[key] = os.open(path, flags)
    except OSError as error:
        raise fifo_error(path, error) from None


def fifo_error(path: Path, error: OSError) -> InputError:
    """The error for an output ``path`` that could not be opened for writing."""
    import errno

    if error.errno == errno.ENXIO:
        return InputError(f"{shown(path)}: a FIFO with no reader; start the reader first")
    return InputError(f"{shown(path)}: cannot write ({error.strerror or error})")


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
        raise InputError(f"{shown(output)}: already exists (use --force to overwrite it)")
    ident = file_id(output)
    if ident is not None and ident in files_read() and not is_null_device(output):
        raise InputError(f"{shown(output)}: refusing to overwrite a file this command reads")
    if regular_only:
        refuse_irregular(output)
    if written_through(output):
        write_through(output, text)
    else:
        target = Path(os.path.realpath(output)) if output.is_symlink() else output
        if target.is_dir():
            raise InputError(f"{shown(output)}: {irregular_kind(stat.S_IFDIR)}")
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
        info = os.stat(output)
        if stat.S_ISREG(info.st_mode):
            flags |= os.O_APPEND  # a descriptor link to a file: after what is there
        held = held_outputs.pop((info.st_dev, info.st_ino), None)  # a FIFO check_outputs opened
        fd = os.open(output, flags) if held is None else held
    except OSError as error:
        raise fifo_error(output, error) from None
    try:
        os.set_blocking(fd, True)
        for chunk in chunked([text] if isinstance(text, str) else text):
            data = memoryview(chunk.encode("utf-8"))
            while data:
                data = data[os.write(fd, data):]
    except OSError as error:
        raise InputError(f"{shown(output)}: cannot write ({error.strerror or error})") from None
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
            raise InputError(f"{shown(output)}: already exists (use --force to overwrite it)") from None
        except OSError:
            # Some file systems have no hard links; the existence check must do.
            if output.exists():
                raise InputError(
                    f"{shown(output)}: already exists (use --force to overwrite it)") from None
            os.replace(tmp, output)
    except OSError as error:
        raise InputError(f"{shown(output)}: cannot write ({error.strerror or error})") from None
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
        raise InputError(f"{shown(output)}: no such directory {directory}")
    import tempfile  # only when writing a file: it costs milliseconds of start-up

    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{temp_stem(output.name, directory)}.",
                                   suffix=".tmp", dir=directory)
    except OSError as error:
        raise InputError(f"{shown(output)}: cannot write ({error.strerror or error})") from None
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.writelines([text] if isinstance(text, str) else text)
    except OSError as error:
        remove_quietly(tmp)
        raise InputError(f"{shown(output)}: cannot write ({error.strerror or error})") from None
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
