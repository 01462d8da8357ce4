"""Shared click options and the settings they hand the commands.

Every option decorator the commands share. Decorators that add several options hand
them to the command as one value (``view``: :class:`ViewSettings`; ``overrides``:
:class:`CheckOverrides`). Values are converted here and checked by the rules of the
module that defines them (:mod:`qkvcli.gradcheck.settings` for the gradient check,
:mod:`qkvcli.reading.limits` for sizes); nothing passes through click's context.

Kept apart from ``console.py`` (rich output) and ``batch.py`` (several fixtures) so that
``qkv report --format text`` loads neither: start-up time is part of the product.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import click

from qkvcli.cli.io import OutputPath, SafePath
from qkvcli.core.record import Record
from qkvcli.gradcheck.settings import (
    MAX_EVALUATIONS,
    MODES,
    GradcheckSettingError,
    check_evaluations,
    check_step,
    check_tolerance,
)
from qkvcli.reading.limits import DEFAULT_MAX_ELEMENTS, check_step_fits
from qkvcli.render.tensors import POLICIES

if TYPE_CHECKING:
    from qkvcli.reading.fixture import Fixture

F = TypeVar("F", bound=Callable[..., Any])

VIEW_FORMATS = ("auto", "rich", "text", "json")
"""The formats of every command with a rich view (run and report add ``trace``)."""
MAX_WIDTH = 1000
"""The widest rich view ``--width`` may ask for: layout work and output grow with it."""
FIGURE_PRECISION = 6
"""Decimals of the rich figure of run and report, and of check's cards (``--precision``)."""
GRADCHECK_PRECISION = 9
"""Decimals of the rich gradient-check table: errors near the tolerance need more digits."""
ATTEND_PRECISION = 6
"""Decimals of attend's rich tables (weights are probabilities; four places read well)."""
VARIANCE_PRECISION = 4
"""Decimals of the variance table's rich view unless ``--precision`` says otherwise."""


def fixture_argument(func: F) -> F:
    return click.argument("fixture", required=False, type=SafePath(dir_okay=True))(func)


def output_option(func: F) -> F:
    return click.option(
        "-o", "--output", type=OutputPath(),
        help="Write to FILE instead of standard output (a regular file atomically; a "
        "device or FIFO written through).",
    )(func)


def html_option(func: F) -> F:
    """``--html FILE``: the evidence explorer, one self-contained page (``html``)."""
    return click.option(
        "--html", type=OutputPath(), metavar="FILE", default=None,
        help="Also write the evidence explorer to FILE: one self-contained HTML page where "
        "a click on any number shows how it was made (--export-html is the terminal's "
        "figure as HTML).",
    )(func)


def max_elements_option(func: F) -> F:
    return click.option(
        "--max-elements", type=click.IntRange(min=1), default=DEFAULT_MAX_ELEMENTS,
        show_default=True, help="Refuse fixtures with a tensor larger than this many elements.",
    )(func)


def format_option(formats: Sequence[str] = VIEW_FORMATS, help: str = "") -> Callable[[F], F]:
    """``-f/--format`` among ``formats``, default ``auto`` (rich on a terminal, else text)."""
    return click.option(
        "-f", "--format", "fmt", type=click.Choice(formats), default="auto", show_default=True,
        help=help or "rich: the figure; text: plain lines; json: everything; "
        "auto: rich on a terminal, text otherwise.",
    )


def tensors_option(func: F) -> F:
    """``--tensors`` (``tensors``: ``None`` when not given; see :func:`tensor_policy`)."""
    return click.option(
        "--tensors", type=click.Choice(POLICIES), default=None,
        help="full: every value; summary (default): every value up to 4096 elements, "
        "above that shape, count, head/tail, min/max/mean/L2 norm and a sha256 digest; "
        "none: shape, count and digest only. --full means full.",
    )(func)


def tensor_policy(tensors: str | None, full: bool) -> str:
    """The policy asked for: ``--tensors``, else ``full`` with ``--full``, else ``summary``."""
    if tensors is not None:
        return tensors
    return "full" if full else "summary"


def _setting(check: Callable[[float], float]) -> Callable[..., Any]:
    """A click callback applying the gradient check's own rule ``check`` to a value."""

    def callback(ctx: click.Context, param: click.Parameter, value: float | None) -> Any:
        if value is None:
            return None
        try:
            return check(value)
        except GradcheckSettingError as error:
            raise click.BadParameter(str(error)) from None

    return callback


