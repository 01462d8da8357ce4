"""``qkv run``, ``qkv report`` and ``qkv gradcheck``."""

from __future__ import annotations

import contextlib
import itertools
from typing import TYPE_CHECKING

import click

from qkvcli.cli.group import EXIT_FAILED
from qkvcli.cli.io import load, write_output
from qkvcli.cli.options import (
    FIGURE_PRECISION,
    GRADCHECK_PRECISION,
    ViewSettings,
    batch_options,
    evidence_options,
    fixture_argument,
    is_batch,
    resolve_format,
)
from qkvcli.cli.overrides import CheckOverrides
from qkvcli.cli.paths import SafePath
from qkvcli.cli.tensors import render_pieces, tensor_policy, tensors_option

if TYPE_CHECKING:
    from pathlib import Path

    from rich.console import RenderableType

    from qkvcli.render.rich.options import RichOptions

REPORT_FORMATS = ("text", "trace", "json", "rich", "auto")
GRADCHECK_FORMATS = ("text", "json", "rich", "auto")


def warn_ignored(overrides: CheckOverrides, mode: str) -> None:
    """Say on stderr which given options this run does not use (never silently)."""
    for warning in overrides.ignored(mode):
        click.echo(f"qkv: warning: {warning}", err=True)


def _evidence_command(
    fixture: Path | None, fmt: str, output: Path | None, max_elements: int,
    overrides: CheckOverrides, view: ViewSettings, *, name_failures: bool,
    golden: Path | None = None,
) -> None:
    """Build the evidence for one fixture, show it in ``fmt``, exit 1 when a check failed.

    ``name_failures`` (``qkv run``) lists the failed checks on stderr.
    """
    from qkvcli.checks.evidence import build_evidence

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
            from qkvcli.render.text.checks import failure_lines

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
            from qkvcli.render.text.checks import check_rows

            failed = [check for check in check_rows(evidence) if not check.passed]
            click.echo(f"qkv: FAILED: {', '.join(check.name for check in failed)}", err=True)
            for check in failed:
                click.echo(f"  {check.name}: {check.detail}", err=True)
    if diff or not evidence.passed:
        raise SystemExit(EXIT_FAILED)


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
    _evidence_command(fixture, fmt, output, max_elements, overrides, view,
                      name_failures=True, golden=golden)


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
    _evidence_command(fixture, fmt, output, max_elements, overrides, view, name_failures=False)


@click.command()
@fixture_argument
@click.option(
    "-f", "--format", "fmt", type=click.Choice(GRADCHECK_FORMATS), default="text",
    show_default=True,
    help="text: an aligned table; json: every coordinate; rich: a table with the worst "
    "coordinate marked; auto: rich on a terminal, text otherwise.",
)
@evidence_options
@click.option(
    "--dtype", type=click.Choice(("float64", "float32")), default="float64", show_default=True,
    help="Type of the analytic gradients under test (a speed study); the central "
    "differences they are checked against are always float64.",
)
def gradcheck(
    fixture: Path | None, fmt: str, output: Path | None, max_elements: int,
    view: ViewSettings, overrides: CheckOverrides, dtype: str = "float64",
) -> None:
    """Check the reverse gradients of FIXTURE against central differences.

    Shows each checked coordinate (tensor, coordinate, analytic, numerical, scaled
    error, pass) and the verdict. Exit status 1 when any coordinate fails.
    """
    from qkvcli.cli.console import (
        auto_format,
        check_export_paths,
        export_only,
        gradcheck_progress,
        show_rich,
    )
    from qkvcli.gradcheck.layer import gradcheck_layer

    check_export_paths(view, output, fixture)
    requested, fmt = fmt, resolve_format(fmt, output)
    loaded = overrides.apply(load(fixture, max_elements))
    warn_ignored(overrides, loaded.mode)
    # The analytic gradients under test come from the engine in the chosen type.
    grads = loaded.layer.astype(dtype).backward(loaded.input, *loaded.upstream)
    reporter = gradcheck_progress(fmt, view)
    with reporter or contextlib.nullcontext():
        result = gradcheck_layer(
            loaded.layer, loaded.input, loaded.upstream,
            (grads.grad_input, grads.grad_w_query, grads.grad_w_key, grads.grad_w_value),
            loaded.step, loaded.tolerance, loaded.samples, progress=reporter,
            mode=loaded.mode, directions=loaded.directions, seed=loaded.seed,
        )

    def table(options: RichOptions) -> RenderableType:
        from qkvcli.render.rich.gradcheck import render_gradcheck_rich

        return render_gradcheck_rich(result, options)

    fmt = auto_format(requested, fmt, table, view, GRADCHECK_PRECISION)
    if fmt == "rich":
        show_rich(table, view, output, fixture, GRADCHECK_PRECISION, "qkv gradcheck")
    else:
        if fmt == "json":
            from qkvcli.render.json.evidence import dumps, gradcheck_json

            text = dumps({**gradcheck_json(result), "dtype": dtype})
        else:
            from qkvcli.render.text.gradcheck import render_gradcheck_text

            text = render_gradcheck_text(result)
            if dtype != "float64":
                text += f"dtype={dtype} (analytic gradients; central differences in float64)\n"
        write_output(text, output, protect=fixture)
        export_only(table, view, fixture, GRADCHECK_PRECISION, "qkv gradcheck")
    if not result.passed:
        raise SystemExit(EXIT_FAILED)
