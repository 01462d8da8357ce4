"""``qkv run``: one fixture's evidence, or a summary of several (``--jobs``, ``--junit``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from qkvcli.cli.evidence import REPORT_FORMATS, evidence_command
from qkvcli.cli.options import ViewSettings, batch_options, evidence_options, is_batch
from qkvcli.cli.overrides import CheckOverrides
from qkvcli.cli.paths import SafePath
from qkvcli.cli.tensors import tensors_option

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
