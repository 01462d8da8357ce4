"""The ``qkv`` group: lazy command loading, and the one place errors become stderr lines and exit codes.

Exit statuses: 0 every check passed, 1 a check failed, 2 usage or input error (one line
``Error: FILE: $.location: message``), 70 an internal error (a bug: no input reaches it),
130 interrupted (Ctrl-C: one line ``qkv: interrupted``, as 128 + SIGINT), 128 + N when
SIGTERM, SIGHUP or SIGPIPE (N) stopped it (one line ``qkv: stopped by SIGTERM``).

Signals: while a command runs, SIGINT, SIGTERM, SIGHUP and SIGPIPE raise
:class:`Stopped` (a ``KeyboardInterrupt``) in the main thread, so the command unwinds
as it does on Ctrl-C: every process qkv started is ended on the way out (the
``--jobs`` workers, a Python implementation's process, a ``--command`` program's
group), then the one line is said. Further signals are ignored while it unwinds, so
the ending of those processes is never cut short. A SIGPIPE while a pipe qkv writes to
has lost its reader is the kernel's answer to that write, not a request to stop: the
write itself fails and says so (``qkv report | head`` ends quietly, status 0).

Bare ``qkv`` prints the help on standard output and exits 0; a mistyped command gets
the nearest command's name (``Did you mean 'check'?``).

Every error line is shown through :func:`~qkvcli.core.text.escape_controls` (no raw
control character from an input reaches the terminal) and capped at
:data:`MAX_ERROR_LINE` characters. No Python warning reaches stderr: a command runs with
warnings ignored, because an overflow in a cast or a sum is a finding the evidence
reports, not a line of noise.
"""

from __future__ import annotations

# The C module behind ``signal``: the same functions and numbers without building the
# ``Signals`` enums at every start (about 1% of a command's start-up); ``signal`` itself
# is imported only to name a signal that stopped qkv.
import _signal  # type: ignore[import-not-found]  # typeshed has no stub for the C module
import errno
import importlib
import io
import os
import sys
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from qkvcli.core.errors import QkvError
from qkvcli.core.text import printable

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INPUT = 2
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report Ctrl-C
MAX_ERROR_LINE = 1000

held_outputs: dict[tuple[int, int], int] = {}
"""Descriptors of outputs opened before the command's work (a FIFO's writing end, by
its device and inode: :func:`qkvcli.cli.io.hold_fifo`); closed when the command ends."""


def release_outputs() -> None:
    """Close every descriptor in :data:`held_outputs` that the command did not write."""
    while held_outputs:
        _, fd = held_outputs.popitem()
        try:
            os.close(fd)
        except OSError:
            pass


class InputError(click.ClickException):
    """Bad input (a fixture, a path, a value): one line on stderr and exit status 2."""

    exit_code = EXIT_INPUT

    def show(self, file: Any = None) -> None:
        click.echo(f"Error: {safe_line(self.format_message())}", err=True)


def safe_line(text: str) -> str:
    """``text`` with control characters escaped, capped at :data:`MAX_ERROR_LINE` with ``…``."""
    return printable(text, MAX_ERROR_LINE)


class Stopped(KeyboardInterrupt):
    """A signal that stops the command (``signum``), raised as Ctrl-C is, so every
    ``except KeyboardInterrupt`` and ``finally`` on the way out runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


STOP_SIGNALS: tuple[int, ...] = tuple(
    getattr(_signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGPIPE")
    if hasattr(_signal, name))
"""The signals that stop a command: it unwinds, ends what it started, says one line."""


def interrupted(cause: BaseException | None = None) -> click.exceptions.Exit:
    """Say ``qkv: interrupted`` (Ctrl-C) or ``qkv: stopped by SIGTERM`` on stderr; give
    the exit to raise: 130, or 128 + the signal that stopped ``cause`` (a :class:`Stopped`,
    or an exception raised while handling one)."""
    signum = _signal.SIGINT
    while cause is not None:
        if isinstance(cause, Stopped):
            signum = cause.signum
            break
        cause = cause.__context__
    if signum == _signal.SIGINT:
        click.echo("qkv: interrupted", err=True)
    else:
        import signal

        click.echo(f"qkv: stopped by {signal.Signals(signum).name}", err=True)
    return click.exceptions.Exit(128 + signum)


def _stop(signum: int, frame: Any) -> None:
    """The handler of :data:`STOP_SIGNALS`: raise :class:`Stopped`, once."""
    if signum == getattr(_signal, "SIGPIPE", None) and pipe_without_reader():
        return  # the kernel's own SIGPIPE for a write: that write fails by itself
    for other in STOP_SIGNALS:
        _signal.signal(other, _signal.SIG_IGN)  # nothing cuts the unwinding short
    raise Stopped(signum)


def pipe_without_reader() -> bool:
    """Whether a pipe or socket this process holds open for writing has lost its reader
    (the cause of a SIGPIPE the kernel sends to a writer)."""
    import select
    import stat

    try:
        descriptors = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        descriptors = [1, 2]
    poller = select.poll()
    for fd in descriptors:
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode) or stat.S_ISSOCK(os.fstat(fd).st_mode):
                poller.register(fd, 0)  # asks for nothing: only POLLERR, POLLHUP, POLLNVAL
        except (OSError, ValueError):
            continue
    return any(events & select.POLLERR for _, events in poller.poll(0))


@contextmanager
def stopping_on_signals() -> Iterator[None]:
    """Within the block, :data:`STOP_SIGNALS` raise :class:`Stopped` in the main thread;
    the previous handlers come back after it (only the main thread can set them)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: _signal.signal(signum, _stop) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            _signal.signal(signum, handler)


