"""What a newcomer trips over, round 3 (issue 44): a misspelt chapter is one error naming
the id, attend points a chapter fixture to qkv run --chapter N, help wraps at word
boundaries at any width and names every chapter."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from qkvcli.cli import main

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "qkvcli" / "data"
IDS = {27: "27-self-attention", 28: "28-causal-masking", 29: "29-rope",
       30: "30-multi-head-attention"}


def invoke(*args: str, **kwargs: Any) -> Any:
    return CliRunner().invoke(main, list(args), prog_name="qkv", **kwargs)


def chapter_fixture(tmp_path: Path, number: int, chapter: object = None, drop: bool = False) -> Path:
    data = json.loads((DATA / f"ch{IDS[number]}.json").read_text())
    if drop:
        del data["chapter"]
    else:
        data["chapter"] = chapter
    path = tmp_path / "f.json"
    path.write_text(json.dumps(data))
    return path


MISSPELT = [
    (27, "27-self-atention", '"27-self-atention" is not a chapter\'s id'),
    (27, "27", '"27" is not a chapter\'s id'),
    (27, "self-attention", '"self-attention" is not a chapter\'s id'),
    (28, "Causal masking", '"Causal masking" is not a chapter\'s id'),
    (29, "ch29-rope", '"ch29-rope" is not a chapter\'s id'),
    (29, 29, "the number 29 is not a chapter's id"),
    (30, 30, "the number 30 is not a chapter's id"),
    (30, "30-multihead-attention", '"30-multihead-attention" is not a chapter\'s id'),
]


@pytest.mark.parametrize(("number", "chapter", "said"), MISSPELT)
@pytest.mark.parametrize("command", [["run"], ["report"], ["validate"], ["gradcheck"], ["attend"],
                                     ["quiz", "--answers", "/dev/null"]])
def test_a_misspelt_chapter_is_one_error_naming_the_id(tmp_path: Path, number: int, chapter: object,
                                                       said: str, command: list[str]) -> None:
    path = chapter_fixture(tmp_path, number, chapter)
    result = invoke(command[0], str(path), *command[1:])
    assert result.stderr == (f"Error: {path}: $.chapter: {said}; chapter {number}'s is "
                             f'"{IDS[number]}"\n'), command
    assert result.exit_code == 2


def test_a_misspelt_chapter_in_a_batch_is_its_row_and_one_line(tmp_path: Path) -> None:
    path = chapter_fixture(tmp_path, 27, "27-self-atention")
    result = invoke("run", str(path), str(DATA / "ch27-self-attention.json"), "-f", "text")
    assert result.exit_code == 2
    assert result.stderr == (f'Error: {path}: $.chapter: "27-self-atention" is not a chapter\'s '
                             'id; chapter 27\'s is "27-self-attention"\n')


@pytest.mark.parametrize("label", ["my own projections", "26-qkv-projection", "2026 notes"])
def test_a_chapter_26_label_is_still_any_text(tmp_path: Path, label: str) -> None:
    data = json.loads((DATA / "ch26-qkv-projections.json").read_text())
    path = tmp_path / "f.json"
    path.write_text(json.dumps({**data, "chapter": label}))
    assert invoke("run", str(path), "-f", "text").exit_code == 0


@pytest.mark.parametrize("number", [27, 28, 29, 30])
def test_attend_points_a_chapter_fixture_to_run_chapter(tmp_path: Path, number: int) -> None:
    path = chapter_fixture(tmp_path, number, IDS[number])
    result = invoke("attend", str(path))
    assert result.stderr == (f"Error: {path}: $.chapter: a chapter {number} fixture "
                             f"({IDS[number]}); qkv attend runs attention layers: run it with "
                             f"qkv run --chapter {number} {path}\n")
    assert result.exit_code == 2


@pytest.mark.parametrize(("number", "key"), [(27, "single_token"), (28, "suffix_perturbation"),
                                             (29, "invariant_tolerance"), (30, "suffix")])
def test_attend_points_a_chapter_fixture_without_its_chapter_key(tmp_path: Path, number: int,
                                                                 key: str) -> None:
    path = chapter_fixture(tmp_path, number, drop=True)
    result = invoke("attend", str(path))
    assert result.stderr == (f"Error: {path}: $.{key}: a chapter {number} fixture's key; qkv "
                             f"attend runs attention layers: run it with qkv run --chapter "
                             f"{number} {path}\n")
    assert invoke("run", "--chapter", str(number), str(path), "-f", "text").exit_code == 0


# --- help ---------------------------------------------------------------------------------

COMMANDS = ["", "run", "report", "gradcheck", "attend", "check", "init", "validate", "schema",
            "inspect", "variance", "quiz"]


def help_text(command: str, columns: int) -> str:
    result = invoke(*([command] if command else []), "--help", env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return str(result.stdout)


@pytest.mark.parametrize("command", COMMANDS)
def test_help_wraps_at_word_boundaries_at_any_width(command: str) -> None:
    words = help_text(command, 400).split()
    for columns in (20, 24, 30, 36, 40, 45, 50, 60, 72, 80, 100):
        text = help_text(command, columns)
        assert text.split() == words, (command, columns)  # no word cut ("sof/tmax", "--max-/...")
        width = max(min(columns, 80) - 2, 20)
        for line in text.splitlines():
            # a line wider than the screen is one word that fits no line: never two
            assert len(line) <= width or len(line.split()) == 1, (command, columns, line)


def test_help_names_every_chapter_and_chapter_comes_first() -> None:
    text = " ".join(help_text("", 80).split())
    for said in ("chapter 26, the default", "self-attention (27)", "causal masking (28)",
                 "RoPE (29)", "multi-head attention (30)"):
        assert said in text
    for command in ("run", "report", "validate"):
        options = help_text(command, 80).split("Options:\n", 1)[1]
        assert options.lstrip().startswith("--chapter N"), command


@pytest.mark.parametrize("number", [27, 30])
def test_validate_attend_points_a_chapter_fixture_to_run_chapter(tmp_path: Path, number: int) -> None:
    path = chapter_fixture(tmp_path, number, IDS[number])
    result = invoke("validate", "--attend", str(path))
    assert result.stderr == (f"Error: {path}: $.chapter: a chapter {number} fixture "
                             f"({IDS[number]}); qkv attend runs attention layers: run it with "
                             f"qkv run --chapter {number} {path}\n")
    assert result.exit_code == 2
