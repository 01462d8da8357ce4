"""``qkv report``: render one fixture's evidence as text, trace, json or rich."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from qkvcli.cli.evidence import REPORT_FORMATS, evidence_command
from qkvcli.cli.options import ViewSettings, evidence_options, fixture_argument
from qkvcli.cli.overrides import CheckOverrides
from qkvcli.cli.tensors import tensors_option

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
