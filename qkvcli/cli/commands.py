"""``qkv run``, ``qkv report`` and ``qkv gradcheck``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from qkvcli.cli.common import (
    EXIT_FAILED,
    fixture_argument,
    gradcheck_mode_options,
    gradcheck_options,
    load,
    max_elements_option,
    output_option,
    with_settings,
    write_output,
)

if TYPE_CHECKING:
    from pathlib import Path

REPORT_FORMATS = ("text", "trace", "json")


def _render(evidence: object, fmt: str) -> str:
    from qkvcli.evidence import Evidence

    assert isinstance(evidence, Evidence)
    if fmt == "trace":
        from qkvcli.render.trace import render_trace

        return render_trace(evidence)
    if fmt == "json":
        from qkvcli.render.json import render_json

        return render_json(evidence)
    from qkvcli.render.text import render_text

    return render_text(evidence)


def _evidence_command(
    fixture: Path | None, fmt: str, output: Path | None, max_elements: int,
    step: float | None, tolerance: float | None, samples: int | None, verdict: bool,
    mode: str | None = None, directions: int | None = None,
) -> None:
    from qkvcli.evidence import build_evidence

    loaded = with_settings(
        load(fixture, max_elements), step, tolerance, samples, mode, directions
    )
    evidence = build_evidence(loaded)
    write_output(_render(evidence, fmt), output, protect=fixture)
    if not evidence.passed:
        if verdict:
            failed = ", ".join(check.name for check in evidence.checks if not check.passed)
            click.echo(f"qkv: FAILED: {failed}", err=True)
        raise SystemExit(EXIT_FAILED)


@click.command()
@fixture_argument
@click.option(
    "-f", "--format", "fmt", type=click.Choice(REPORT_FORMATS), default="text",
    show_default=True, help="How to show the evidence.",
)
@output_option
@gradcheck_options
@gradcheck_mode_options
@max_elements_option
def run(
    fixture: Path | None, fmt: str, output: Path | None, step: float | None,
    tolerance: float | None, samples: int | None, max_elements: int,
    mode: str | None = None, directions: int | None = None,
) -> None:
    """Run every check of the chapter's evidence on FIXTURE and show it.

    FIXTURE defaults to the bundled chapter fixture. Exit status: 0 when every
    check passed, 1 when any failed, 2 for bad input.
    """
    _evidence_command(fixture, fmt, output, max_elements, step, tolerance, samples, True,
                      mode, directions)


@click.command()
@fixture_argument
@click.option(
    "-f", "--format", "fmt", type=click.Choice(REPORT_FORMATS), default="text",
    show_default=True, help="text: the chapter's report; trace: the diagram trace; json: everything.",
)
@output_option
@gradcheck_options
@gradcheck_mode_options
@max_elements_option
def report(
    fixture: Path | None, fmt: str, output: Path | None, step: float | None,
    tolerance: float | None, samples: int | None, max_elements: int,
    mode: str | None = None, directions: int | None = None,
) -> None:
    """Render the evidence for FIXTURE (default: the bundled chapter fixture).

    Exit status: 0 when every check passed, 1 when any failed, 2 for bad input.
    """
    _evidence_command(fixture, fmt, output, max_elements, step, tolerance, samples, False,
                      mode, directions)


@click.command()
@fixture_argument
@gradcheck_options
@gradcheck_mode_options
@click.option(
    "-f", "--format", "fmt", type=click.Choice(("text", "json")), default="text",
    show_default=True, help="text: an aligned table; json: every coordinate.",
)
@output_option
@max_elements_option
@click.option(
    "--dtype", type=click.Choice(("float64", "float32")), default="float64", show_default=True,
    help="Type of the analytic gradients under test (a speed study); the central "
    "differences they are checked against are always float64.",
)
def gradcheck(
    fixture: Path | None, step: float | None, tolerance: float | None, samples: int | None,
    fmt: str, output: Path | None, max_elements: int,
    mode: str | None = None, directions: int | None = None, dtype: str = "float64",
) -> None:
    """Check the reverse gradients of FIXTURE against central differences.

    Shows each checked coordinate (tensor, coordinate, analytic, numerical, scaled
    error, pass) and the verdict. Exit status 1 when any coordinate fails.
    """
    from qkvcli.gradcheck import gradcheck_layer

    loaded = with_settings(
        load(fixture, max_elements), step, tolerance, samples, mode, directions
    )
    # The analytic gradients under test come from the engine in the chosen type.
    grads = loaded.layer.astype(dtype).backward(loaded.input, *loaded.upstream)
    result = gradcheck_layer(
        loaded.layer, loaded.input, loaded.upstream,
        (grads.input, grads.query, grads.key, grads.value),
        loaded.step, loaded.tolerance, loaded.samples,
        mode=loaded.mode, directions=loaded.directions, seed=loaded.seed,
    )
    if fmt == "json":
        from qkvcli.render.json import dumps, gradcheck_json

        text = dumps(gradcheck_json(result))
    else:
        from qkvcli.render.gradcheck import render_gradcheck_text

        text = render_gradcheck_text(result)
    write_output(text, output, protect=fixture)
    if not result.passed:
        raise SystemExit(EXIT_FAILED)
