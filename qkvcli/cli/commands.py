"""``qkv run``, ``qkv report`` and ``qkv gradcheck``."""

from __future__ import annotations

from pathlib import Path

import click

from qkvcli.cli.batch import batch_options, golden_diff, is_batch, reject_single_options, run_many
from qkvcli.cli.common import (
    EXIT_FAILED,
    fixture_argument,
    gradcheck_options,
    load,
    max_elements_option,
    output_option,
    with_settings,
    write_output,
)

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
    golden: Path | None = None,
) -> None:
    from qkvcli.evidence import build_evidence

    loaded = with_settings(load(fixture, max_elements), step, tolerance, samples)
    evidence = build_evidence(loaded)
    text = _render(evidence, fmt)
    if golden is None or output is not None:
        write_output(text, output, protect=fixture)
    diff = "" if golden is None else golden_diff(text, golden)
    if diff:
        click.echo(diff, nl=False)
        click.echo(f"qkv: FAILED: the report differs from {golden}", err=True)
    if not evidence.passed:
        if verdict:
            failed = [check for check in evidence.checks if not check.passed]
            click.echo(f"qkv: FAILED: {', '.join(check.name for check in failed)}", err=True)
            for check in failed:
                click.echo(f"  {check.name}: {check.detail}", err=True)
    if diff or not evidence.passed:
        raise SystemExit(EXIT_FAILED)


@click.command()
@click.argument("fixtures", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "-f", "--format", "fmt", type=click.Choice(REPORT_FORMATS), default="text",
    show_default=True, help="How to show the evidence.",
)
@output_option
@batch_options
@gradcheck_options
@max_elements_option
def run(
    fixtures: tuple[Path, ...], fmt: str, output: Path | None, golden: Path | None,
    junit: Path | None, step: float | None, tolerance: float | None, samples: int | None,
    max_elements: int,
) -> None:
    """Run every check of the chapter's evidence on FIXTURE... and show it.

    FIXTURE defaults to the bundled chapter fixture. With several fixtures (or a
    directory, meaning its *.json files) each is run and a summary table is shown.
    Exit status: 0 when every check passed, 1 when any failed, 2 for bad input.
    """
    if is_batch(fixtures, junit):
        reject_single_options(output, golden)
        run_many(fixtures, junit, max_elements, step, tolerance, samples)
        return
    fixture = fixtures[0] if fixtures else None
    _evidence_command(fixture, fmt, output, max_elements, step, tolerance, samples, True, golden)


@click.command()
@fixture_argument
@click.option(
    "-f", "--format", "fmt", type=click.Choice(REPORT_FORMATS), default="text",
    show_default=True, help="text: the chapter's report; trace: the diagram trace; json: everything.",
)
@output_option
@gradcheck_options
@max_elements_option
def report(
    fixture: Path | None, fmt: str, output: Path | None, step: float | None,
    tolerance: float | None, samples: int | None, max_elements: int,
) -> None:
    """Render the evidence for FIXTURE (default: the bundled chapter fixture).

    Exit status: 0 when every check passed, 1 when any failed, 2 for bad input.
    """
    _evidence_command(fixture, fmt, output, max_elements, step, tolerance, samples, False)


@click.command()
@fixture_argument
@gradcheck_options
@click.option(
    "-f", "--format", "fmt", type=click.Choice(("text", "json")), default="text",
    show_default=True, help="text: an aligned table; json: every coordinate.",
)
@output_option
@max_elements_option
def gradcheck(
    fixture: Path | None, step: float | None, tolerance: float | None, samples: int | None,
    fmt: str, output: Path | None, max_elements: int,
) -> None:
    """Check the reverse gradients of FIXTURE against central differences.

    Shows each checked coordinate (tensor, coordinate, analytic, numerical, scaled
    error, pass) and the verdict. Exit status 1 when any coordinate fails.
    """
    from qkvcli.evidence import compute_primary
    from qkvcli.gradcheck import gradcheck_layer

    loaded = with_settings(load(fixture, max_elements), step, tolerance, samples)
    primary = compute_primary(loaded)
    result = gradcheck_layer(
        loaded.layer, loaded.input, loaded.upstream,
        (primary.input_gradient, primary.query_weight_gradient,
         primary.key_weight_gradient, primary.value_weight_gradient),
        loaded.step, loaded.tolerance, loaded.samples,
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