def _packed(func: F, names: tuple[str, ...]) -> Callable[..., Any]:
    """A wrapper that moves ``names`` from the keyword arguments into one ``overrides``."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        given = {name: kwargs.pop(name) for name in names}
        kwargs["overrides"] = (kwargs.get("overrides") or CheckOverrides())._replace(**given)
        return func(*args, **kwargs)

    return wrapper


def gradcheck_options(func: F) -> F:
    """``--step``, ``--tolerance``, ``--samples``, ``--max-evaluations``: in ``overrides``."""
    result: Any = _packed(func, ("step", "tolerance", "samples", "max_evaluations"))
    result = click.option(
        "--max-evaluations", type=click.IntRange(min=1), default=None,
        help=f"Refuse a gradient check that would evaluate the objective more than this "
        f"many times (two per coordinate or direction).  [default: {MAX_EVALUATIONS}]",
    )(result)
    result = click.option(
        "--samples", type=click.IntRange(min=1), default=None,
        help="Coordinates to check per tensor (evenly spaced); default: every coordinate "
        "of a tensor up to 4096 elements, 6 above.",
    )(result)
    result = click.option(
        "--tolerance", type=float, default=None, callback=_setting(check_tolerance),
        help="Largest scaled error |a-n|/max(1,|a|,|n|) that passes (fixture's, else 2e-6).",
    )(result)
    result = click.option(
        "--step", type=float, default=None, callback=_setting(check_step),
        help="Central-difference step h (fixture's, else 1e-6).",
    )(result)
    return result  # type: ignore[no-any-return]


def gradcheck_mode_options(func: F) -> F:
    """``--mode`` and ``--directions`` for the Q/K/V gradient check, in ``overrides``."""
    result: Any = _packed(func, ("mode", "directions"))
    result = click.option(
        "--directions", type=click.IntRange(min=1), default=None,
        help="Random directions per tensor in --mode fast (default 3).",
    )(result)
    result = click.option(
        "--mode", type=click.Choice(MODES), default=None,
        help="full: every coordinate; sampled: --samples evenly spaced (default 6); "
        "fast: --directions random directions; auto (default): full up to 4096 "
        "elements per tensor, sampled above.",
    )(result)
    return result  # type: ignore[no-any-return]


class ViewSettings(Record):
    """The view options of a command.

    ``given`` names the options given on the command line (``--width``, ``--full``...),
    so a view that cannot honour one says so (:mod:`qkvcli.cli.show`).
    """

    no_color: bool = False
    width: int | None = None
    precision: int | None = None
    full: bool = False
    export_svg: Path | None = None
    export_html: Path | None = None
    given: tuple[str, ...] = ()
    shading: str = "absolute"

    @property
    def exports(self) -> list[tuple[str, Path]]:
        """``(format, path)`` for each export asked for (``"svg"``, ``"html"``), SVG first."""
        out = []
        if self.export_svg is not None:
            out.append(("svg", self.export_svg))
        if self.export_html is not None:
            out.append(("html", self.export_html))
        return out


def view_options(func: F) -> F:
    """Add the view options and hand them to ``func`` as one ``view`` argument."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        width, precision = kwargs.pop("width"), kwargs.pop("precision")
        no_color, full = kwargs.pop("no_color"), kwargs.pop("full")
        given = tuple(name for name, value in (
            ("--width", width is not None), ("--precision", precision is not None),
            ("--full", full), ("--no-color", no_color)) if value)
        kwargs["view"] = ViewSettings(
            no_color=no_color,
            width=width or environment_width(),  # COLUMNS is capped too
            precision=precision, full=full, export_svg=kwargs.pop("export_svg"),
            export_html=kwargs.pop("export_html"), given=given,
        )
        return func(*args, **kwargs)

    path = OutputPath()
    options = [
        click.option("--export-html", type=path, metavar="FILE",
                     help="Also write the rich view as HTML to FILE, with any --format "
                     "(a copy of the terminal; --html, where offered, is the explorer)."),
        click.option("--export-svg", type=path, metavar="FILE",
                     help="Also write the rich view as SVG to FILE, with any --format."),
        click.option("--full", is_flag=True,
                     help="Show every value of large tensors instead of eliding."),
        click.option("--precision", type=click.IntRange(0, 17), default=None,
                     help="Decimals for values: the rich view (default 6; gradcheck 9; "
                     "variance 4) and attend's and variance's text (6 and 4); "
                     "check shows exact values and says so."),
        click.option("--width", type=click.IntRange(20, MAX_WIDTH), default=None,
                     help="Rich view: columns to lay out for (default: the terminal's, "
                          "or COLUMNS)."),
        click.option("--no-color", is_flag=True,
                     help="No colour (as NO_COLOR does); borders and words remain."),
    ]
    result: Any = wrapper
    for option in options:
        result = option(result)
    return result  # type: ignore[no-any-return]