def error_line(error: Exception) -> str:
    """The text after ``Error:`` for a :class:`~qkvcli.core.errors.QkvError`: ``FILE: message``."""
    file = getattr(error, "file", None)
    return f"{file}: {error}" if file else str(error)


HELP_MIN_WIDTH = 20
"""Help is laid out for the terminal's width down to this many columns."""
DL_BESIDE_WIDTH = 70
"""Below this width an option's or command's sentence goes under it, not beside it: a
column beside a long option name leaves too little room for whole words."""


def wrap_words(text: str, width: int, initial_indent: str = "", subsequent_indent: str = "",
               preserve_paragraphs: bool = False) -> str:
    """click's ``wrap_text``, breaking lines only at spaces: never inside a word, nor at a
    word's hyphen (``--max-`` / ``evaluations``). A word longer than a line keeps its line.
    A paragraph after a line holding only ``\\b`` keeps its lines, as in click."""
    import textwrap

    def fill(paragraph: str, extra: str) -> str:
        return textwrap.fill(paragraph, max(width, 1), initial_indent=initial_indent + extra,
                             subsequent_indent=subsequent_indent + extra,
                             replace_whitespace=False, break_long_words=False,
                             break_on_hyphens=False)

    text = text.expandtabs()
    if not preserve_paragraphs:
        return fill(text, "")
    paragraphs: list[tuple[int, bool, list[str]]] = []
    lines: list[str] = []
    indent: int | None = None
    for line in [*text.splitlines(), ""]:
        if line:
            if indent is None:
                indent = len(line) - len(line.lstrip())
                line = line.lstrip()
            lines.append(line)
            continue
        if lines:
            raw = lines[0].strip() == "\b"
            paragraphs.append((indent or 0, raw, lines[1:] if raw else lines))
        lines, indent = [], None
    out = []
    for extra, raw, body in paragraphs:
        pad = " " * extra
        if raw:  # kept as written while it fits; a line too wide wraps at its spaces
            kept = []
            for i, line in enumerate(body):
                first = (initial_indent if i == 0 else subsequent_indent) + pad
                if len(first + line) <= width:
                    kept.append(first + line)
                    continue
                inner = " " * (len(line) - len(line.lstrip()))
                kept.append(textwrap.fill(line.strip(), max(width, 1), initial_indent=first + inner,
                                          subsequent_indent=first + inner + "    ",
                                          break_long_words=False, break_on_hyphens=False))
            out.append("\n".join(kept))
        else:
            out.append(fill(" ".join(body), pad))
    return "\n\n".join(out)


