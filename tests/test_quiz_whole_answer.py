"""The quiz grades the whole answer: a list is a list, a number a number (issue 44)."""

from __future__ import annotations

import pytest

from qkvcli.learn.chapter_quiz import chapter_questions
from qkvcli.learn.quiz import A_LIST, ONE_NUMBER, SEVERAL, Marking, build_questions, check_answer
from qkvcli.reading.load import load_fixture

QUESTIONS = build_questions(load_fixture())
CH30 = chapter_questions(30)


@pytest.mark.parametrize(("answer", "problem"), [
    ("5,18", SEVERAL), ("17, 18", SEVERAL), ("18 17", SEVERAL), ("[18]", A_LIST),
    ("(18)", A_LIST), ("eighteen", ONE_NUMBER), ("3 x 3 x 2 =", ONE_NUMBER),
])
def test_a_one_number_question_refuses_more_or_less_than_one_number(answer: str, problem: str) -> None:
    assert QUESTIONS[3].shown == "18"
    assert check_answer(QUESTIONS[3], answer) == Marking(False, problem)


@pytest.mark.parametrize("answer", [
    "18", " 18 ", "18.", "+18", "18.0", "1.8e1", "= 18", "18 scalars", "count: 18",
    "3 x 3 x 2 = 18", "3*3*2=18", "3 \u00d7 3 \u00d7 2 = 18", "3·3·2 = 18", "3 x (3 x 2) = 18",
    "n = 3 x 3 x 2 = 18", "3 x 3 x 2", "3*6", "36/2", "(3 x 3) x 2",
])
def test_a_one_number_question_takes_each_spelling_of_the_number(answer: str) -> None:
    verdict = check_answer(QUESTIONS[3], answer)
    assert verdict.correct and verdict.problem == "", answer


def test_working_that_contradicts_the_number_is_wrong() -> None:
    for answer in ("3 x 3 x 3 = 18", "3 x 3 x 3", "17+2"):
        verdict = check_answer(QUESTIONS[3], answer)
        assert not verdict.correct and verdict.problem == "", answer


@pytest.mark.parametrize("answer", ["[1,2,3]", "[1,2,3,2,3]", "[3]", "1,2,3", "2 3"])
def test_question_six_takes_one_rank_not_a_list_of_them(answer: str) -> None:
    assert QUESTIONS[5].shown == "3"
    assert not check_answer(QUESTIONS[5], answer).correct
    assert check_answer(QUESTIONS[5], "rank 3").correct and check_answer(QUESTIONS[5], "3").correct


def test_chapter_30s_head_width_is_one_number() -> None:
    assert CH30[0].shown == "2"
    assert check_answer(CH30[0], "[1,2,3,2]") == Marking(False, A_LIST)
    assert not check_answer(CH30[0], "1, 2").correct
    assert check_answer(CH30[0], "d_h = 8/4 = 2").correct
    assert not check_answer(CH30[0], "d_h = 8/2 = 2").correct


@pytest.mark.parametrize(("number", "answer", "correct"), [
    (1, "[4,7,2]", True), (1, "(4, 7, 2)", True), (1, "4\u00d77\u00d72", True), (1, "[4,7,2].", True),
    (1, "shape [4,7,2]", True), (1, "[4,7,2,2]", False), (1, "[4,7]", False),
    (1, "[[4,7,2],[4,7,2],[4,7,2]]", True), (2, "q0 = [0, 3]; k0 = [3, 0]; v0 = [3, \u22123]", True),
    (2, "[0,3] [3,0] [3,-3] [1]", False), (5, "[0,2,2] and [2,0,2]", True),
    (5, "[0,2,2]", False),
])
def test_a_numbers_question_takes_the_whole_list(number: int, answer: str, correct: bool) -> None:
    verdict = check_answer(QUESTIONS[number - 1], answer)
    assert verdict.correct is correct and verdict.problem == "", answer


@pytest.mark.parametrize(("answer", "problem"), [
    ("[4,7,2", "unbalanced brackets"), ("4,7,2]", "unbalanced brackets"),
    ("4/7/2", 'could not read "/7/2"'), ("1e999", 'could not read "1e999"'),
])
def test_an_unreadable_list_says_why(answer: str, problem: str) -> None:
    verdict = check_answer(QUESTIONS[0], answer)
    assert not verdict.correct and verdict.problem == problem


def test_an_answers_file_with_a_hedged_answer_scores_it_wrong(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from click.testing import CliRunner

    from qkvcli.cli import main

    answers = ["[4,7,2]", "[0,3] [3,0] [3,-3]", "no", "5,18", "[0,2,2] and [2,0,2]",
               "[1,2,3]", "no", "b", "c"]
    path = tmp_path / "answers.txt"
    path.write_text("\n".join(answers) + "\n")
    result = CliRunner().invoke(main, ["quiz", "--answers", str(path)])
    assert result.exit_code == 1
    assert "not quite (expected one number, not several). Answer: 18" in result.stdout
    assert "not quite (expected one number, not a list). Answer: 3" in result.stdout
    assert result.stdout.endswith("missed: questions 4 and 6\nscore=7/9\n")
