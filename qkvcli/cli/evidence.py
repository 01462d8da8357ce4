"""``qkv run`` and ``qkv report``: load a fixture, build its evidence, show it, exit.

``qkv run`` shows one fixture's evidence (the figure on a terminal, text elsewhere),
compares it with a golden file (``--expect``), or summarises several (``cli/batch.py``).
``qkv report`` renders one fixture's evidence as text, trace, json or rich.
Exit status: 0 when every check passed, 1 when any failed, 2 for bad input.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from pathlib import Path

import click

from qkvcli.check.chapter26 import build_evidence
from qkvcli.check.chapter26_evidence import Evidence
from qkvcli.cli.chapter import chapter_option, check_chapter
from qkvcli.cli.group import EXIT_FAILED
from qkvcli.cli.io import SafePath, check_outputs, label_of, load, working_on, write_output
from qkvcli.cli.options import (
    FIGURE_PRECISION,
    CheckOverrides,
    ViewSettings,
    batch_options,
    evidence_options,
    fixture_argument,
    format_option,
    html_option,
    is_batch,
    tensor_policy,
    tensors_option,
)
from qkvcli.cli.show import show, write_page
from qkvcli.render import render_pieces
from qkvcli.render.wording import check_rows, failure_lines

REPORT_FORMATS = ("auto", "rich", "text", "trace", "json")
FORMAT_HELP = ("text: the chapter's report; trace: the diagram trace; json: everything; "
               "rich: the chapter's figure; auto: rich on a terminal, text otherwise.")


def report_pieces(evidence: Evidence, tensors: str) -> Callable[[str], Iterable[str]]:
    """A text format's pieces: the report, and below a failing text report one
    ``failed=`` line per failed check (no verdict line: the text and trace are the
    course's formats; a passing report stays byte for byte the chapter's)."""

    def pieces(fmt: str) -> Iterable[str]:
        rendered = render_pieces(evidence, fmt, tensors=tensors)
        if fmt == "text" and not evidence.passed:
            if not isinstance(evidence, Evidence):  # chapters 27-30
                from qkvcli.render.chapters.dispatch import failure_lines as chapter_failures

                return itertools.chain(rendered, [chapter_failures(evidence)])
            return itertools.chain(rendered, [failure_lines(evidence)])
        return rendered

    return pieces


def build(fixture: Path | None, max_elements: int, overrides: CheckOverrides,
          chapter: int | None = None, tensors: str | None = None) -> Evidence:
    """Load ``fixture`` with the command line's gradient-check settings and build its
    evidence (``chapter``: ``--chapter``, see :mod:`qkvcli.cli.chapter`); errors (also
    running out of memory) name the file."""
    from qkvcli.core.names import CHAPTER_IDS

    # without FIXTURE, --chapter N reads chapter N's bundled fixture: errors name it
    bundled = f"<bundled ch{CHAPTER_IDS[chapter]}.json>" if chapter in CHAPTER_IDS else None
    with working_on(label_of(fixture) if bundled is None else label_of(fixture, bundled)):
        if chapter is not None or fixture is not None:
            from qkvcli.cli import chapter as chapters

            found = chapters.load(fixture, max_elements, chapter)
            if isinstance(found, chapters.ChapterFixture):
                return chapters.build(found, overrides, tensors)  # type: ignore[no-any-return]
            loaded = overrides.apply(found)
        else:
            loaded = overrides.apply(load(fixture, max_elements))
        overrides.warn_ignored(loaded.mode)
        return build_evidence(loaded)


def name_failures(evidence: Evidence) -> None:
    """On stderr: ``qkv: FAILED: names`` and one line per failed check (``qkv run``)."""
    from qkvcli.cli.console import echo_wrapped

    if not isinstance(evidence, Evidence):  # chapters 27-30: their families
        names = [check.name for check in evidence.checks if not check.passed]
        echo_wrapped(f"qkv: FAILED: {', '.join(names)}")
        return
    failed = [check for check in check_rows(evidence) if not check.passed]
    echo_wrapped("\n".join([f"qkv: FAILED: {', '.join(check.name for check in failed)}",
                            *(f"  {check.name}: {check.detail}" for check in failed)]))


def compare_golden(text: str, golden: Path, output: Path | None) -> bool:
    """Write ``text`` to ``output`` (if given), compare it with ``golden``; print the diff
    and say the outcome on stderr. Returns whether they match."""
    from qkvcli.cli.batch import golden_diff

    if output is not None:
        write_output(text, output)
    diff = golden_diff(text, golden)
    if diff:
        click.echo(diff, nl=False)
        click.echo(f"qkv: FAILED: the report differs from {golden}", err=True)
        return False
    click.echo(f"qkv: the report matches {golden}", err=True)
    return True


@click.command()
@click.argument("fixtures", nargs=-1, type=SafePath())
@chapter_option
@format_option(REPORT_FORMATS, FORMAT_HELP)
@batch_options
@evidence_options
@tensors_option
@html_option
@click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Run several fixtures in this many worker processes.")
def run(
    fixtures: tuple[Path, ...], fmt: str, output: Path | None, golden: Path | None,
    junit: Path | None, max_elements: int, view: ViewSettings, overrides: CheckOverrides,
    tensors: str | None, html: Path | None = None, jobs: int = 1, chapter: int | None = None,
) -> None:
    """Run every check of the chapter's evidence on FIXTURE... and show it.

    FIXTURE defaults to the bundled chapter fixture. With several fixtures (or a
    directory, meaning its *.json files) each is run and a summary table is shown
    (-o FILE saves it instead).
    Exit status: 0 when every check passed, 1 when any failed, 2 for bad input.
    """
    check_chapter(chapter)
    if is_batch(fixtures, junit):
        from qkvcli.cli.batch import reject_single_options, run_many

        reject_single_options(golden)
        if chapter is not None:
            raise click.UsageError(
                "--chapter takes one fixture; with several, each fixture's \"chapter\" key "
                "says which chapter it is" if junit is None or len(fixtures) > 1
                or any(path.is_dir() for path in fixtures) else
                "--chapter does not take --junit: --junit runs fixtures as a batch, where each "
                "fixture's \"chapter\" key says which chapter it is (name the fixture: "
                "qkv run FIXTURE --junit FILE)")
        if view.exports or html is not None:
            raise click.UsageError("--export-svg/--export-html/--html take a single fixture file")
        if fmt not in ("auto", "text"):  # the summary is one table of plain lines
            raise click.UsageError(f"-f {fmt} shows one fixture's report; with several "
                                   "fixtures, a directory or --junit, qkv run shows a summary "
                                   "table (--junit FILE also writes each result as JUnit XML)")
        run_many(fixtures, junit, max_elements, overrides, jobs=jobs, output=output)
        return
    fixture = fixtures[0] if fixtures else None
    if golden is not None:
        # A golden file is plain text: compare the text report unless a plain format is named.
        if fmt == "rich":
            raise click.UsageError("--expect compares text, trace or json, not the rich figure")
        fmt = "text" if fmt == "auto" else fmt
    check_outputs([output, *(path for _, path in view.exports), html], [fixture, golden])
    evidence = build(fixture, max_elements, overrides, chapter, tensors)
    pieces = report_pieces(evidence, tensor_policy(tensors, view.full))
    matched = True
    if golden is None:
        show(evidence, fmt, view, output, title="qkv run", precision=FIGURE_PRECISION,
             pieces=pieces, html=html)
    else:
        matched = compare_golden("".join(pieces(fmt)), golden, output)
        if html is not None:
            write_page(evidence, html, view, title="qkv run", precision=FIGURE_PRECISION)
    if not evidence.passed:
        name_failures(evidence)
    if not (matched and evidence.passed):
        raise SystemExit(EXIT_FAILED)


@click.command()
@fixture_argument
@chapter_option
@format_option(REPORT_FORMATS, FORMAT_HELP)
@evidence_options
@tensors_option
@html_option
def report(
    fixture: Path | None, fmt: str, output: Path | None, max_elements: int,
    view: ViewSettings, overrides: CheckOverrides, tensors: str | None,
    chapter: int | None = None, html: Path | None = None,
) -> None:
    """Render the evidence for FIXTURE (default: the bundled chapter fixture).

    Exit status: 0 when every check passed, 1 when any failed, 2 for bad input.
    """
    check_chapter(chapter)
    check_outputs([output, *(path for _, path in view.exports), html], [fixture])
    evidence = build(fixture, max_elements, overrides, chapter, tensors)
    show(evidence, fmt, view, output, title="qkv report", precision=FIGURE_PRECISION,
         pieces=report_pieces(evidence, tensor_policy(tensors, view.full)), html=html)
    if not evidence.passed:
        raise SystemExit(EXIT_FAILED)
