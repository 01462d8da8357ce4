"""``qkv validate`` on attend fixtures: recognised by their keys, or all of them with ``--attend``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from qkvcli.cli import main
from qkvcli.cli.validate import attend_keys

ROOT = Path(__file__).resolve().parent.parent
ATTEND = sorted((ROOT / "fixtures" / "attend").glob("*.json"))
CHAPTER = ROOT / "fixtures" / "ch26-qkv-projections.json"


def invoke(args: list[str], cwd: Path, stdin: str | None = None) -> Any:
    old = os.getcwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(main, args, input=stdin)
    finally:
        os.chdir(old)


def layer(**extra: Any) -> dict[str, Any]:
    eye = [[1.0 if i == j else 0.0 for j in range(4)] for i in range(4)]
    return {"heads": 2, "input": [[[1, 2, 3, 4], [0, 1, 0, -1]]],
            "weights": {"query": eye, "key": eye, "value": eye, **extra}}


def test_the_shipped_attend_fixtures_are_ok(tmp_path: Path) -> None:
    result = invoke(["validate", *map(str, ATTEND)], tmp_path)
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert len(lines) == len(ATTEND) and all(": ok" in line for line in lines)
    # A packed in_proj weight without biases is a chapter fixture too; biases are not.
    assert f"{ROOT / 'fixtures/attend/attend-value-width.json'}: ok (attend fixture)" in lines


def test_attend_flag_checks_every_file_as_an_attend_fixture(tmp_path: Path) -> None:
    result = invoke(["validate", "--attend", str(CHAPTER), *map(str, ATTEND)], tmp_path)
    assert result.exit_code == 0, result.stderr
    assert all(line.endswith(": ok (attend fixture)") for line in result.stdout.splitlines())


def test_a_layer_fixture_is_recognised_and_its_problem_is_attends(tmp_path: Path) -> None:
    (tmp_path / "good.json").write_text(json.dumps(layer(out_proj_weight=[[1, 0, 0, 0]] * 4)))
    (tmp_path / "bad.json").write_text(json.dumps(layer(out_proj_weight=[[1, 0, 0]] * 4)))
    result = invoke(["validate", "good.json", "bad.json"], tmp_path)
    assert result.exit_code == 2
    assert result.stdout == "good.json: ok (attend fixture)\n"
    direct = invoke(["attend", "bad.json"], tmp_path)
    assert direct.exit_code == 2
    # The same first line qkv attend prints, and the count.
    assert result.stderr.splitlines() == [direct.stderr.splitlines()[0],
                                          "qkv: 1 problem in 1 of 2 fixtures"]


def test_without_attend_keys_a_file_stays_a_chapter_fixture(tmp_path: Path) -> None:
    (tmp_path / "f.json").write_text('{"input": [], "weights": {}}')
    chapter = invoke(["validate", "f.json"], tmp_path)
    assert chapter.exit_code == 2
    assert len(chapter.stderr.splitlines()) > 1  # every problem, collected
    attend = invoke(["validate", "--attend", "f.json"], tmp_path)
    assert attend.exit_code == 2
    assert len(attend.stderr.splitlines()) == 1  # the attend reader stops at the first


def test_standard_input_is_recognised_too(tmp_path: Path) -> None:
    result = invoke(["validate", "-"], tmp_path, stdin=ATTEND[-1].read_text())
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("<stdin>: ok")


@pytest.mark.parametrize(
    ("data", "keys"),
    [
        ({"heads": 2, "value_width": "independent"}, ["$.heads", "$.value_width"]),
        ({"weights": {"in_proj_weight": [], "c_attn_bias": [], "out_proj_weight": []}},
         ["$.weights.in_proj_weight", "$.weights.c_attn_bias", "$.weights.out_proj_weight"]),
        ({"weights": {"key": {"values": [], "bias": []}}}, ["$.weights.key.bias"]),
        ({"weights": {"query": [[1]]}}, []),
        ([], []),
    ],
    ids=["top", "packed-and-out", "bias", "chapter", "not-an-object"],
)
def test_attend_keys(data: Any, keys: list[str]) -> None:
    assert attend_keys(data) == keys
