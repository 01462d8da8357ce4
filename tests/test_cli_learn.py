"""qkv variance and qkv quiz through the command line (interactive and from a file)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from qkvcli import __version__
from qkvcli.cli import main

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
    assert list(document) == ["qkv_version", "kind", "seed", "samples", "rows"]
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
