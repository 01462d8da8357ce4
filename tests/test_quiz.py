"""The quiz: answers computed from the fixture, tolerant reading, answer files."""

from __future__ import annotations

import json

import pytest

from qkvcli.core.errors import QkvError
from qkvcli.learn.quiz import (
    EmptyQuizFixture,
    QuizError,
    TooManyAnswers,
    UnknownAnswerKey,
    build_questions,
    check_answer,
    parse_answers,
)
from qkvcli.reading.load import load_fixture
from qkvcli.reading.parse import parse_fixture

QUESTIONS = build_questions(load_fixture())
CHAPTER_ANSWERS = ["[4,7,2]", "[0,3] [3,0] [3,-3]", "no", "18", "[0,2,2] and [2,0,2]", "3",
                   "no", "b", "c"]


def test_nine_questions_in_the_chapters_order() -> None:
    assert [q.number for q in QUESTIONS] == list(range(1, 10))
    assert QUESTIONS[0].prompt == "Predict all three output shapes for input [4,7,3] when d_head=2."


def test_chapter_answers_match_the_chapters_check_the_predictions() -> None:
    shown = [q.shown for q in QUESTIONS]
    assert shown[0] == "[4,7,2]"
    assert shown[1] == "q0=[0,3], k0=[3,0], v0=[3,-3]"
    assert shown[2:7] == ["no", "18", "[0,2,2] and [2,0,2]", "3", "no"]
    for question, answer in zip(QUESTIONS, CHAPTER_ANSWERS, strict=True):
        assert check_answer(question, answer).correct, question.number


def test_answers_follow_the_fixture() -> None:
    data = {"input": [[[1, 0, 0, 0]], [[0, 0, 0, 1]]],
            "weights": {"query": [[2], [0], [0], [0]], "key": [[1], [1], [1], [1]],
                        "value": [[0], [0], [0], [5]]}}
    questions = build_questions(parse_fixture(data))
    assert questions[0].shown == "[4,7,1]"
    assert questions[1].expected == (2.0, 1.0, 0.0)
    assert questions[3].shown == "12"
    assert questions[4].shown == "[0,1,1] and [4,0,1]"


@pytest.mark.parametrize(
    ("number", "answer", "correct"),
    [
        (1, "4,7,2", True), (1, "4 x 7 x 2", True), (1, "[4,7,2] [4,7,2] [4,7,2]", True),
        (1, "[4,7,3]", False), (2, "q0=[0,3], k0=[3,0], v0=[3,-3]", True),
        (2, "0 3 3 0 3 -3.0004", True), (2, "0 3 3 0 3 -3.01", False), (3, "No.", True),
        (3, "y", False), (4, "3 x 3 x 2 = 18", True), (4, "17", False),
        (5, "[0,2,2],[0,2,2],[0,2,2],[2,0,2],[2,0,2],[2,0,2]", True), (6, "rank 3", True),
        (7, "NO", True), (8, "B)", True), (8, "a", False), (9, "C", True),
        (9, "query-key scores, softmax probabilities and a weighted mixture of the values", True),
    ],
)
def test_tolerant_reading(number: int, answer: str, correct: bool) -> None:
    verdict = check_answer(QUESTIONS[number - 1], answer)
    assert verdict.correct is correct and verdict.problem == ""


@pytest.mark.parametrize(("number", "answer"), [(1, "four"), (3, "maybe"), (8, "d"), (2, "")])
def test_unreadable_answers_say_why(number: int, answer: str) -> None:
    verdict = check_answer(QUESTIONS[number - 1], answer)
    assert not verdict.correct and verdict.problem


def test_answer_files() -> None:
    lines = "# my answers\n" + "\n".join(CHAPTER_ANSWERS) + "\n\n"
    assert parse_answers(lines, 9) == CHAPTER_ANSWERS
    assert parse_answers(json.dumps(CHAPTER_ANSWERS), 9) == CHAPTER_ANSWERS
    assert parse_answers(json.dumps([[4, 7, 2], 18]), 9)[:3] == ["[4, 7, 2]", "18", ""]
    assert parse_answers(json.dumps({"4": 18, "1": "4,7,2"}), 9)[:4] == ["4,7,2", "", "", "18"]
    with pytest.raises(QuizError) as caught:
        parse_answers("\n".join(["x"] * 10), 9)
    assert caught.value == TooManyAnswers(10, 9)
    assert str(caught.value) == "answers file has 10 answers; the quiz has 9 questions"
    with pytest.raises(QuizError) as caught:
        parse_answers(json.dumps({"10": "x"}), 9)
    assert caught.value == UnknownAnswerKey("10", 9)
    assert str(caught.value) == 'answers file key "10" is not a question number 1..9'


def test_quiz_needs_a_token() -> None:
    data = {"input": {"shape": [1, 0, 3], "values": []},
            "weights": {"query": [[1], [0], [0]], "key": [[0], [1], [0]], "value": [[0], [0], [1]]}}
    with pytest.raises(QuizError) as caught:
        build_questions(parse_fixture(data))
    assert caught.value == EmptyQuizFixture()
    assert isinstance(caught.value, QkvError)
    assert str(caught.value) == (
        "the quiz needs a fixture with at least one batch item and one token")