class WordFormatter(click.HelpFormatter):
    """Help text and option lists wrapped by :func:`wrap_words`; below
    :data:`DL_BESIDE_WIDTH` columns each option's help goes under the option."""

    def write_usage(self, prog: str, args: str = "", prefix: str | None = None) -> None:
        prefix = "Usage: " if prefix is None else prefix
        usage_prefix = f"{prefix:>{self.current_indent}}{prog} "
        text_width = self.width - self.current_indent
        if text_width >= len(usage_prefix) + 20:
            self.write(wrap_words(args, text_width, usage_prefix, " " * len(usage_prefix)))
        else:  # as click does: the arguments under the program's name
            self.write(usage_prefix.rstrip() + "\n")
            indent = " " * (max(self.current_indent, len(prefix)) + 4)
            self.write(wrap_words(args, text_width, indent, indent))
        self.write("\n")

    def write_text(self, text: str) -> None:
        indent = " " * self.current_indent
        self.write(wrap_words(text, self.width, indent, indent, preserve_paragraphs=True))
        self.write("\n")

    def write_dl(self, rows: Any, col_max: int = 30, col_spacing: int = 2) -> None:
        rows = list(rows)
        if self.width < DL_BESIDE_WIDTH:
            col_max = 0
        first_col = min(max((len(first) for first, _ in rows), default=0), col_max) + col_spacing
        for first, second in rows:
            wrapped = len(first) > self.width - self.current_indent  # -f, --format [auto|...]
            if wrapped:
                first = wrap_words(first, self.width - self.current_indent,
                                   subsequent_indent=" " * (self.current_indent + 2))
            self.write(f"{'':>{self.current_indent}}{first}")
            if not second:
                self.write("\n")
                continue
            if not wrapped and len(first) <= first_col - col_spacing:
                self.write(" " * (first_col - len(first)))
            else:
                self.write("\n")
                self.write(" " * (first_col + self.current_indent))
            text_width = max(self.width - first_col - 2, 10)  # as click's own
            lines = wrap_words(second, text_width, preserve_paragraphs=True).splitlines()
            self.write(f"{lines[0]}\n" if lines else "\n")
            for line in lines[1:]:
                self.write(f"{'':>{first_col + self.current_indent}}{line}\n")


class WordContext(click.Context):
    """A context whose help is laid out by :class:`WordFormatter`."""

    formatter_class = WordFormatter


