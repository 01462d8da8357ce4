"""Showing a command's evidence: the view contract every command with a rich view keeps.

``run``, ``report``, ``gradcheck``, ``attend``, ``variance`` and ``check`` all end in
:func:`show`: ``-f auto`` picks the rich view on a terminal and text elsewhere; a rich
view wider than the screen it is shown on becomes the text, wrapped to the screen at
word boundaries (:mod:`qkvcli.render.wrap`); the text formats come from
:func:`qkvcli.render.render_pieces`, the figure from :func:`qkvcli.render.figure`;
``--export-svg``/``--export-html`` export the figure whatever format was shown; a view
option the shown view does not use is named in one warning line
(:func:`unused_options`), never silently dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from qkvcli.cli.io import write_output
from qkvcli.cli.options import ViewSettings, resolve_format
from qkvcli.render import PRECISION_FORMATS, figure, kind_of

if TYPE_CHECKING:
    from rich.console import RenderableType

    from qkvcli.render.rich.options import RichOptions

RICH_HONOURS = {
    "evidence": ("--width", "--precision", "--full", "--no-color"),
    "gradcheck": ("--width", "--precision", "--full", "--no-color"),
    "attend": ("--width", "--precision", "--full", "--no-color"),
    "variance": ("--width", "--precision", "--no-color"),  # its rows are the table's own
    "check": ("--width", "--full", "--no-color"),  # cards print exact values
}
"""The view options the rich view (shown or exported) of each kind uses."""
REASONS = {
    ("check", "--precision"): "its details show exact values",
    ("variance", "--full"): "its table elides nothing",
}
"""Why a kind's views never use an option (said in its warning)."""
TEXT_HONOURS = {"evidence": ("--full", "--no-color"), "attend": ("--full", "--no-color")}
"""The view options the text formats of each kind use (``--full``: ``--tensors full``);
every text format honours ``--no-color``: it has no colour."""


def unused_options(kind: str, fmt: str, view: ViewSettings) -> list[str]:
    """The given view options that neither the shown format ``fmt`` nor an export uses."""
    used = set(TEXT_HONOURS.get(kind, ("--no-color",)))
    if fmt in PRECISION_FORMATS[kind]:
        used.add("--precision")
    if fmt == "rich" or view.exports:
        used.update(RICH_HONOURS[kind])
    return [name for name in view.given if name not in used]


def unused_warnings(kind: str, fmt: str, view: ViewSettings, title: str) -> list[str]:
    """One warning per given view option that :func:`unused_options` finds unused."""
    warnings = []
    for name in unused_options(kind, fmt, view):
        reason = REASONS.get((kind, name))
        if reason is not None:
            warnings.append(f"{name} does not apply to {title} ({reason})")
        else:
            warnings.append(f"{name} applies to the rich view (-f rich, --export-svg, "
                            f"--export-html); ignored with -f {fmt}")
    return warnings


def show(
    evidence: object, fmt: str, view: ViewSettings, output: Path | None, *,
    title: str, precision: int, pieces: Callable[[str], Iterable[str]],
) -> str:
    """Show ``evidence`` as ``fmt`` on stdout or in ``output``, then export the figure;
    return the format shown.

    ``precision`` is the rich view's default decimals; ``pieces(fmt)`` gives a text
    format's pieces (normally :func:`qkvcli.render.render_pieces` of ``evidence``);
    ``title`` names the exported page (``qkv run``).
    """
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
    for warning in unused_warnings(kind_of(evidence), fmt, view, title):
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