def environment_width() -> int | None:
    """:data:`MAX_WIDTH` when ``COLUMNS`` asks for more (a layout that wide would not end)."""
    try:
        return MAX_WIDTH if int(os.environ.get("COLUMNS", "0")) > MAX_WIDTH else None
    except ValueError:
        return None


def stdout_is_terminal() -> bool:
    """Whether standard output is a terminal (what ``--format auto`` looks at)."""
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def resolve_format(fmt: str, output: Path | None) -> str:
    """``auto`` becomes ``rich`` on a terminal and ``text`` otherwise (pipes, files, CI)."""
    if fmt != "auto":
        return fmt
    return "rich" if output is None and stdout_is_terminal() else "text"


def batch_options(func: F) -> F:
    """``--expect GOLDEN`` and ``--junit FILE`` for ``qkv run``."""
    func = click.option(
        "--junit", type=OutputPath(), default=None,
        help="Also write a JUnit XML report to FILE (atomically), for CI systems.",
    )(func)
    func = click.option(
        "--expect", "golden", type=SafePath(dir_okay=False), default=None,
        metavar="GOLDEN",
        help="Compare the rendered report with the golden file GOLDEN instead of printing it; "
        "show a unified diff and exit 1 when they differ. One fixture only.",
    )(func)
    return func


def is_batch(fixtures: Sequence[Path], junit: Path | None) -> bool:
    """Whether ``qkv run`` runs in batch mode: several arguments, a directory, or ``--junit``."""
    return len(fixtures) > 1 or junit is not None or any(path.is_dir() for path in fixtures)


def evidence_options(func: F) -> F:
    """What every evidence command (run, report, gradcheck) takes: ``-o``, the
    gradient-check settings (as ``overrides``), ``--max-elements`` and the view
    options (as ``view``)."""
    for decorate in (view_options, max_elements_option, gradcheck_mode_options,
                     gradcheck_options, output_option):
        func = decorate(func)
    return func


class CheckOverrides(Record):
    """Gradient-check settings given on the command line (``None``: the fixture's own).

    ``max_evaluations`` is a limit, not a setting of the fixture: :meth:`check` refuses a
    check that would evaluate the objective more often.
    """

    SETTINGS: ClassVar[tuple[str, ...]] = ("directions", "mode", "samples", "step", "tolerance")

    step: float | None = None
    tolerance: float | None = None
    samples: int | None = None
    mode: str | None = None
    directions: int | None = None
    max_evaluations: int | None = None

    def changes(self) -> dict[str, Any]:
        """The settings that were given, by field name."""
        return {name: getattr(self, name) for name in self.SETTINGS
                if getattr(self, name) is not None}

    def ignored(self, mode: str) -> list[str]:
        """Warnings for options given here that the gradient check in ``mode`` does not use."""
        warnings = []
        if self.directions is not None and mode != "fast":
            warnings.append(f"--directions is used only by --mode fast; ignored with mode {mode}")
        if self.samples is not None and mode in ("full", "fast"):
            what = "every coordinate is checked" if mode == "full" else "it checks directions"
            warnings.append(f"--samples is ignored by --mode {mode} ({what})")
        return warnings

    def warn_ignored(self, mode: str) -> None:
        """Say on stderr which given options a check in ``mode`` does not use (never silently)."""
        for warning in self.ignored(mode):
            click.echo(f"qkv: warning: {warning}", err=True)

    def apply(self, fixture: Fixture) -> Fixture:
        """``fixture`` with these settings in place of its own, checked by :meth:`check`."""
        changes = self.changes()
        fixture = fixture._replace(**changes) if changes else fixture
        self.check(fixture.step, (fixture.input, *fixture.weights), fixture.mode,
                   fixture.samples, fixture.directions)
        return fixture

    def check(self, step: float, arrays: Sequence[Any], mode: str, samples: int | None,
              directions: int, has_fast: bool = True) -> None:
        """Refuse a ``--step`` that overflows beside ``arrays``
        (:func:`~qkvcli.reading.limits.check_step_fits`) and a check over
        ``--max-evaluations`` (:func:`~qkvcli.gradcheck.settings.check_evaluations`).

        ``has_fast``: whether the command offers ``--mode fast`` (``attend`` does not).
        Raises a :class:`~qkvcli.core.errors.QkvError` (the command names its file).
        """
        limit = MAX_EVALUATIONS if self.max_evaluations is None else self.max_evaluations
        if self.step is not None:
            check_step_fits(step, arrays, "--step")
        check_evaluations(mode, samples, directions, [a.size for a in arrays], limit, has_fast)
