"""qkv variance and qkv quiz through the command line (interactive and from a file)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from qkvcli import __version__
from qkvcli.cli import main
from qkvcli.learn.quiz import HOW_TO_ANSWER, SCREEN_BYTES, SCREEN_LINES
from tests.conftest import GOLDEN

RIGHT = ["[4,7,2]", "[0,3] [3,0] [3,-3]", "no", "18", "[0,2,2] and [2,0,2]", "3", "no", "b", "c"]


def invoke(*args: str, **kwargs: Any) -> Any:
    return CliRunner().invoke(main, list(args), **kwargs)


def test_variance_table() -> None:
    result = invoke("variance", "--max", "64", "--samples", "500")
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0].split() == ["d_k", "var(q.k)", "std(q.k)", "var(q.k/sqrt(d_k))", "std_err",
                                "z"]
    assert [line.split()[0] for line in lines[1:6]] == ["4", "8", "16", "32", "64"]
    assert "samples=500 per row, seed=26" in lines
    assert invoke("variance", "--max", "64", "--samples", "500").output == result.output


def test_variance_json_and_rich() -> None:
    document = json.loads(invoke("variance", "--max", "16", "--samples", "100", "-f",
                                 "json").output)
    assert [row["d_k"] for row in document["rows"]] == [4, 8, 16]
    assert list(document) == ["qkv_version", "schema_version", "report", "seed", "samples", "rows"]
    assert document["report"] == "variance"
    assert document["qkv_version"] == __version__
    for row in document["rows"]:
        assert row["z"] == pytest.approx((row["ratio"] - 1) / row["std_error"])
        assert row["ratio"] == pytest.approx(row["scaled_variance"], rel=1e-12)
    rich = invoke("variance", "--max", "16", "--samples", "100", "-f", "rich")
    assert rich.exit_code == 0 and "█" in rich.output and "log2 scale" in rich.output
    assert "var/d_k" not in rich.output and " z" in rich.output


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--min", "64", "--max", "4"], "--max 4 is smaller than --min 64"),
     (["--samples", "1"], "Invalid value for '--samples'"),
     (["--samples", "1000000", "--max", "1024"], "lower one of them")],
    ids=["order", "samples", "too-big"],
)
def test_variance_bad_options(args: list[str], message: str) -> None:
    result = invoke("variance", *args)
    assert result.exit_code == 2
    assert message in result.stderr


def test_quiz_from_a_file_all_right(tmp_path: Path) -> None:
    path = tmp_path / "answers.txt"
    path.write_text("# chapter 26\n" + "\n".join(RIGHT) + "\n", encoding="utf-8")
    result = invoke("quiz", "--answers", str(path))
    assert result.exit_code == 0
    assert result.output.count("right. Answer:") == 9
    assert result.output.endswith("score=9/9\n")


def test_quiz_from_a_json_file_with_a_wrong_answer(tmp_path: Path) -> None:
    path = tmp_path / "answers.json"
    path.write_text(json.dumps([*RIGHT[:3], "17", *RIGHT[4:]]), encoding="utf-8")
    result = invoke("quiz", "--answers", str(path))
    assert result.exit_code == 1
    assert "not quite. Answer: 18" in result.output
    assert "why: The count is 3 x 3 x 2 = 18." in result.output
    assert result.output.endswith("score=8/9\n")


def test_quiz_interactive_asks_again_for_unreadable_answers() -> None:
    answers = ["[4,7,2]", "[0,3] [3,0] [3,-3]", "maybe", "no", *RIGHT[3:]]
    result = invoke("quiz", input="\n".join(answers) + "\n")
    assert result.exit_code == 0, result.output
    assert "(expected yes or no; try again)" in result.output
    assert result.output.index("Question 2/9") < result.output.index("why: Multiply")
    assert result.output.endswith("score=9/9\n")


def test_quiz_interactive_wrong_answer_exits_one() -> None:
    result = invoke("quiz", input="\n".join(["[4,7,3]", *RIGHT[1:]]) + "\n")
    assert result.exit_code == 1
    assert "not quite. Answer: [4,7,2]" in result.output


def test_quiz_on_another_fixture(tmp_path: Path) -> None:
    data = {"input": [[[1, 0, 0, 0]]],
            "weights": {"query": [[2], [0], [0], [0]], "key": [[1], [1], [1], [1]],
                        "value": [[0], [0], [0], [5]]}}
    fixture = tmp_path / "f.json"
    fixture.write_text(json.dumps(data), encoding="utf-8")
    answers = tmp_path / "a.txt"
    answers.write_text("4,7,1\n2 1 0\nno\n12\n[0,1,1] [2,0,1]\n3\nno\nb\nc\n", encoding="utf-8")
    result = invoke("quiz", str(fixture), "--answers", str(answers))
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    ("content", "message"),
    [("\n".join(["x"] * 10), "answers file has 10 answers; the quiz has 9 questions"),
     ('{"0": "x"}', 'answers file key "0" is not a question number 1..9')],
    ids=["too-many", "bad-key"],
)
def test_quiz_bad_answer_files(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "answers.txt"
    path.write_text(content, encoding="utf-8")
    result = invoke("quiz", "--answers", str(path))
    assert result.exit_code == 2
    assert result.stderr == f"Error: {path}: {message}\n"


def test_quiz_missing_answers_file() -> None:
    result = invoke("quiz", "--answers", "nope.txt")
    assert result.exit_code == 2
    assert result.stderr == "Error: nope.txt: no such file\n"


def _answers_file(tmp_path: Path) -> Path:
    path = tmp_path / "answers.txt"
    path.write_text("\n".join(RIGHT) + "\n", encoding="utf-8")
    return path


def test_quiz_on_the_chapter_prints_what_it_printed_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Transcripts recorded before the quiz scaled to wide fixtures; the interactive one
    # gains exactly the how-to-answer line on top, nothing else.
    monkeypatch.setenv("COLUMNS", "100")
    from_file = invoke("quiz", "--answers", str(_answers_file(tmp_path)))
    assert from_file.exit_code == 0
    assert from_file.output == (GOLDEN / "quiz" / "chapter-answers-file.txt").read_text("utf-8")
    # A real pipe, not CliRunner: CliRunner echoes the typed input into the output.
    import subprocess
    import sys

    typed = subprocess.run([sys.executable, "-m", "qkvcli", "quiz"], input="\n".join(RIGHT) + "\n",
                           capture_output=True, text=True, timeout=60, check=False)
    assert typed.returncode == 0, typed.stderr
    recorded = (GOLDEN / "quiz" / "chapter-interactive.txt").read_text("utf-8")
    assert typed.stdout == HOW_TO_ANSWER + "\n" + recorded
    assert len(HOW_TO_ANSWER) <= 80 and "\n" not in HOW_TO_ANSWER


def _per_question(output: str) -> list[str]:
    """The transcript cut at each "Question N/9:" line (the score line left out)."""
    blocks = output.split("Question ")[1:]
    blocks[-1] = blocks[-1].rsplit("score=", 1)[0]
    return ["Question " + block for block in blocks]


@pytest.mark.parametrize(
    ("d_model", "d_head", "asks"),
    [(64, 64, "Predict the shape of q0"), (40, 40, "Compute q0[0]"), (2, 512, "Compute q0[0]"),
     (512, 1, "Predict the shape of q0"), (4, 3, "Compute q0, k0 and v0")],
    ids=["64x64", "40x40", "narrow-model-wide-head", "wide-model", "small"],
)
def test_quiz_questions_fit_a_screen_on_any_fixture(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, d_model: int, d_head: int, asks: str,
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    fixture = tmp_path / "wide.json"
    written = invoke("init", "--generate", "--batch", "2", "--tokens", "16", "--d-model",
                     str(d_model), "--d-head", str(d_head), "-o", str(fixture))
    assert written.exit_code == 0, written.output
    result = invoke("quiz", str(fixture), "--answers", str(_answers_file(tmp_path)))
    assert result.exit_code == 1  # the chapter's answers are wrong here
    blocks = _per_question(result.output)
    assert len(blocks) == 9
    for block in blocks:
        # A word longer than the terminal (a matrix without spaces) wraps where it must.
        lines = sum(max(1, -(-len(line) // 80)) for line in block.splitlines())
        assert lines <= SCREEN_LINES, block
        assert len(block.encode("utf-8")) <= SCREEN_BYTES, block
    assert blocks[1].startswith("Question 2/9: ") and asks in " ".join(blocks[1].split())


def test_quiz_on_a_64_wide_fixture_is_small(tmp_path: Path) -> None:
    fixture = tmp_path / "wide.json"
    assert invoke("init", "--generate", "--batch", "2", "--tokens", "16", "--d-model", "64",
                  "--d-head", "64", "-o", str(fixture)).exit_code == 0
    answers = ["[4,7,64]", "[64]", "no", "12288", "[0,16,64] [4,0,64]", "3", "no", "b", "c"]
    result = invoke("quiz", str(fixture), input="\n".join(answers) + "\n")
    assert result.exit_code == 0, result.output
    assert result.output.endswith("score=9/9\n")
    assert len(result.output.encode("utf-8")) < 9 * 1024


def _in_pty(argv: list[str], replies: list[str]) -> tuple[int, str]:
    """Run ``argv`` on a pseudo-terminal, typing each reply after each "your answer:"."""
    import os
    import select
    import subprocess

    pty = pytest.importorskip("pty")
    master, slave = pty.openpty()
    environment = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    process = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave,
                               env={**environment, "TERM": "xterm"}, close_fds=True)
    os.close(slave)
    seen = b""
    pending = list(replies)
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            process.kill()
            break
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed its side
            break
        if not data:
            break
        seen += data
        # Type only once the prompt is up: readline has then put the terminal in raw mode.
        if pending and seen.count(b"your answer:") > len(replies) - len(pending):
            os.write(master, pending.pop(0).encode("utf-8"))
    os.close(master)
    return process.wait(timeout=60), seen.decode("utf-8", "replace")


def test_quiz_answer_prompt_has_line_editing_on_a_terminal() -> None:
    # "4,2", cursor left once, "7,": with readline the line reads "4,7,2"; without it the
    # escape sequence would stay in the answer ("4,2^[[D7,") and the answer would be wrong.
    import sys

    pytest.importorskip("readline")
    left = "\x1b[D"
    replies = ["4,2" + left + "7,\r", *(answer + "\r" for answer in RIGHT[1:])]
    code, seen = _in_pty([sys.executable, "-m", "qkvcli", "quiz"], replies)
    assert "right. Answer: [4,7,2]" in seen, seen
    assert "score=9/9" in seen and code == 0


def test_rich_is_imported_only_on_rich_paths() -> None:
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from qkvcli.cli import main\n"
        "for args in (['attend', '--example', 'primer'], ['attend', '-f', 'json'],\n"
        "             ['variance', '--max', '8', '--samples', '10']):\n"
        "    assert CliRunner().invoke(main, args).exit_code == 0\n"
        "assert not [m for m in sys.modules if m == 'rich' or m.startswith('rich.')]\n"
        "assert CliRunner().invoke(main, ['attend', '-f', 'rich']).exit_code == 0\n"
        "assert 'rich' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)
