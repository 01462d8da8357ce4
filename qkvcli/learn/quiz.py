"""The chapter's nine "predict before reading the evidence" questions, answered by the engine.

Every expected answer is computed from the fixture by running the engine (shapes by
projecting zero tensors, vectors by projecting the first token, the parameter count
from the projections, rejections by probing). Questions 8 and 9 are conceptual: their answers
come from the evidence's history record and from the stages ``qkv attend`` adds.

Questions scale to the fixture: each fits one screen (:data:`SCREEN_LINES` lines of
:data:`SCREEN_COLUMNS` columns, :data:`SCREEN_BYTES` bytes, answer and explanation
included). Question 2 asks for all of q0, k0 and v0 when the weights fit, else for one
coordinate of q0 (a dot product of x0 with one column of W_Q), else for their shapes.

Answers are read tolerantly: numbers anywhere in the text (``[4,7,2]``, ``4,7,2``,
``4 x 7 x 2``; a digit glued to a letter such as ``q0`` is a name, not a number),
``yes``/``no`` (or ``y``/``n``), and a letter or the full text for choices.
"""

from __future__ import annotations

import json
import math
import re
import textwrap

import numpy as np

from qkvcli.attention.head import STAGES
from qkvcli.check.chapter26_evidence import HistoryEvidence
from qkvcli.core.errors import QkvError, format_shape
from qkvcli.core.outputs import QkvForward
from qkvcli.core.projections import QkvProjections
from qkvcli.core.record import Record
from qkvcli.core.splitmix import SplitMix64
from qkvcli.core.text import printable
from qkvcli.reading.fixture import Fixture

