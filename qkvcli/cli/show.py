"""Showing a command's evidence: the view contract every command with a rich view keeps.

``run``, ``report``, ``gradcheck``, ``attend``, ``variance`` and ``check`` all end in
:func:`show`: ``-f auto`` picks the rich view on a terminal and text elsewhere; a rich
view wider than the screen it is shown on becomes the text, wrapped to the screen at
word boundaries (:mod:`qkvcli.render.wrap`); the text formats come from
:func:`qkvcli.render.render_pieces`, the figure from :func:`qkvcli.render.figure`;
``--export-svg``/``--export-html`` export the figure whatever format was shown, and
``--html`` (run, report, attend, check) writes the explorer page
(:mod:`qkvcli.render.explorer`); a view option the shown view does not use is named in
one warning line (:func:`unused_options`), never silently dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from qkvcli.cli.io import write_file, write_output
from qkvcli.cli.options import ViewSettings, resolve_format
from qkvcli.render import PRECISION_FORMATS, figure, view_of

if TYPE_CHECKING:
    from rich.console import RenderableType

    from qkvcli.render.rich.options import RichOptions

RICH_HONOURS = {
    "evidence": ("--width", "--precision", "--full", "--no-color"),
    "gradcheck": ("--width", "--precision", "--full", "--no-color"),
    "attend": ("--width", "--precision", "--full", "--no-color"),
    "variance": ("--width", "--precision", "--no-color"),  # its rows are the table's own
    "check": ("--width", "--full", "--no-color"),  # cards print exact values
    "chapter": ("--width", "--precision", "--full", "--no-color"),  # chapters 27-30
}
"""The view options the rich view (shown or exported) of each report uses (by its
:data:`~qkvcli.render.views.VIEWS` view)."""
REASONS = {
    ("check", "--precision"): "its details show exact values",
    ("variance", "--full"): "its table elides nothing",
}
"""Why a report's views never use an option (said in its warning)."""
TEXT_HONOURS = {"evidence": ("--full", "--no-color"), "attend": ("--full", "--no-color")}
"""The view options the text formats of each report use (``--full``: ``--tensors full``);
every text format honours ``--no-color``: it has no colour."""


def unused_options(report: str, fmt: str, view: ViewSettings, html: bool = False) -> list[str]:
    """The given view options that neither the shown format ``fmt``, an export nor the
    explorer page (``html``: it takes ``--precision``) uses."""
    used = set(TEXT_HONOURS.get(report, ("--no-color",)))
    if fmt in PRECISION_FORMATS[report] or html:
        used.add("--precision")
    if fmt == "rich" or view.exports:
        used.update(RICH_HONOURS[report])
    return [name for name in view.given if name not in used]


def unused_warnings(report: str, fmt: str, view: ViewSettings, title: str,
                    html: bool = False) -> list[str]:
    """One warning per given view option that :func:`unused_options` finds unused."""
    warnings = []
    for name in unused_options(report, fmt, view, html):
        reason = REASONS.get((report, name))
        if reason is not None:
            warnings.append(f"{name} does not apply to {title} ({reason})")
        else:
            warnings.append(f"{name} applies to the rich view (-f rich, --export-svg, "
                            f"--export-html); ignored with -f {fmt}")
    return warnings


def show(
    evidence: object, fmt: str, view: ViewSettings, output: Path | None, *,
    title: str, precision: int, pieces: Callable[[str], Iterable[str]],
    html: Path | None = None, page: Mapping[str, Any] | None = None,
) -> str:
    """Show ``evidence`` as ``fmt`` on stdout or in ``output``, then export the figure
    and write the explorer page to ``html``; return the format shown.

    ``precision`` is the rich view's (and the explorer's) default decimals; ``pieces(fmt)``
    gives a text format's pieces (normally :func:`qkvcli.render.render_pieces` of
    ``evidence``); ``title`` names the exported page (``qkv run``); ``page`` holds what
    else the explorer takes (check's ``replay`` and ``spec``, attend's ``other`` mask).
    """
    shown = _show(evidence, fmt, view, output, title=title, precision=precision,
                  pieces=pieces, html=html is not None)
    if html is not None:
        write_page(evidence, html, view, title=title, precision=precision, page=page)
    return shown


def write_page(evidence: object, html: Path, view: ViewSettings, *, title: str,
               precision: int, page: Mapping[str, Any] | None = None) -> None:
    """Write the explorer page of ``evidence`` to ``html`` (``--precision`` decimals, else
    ``precision``), through the one writer of every output."""
    from qkvcli.render.explorer import explorer_page

    decimals = precision if view.precision is None else view.precision
    write_file(html, explorer_page(evidence, precision=decimals, title=title, **(page or {})))


def _show(
    evidence: object, fmt: str, view: ViewSettings, output: Path | None, *,
    title: str, precision: int, pieces: Callable[[str], Iterable[str]], html: bool,
) -> str:
    built: dict[RichOptions, RenderableType] = {}

    def build(options: RichOptions) -> RenderableType:
        # measured for the screen, then printed: one figure for both
        if options not in built:
            built[options] = figure(evidence, options)
        return built[options]

    fmt = resolve_format(fmt, output)
    wrap: int | None = None
    if fmt == "rich" and output is None:
        from qkvcli.cli.console import narrow_screen

        wrap = narrow_screen(build, view, precision)
        fmt = "text" if wrap is not None else fmt
    for warning in unused_warnings(view_of(evidence), fmt, view, title, html):
        if wrap is None or not warning.startswith("--width "):  # the text is wrapped to it
            click.echo(f"qkv: warning: {warning}", err=True)
    if fmt == "rich":
        from qkvcli.cli.console import show_rich

        show_rich(build, view, output, precision, title)
        return fmt
    if wrap is not None:
        from qkvcli.render.wrap import wrap_lines

        write_output(wrap_lines(pieces(fmt), wrap), output)
    else:
        write_output(pieces(fmt), output)
    if view.exports:
        from qkvcli.cli.console import export_only

        export_only(build, view, precision, title)
    return fmt