class QkvGroup(click.Group):
    """A click group that imports a command's module only when it is needed, and
    translates any escaped exception into one stderr line and an exit status.

    ``lazy_commands`` maps command names to the modules defining them (as attributes of
    the same name). Lazy loading is a start-up measure: building a module's click options
    costs time that other commands need not pay.
    """

    context_class = WordContext

    def __init__(self, *args: Any, lazy_commands: dict[str, str] | None = None,
                 listing: tuple[tuple[str, str], ...] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands or {})
        self.listing = listing

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        if parent is None and "terminal_width" not in extra and (
                not args or any(arg in ("-h", "--help") for arg in args)):
            # click wraps help at 50 columns or more; a narrower terminal would wrap it
            # again, mid-word ("sof/tmax"). The width is the terminal's, for this help and
            # a command's (its context inherits it); only help pays for the look-up.
            import shutil

            columns = shutil.get_terminal_size().columns
            extra["terminal_width"] = max(min(columns, 80) - 2, HELP_MIN_WIDTH)
        return super().make_context(info_name, args, parent, **extra)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The help's one list of commands: ``listing``'s usage and sentence of each,
        wrapped at word boundaries to the terminal's width (click's own list would
        import every command's module and cut each sentence off with ``...``); a command
        the listing lacks follows with the first sentence of its own help."""
        if not self.listing:
            super().format_commands(ctx, formatter)
            return
        rows = [(f"qkv {usage}", what) for usage, what in self.listing]
        listed = {usage.split()[0] for usage, _ in self.listing}
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if name not in listed and command is not None and not command.hidden:
                rows.append((f"qkv {name}", command.get_short_help_str(limit=1000)))
        with formatter.section("Commands"):
            # below 70 columns each sentence goes under its usage, not beside it
            formatter.write_dl(rows, col_max=28 if formatter.width >= 70 else 0)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.lazy_commands, *super().list_commands(ctx)})  # as click sorts

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = self.lazy_commands.get(cmd_name)
        if module is not None and cmd_name not in self.commands:
            command = getattr(importlib.import_module(module), cmd_name)
            assert isinstance(command, click.Command)
            command.context_class = WordContext  # its help wraps at word boundaries too
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args and self.no_args_is_help and not ctx.resilient_parsing:
            # Asking for nothing is asking what there is: the help, on stdout, status 0
            # (click's default is stderr and status 2, as for a usage error).
            click.echo(ctx.get_help(), color=ctx.color)
            ctx.exit(EXIT_OK)
        return super().parse_args(ctx, args)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            import difflib  # only for a mistyped command: a report never needs it

            close = difflib.get_close_matches(name, self.list_commands(ctx), n=1, cutoff=0.6)
            if close:
                ctx.fail(f"No such command {printable(name)!r}. Did you mean {close[0]!r}?")
        return super().resolve_command(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        from qkvcli.reading.files import forget_reads

        guard_closed_streams()

        forget_reads()  # this command's outputs are checked against this command's reads
        try:
            with warnings.catch_warnings(), stopping_on_signals():
                warnings.simplefilter("ignore")
                return self.invoke_translating(ctx)
        finally:
            release_outputs()  # a FIFO's reader gets its end of file, even after an error

    def invoke_translating(self, ctx: click.Context) -> Any:
        """Run the command; any escaped exception becomes an error line and exit status."""
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit):
            raise
        except KeyboardInterrupt as error:
            raise interrupted(error) from None
        except click.Abort as error:
            # click's prompt turns Ctrl-C into Abort; end of input stays click's "Aborted!".
            if isinstance(error.__context__, KeyboardInterrupt):
                raise interrupted(error) from None
            raise
        except BrokenPipeError:
            # The reader went away (``qkv report | head``): stop quietly.
            silence_stdout()
            ctx.exit(EXIT_OK)
        except MemoryError:
            # A command that knows its file says so (cli/io.working_on); this is the rest.
            raise InputError(out_of_memory("")) from None
        except RecursionError:
            raise InputError("input is nested too deeply") from None
        except OSError as error:
            if error.errno not in OUTPUT_ERRNOS:
                internal_error(ctx, error)
            # Standard output is full or failing (``> /dev/full``): one line, exit 2, and
            # nothing more tried on it (the interpreter's final flush would fail again).
            silence_stdout()
            raise InputError(f"standard output: cannot write ({error.strerror})") from None
        except QkvError as error:
            raise InputError(error_line(error)) from None
        except Exception as error:
            internal_error(ctx, error)


class ClosedStream(io.TextIOBase):
    """What stands for a standard stream that was closed when qkv started (``<&-``,
    ``>&-``): using it is an :class:`InputError` naming it (exit 2); a closed stderr
    takes what is written and drops it (there is nowhere to say anything)."""

    def __init__(self, name: str, hint: str = "", silent: bool = False) -> None:
        super().__init__()
        self.stream_name = name
        self.hint = hint
        self.silent = silent

    def closed_error(self) -> InputError:
        return InputError(f"standard {self.stream_name} is closed{self.hint}")

    def readable(self) -> bool:
        return self.stream_name == "input"

    def writable(self) -> bool:
        return self.stream_name != "input"

    def read(self, size: int | None = -1) -> str:
        raise self.closed_error()

    def readline(self, size: int | None = -1) -> str:  # type: ignore[override]
        raise self.closed_error()

    def write(self, text: str) -> int:
        if self.silent or not text:
            return len(text)
        raise self.closed_error()

    def flush(self) -> None:
        return None

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise io.UnsupportedOperation("a closed standard stream has no descriptor")


def guard_closed_streams() -> None:
    """Stand a :class:`ClosedStream` in for each standard stream closed at start-up.

    Its descriptor gets the null device first, so no file qkv opens later takes the
    number 0, 1 or 2 (and is read or written as a standard stream by mistake).
    """
    streams = (("stdin", "input", "", False),
               ("stdout", "output", " (-o FILE writes the output to a file)", False),
               ("stderr", "error", "", True))
    for fd, (attribute, name, hint, silent) in enumerate(streams):
        if getattr(sys, attribute) is not None:
            continue
        try:
            os.fstat(fd)
        except OSError:
            try:
                placeholder = os.open(os.devnull, os.O_RDWR)
                if placeholder != fd:
                    os.dup2(placeholder, fd)
                    os.close(placeholder)
            except OSError:
                pass
        setattr(sys, attribute, ClosedStream(name, hint, silent))


OUTPUT_ERRNOS = frozenset({errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EFBIG})
"""Errors of a failing output device: reported as input errors, not as bugs. Writing a
file named by ``-o`` reports its own (:func:`qkvcli.cli.io.write_file`)."""


def out_of_memory(label: str) -> str:
    """The out-of-memory message, naming ``label`` (the file worked on) when given."""
    where = f"{label}: " if label else ""
    return (f"{where}out of memory: the input's tensors are too large for this machine "
            "(lower --max-elements to refuse such inputs up front)")


def internal_error(ctx: click.Context, error: Exception) -> None:
    """Report a bug (no input reaches here): one line, exit status 70."""
    click.echo(
        safe_line(f"Error: internal error ({type(error).__name__}: {error}); please report this"),
        err=True,
    )
    ctx.exit(EXIT_INTERNAL)


def silence_stdout() -> None:
    """Point standard output at the null device (its reader has gone)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