# Numbers not glued to a name: "q0" is a name; "[0,3]" holds two numbers.
NUMBER = re.compile(r"(?<![A-Za-z_\d.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
LETTERS = "abc"
QUESTION_COUNT = 9
SCREEN_COLUMNS = 80
SCREEN_LINES = 20
SCREEN_BYTES = 2048
"""One question, its choices, the answer and the explanation fit in this much screen."""
HOW_TO_ANSWER = "Answer each on one line: numbers like 4,7,2, yes/no, or a letter; Ctrl-D stops."
"""The one line the interactive quiz prints first (it fits 80 columns)."""


class QuizError(QkvError):
    """A fixture the quiz cannot ask about, or an unusable answers file."""


class EmptyQuizFixture(QuizError):
    def __init__(self) -> None:
        super().__init__("the quiz needs a fixture with at least one batch item and one token")


class UnknownAnswerKey(QuizError):
    def __init__(self, key: str, count: int) -> None:
        self.key = key
        self.count = count
        super().__init__(
            f'answers file key "{printable(key, 40)}" is not a question number 1..{count}'
        )


class TooManyAnswers(QuizError):
    def __init__(self, given: int, count: int) -> None:
        self.given = given
        self.count = count
        super().__init__(f"answers file has {given} answers; the quiz has {count} questions")


class Question(Record):
    number: int
    prompt: str
    form: str  # "numbers", "number", "integer", "yesno" or "choice"
    expected: tuple[float, ...] | str
    shown: str
    explanation: str
    accepted: tuple[tuple[float, ...], ...] = ()  # other spellings of a numbers answer
    choices: tuple[str, ...] = ()
    parts: tuple[str, ...] = ()  # names of the slices of a numbers answer ("q0", "k0")
    sizes: tuple[int, ...] = ()  # each part's count of numbers (empty: equal slices)


class Marking(Record):
    correct: bool
    problem: str = ""  # why an answer could not be read (the interactive quiz asks again)
    detail: str = ""  # which parts of a wrong answer are wrong ("v0 is wrong; q0 and k0 ...")


def listed(names: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def wrong_parts(question: Question, numbers: tuple[float, ...]) -> str:
    """Which named parts of a numbers answer are wrong and which right, when the answer
    has the expected count: ``v0 is wrong; q0 and k0 are right``; else ``""``."""
    expected = question.expected
    if not question.parts or not isinstance(expected, tuple) or len(numbers) != len(expected):
        return ""
    sizes = question.sizes or (len(expected) // len(question.parts),) * len(question.parts)
    wrong: list[str] = []
    right: list[str] = []
    start = 0
    for name, size in zip(question.parts, sizes, strict=True):
        piece = slice(start, start + size)
        start += size
        (right if _close(numbers[piece], expected[piece]) else wrong).append(name)
    if not wrong:
        return ""
    said = f"{listed(wrong)} {'is' if len(wrong) == 1 else 'are'} wrong"
    return said + (f"; {listed(right)} {'is' if len(right) == 1 else 'are'} right" if right else "")


def _g(value: float) -> str:
    return f"{value:g}" if value != 0 else "0"


def _vec(values: np.ndarray) -> str:
    return "[" + ",".join(_g(float(v)) for v in np.asarray(values).reshape(-1)) + "]"


def _spaced(values: np.ndarray) -> str:
    # Spaces after the commas let a long vector wrap between numbers, not inside one.
    return "[" + ", ".join(_g(float(v)) for v in np.asarray(values).reshape(-1)) + "]"


def _mat(values: np.ndarray) -> str:
    return "[" + ",".join(_vec(row) for row in values) + "]"


def build_questions(fixture: Fixture) -> tuple[Question, ...]:
    """The nine questions with answers computed from ``fixture``. Raises :class:`QuizError`."""
    projections = QkvProjections.from_arrays(*fixture.weights, names=fixture.names)
    batch, tokens, d = fixture.input.shape
    h = projections.d_head
    if batch == 0 or tokens == 0:
        raise EmptyQuizFixture()

    def shapes_of(shape: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple(out.shape) for out in projections.forward(np.zeros(shape)))

    one = shapes_of((4, 7, d))
    q1 = tuple(float(v) for v in one[0])
    x0 = fixture.input[0, 0]
    first = projections.forward(fixture.input[:1, :1])
    vectors = tuple(float(v) for out in first for v in out.reshape(-1))
    row = int(np.flatnonzero(x0 != 0.0)[0]) if np.any(x0 != 0.0) else 0
    changed = np.array(projections.weights[0])
    changed[row, 0] += 1.0
    before, after = projections.forward(fixture.input), projections.with_weight("query", changed).forward(
        fixture.input)
    kv_changed = not (np.array_equal(before.key, after.key)
                      and np.array_equal(before.value, after.value))
    empty = shapes_of((0, tokens, d)), shapes_of((2 * batch, 0, d))
    accepted_ranks = []
    rank_two = ""
    for rank in range(1, 6):
        try:
            projections.forward(np.zeros((1,) * (rank - 1) + (d,)))
            accepted_ranks.append(rank)
        except QkvError as error:
            rank_two = str(error) if rank == 2 else rank_two
    try:
        QkvProjections.from_seed(d, d + 1, SplitMix64(fixture.seed))
        divisible_needed = False  # d % (d + 1) == d != 0, and it was accepted
    except QkvError:
        divisible_needed = True
    history = HistoryEvidence()
    history_choices = (
        "both use one sequence",
        f"additive encoder-decoder attention uses two streams ({history.earlier_left}, "
        f"{history.earlier_right}); self-attention uses one ({history.transformer_source})",
        "additive encoder-decoder attention uses one stream; self-attention uses two",
    )
    missing_choices = (
        "nothing: Q, K and V are already the attention output",
        "another projection of X",
        "query-key scores, softmax probabilities and a weighted mixture of the values",
    )
    names = ("q0", "k0", "v0")
    q2 = ", ".join(f"{n}={_vec(out.reshape(-1))}" for n, out in zip(names, first, strict=True))
    e0, e1 = empty
    return (
        Question(1, f"Predict all three output shapes for input [4,7,{d}] when d_head={h}.",
                 "numbers", q1, format_shape(one[0]),
                 "Each output keeps batch and token axes and takes d_head: "
                 f"{format_shape(one[0])} for query, key and value.", accepted=(q1 * 3,)),
        _first_token_question(x0, projections.weights, first, vectors, q2, QUESTION_COUNT),
        Question(3, "Can changing only W_Q change K or V? (yes/no)", "yesno",
                 "yes" if kv_changed else "no", "yes" if kv_changed else "no",
                 f"Computed: W_Q[{row},0]+1 changed Q; K and V "
                 f"{'changed' if kv_changed else 'stayed bitwise unchanged'}. Independent "
                 "weights make the unchanged key and value outputs replay bitwise."),
        Question(4, f"Count the trainable scalars in three bias-free [{d},{h}] weights.",
                 "integer", (float(projections.parameter_count),), str(projections.parameter_count),
                 f"The count is 3 x {d} x {h} = {projections.parameter_count}."),
        Question(5, f"Predict the three outputs' shapes for inputs [0,{tokens},{d}] and "
                 f"[{2 * batch},0,{d}].", "numbers",
                 tuple(float(v) for v in e0[0] + e1[0]),
                 f"{format_shape(e0[0])} and {format_shape(e1[0])}",
                 "Empty axes stay empty and keep their place; every branch gives "
                 f"{format_shape(e0[0])} and {format_shape(e1[0])}.",
                 accepted=(tuple(float(v) for s in e0 + e1 for v in s),),
                 parts=("the empty-batch shape", "the empty-token shape")),
        Question(6, f"A rank-two [T,{d}] input is rejected by this wrapper. Which rank does it "
                 "require? (a number)", "integer",
                 tuple(float(r) for r in accepted_ranks),
                 format_shape(tuple(accepted_ranks))[1:-1],
                 "The API keeps both batch and token axes explicit, so it requires rank "
                 f"three. Rank two is refused with: {rank_two}"),
        Question(7, f"Must d_model ({d}) be divisible by d_head here? (yes/no)", "yesno",
                 "yes" if divisible_needed else "no", "yes" if divisible_needed else "no",
                 f"Computed: [{d},{d + 1}] weights were "
                 f"{'refused' if divisible_needed else 'accepted'}. Divisibility belongs to "
                 "later multi-head splitting (chapter 30)."),
        Question(8, "Which historical mechanism uses two source streams and which uses one?",
                 "choice", LETTERS[1], f"b) {history_choices[1]}",
                 "Additive encoder-decoder attention aligns decoder states with encoder "
                 "annotations; self-attention projects one sequence three ways.",
                 choices=history_choices),
        Question(9, "Which computation is still missing before these tensors form an attention "
                 "output?", "choice", LETTERS[2], f"c) {missing_choices[2]}",
                 "Chapter 27 computes them; `qkv attend` runs exactly these stages: "
                 + " -> ".join(STAGES) + ".", choices=missing_choices),
    )


def _first_token_question(
    x0: np.ndarray, weights: tuple[np.ndarray, ...], first: QkvForward,
    vectors: tuple[float, ...], shown: str, count: int,
) -> Question:
    """Question 2 at the largest of three sizes that fits a screen.

    All of q0, k0 and v0 (the chapter's question) when the three weights fit; else
    q0[0], the dot product of x0 with column 0 of W_Q; else the shapes of q0, k0, v0.
    """
    full = Question(2, f"Compute q0, k0 and v0 for the first token x0={_vec(x0)} with "
                    f"W_Q={_mat(weights[0])}, W_K={_mat(weights[1])}, "
                    f"W_V={_mat(weights[2])}.", "numbers", vectors, shown,
                    "Multiply the token's row vector by each weight: q0 = x0 W_Q, k0 = x0 W_K, "
                    "v0 = x0 W_V.", parts=("q0", "k0", "v0"))
    if fits_screen(full, count):
        return full
    coordinate = float(first.query.reshape(-1)[0])
    one = Question(2, "Compute q0[0], coordinate 0 of the first token's query: the dot product "
                   f"of x0={_spaced(x0)} with column 0 of W_Q, W_Q[:,0]={_spaced(weights[0][:, 0])}.",
                   "number", (coordinate,), _g(coordinate),
                   "q0 = x0 W_Q, so q0[0] = sum over i of x0[i] W_Q[i,0]; k0 and v0 take the "
                   "same product with W_K and W_V. `qkv report` prints all of them.")
    if fits_screen(one, count):
        return one
    d, h = weights[0].shape
    return Question(2, f"The first token x0 has {d} numbers and each weight is [{d},{h}]: too many "
                    "to multiply here. Predict the shape of q0, k0 and v0.", "numbers",
                    (float(h),), f"[{h}]",
                    f"A [{d}] row vector times a [{d},{h}] weight is a [{h}] vector, for each "
                    "of q0, k0 and v0. `qkv report` prints their values.",
                    accepted=((float(h),) * 3,))


def screen_lines(text: str, columns: int = SCREEN_COLUMNS, indent: str = "  ") -> int:
    """Terminal lines ``text`` takes wrapped at spaces to ``columns`` (as ``qkv quiz`` wraps).

    A word longer than a line (a matrix written without spaces) still takes
    ``ceil(len / columns)`` lines: the terminal wraps it.
    """
    lines = textwrap.wrap(text, width=columns, subsequent_indent=indent,
                          break_long_words=False, break_on_hyphens=False) or [""]
    return sum(max(1, -(-len(line) // columns)) for line in lines)


def question_screen(question: Question, count: int) -> list[str]:
    """The lines ``qkv quiz`` prints for ``question`` answered with its own answer, unwrapped."""
    return [f"Question {question.number}/{count}: {question.prompt}",
            *(f"  {letter}) {choice}" for letter, choice in zip(LETTERS, question.choices,
                                                                 strict=False)),
            "  (3 decimals are enough: within 0.0005 counts as right)",
            f"your answer: {question.shown}", f"right. Answer: {question.shown}",
            f"why: {question.explanation}", ""]


def fits_screen(question: Question, count: int) -> bool:
    """Whether ``question`` fits :data:`SCREEN_LINES` x :data:`SCREEN_COLUMNS` and
    :data:`SCREEN_BYTES`, counting its choices, the hint, the answer and the explanation."""
    lines = question_screen(question, count)
    size = sum(len(line.encode("utf-8")) + 1 for line in lines)
    return size <= SCREEN_BYTES and sum(screen_lines(line) for line in lines) <= SCREEN_LINES


def _close(got: tuple[float, ...], want: tuple[float, ...]) -> bool:
    # Answers typed by hand are rounded: accept 3 decimals (half a unit in the last place).
    return len(got) == len(want) and all(
        math.isclose(g, w, rel_tol=5e-4, abs_tol=5e-4) for g, w in zip(got, want, strict=True)
    )


# The whole answer is read, never a number picked out of it: "5,18" is two numbers, not 18.
_TOKEN = re.compile(r"""\s*(?:
    (?P<label>[a-z_][a-z0-9_]*(?:\[[\d,\s]*\])*\s*[=:])   # q0=, q0[0]=, rank:
  | (?P<number>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?)
  | (?P<open>[\[(])
  | (?P<close>[\])])
  | (?P<sep>,|;|\*|\u00d7|\u00b7|x(?![a-z_]))              # 4,7,2  4 x 7 x 2  4\u00d77\u00d72
  | (?P<word>[a-z_][a-z0-9_]*)                                 # rank 3, [0,2,2] and [2,0,2]
  )""", re.X)
_ARITHMETIC = re.compile(r"[\d.\se+\-*/()]+")
ONE_NUMBER = "expected one number, e.g. 12 or 3 x 4 = 12"
SEVERAL = "expected one number, not several"
A_LIST = "expected one number, not a list"
NUMBERS = "expected numbers, e.g. [4,7,2] or 4,7,2"


class _Read(Record):
    numbers: tuple[float, ...] = ()
    listed: bool = False  # brackets: the answer is spelled as a list
    problem: str = ""


def _normalised(text: str) -> str:
    # Typographic minus and a sentence's full stop are spellings, not content.
    return text.replace("\u2212", "-").strip().rstrip("!?").strip()


def _read_numbers(text: str) -> _Read:
    """Every number of ``text`` in order, if all of ``text`` is numbers, brackets, separators,
    labels (``q0=``) and words (``rank``, ``and``); else why it could not be read."""
    numbers: list[float] = []
    depth = 0
    listed = False
    at = 0
    text = text.rstrip(".") if not re.search(r"\d\.$", text) else text
    while at < len(text):
        found = _TOKEN.match(text, at)
        if found is None or found.end() == at:
            if text[at:].strip() == "":
                break
            return _Read(problem=f'could not read "{printable(text[at:], 20)}"')
        at = found.end()
        if found.group("number") is not None:
            value = float(found.group("number"))
            if not math.isfinite(value):
                return _Read(problem=f'could not read "{printable(found.group("number"), 20)}"')
            numbers.append(value)
        elif found.group("open") is not None:
            depth += 1
            listed = True
        elif found.group("close") is not None:
            depth -= 1
            if depth < 0:
                return _Read(problem="unbalanced brackets")
    if depth:
        return _Read(problem="unbalanced brackets")
    return _Read(numbers=tuple(numbers), listed=listed)


def _arithmetic(text: str) -> float | None:
    """The value of ``text`` if it is plain arithmetic (``3 x 3 x 2``), else ``None``."""
    import ast

    spelled = re.sub(r"(?<=[\d)\s])(?:x|\u00d7|\u00b7)(?=[\s\d(])", "*", text.strip())
    if not spelled or not _ARITHMETIC.fullmatch(spelled) or "**" in spelled:
        return None
    try:
        tree = ast.parse(spelled, mode="eval")
    except (SyntaxError, ValueError):
        return None

    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return float(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            inner = value(node.operand)
            return -inner if isinstance(node.op, ast.USub) else inner
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Add):
                return left + right
            if isinstance(node.op, ast.Sub):
                return left - right
            if isinstance(node.op, ast.Mult):
                return left * right
            return left / right
        raise ValueError("not arithmetic")

    try:
        result = value(tree.body)
    except (ValueError, ZeroDivisionError, OverflowError):
        return None
    return result if math.isfinite(result) else None


def _read_one_number(text: str) -> _Read:
    """One number: ``18``, ``rank 3``, ``q0[0]=1.5``, ``3 x 3 x 2 = 18``, ``3 x 3 x 2``.
    Every part before an ``=`` that is arithmetic must come to the same number; a list or
    two numbers is not one."""
    *working, last = text.split("=")
    worked = None if working else _arithmetic(last)
    if worked is not None and re.search(r"\d\s*[-+*/x\u00d7\u00b7]\s*[\d(]", last):
        return _Read(numbers=(worked,))  # the working alone: "3 x 3 x 2" is 18
    read = _read_numbers(last)
    if read.problem:
        return read
    if not read.numbers:
        return _Read(problem=ONE_NUMBER)
    if read.listed:
        return _Read(problem=A_LIST)
    if len(read.numbers) > 1:
        return _Read(problem=SEVERAL)
    for step in working:
        worked = _arithmetic(step)
        if worked is not None and not _close((worked,), read.numbers):
            return _Read(numbers=(math.nan,))  # "3 x 3 x 3 = 18" contradicts itself: wrong
    return read


def check_answer(question: Question, answer: str) -> Marking:
    """Whether ``answer`` is right; ``problem`` says why it could not be read.

    The whole answer is read: a numbers question takes a list (``[4,7,2]``, ``4,7,2``,
    ``4 x 7 x 2``, ``q0=[0,3], k0=[3,0]``), a one-number question one number (``18``,
    ``3 x 3 x 2 = 18``); an answer holding more, or less, than asked is not right.
    """
    text = _normalised(answer.lower())
    if not text:
        return Marking(False, "no answer")
    if question.form in ("numbers", "number", "integer"):
        if question.form == "numbers":
            read = _read_numbers(text)
            if not read.problem and not read.numbers:
                read = _Read(problem=NUMBERS)
        else:
            read = _read_one_number(text)
        if read.problem:
            return Marking(False, read.problem)
        numbers = read.numbers
        assert isinstance(question.expected, tuple)
        wants = (question.expected, *question.accepted)
        correct = any(_close(numbers, want) for want in wants)
        return Marking(correct, detail="" if correct else wrong_parts(question, numbers))
    if question.form == "yesno":
        word = re.split(r"[^a-z]+", text)[0]
        if word in ("y", "yes"):
            return Marking(question.expected == "yes")
        if word in ("n", "no"):
            return Marking(question.expected == "no")
        return Marking(False, "expected yes or no")
    letter = text.rstrip(").").strip()
    if letter in LETTERS[: len(question.choices)]:
        return Marking(letter == question.expected)
    for index, choice in enumerate(question.choices):
        if text == choice.lower():
            return Marking(LETTERS[index] == question.expected)
    return Marking(False, f"expected one of {', '.join(LETTERS[: len(question.choices)])}")


def parse_answers(text: str, count: int) -> list[str]:
    """Answers from a file: JSON (a list, or an object keyed "1".."N") or one per line.

    A file that parses as a JSON list or object is JSON; anything else is lines. In the
    line form blank lines and lines starting with ``#`` are skipped. Non-string JSON
    values (numbers, lists) are spelled back as JSON. Missing answers are empty strings.
    Raises :class:`QuizError` for more answers than questions or a key that is no question.
    """
    stripped = text.lstrip("\ufeff").strip()
    try:
        data = json.loads(stripped)
    except (ValueError, RecursionError):
        # Not JSON ("[4,7,2]" on the first of nine lines is a line answer), or JSON
        # Python cannot hold (too deep, an integer too long): read as lines.
        data = None
    if data is not None:
        from qkvcli.reading.json_values import refuse_lone_surrogates

        refuse_lone_surrogates(data, "$")

    def spell(value: object) -> str:
        return value if isinstance(value, str) else json.dumps(value)

    answers: list[str]
    if isinstance(data, list):
        answers = [spell(v) for v in data]
    elif isinstance(data, dict):
        unknown = [k for k in data if k not in {str(i) for i in range(1, count + 1)}]
        if unknown:
            raise UnknownAnswerKey(unknown[0], count)
        answers = [spell(data[str(i)]) if str(i) in data else "" for i in range(1, count + 1)]
    else:
        answers = [line.strip() for line in stripped.splitlines()
                   if line.strip() and not line.strip().startswith("#")]
    if len(answers) > count:
        raise TooManyAnswers(len(answers), count)
    return answers + [""] * (count - len(answers))
