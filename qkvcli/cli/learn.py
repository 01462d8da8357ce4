"""``qkv attend``, ``qkv variance`` and ``qkv quiz``: what learners reach for after the chapter."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from qkvcli.cli.group import EXIT_FAILED, InputError
from qkvcli.cli.io import SafePath, label_of, labelled, load, read_text, write_output
from qkvcli.cli.options import (
    CheckOverrides,
    ViewSettings,
    fixture_argument,
    gradcheck_options,
    max_elements_option,
    output_option,
    view_options,
)
from qkvcli.core.text import printable

if TYPE_CHECKING:
    from pathlib import Path

    from qkvcli.attention.fixture import AttendFixture

FORMATS = ("text", "json", "rich")
ATTEND_PRECISION = 4
"""Decimals of attend's rich tables (weights are probabilities; four places read well)."""
VARIANCE_PRECISION = 4


def _format_option(func: Any) -> Any:
    return click.option(
        "-f", "--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True,
        help="text: key=value lines; json: everything; rich: tables for a terminal.",
    )(func)


def _load_attend(path: Path | None, example: str, max_elements: int,
                 heads: int | None = None) -> AttendFixture:
    from qkvcli.attention.fixture import EXAMPLES, load_attend_fixture

    label = f"<bundled {EXAMPLES[example]}>" if path is None else str(path)
    return labelled(label, lambda: load_attend_fixture(path, example, max_elements, heads))


@click.command()
@fixture_argument
@click.option("--example", type=click.Choice(("chapter", "primer")), default=None,
              help="Run a bundled fixture: the chapter's, or the primer's worked example.")
@click.option("--causal", is_flag=True, help="Mask key positions after each query (-inf above "
              "the diagonal before the softmax).")
@click.option("--heads", type=click.IntRange(min=1), default=None,
              help="Split the projections into this many heads (overrides the fixture's "
              '"heads"); each head attends on its own slice.')
@_format_option
@output_option
@gradcheck_options
@max_elements_option
@view_options
def attend(
    fixture: Path | None, example: str | None, causal: bool, heads: int | None, fmt: str,
    output: Path | None, max_elements: int, view: ViewSettings, overrides: CheckOverrides,
) -> None:
    """One attention head on FIXTURE: O = softmax(Q K^T / sqrt(d_k)) V.

    Shows scores, scaled scores, softmax weights (each row sums to 1), the output
    (each row inside the convex hull of the value rows), the reverse pass back to X and
    every weight and bias, and a central-difference check of the whole head. FIXTURE
    defaults to the chapter fixture; --example primer runs the primer's worked example.
    Fixtures may use torch [out,in] or packed in_proj_weight layouts, biases, and
    "value_width": "independent". With --heads H (or "heads" in the fixture), an
    out_proj/c_proj output projection or GPT-2's c_attn, it runs a multi-head layer.
    Exit status: 0 all checks passed, 1 a check failed,
    2 bad input.
    """
    from qkvcli.attention.evidence import build_attend_evidence
    from qkvcli.attention.fixture import attend_parameters

    if fixture is not None and example is not None:
        raise click.UsageError("give FIXTURE or --example, not both")
    loaded = _load_attend(fixture, example or "chapter", max_elements, heads)
    changes = overrides.changes()
    import dataclasses

    loaded = dataclasses.replace(loaded, **changes) if changes else loaded
    # One head or a layer: the same step and evaluation limits before any work.
    arrays = attend_parameters(loaded.input, loaded.head, loaded.layer)
    overrides.check(loaded.step, arrays, "full" if loaded.samples is None else "sampled",
                    loaded.samples, 1, has_fast=False)
    if loaded.layer is not None:
        from qkvcli.attention.layer_evidence import build_layer_evidence

        evidence = build_layer_evidence(loaded, loaded.layer, causal=causal)
    else:
        evidence = build_attend_evidence(loaded, causal=causal)
    if fmt == "rich":
        from qkvcli.cli.console import show_rich
        from qkvcli.render.rich.attend import attend_renderable

        show_rich(lambda options: attend_renderable(evidence, options), view, output, fixture,
                  ATTEND_PRECISION, "qkv attend")
    elif fmt == "json":
        from qkvcli.render.attend import render_attend_json

        write_output(render_attend_json(evidence), output, protect=fixture)
    else:
        from qkvcli.render.attend import render_attend_text

        write_output(render_attend_text(evidence), output, protect=fixture)
    if not evidence.passed:
        from qkvcli.render.attend import failed_checks

        click.echo(f"qkv: FAILED: {', '.join(failed_checks(evidence))}", err=True)
        raise SystemExit(EXIT_FAILED)


@click.command()
@click.option("--min", "minimum", type=click.IntRange(min=1), default=4, show_default=True,
              help="Smallest d_k.")
@click.option("--max", "maximum", type=click.IntRange(min=1), default=512, show_default=True,
              help="Largest d_k (widths double from --min).")
@click.option("--samples", type=click.IntRange(min=2), default=4096, show_default=True,
              help="Pairs q, k sampled per width.")
@click.option("--seed", type=click.IntRange(0, (1 << 64) - 1), default=26, show_default=True,
              help="SplitMix64 seed.")
