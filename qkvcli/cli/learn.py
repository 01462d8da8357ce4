"""``qkv variance`` and ``qkv quiz``: the chapter's scale argument and its prediction questions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from qkvcli.cli.group import EXIT_FAILED, InputError, interrupted
from qkvcli.cli.io import (
    SafePath,
    check_outputs,
    label_of,
    labelled,
    load,
    read_text,
)
from qkvcli.cli.options import (
    VARIANCE_PRECISION,
    ViewSettings,
    fixture_argument,
    format_option,
    max_elements_option,
    output_option,
    view_options,
)
from qkvcli.cli.show import show
from qkvcli.core.text import printable
from qkvcli.render import render_pieces

if TYPE_CHECKING:
    from pathlib import Path




@click.command()
@click.option("--min", "minimum", type=click.IntRange(min=1), default=4, show_default=True,
              help="Smallest d_k.")
@click.option("--max", "maximum", type=click.IntRange(min=1), default=512, show_default=True,
              help="Largest d_k (widths double from --min).")
@click.option("--samples", type=click.IntRange(min=2), default=4096, show_default=True,
              help="Pairs q, k sampled per width.")
@click.option("--seed", type=click.IntRange(0, (1 << 64) - 1), default=26, show_default=True,
              help="SplitMix64 seed.")
@format_option()
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
    check_outputs([output, *(path for _, path in view.exports)])
    result = dot_variance(widths(minimum, maximum), samples, seed)
    show(result, fmt, view, output, title="qkv variance", precision=VARIANCE_PRECISION,
         pieces=lambda shown: render_pieces(result, shown, precision=view.precision))


@click.command()
@fixture_argument
@click.option("--answers", type=SafePath(dir_okay=False),
              help="Answer from FILE instead of the terminal: JSON (a list of answers, or "
              'an object keyed "1".."N") or one answer per line (# comments skipped).')
@click.option("--chapter", type=int, default=None, metavar="N",
              help="The chapter whose predictions to ask: 26 (the default, about FIXTURE), "
              "27, 28, 29, 30 or 37 (about the chapter's own worked example).")
@max_elements_option
def quiz(fixture: Path | None, answers: Path | None, max_elements: int,
         chapter: int | None = None) -> None:
    """A chapter's "predict before reading the evidence" questions, one by one.

    Chapter 26's nine are checked against values computed from FIXTURE (default: the
    chapter fixture); --chapter 27 to 30 or 37 asks that chapter's questions about its
    worked example, every answer computed by qkv. The explanation follows each answer; a wrong
    answer of several parts names the wrong ones, and the end lists the questions missed.
    Questions fit a screen: on wide tensors question 2 asks for one coordinate, or a
    shape. Numbers count as right within 0.0005 (three decimals are enough). At the end
    of piped input or on Ctrl-C the score so far is shown. Exit status: 0 all right, 1
    otherwise, 2 bad input.
    """
    from qkvcli.learn.quiz import HOW_TO_ANSWER, build_questions, check_answer, parse_answers

    questions = _questions(fixture, max_elements, chapter, build_questions)
    given: list[str] | None = None
    if answers is not None:
        text = read_text(answers, "answer")
        given = labelled(label_of(answers), lambda: parse_answers(text, len(questions)))
        answered = sum(1 for answer in given if answer)
        if answered < len(questions):
            click.echo(f"qkv: warning: {label_of(answers)} answers {answered} of {len(questions)} "
                       "questions; the others count as unanswered", err=True)
    else:
        _line_editing()
        click.echo(wrapped(HOW_TO_ANSWER, "  "))
    right = 0
    asked = 0
    missed: list[int] = []
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
            if not verdict.correct:
                missed.append(question.number)
            click.echo(wrapped(("right" if verdict.correct else "not quite")
                               + (f" ({verdict.problem})" if verdict.problem else "")
                               + (f": {verdict.detail}" if verdict.detail else "")
                               + f". Answer: {question.shown}", "  "))
            click.echo(wrapped(f"why: {question.explanation}", "  ") + "\n")
    except (click.Abort, KeyboardInterrupt) as error:
        # End of piped input or Ctrl-C: keep the score so far rather than only "Aborted!".
        click.echo(f"\nstopped at question {asked} of {len(questions)}; "
                   f"{right} right before it")
        if missed:
            click.echo(missed_line(missed))
        click.echo(f"score={right}/{len(questions)}")
        if isinstance(error, KeyboardInterrupt) or isinstance(error.__context__,
                                                              KeyboardInterrupt):
            raise interrupted(error) from None
        raise SystemExit(EXIT_FAILED) from None
    if missed:
        click.echo(missed_line(missed))
    click.echo(f"score={right}/{len(questions)}")
    if right != len(questions):
        raise SystemExit(EXIT_FAILED)


def missed_line(missed: list[int]) -> str:
    """``missed: question 4`` or ``missed: questions 2, 5 and 7``: what to read again."""
    from qkvcli.learn.quiz import listed

    names = [str(number) for number in missed]
    return f"missed: question{'s' if len(names) > 1 else ''} {listed(names)}"


def _questions(fixture: Path | None, max_elements: int, chapter: int | None,
               build: Any) -> Any:
    """Chapter 26's questions about ``fixture``, or chapter ``chapter``'s (27 to 30, 37)."""
    if chapter is None or chapter == 26:
        loaded = load(fixture, max_elements)
        return labelled(label_of(fixture), lambda: build(loaded))
    from qkvcli.learn.chapter_quiz import CHAPTERS, chapter_questions

    if chapter not in CHAPTERS:
        from qkvcli.core.names import DEFAULT_CHAPTER, chapter_span

        raise InputError(f"--chapter {chapter}: no chapter {chapter}; qkv quizzes chapters "
                         f"{chapter_span((DEFAULT_CHAPTER, *CHAPTERS))}")
    if fixture is not None:
        raise InputError(f"--chapter {chapter}: the chapter's questions are about its own "
                         "worked example; give no FIXTURE")
    return chapter_questions(chapter)


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


def _line_editing() -> None:
    """Give the answer prompt line editing and history where the platform has ``readline``.

    Without it the arrow keys print ``^[[D``. Only for a terminal: piped answers need none,
    and importing readline there could write terminal escapes into the output.
    """
    import sys

    if sys.stdin.isatty():
        try:
            import readline  # noqa: F401  (importing it is what makes input() edit lines)
        except ImportError:  # Windows and some minimal Pythons: answers still work
            pass


def _ask(question: Any, count: int) -> None:
    """Print one question, its choices and, for decimals, how close counts as right."""
    click.echo(wrapped(f"Question {question.number}/{count}: {question.prompt}", "  "))
    for letter, choice in zip("abc", question.choices, strict=False):
        click.echo(wrapped(f"  {letter}) {choice}", "     "))
    expected = question.expected
    if question.form in ("numbers", "number") and isinstance(expected, tuple) and any(
        value != int(value) for value in expected
    ):
        click.echo("  (3 decimals are enough: within 0.0005 counts as right)")
