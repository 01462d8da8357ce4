"""``qkv gradcheck``: the per-coordinate central-difference check of one fixture's gradients.

A chapter 27-30 fixture (its ``"chapter"`` key names one) gets its chapter's own gradient
check, as ``qkv run`` computes it (:mod:`qkvcli.cli.chapter`); any other is chapter 26's.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import click

from qkvcli.check.chapter26 import projections_of
from qkvcli.cli.group import EXIT_FAILED, InputError
from qkvcli.cli.io import check_outputs, label_of, load, working_on
from qkvcli.cli.options import (
    GRADCHECK_PRECISION,
    CheckOverrides,
    ViewSettings,
    evidence_options,
    fixture_argument,
    format_option,
    html_option,
    resolve_format,
)
from qkvcli.cli.show import show
from qkvcli.gradcheck.projections import gradcheck_projections
from qkvcli.render import render_pieces


@click.command()
@fixture_argument
@format_option(help="text: an aligned table; json: every coordinate; rich: a table with the "
               "worst coordinate marked; auto: rich on a terminal, text otherwise.")
@evidence_options
@click.option(
    "--dtype", type=click.Choice(("float64", "float32")), default="float64", show_default=True,
    help="Type of the analytic gradients under test (a speed study); the central "
    "differences they are checked against are always float64.",
)
@html_option
def gradcheck(
    fixture: Path | None, fmt: str, output: Path | None, max_elements: int,
    view: ViewSettings, overrides: CheckOverrides, dtype: str = "float64",
    html: Path | None = None,
) -> None:
    """Check the reverse gradients of FIXTURE against central differences.

    Shows each checked coordinate (tensor, coordinate, analytic, numerical, scaled
    error, pass) and the verdict. A chapter 27-30 fixture gets its chapter's own check.
    Exit status 1 when any coordinate fails.
    """
    from qkvcli.cli import chapter as chapters
    from qkvcli.cli.console import gradcheck_progress

    check_outputs([output, *(path for _, path in view.exports), html], [fixture])
    if fixture is not None:
        with working_on(label_of(fixture)):
            found = chapters.load(fixture, max_elements, None)
        if isinstance(found, chapters.ChapterFixture):
            if not found.chapter.has_gradcheck:
                raise InputError(f"{label_of(fixture)}: chapter {found.chapter.name} has no "
                                 "reverse pass: no gradients to check (qkv run shows its "
                                 "evidence)")
            if dtype != "float64":
                click.echo(f"qkv: warning: --dtype does not apply to chapter "
                           f"{found.chapter.name}; ignored", err=True)
            with working_on(label_of(fixture)):
                result = chapters.build(found, overrides).gradcheck
            show(result, fmt, view, output, title="qkv gradcheck",
                 precision=GRADCHECK_PRECISION, pieces=lambda shown: render_pieces(result, shown),
                 html=html, page={"chapter": found.chapter.name})
            if not result.passed:
                raise SystemExit(EXIT_FAILED)
            return
    reporter = gradcheck_progress(resolve_format(fmt, output), view)
    with working_on(label_of(fixture)), reporter or contextlib.nullcontext():
        loaded = overrides.apply(load(fixture, max_elements))
        overrides.warn_ignored(loaded.mode)
        # The analytic gradients under test come from the engine in the chosen type.
        layer = projections_of(loaded)
        grads = layer.astype(dtype).backward(loaded.input, *loaded.upstream)
        result = gradcheck_projections(
            layer, loaded.input, loaded.upstream,
            (grads.grad_input, grads.grad_w_query, grads.grad_w_key, grads.grad_w_value),
            loaded.step, loaded.tolerance, loaded.samples, progress=reporter,
            mode=loaded.mode, directions=loaded.directions, seed=loaded.seed,
        )
    from qkvcli.core.names import CHAPTER_IDS, DEFAULT_CHAPTER

    show(result, fmt, view, output, title="qkv gradcheck", precision=GRADCHECK_PRECISION,
         pieces=lambda shown: render_pieces(result, shown, dtype=dtype), html=html,
         page={"chapter": CHAPTER_IDS[DEFAULT_CHAPTER]})
    if not result.passed:
        raise SystemExit(EXIT_FAILED)
