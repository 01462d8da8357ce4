"""``qkv gradcheck``: the per-coordinate central-difference check of one fixture's gradients."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import click

from qkvcli.cli.evidence import warn_ignored
from qkvcli.cli.group import EXIT_FAILED
from qkvcli.cli.io import load, write_output
from qkvcli.cli.options import (
    GRADCHECK_PRECISION,
    CheckOverrides,
    ViewSettings,
    evidence_options,
    fixture_argument,
    resolve_format,
)

if TYPE_CHECKING:
    from pathlib import Path

    from rich.console import RenderableType

    from qkvcli.render.rich.options import RichOptions

GRADCHECK_FORMATS = ("text", "json", "rich", "auto")


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
            from qkvcli.render.gradcheck import render_gradcheck_json

            text = render_gradcheck_json(result, dtype=dtype)
        else:
            from qkvcli.render.gradcheck import render_gradcheck_text

            text = render_gradcheck_text(result)
            if dtype != "float64":
                text += f"dtype={dtype} (analytic gradients; central differences in float64)\n"
        write_output(text, output, protect=fixture)
        export_only(table, view, fixture, GRADCHECK_PRECISION, "qkv gradcheck")
    if not result.passed:
        raise SystemExit(EXIT_FAILED)
