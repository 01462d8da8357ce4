"""The ``qkv`` command line: the only layer that touches argv, files, exit codes and the terminal."""

from __future__ import annotations

import click

from qkvcli import __version__
from qkvcli.cli.commands import gradcheck, report, run
from qkvcli.cli.common import QkvGroup


@click.group(cls=QkvGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="qkv", message="%(prog)s %(version)s")
def main() -> None:
    """Evidence for the query/key/value projections of self-attention (chapter 26).

    \b
    qkv run [FIXTURE]              run every check and show the evidence
                                   (the chapter's figure on a terminal, text in a pipe)
    qkv report [FIXTURE] -f trace  render the report as text, trace, json or rich
    qkv gradcheck [FIXTURE]        per-coordinate central-difference check

    Without FIXTURE the bundled chapter fixture is used.
    """


main.add_command(run)
main.add_command(report)
main.add_command(gradcheck)