@_format_option
@output_option
@view_options
def variance(
    minimum: int, maximum: int, samples: int, seed: int, fmt: str, output: Path | None,
    view: ViewSettings,
) -> None:
    """Why scores are divided by sqrt(d_k): sample var(q.k) for growing d_k.

    For unit-variance q and k, var(q.k) is about d_k and var(q.k / sqrt(d_k)) about 1;
    z says how many standard errors each sample lies from 1. Deterministic: the same
    seed gives the same table.
    """
    from qkvcli.learn.variance import dot_variance, widths
    from qkvcli.reading.limits import DEFAULT_MAX_ELEMENTS

    if maximum < minimum:
        raise InputError(f"--max {maximum} is smaller than --min {minimum}")
    if samples * maximum > DEFAULT_MAX_ELEMENTS:
        raise InputError(f"--samples {samples} x --max {maximum} needs more than "
                         f"{DEFAULT_MAX_ELEMENTS} normals per tensor; lower one of them")
    result = dot_variance(widths(minimum, maximum), samples, seed)
    if fmt == "rich":
        from qkvcli.cli.console import show_rich
        from qkvcli.render.rich.variance import variance_renderable

        show_rich(lambda options: variance_renderable(result, options), view, output, None,
                  VARIANCE_PRECISION, "qkv variance")
        return
    if fmt == "json":
        from qkvcli.render.variance import render_variance_json

        write_output(render_variance_json(result), output)
        return
    from qkvcli.render.variance import render_variance_text

    text = render_variance_text(result)
    write_output(text, output)


@click.command()
@fixture_argument
@click.option("--answers", type=SafePath(dir_okay=False),
              help="Answer from FILE instead of the terminal: JSON (a list of nine answers, or "
              'an object keyed "1".."9") or one answer per line (# comments skipped).')
@max_elements_option
def quiz(fixture: Path | None, answers: Path | None, max_elements: int) -> None:
    """The chapter's nine "predict before reading the evidence" questions, one by one.

    Each answer is checked against values computed from FIXTURE (default: the chapter
    fixture); the explanation follows. Numbers count as right within 0.0005 (three
    decimals are enough). At the end of piped input or on Ctrl-C the score so far is
    shown. Exit status: 0 all right, 1 otherwise, 2 bad input.
    """
    from qkvcli.learn.quiz import build_questions, check_answer, parse_answers

    loaded = load(fixture, max_elements)
    questions = labelled(label_of(fixture), lambda: build_questions(loaded))
    given: list[str] | None = None
    if answers is not None:
        text = read_text(answers, "answer")
        given = labelled(str(answers), lambda: parse_answers(text, len(questions)))
        answered = sum(1 for answer in given if answer)
        if answered < len(questions):
            click.echo(f"qkv: warning: {answers} answers {answered} of {len(questions)} "
                       "questions; the others count as unanswered", err=True)
    right = 0
    asked = 0
    try:
        for question in questions:
            asked = question.number
            _ask(question, len(questions))
            if given is not None:
                answer = given[question.number - 1]
                verdict = check_answer(question, answer)
                click.echo(f"your answer: {printable(answer, 200) if answer else '(none)'}")
            else:
                while True:
                    answer = click.prompt("your answer", type=str)
                    verdict = check_answer(question, answer)
                    if not verdict.problem:
                        break
                    click.echo(f"  ({verdict.problem}; try again)")
            right += verdict.correct
            click.echo(wrapped(("right" if verdict.correct else "not quite")
                               + (f" ({verdict.problem})" if verdict.problem else "")
                               + f". Answer: {question.shown}", "  "))
            click.echo(wrapped(f"why: {question.explanation}", "  ") + "\n")
    except click.Abort:
        # End of piped input or Ctrl-C: keep the score so far rather than only "Aborted!".
        click.echo(f"\nstopped at question {asked} of {len(questions)}; "
                   f"{right} right before it")
        click.echo(f"score={right}/{len(questions)}")
        raise SystemExit(EXIT_FAILED) from None
    click.echo(f"score={right}/{len(questions)}")
    if right != len(questions):
        raise SystemExit(EXIT_FAILED)


QUIZ_WIDTH = 100
"""Questions wrap at the terminal's width, at most this many columns, and only at spaces."""


def wrapped(text: str, indent: str = "") -> str:
    """``text`` wrapped at the terminal's width (at most :data:`QUIZ_WIDTH`), only at spaces.

    A terminal left to wrap a long line cuts it anywhere (``W`` / ``_K``).
    """
    import shutil
    import textwrap

    width = max(min(shutil.get_terminal_size((80, 24)).columns, QUIZ_WIDTH), 40)
    return textwrap.fill(text, width=width, subsequent_indent=indent,
                         break_long_words=False, break_on_hyphens=False)


def _ask(question: Any, count: int) -> None:
    """Print one question, its choices and, for decimals, how close counts as right."""
    click.echo(wrapped(f"Question {question.number}/{count}: {question.prompt}", "  "))
    for letter, choice in zip("abc", question.choices, strict=False):
        click.echo(wrapped(f"  {letter}) {choice}", "     "))
    expected = question.expected
    if question.kind == "numbers" and isinstance(expected, tuple) and any(
        value != int(value) for value in expected
    ):
        click.echo("  (3 decimals are enough: within 0.0005 counts as right)")
