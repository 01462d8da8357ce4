"""``qkv quiz --chapter N``: the chapters' questions, a wrong part named, the missed list."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from qkvcli.cli import main
from qkvcli.learn.chapter_quiz import CHAPTERS, chapter_questions
from qkvcli.learn.quiz import Question, build_questions, check_answer, fits_screen, wrong_parts
from qkvcli.reading.load import load_fixture


def right_answer(question: Question) -> str:
    return question.expected if question.form == "choice" else question.shown  # type: ignore[return-value]


@pytest.mark.parametrize("number", CHAPTERS)
def test_every_question_takes_its_own_answer_and_fits_a_screen(number: int) -> None:
    questions = chapter_questions(number)
    assert [q.number for q in questions] == list(range(1, len(questions) + 1))
    for question in questions:
        assert check_answer(question, right_answer(question)).correct, question.number
        assert fits_screen(question, len(questions)), question.number
        if question.parts and isinstance(question.expected, tuple):
            assert sum(question.sizes) == len(question.expected) if question.sizes else \
                len(question.expected) % len(question.parts) == 0


def test_the_answers_agree_with_the_chapters_texts() -> None:
    """Facts the chapters state, against the answers qkv computes."""
    ch27 = chapter_questions(27)
    assert ch27[0].expected == (1.0, 0.0)  # q0 favours the second value, q1 the first
    assert ch27[1].expected == (0.0, 6.0, 6.0, -4.0)
    assert ch27[2].expected == pytest.approx((math.e / (math.e + 1), 0.669762), abs=1e-6)
    assert ch27[3].expected == (5.0, -2.0)
    ch28 = chapter_questions(28)
    assert ch28[0].expected == (6.0, 3.0)  # six allowed, three blocked
    assert ch28[2].expected == (1.0, 0.0, 0.0, 3.0, -3.0)
    ch29 = chapter_questions(29)
    assert ch29[0].expected == pytest.approx((0.0, math.sin(1.0), math.sin(1.0)), abs=1e-15)
    assert ch29[1].expected == pytest.approx((1.0, 0.1), rel=1e-15)
    ch30 = chapter_questions(30)
    assert ch30[0].expected == (2.0,)
    assert ch30[1].expected == (1, 2, 3, 2, 1, 2, 3, 3, 1, 3, 4)
    assert ch30[2].expected == pytest.approx((1 / 3,) * 3, rel=1e-12)
    assert ch30[4].expected == (64.0,)


# Chapter 37's nine answers as the course gives them (chapter md l.403-409).
CH37_COURSE = ((2.0,), "no", (3.0,), (6.0,), (3.0,), "b", "no", "no", "yes")


def test_chapter_37s_answers_are_the_courses() -> None:
    """Each computed by running qkv's cache on the bundled fixture, equal to the course's."""
    questions = chapter_questions(37)
    assert len(questions) == 9
    assert tuple(q.expected for q in questions) == CH37_COURSE
    assert questions[5].shown.startswith("b) only the length, to 0:")  # reset: nothing else
    assert "neither refreshed nor rebound" in questions[5].shown
    # The refusals were caught from the cache, not written here.
    assert "KV cache parameter identity does not match this attention layer" in \
        questions[6].explanation
    assert ("KV cache parameter revision 0 at stable index 0 does not match layer revision 1; "
            "after a reset too") in questions[7].explanation
    assert "KV cache is full at capacity 3" in questions[8].explanation


@pytest.mark.parametrize(("number", "right", "wrong"), [
    (1, "2", "3"), (2, "no", "yes"), (3, "3", "2"), (4, "6", "3"), (4, "1 + 2 + 3", "1+2"),
    (5, "3", "6"), (6, "b", "a"), (7, "no", "yes"), (8, "n", "y"), (9, "yes", "no"),
])
def test_chapter_37_grades_exactly(number: int, right: str, wrong: str) -> None:
    question = chapter_questions(37)[number - 1]
    assert check_answer(question, right).correct
    assert not check_answer(question, wrong).correct
    if question.form == "integer":  # one number, not several
        assert not check_answer(question, f"{right}, {wrong}").correct


def test_chapter_37s_answers_follow_the_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """The answers are what the cache did: were an update in place not to advance the
    revisions, the old cache would be accepted (question 8: yes) and a reset cache would
    take the updated layer (question 6: the choice that says it rebinds)."""
    from qkvcli.attention.cache import DecodingLayer

    monkeypatch.setattr(DecodingLayer, "updated", lambda self, index: self)
    questions = chapter_questions(37)
    assert questions[7].expected == "yes"
    assert questions[5].expected == "c"
    assert [q.expected for q in questions[:5]] == list(CH37_COURSE[:5])


def test_a_wrong_part_is_named() -> None:
    question = build_questions(load_fixture())[1]  # q0, k0 and v0 of the chapter's first token
    assert check_answer(question, "[0,3] [3,0] [3,-2]").detail == \
        "v0 is wrong; q0 and k0 are right"
    assert check_answer(question, "[0,4] [3,0] [3,-2]").detail == \
        "q0 and v0 are wrong; k0 is right"
    assert check_answer(question, "[1,1] [1,1] [1,1]").detail == "q0, k0 and v0 are wrong"
    assert check_answer(question, "[0,3] [3,0]").detail == ""  # too few numbers to tell
    assert check_answer(question, "[0,3] [3,0] [3,-3]").detail == ""
    uneven = chapter_questions(28)[2]
    assert wrong_parts(uneven, (1.0, 0.0, 0.0, 3.0, -2.0)) == (
        "the output is wrong; the probability row is right")


def answers_file(tmp_path: Path, answers: list[str]) -> Path:
    path = tmp_path / "answers.json"
    path.write_text(json.dumps(answers), encoding="utf-8")
    return path


@pytest.mark.parametrize("number", CHAPTERS)
def test_the_cli_asks_the_chapters_questions(number: int, tmp_path: Path) -> None:
    questions = chapter_questions(number)
    right = [right_answer(q) for q in questions]
    result = CliRunner().invoke(main, ["quiz", "--chapter", str(number), "--answers",
                                       str(answers_file(tmp_path, right))])
    assert result.exit_code == 0, result.output
    assert result.stdout.endswith(f"score={len(questions)}/{len(questions)}\n")
    assert "missed" not in result.stdout


def test_the_end_lists_the_missed_questions(tmp_path: Path) -> None:
    questions = chapter_questions(27)
    answers = [right_answer(q) for q in questions]
    answers[0], answers[4] = "[1,1]", "yes"
    result = CliRunner().invoke(main, ["quiz", "--chapter", "27", "--answers",
                                       str(answers_file(tmp_path, answers))])
    assert result.exit_code == 1
    assert "not quite: q1 is wrong; q0 is right. Answer: [1,0]" in result.stdout
    assert result.stdout.endswith(f"missed: questions 1 and 5\nscore={len(questions) - 2}/"
                                  f"{len(questions)}\n")


def test_chapter_37_on_the_cli_shows_the_caught_refusal_and_marks_a_wrong_answer(
        tmp_path: Path) -> None:
    answers = ["2", "no", "3", "1 + 2 + 3", "3", "a", "no", "no", "yes"]
    result = CliRunner().invoke(main, ["quiz", "--chapter", "37", "--answers",
                                       str(answers_file(tmp_path, answers))])
    assert result.exit_code == 1, result.output
    assert result.stdout.startswith("Question 1/9: The cache already holds two rows")
    said = " ".join(result.stdout.split())  # the lines as wrapped, joined again
    assert "KV cache parameter identity does not match this attention layer" in said
    assert "not quite. Answer: b) only the length, to 0:" in said
    assert result.stdout.endswith("missed: question 6\nscore=8/9\n")


def test_chapter_26_names_the_wrong_entry(tmp_path: Path) -> None:
    questions = build_questions(load_fixture())
    answers = [right_answer(q) for q in questions]
    answers[1] = "[0,3] [3,0] [3,-2]"
    result = CliRunner().invoke(main, ["quiz", "--chapter", "26", "--answers",
                                       str(answers_file(tmp_path, answers))])
    assert result.exit_code == 1
    assert "not quite: v0 is wrong; q0 and k0 are right. Answer:" in result.stdout
    assert result.stdout.endswith("missed: question 2\nscore=8/9\n")


@pytest.mark.parametrize(("args", "message"), [
    (["--chapter", "31"],
     "Error: --chapter 31: no chapter 31; qkv quizzes chapters 26 to 30 and 37\n"),
    (["--chapter", "37", "fixtures/ch37-incremental-attention.json"],
     "Error: --chapter 37: the chapter's questions are about its own worked example; give no "
     "FIXTURE\n"),
    (["--chapter", "27", "fixtures/ch27-self-attention.json"],
     "Error: --chapter 27: the chapter's questions are about its own worked example; give no "
     "FIXTURE\n"),
], ids=["unknown", "fixture-37", "fixture"])
def test_bad_chapter_requests_are_one_line(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["quiz", *args])
    assert result.exit_code == 2
    assert result.stderr == message
