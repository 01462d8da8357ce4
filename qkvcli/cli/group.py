"""The ``qkv`` group: lazy command loading, and the one place errors become stderr lines and exit codes.

Exit statuses: 0 every check passed, 1 a check failed, 2 usage or input error (one line
``Error: FILE: $.location: message``), 70 an internal error (a bug: no input reaches it).

Every error line is shown through :func:`~qkvcli.core.text.escape_controls` (no raw
control character from an input reaches the terminal) and capped at
:data:`MAX_ERROR_LINE` characters. No Python warning reaches stderr: a command runs with
warnings ignored, because an overflow in a cast or a sum is a finding the evidence
reports, not a line of noise.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INPUT = 2
EXIT_INTERNAL = 70
MAX_ERROR_LINE = 1000
CURRENT_FILE = "qkv.current_file"
"""Key in ``ctx.meta``: the label of the input file being read or worked on, for messages."""


class InputError(click.ClickException):
    """Bad input (a fixture, a path, a value): one line on stderr and exit status 2."""

    exit_code = EXIT_INPUT

    def show(self, file: Any = None) -> None:
        click.echo(f"Error: {safe_line(self.format_message())}", err=True)


def safe_line(text: str) -> str:
    """``text`` with control characters escaped, capped at :data:`MAX_ERROR_LINE` with ``…``."""
    from qkvcli.core.text import printable

    return printable(text, MAX_ERROR_LINE)


def note_file(label: str) -> None:
    """Remember ``label`` as the file the command works on (named if memory runs out)."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.meta[CURRENT_FILE] = label


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
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.lazy_commands, *super().list_commands(ctx)})  # as click sorts

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = self.lazy_commands.get(cmd_name)
        if module is not None and cmd_name not in self.commands:
            import importlib

            command = getattr(importlib.import_module(module), cmd_name)
            assert isinstance(command, click.Command)
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return self.invoke_translating(ctx)

    def invoke_translating(self, ctx: click.Context) -> Any:
        """Run the command; any escaped exception becomes an error line and exit status."""
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except BrokenPipeError:
            # The reader went away (``qkv report | head``): stop quietly.
            silence_stdout()
            ctx.exit(EXIT_OK)
        except MemoryError:
            file = ctx.meta.get(CURRENT_FILE)
            where = f"{file}: " if file else ""
            raise InputError(
                f"{where}out of memory: the input's tensors are too large for this machine "
                "(lower --max-elements to refuse such inputs up front)"
            ) from None
        except RecursionError:
            raise InputError("input is nested too deeply") from None
        except Exception as error:
            from qkvcli.core.errors import QkvError

            if isinstance(error, QkvError):
                raise InputError(error_line(error)) from None
            internal_error(ctx, error)


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
