"""The ``qkv`` group: lazy command loading, and the one place errors become stderr lines and exit codes.

Exit statuses: 0 every check passed, 1 a check failed, 2 usage or input error (one line
``Error: FILE: $.location: message``), 70 an internal error (a bug: no input reaches it),
130 interrupted (Ctrl-C: one line ``qkv: interrupted``, as 128 + SIGINT).

Bare ``qkv`` prints the help on standard output and exits 0; a mistyped command gets
the nearest command's name (``Did you mean 'check'?``).

Every error line is shown through :func:`~qkvcli.core.text.escape_controls` (no raw
control character from an input reaches the terminal) and capped at
:data:`MAX_ERROR_LINE` characters. No Python warning reaches stderr: a command runs with
warnings ignored, because an overflow in a cast or a sum is a finding the evidence
reports, not a line of noise.
"""

from __future__ import annotations

import errno
import importlib
import os
import sys
import warnings
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


class InputError(click.ClickException):
    """Bad input (a fixture, a path, a value): one line on stderr and exit status 2."""

    exit_code = EXIT_INPUT

    def show(self, file: Any = None) -> None:
        click.echo(f"Error: {safe_line(self.format_message())}", err=True)


def safe_line(text: str) -> str:
    """``text`` with control characters escaped, capped at :data:`MAX_ERROR_LINE` with ``…``."""
    return printable(text, MAX_ERROR_LINE)


def interrupted() -> click.exceptions.Exit:
    """Say ``qkv: interrupted`` on stderr; give the exit (status 130) to raise."""
    click.echo("qkv: interrupted", err=True)
    return click.exceptions.Exit(EXIT_INTERRUPTED)


def error_line(error: Exception) -> str:
    """The text after ``Error:`` for a :class:`~qkvcli.core.errors.QkvError`: ``FILE: message``."""
    file = getattr(error, "file", None)
    return f"{file}: {error}" if file else str(error)


class QkvGroup(click.Group):
    """A click group that imports a command's module only when it is needed, and
    translates any escaped exception into one stderr line and an exit status.

    ``lazy_commands`` maps command names to the modules defining them (as attributes of
    the same name). Lazy loading is a start-up measure: building a module's click options
    costs time that other commands need not pay.
    """

    def __init__(self, *args: Any, lazy_commands: dict[str, str] | None = None,
                 listing: tuple[tuple[str, str], ...] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands or {})
        self.listing = listing

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        if parent is None and "terminal_width" not in extra and (
                not args or args[0] in ("-h", "--help")):
            # click wraps help at 50 columns or more; a narrower terminal would wrap the
            # list of commands again, mid-word. Only this help pays for the look-up
            # (start-up); a command's options keep click's layout.
            import shutil

            columns = shutil.get_terminal_size().columns
            extra["terminal_width"] = max(min(columns, 80) - 2, 30)
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
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return self.invoke_translating(ctx)

    def invoke_translating(self, ctx: click.Context) -> Any:
        """Run the command; any escaped exception becomes an error line and exit status."""
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit):
            raise
        except KeyboardInterrupt:
            raise interrupted() from None
        except click.Abort as error:
            # click's prompt turns Ctrl-C into Abort; end of input stays click's "Aborted!".
            if isinstance(error.__context__, KeyboardInterrupt):
                raise interrupted() from None
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
