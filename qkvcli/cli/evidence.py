"""``qkv run`` and ``qkv report``: build the evidence, show it, pick the exit status.

What ``qkv run`` and ``qkv report`` share: build one fixture's evidence, show it, pick the exit status.

``qkv run``: one fixture's evidence, or a summary of several (``--jobs``, ``--junit``).

``qkv report``: render one fixture's evidence as text, trace, json or rich.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import click

from qkvcli.cli.group import EXIT_FAILED
from qkvcli.cli.io import SafePath, load, write_output
from qkvcli.cli.options import (
    FIGURE_PRECISION,
    CheckOverrides,
    ViewSettings,
    batch_options,
    evidence_options,
    fixture_argument,
    is_batch,
    resolve_format,
)
from qkvcli.cli.tensors import render_pieces, tensor_policy, tensors_option

if TYPE_CHECKING:
    from pathlib import Path

    from rich.console import RenderableType

    from qkvcli.render.rich.options import RichOptions

REPORT_FORMATS = ("text", "trace", "json", "rich", "auto")


def warn_ignored(overrides: CheckOverrides, mode: str) -> None:
    """Say on stderr which given options this run does not use (never silently)."""
    for warning in overrides.ignored(mode):
        click.echo(f"qkv: warning: {warning}", err=True)


def evidence_command(
    fixture: Path | None, fmt: str, output: Path | None, max_elements: int,
    overrides: CheckOverrides, view: ViewSettings, *, name_failures: bool,
    golden: Path | None = None,
) -> None:
    """Build the evidence for one fixture, show it in ``fmt``, exit 1 when a check failed.

    ``name_failures`` (``qkv run``) lists the failed checks on stderr.
    """
    from qkvcli.evidence.build import build_evidence

    if view.exports:
        from qkvcli.cli.console import check_export_paths

        check_export_paths(view, output, fixture)
    if golden is not None:
        # A golden file is plain text: compare the text report unless a plain format is named.
        if fmt == "auto":
            fmt = "text"
        if fmt == "rich":
            raise click.UsageError("--expect compares text, trace or json, not the rich figure")
    requested, fmt = fmt, resolve_format(fmt, output)
    loaded = overrides.apply(load(fixture, max_elements))
    warn_ignored(overrides, loaded.mode)
    evidence = build_evidence(loaded)

    def figure(options: RichOptions) -> RenderableType:
        from qkvcli.render.rich.view import render_rich

        return render_rich(evidence, options)

    if fmt == "rich" and requested == "auto":
        from qkvcli.cli.console import auto_format

        fmt = auto_format(requested, fmt, figure, view, FIGURE_PRECISION)

    title = f"qkv {click.get_current_context().info_name}"
    diff = ""
    if fmt == "rich":
        from qkvcli.cli.console import show_rich

        show_rich(figure, view, output, fixture, FIGURE_PRECISION, title)
    else:
        pieces = render_pieces(evidence, fmt, tensor_policy(view.full))
        if fmt == "text" and not evidence.passed:
            from qkvcli.render.wording import failure_lines

            # Only a failing report grows: passing reports stay byte for byte the chapter's.
            pieces = itertools.chain(pieces, [failure_lines(evidence)])
        if golden is None:
            write_output(pieces, output, protect=fixture)
        else:
            text = "".join(pieces)
            if output is not None:
                write_output(text, output, protect=fixture)
            from qkvcli.cli.batch import golden_diff

            diff = golden_diff(text, golden)
        if diff:
            click.echo(diff, nl=False)
            click.echo(f"qkv: FAILED: the report differs from {golden}", err=True)
        elif golden is not None:
            click.echo(f"qkv: the report matches {golden}", err=True)
        if view.exports:
            from qkvcli.cli.console import export_only

            export_only(figure, view, fixture, FIGURE_PRECISION, title)
    if not evidence.passed:
        if name_failures:
            from qkvcli.render.wording import check_rows

            failed = [check for check in check_rows(evidence) if not check.passed]
            click.echo(f"qkv: FAILED: {', '.join(check.name for check in failed)}", err=True)
            for check in failed:
                click.echo(f"  {check.name}: {check.detail}", err=True)
    if diff or not evidence.passed:
        raise SystemExit(EXIT_FAILED)


if TYPE_CHECKING:
    from pathlib import Path


@click.command()
@click.argument("fixtures", nargs=-1, type=SafePath())
@click.option(
    "-f", "--format", "fmt", type=click.Choice(REPORT_FORMATS), default="auto",
    show_default=True,
    help="How to show the evidence; auto: the rich figure on a terminal, text otherwise.",
)
@batch_options
@evidence_options
@tensors_option
@click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Run several fixtures in this many worker processes.")
def run(
    fixtures: tuple[Path, ...], fmt: str, output: Path | None, golden: Path | None,
    junit: Path | None, max_elements: int, view: ViewSettings, overrides: CheckOverrides,
    jobs: int = 1,
) -> None:
    """Run every check of the chapter's evidence on FIXTURE... and show it.

    FIXTURE defaults to the bundled chapter fixture. With several fixtures (or a
    directory, meaning its *.json files) each is run and a summary table is shown
    (-o FILE saves it instead).
    Exit status: 0 when every check passed, 1 when any failed, 2 for bad input.
    """
    if is_batch(fixtures, junit):
        from qkvcli.cli.batch import reject_single_options, run_many

        reject_single_options(golden)
        if view.exports:
            raise click.UsageError("--export-svg/--export-html take a single fixture file")
        run_many(fixtures, junit, max_elements, overrides, jobs=jobs, output=output)
        return
    fixture = fixtures[0] if fixtures else None
    evidence_command(fixture, fmt, output, max_elements, overrides, view,
                      name_failures=True, golden=golden)


if TYPE_CHECKING:
    from pathlib import Path


@click.command()
@fixture_argument
@click.option(
    "-f", "--format", "fmt", type=click.Choice(REPORT_FORMATS), default="text",
    show_default=True,
    help="text: the chapter's report; trace: the diagram trace; json: everything; "
    "rich: the chapter's figure; auto: rich on a terminal, text otherwise.",
)
@evidence_options
@tensors_option
def report(
    fixture: Path | None, fmt: str, output: Path | None, max_elements: int,
    view: ViewSettings, overrides: CheckOverrides,
) -> None:
    """Render the evidence for FIXTURE (default: the bundled chapter fixture).

    Exit status: 0 when every check passed, 1 when any failed, 2 for bad input.
    """
    evidence_command(fixture, fmt, output, max_elements, overrides, view, name_failures=False)
