"""The quiz: answers computed from the fixture, tolerant reading, answer files."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkvcli.core.errors import QkvError
from qkvcli.learn.quiz import (
    NUMBER,
    SCREEN_BYTES,
    SCREEN_LINES,
    EmptyQuizFixture,
    QuizError,
    TooManyAnswers,
    UnknownAnswerKey,
    build_questions,
    check_answer,
    fits_screen,
    parse_answers,
    question_screen,
    screen_lines,
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


def test_chapter_questions_are_unchanged() -> None:
    # Recorded from the quiz before it learnt to scale to wide fixtures: on the chapter's
    # fixture every prompt, form, expected answer, spelling and explanation stays as it was.

    from tests.conftest import GOLDEN

    recorded = json.loads((GOLDEN / "quiz" / "chapter-questions.json").read_text("utf-8"))
    fields = [{name: getattr(q, name) for name in q.__record_fields__} for q in QUESTIONS]
    assert json.loads(json.dumps(fields)) == recorded


def _seeded(d_model: int, d_head: int, tokens: int = 2) -> dict[str, object]:
    def generated(seed: int, *shape: int) -> dict[str, object]:
        return {"generate": {"seed": seed, "shape": list(shape)}}

    return {"input": generated(1, 1, tokens, d_model),
            "weights": {"query": generated(2, d_model, d_head),
                        "key": generated(3, d_model, d_head),
                        "value": generated(4, d_model, d_head)}}


def test_a_wider_fixture_asks_for_one_coordinate() -> None:
    fixture = parse_fixture(_seeded(24, 16))
    question = build_questions(fixture)[1]
    assert question.form == "number"
    assert question.prompt.startswith("Compute q0[0], coordinate 0 of the first token's query")
    # An independent reference: the dot product of the first token with W_Q's column 0.
    x0, column = fixture.input[0, 0], fixture.weights[0][:, 0]
    want = float(sum(float(a) * float(b) for a, b in zip(x0, column, strict=True)))
    assert question.expected == pytest.approx((want,), rel=1e-12)
    # Every number the question shows is one of x0's or of the column's, in order.
    for name, values in (("x0", x0), (r"W_Q\[:,0\]", column)):
        found = re.search(name + r"=\[([^\]]*)\]", question.prompt)
        assert found is not None, name
        shown = [float(v) for v in NUMBER.findall(found.group(1))]
        assert shown == pytest.approx(list(values), rel=1e-5)  # six significant digits
    assert check_answer(question, f"q0[0]={want:.4f}").correct
    assert check_answer(question, f"{want:.3f}").correct
    assert not check_answer(question, f"{want + 0.01:.3f}").correct


def test_a_fixture_too_wide_for_a_coordinate_asks_for_a_shape() -> None:
    question = build_questions(parse_fixture(_seeded(300, 5)))[1]
    assert question.prompt == ("The first token x0 has 300 numbers and each weight is [300,5]: "
                               "too many to multiply here. Predict the shape of q0, k0 and v0.")
    assert question.shown == "[5]"
    assert check_answer(question, "[5]").correct and check_answer(question, "[5] [5] [5]").correct
    assert not check_answer(question, "[300]").correct


def test_the_chapter_question_two_fits_and_is_the_full_one() -> None:
    assert fits_screen(QUESTIONS[1], 9) and QUESTIONS[1].form == "numbers"


@settings(max_examples=40, deadline=None)
@given(d_model=st.integers(1, 200), d_head=st.integers(1, 200))
def test_every_question_fits_a_screen(d_model: int, d_head: int) -> None:
    for question in build_questions(parse_fixture(_seeded(d_model, d_head, tokens=1))):
        assert fits_screen(question, 9), (question.number, d_model, d_head)
        lines = question_screen(question, 9)
        assert sum(screen_lines(line) for line in lines) <= SCREEN_LINES
        assert sum(len(line.encode("utf-8")) + 1 for line in lines) <= SCREEN_BYTES


@pytest.mark.parametrize(
    ("text", "lines"),
    [("", 1), ("a b", 1), ("x" * 80, 1), ("x" * 81, 2), ("word " * 20, 2), ("y" * 200, 3)],
    ids=["empty", "short", "exact", "one-over", "wraps-at-spaces", "long-word"],
)
def test_screen_lines(text: str, lines: int) -> None:
    assert screen_lines(text) == lines
