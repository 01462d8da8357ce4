"""What every command shares: loading fixtures, writing output, and turning errors into exit codes.

This module is the one place where exceptions become stderr lines and exit statuses:
0 when every check passed, 1 when a check failed, 2 for usage or input errors.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from pathlib import Path

    from qkvcli.fixtures.fixture import Fixture

F = TypeVar("F", bound=Callable[..., Any])

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INPUT = 2
EXIT_INTERNAL = 70
BUNDLED_LABEL = "<bundled ch26-qkv-projections.json>"


class InputError(click.ClickException):
    """Bad input (a fixture, a path, a value): one line on stderr and exit status 2."""

    exit_code = EXIT_INPUT

    def show(self, file: Any = None) -> None:
        click.echo(f"Error: {self.format_message()}", err=True)


class QkvGroup(click.Group):
    """A click group that translates any escaped exception into one stderr line.

    ``lazy_commands`` maps command names to the modules defining them (as attributes of
    the same name); a module is imported the first time one of its commands is needed.
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
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except BrokenPipeError:
            # The reader went away (``qkv report | head``): stop quietly.
            _silence_stdout()
            ctx.exit(EXIT_OK)
        except MemoryError:
            raise InputError("out of memory: the fixture's tensors are too large") from None
        except RecursionError:
            raise InputError("input is nested too deeply") from None
        except Exception as error:
            from qkvcli.core.errors import QkvError

            if isinstance(error, QkvError):
                raise InputError(str(error)) from None
            click.echo(
                f"Error: internal error ({type(error).__name__}: {error}); please report this",
                err=True,
            )
            ctx.exit(EXIT_INTERNAL)


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def label_of(path: Path | None) -> str:
    return BUNDLED_LABEL if path is None else str(path)


def load(path: Path | None, max_elements: int) -> Fixture:
    """Load a fixture, or raise :class:`InputError` naming the file and JSON location."""
    from qkvcli.fixtures.fixture import FixtureError, load_fixture

    label = label_of(path)
    if path is not None:
        if not path.exists():
            raise InputError(f"{label}: no such file")
        if path.is_dir():
            raise InputError(f"{label}: is a directory, not a fixture file")
    try:
        return load_fixture(path, max_elements=max_elements)
    except FixtureError as error:
        raise InputError(f"{label}: {error}") from None
    except PermissionError:
        raise InputError(f"{label}: permission denied") from None
    except OSError as error:
        raise InputError(f"{label}: cannot read ({error.strerror or error})") from None


def with_settings(
    fixture: Fixture, step: float | None, tolerance: float | None, samples: int | None,
    mode: str | None = None, directions: int | None = None,
) -> Fixture:
    """The fixture with gradient-check settings from the command line, if given."""
    changes: dict[str, Any] = {}
    if mode is not None:
        changes["mode"] = mode
    if directions is not None:
        changes["directions"] = directions
    if step is not None:
        changes["step"] = step
    if tolerance is not None:
        changes["tolerance"] = tolerance
    if samples is not None:
        changes["samples"] = samples
    return fixture._replace(**changes) if changes else fixture


def write_output(text: str | Iterable[str], output: Path | None,
                 protect: Path | None = None) -> None:
    """Print ``text`` (a string or pieces, written as they come), or write it to ``output``
    atomically (temp file + rename).

    Refuses to write over ``protect`` (the fixture being read).
    """
    if output is None:
        for piece in [text] if isinstance(text, str) else text:  # issue 11: streamed
            click.echo(piece, nl=False)
        return
    write_atomic(output, text, protect)


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
            handle.writelines([text] if isinstance(text, str) else text)  # issue 11
    except BaseException:
        remove_quietly(tmp)
        raise
    return tmp


def remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


# --- shared options ----------------------------------------------------------------------


def _positive_finite(ctx: click.Context, param: click.Parameter, value: float | None) -> Any:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise click.BadParameter("must be a finite number greater than zero")
    return value


def _nonnegative_finite(ctx: click.Context, param: click.Parameter, value: float | None) -> Any:
    if value is not None and not (math.isfinite(value) and value >= 0):
        raise click.BadParameter("must be a finite number, zero or more")
    return value


class LazyPath:
    """A click ``path_type`` that gives a :class:`pathlib.Path`.

    pathlib (with urllib.parse and ipaddress behind it) costs about 7 ms to import,
    a large share of a report's whole run; this imports it only once a path is given.
    """

    def __new__(cls, value: str) -> Path:  # type: ignore[misc]
        from pathlib import Path

        return Path(value)


def fixture_argument(func: F) -> F:
    return click.argument(
        "fixture", required=False, type=click.Path(path_type=LazyPath, dir_okay=True)
    )(func)


def output_option(func: F) -> F:
    return click.option(
        "-o", "--output", type=click.Path(path_type=LazyPath, dir_okay=False),
        help="Write to FILE (atomically) instead of standard output.",
    )(func)


def max_elements_option(func: F) -> F:
    from qkvcli.fixtures.fixture import DEFAULT_MAX_ELEMENTS

    return click.option(
        "--max-elements", type=click.IntRange(min=1), default=DEFAULT_MAX_ELEMENTS,
        show_default=True, help="Refuse fixtures with a tensor larger than this many elements.",
    )(func)


GRADCHECK_MODES = ("auto", "full", "sampled", "fast")  # as qkvcli.gradcheck.layer.MODES


def gradcheck_mode_options(func: F) -> F:
    """``--mode`` and ``--directions`` for the Q/K/V gradient check (run, report, gradcheck)."""
    func = click.option(
        "--directions", type=click.IntRange(min=1), default=None,
        help="Random directions per tensor in --mode fast (default 3).",
    )(func)
    func = click.option(
        "--mode", type=click.Choice(GRADCHECK_MODES), default=None,
        help="full: every coordinate; sampled: --samples evenly spaced (default 6); "
        "fast: --directions random directions; auto (default): full up to 4096 "
        "elements per tensor, sampled above.",
    )(func)
    return func


def gradcheck_options(func: F) -> F:
    func = click.option(
        "--samples", type=click.IntRange(min=1), default=None,
        help="Coordinates to check per tensor (evenly spaced); default: every coordinate "
        "of a tensor up to 4096 elements, 6 above.",
    )(func)
    func = click.option(
        "--tolerance", type=float, default=None, callback=_nonnegative_finite,
        help="Largest scaled error |a-n|/max(1,|a|,|n|) that passes (fixture's, else 2e-6).",
    )(func)
    func = click.option(
        "--step", type=float, default=None, callback=_positive_finite,
        help="Central-difference step h (fixture's, else 1e-6).",
    )(func)
    return func
