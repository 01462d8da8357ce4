"""``qkv check IMPL FIXTURE`` with a later chapter's fixture: a case of the kind it
describes (chapter 29's of RoPE, 30's of multi-head attention, 37's of the KV cache, 27's
and 28's of a head), labelled as the user named the file, counted by that kind's families
and named in their findings; what the check cannot judge refused in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner, Result

from qkvcli.check.cases import cache_cases, mha_cases, rope_cases
from qkvcli.check.given import operand_case
from qkvcli.cli import main
from qkvcli.render.check import SLIP_WORDS

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "implementations"
NAMES = ("ch27-self-attention.json", "ch28-causal-masking.json", "ch29-rope.json",
         "ch30-multi-head-attention.json", "ch37-incremental-attention.json")
CH27, CH28, CH29, CH30, CH37 = (f"fixtures/{name}" for name in NAMES)
"""The bundled fixtures as a user names them from a folder holding them (reports
shorten a long label, so the tests name them short, wherever the checkout is)."""


@pytest.fixture(autouse=True)
def _in_a_folder_with_the_fixtures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "fixtures").mkdir()
    for name in NAMES:
        (tmp_path / "fixtures" / name).write_bytes((ROOT / "fixtures" / name).read_bytes())
    monkeypatch.chdir(tmp_path)


def check(*arguments: str) -> Result:
    return CliRunner().invoke(main, ["check", *arguments, "--random", "0"])


def fixtures_line(result: Result) -> list[str]:
    """The labels of the fixtures checked, from the text report's ``fixtures=`` line."""
    line = next(line for line in result.stdout.splitlines() if line.startswith("fixtures="))
    return line.removeprefix("fixtures=").split(",")


def details(result: Result) -> dict[str, str]:
    return {line.split()[0]: line for line in result.stdout.splitlines()[2:]}


def failures_on(result: Result, label: str) -> list[dict[str, Any]]:
    """The JSON report's findings on the fixture ``label`` (in any mode: ``label causal``)."""
    return [failure for failure in json.loads(result.stdout)["failures"]
            if failure["fixture"] is not None
            and (failure["fixture"] == label or failure["fixture"].startswith(label + " "))]


def test_chapter_29_and_30_fixtures_pass_the_numpy_example_as_rope_and_multi_head_cases() -> None:
    result = check(str(EXAMPLES / "numpy_rope_mha.py"), CH29, CH30, "-f", "text")
    assert result.exit_code == 0, result.output
    assert {CH29, CH30} <= set(fixtures_line(result))
    lines = details(result)
    # one more fixture than the kind's own: the chapter's, and only in its kind's families
    assert f"on {len(rope_cases()) + 1} fixtures" in lines["rope"]
    assert f"on {len(mha_cases()) + 1} fixtures" in lines["multi-head"]
    assert f"on {len(mha_cases()) + 1} fixtures" in lines["multi-head-gradcheck"]


@pytest.mark.parametrize(("example", "fixture", "words"), [
    ("wrong_mha_dv_uses_a", CH30, SLIP_WORDS["dv-uses-a"]),
    ("wrong_rope_cos_sin_swapped", CH29, SLIP_WORDS["cos-sin-swapped"]),
    ("wrong_cache_rope_at_zero", CH37, "the cache holds the keys unturned"),
], ids=["multi-head", "rope", "cache"])
def test_a_wrong_example_fails_on_the_chapter_fixture_with_its_slip_named(
        example: str, fixture: str, words: str) -> None:
    result = check(str(EXAMPLES / f"{example}.py"), fixture, "-f", "json")
    assert result.exit_code == 1, result.output
    found = failures_on(result, fixture)
    assert found, result.stdout
    assert any(words in failure["detail"] for failure in found), found


def test_a_chapter_37_fixture_passes_the_kv_cache_example_in_its_own_capacity() -> None:
    result = check(str(EXAMPLES / "numpy_kv_cache.py"), CH37, "-f", "text")
    assert result.exit_code == 0, result.output
    assert fixtures_line(result)[0] == CH37
    assert f"on {len(cache_cases()) + 1} fixtures" in details(result)["cache-steps"]


def test_chapters_27_and_28_fixtures_are_head_cases(tmp_path: Path) -> None:
    """Given as operands or as input and weights; a head's families count them, the
    projections' do not."""
    projected = tmp_path / "projected.json"
    projected.write_text(json.dumps({
        "chapter": "27-self-attention", "input": [[[1, 0, 2], [0, -1, 1]]],
        "weights": {"query": [[1, 0], [0, 1], [1, 1]], "key": [[0, 1], [1, 0], [1, -1]],
                    "value": [[2, 0], [0, 1], [1, 0]]}}))
    result = check(str(EXAMPLES / "numpy_head.py"), CH27, CH28, str(projected), "-f", "text")
    assert result.exit_code == 0, result.output
    assert fixtures_line(result)[1:4] == [CH27, CH28, str(projected)]
    lines = details(result)
    assert "on 6 fixtures" in lines["head-forward"]  # chapter, 3 given, precision, contrast
    assert "on 2 fixtures" in lines["forward"]  # chapter, precision


def test_operands_become_an_input_whose_selection_gives_them_exactly() -> None:
    rng = np.random.default_rng(27)
    query, key, value = (rng.standard_normal((2, 3, 4)) for _ in range(3))
    case = operand_case(query, key, value, np.ones((2, 3, 4)), 1e-6, 1e-6, None)
    for weight, operand in zip(case.weights, (query, key, value), strict=True):
        assert np.array_equal(case.input @ weight, operand)


def test_a_failing_head_case_of_chapter_28_is_saved_as_a_fixture_check_replays(
        tmp_path: Path) -> None:
    wrong = str(EXAMPLES / "wrong_head_ignores_mask.py")
    result = check(wrong, CH28, "-f", "json", "--save-failures", "out")
    assert result.exit_code == 1, result.output
    assert failures_on(result, CH28)
    saved = [path.name for path in Path("out").glob("*ch28*.json")]
    assert saved == ["02-fixtures-ch28-causal-masking-json.json"]
    replayed = check(wrong, f"out/{saved[0]}", "-f", "json")
    assert replayed.exit_code == 1
    assert failures_on(replayed, f"out/{saved[0]}")


def test_a_failing_later_chapter_case_is_said_not_saved(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = check(str(EXAMPLES / "wrong_mha_dv_uses_a.py"), CH30, "-f", "json",
                   "--save-failures", "out")
    assert result.exit_code == 1
    said = [line for line in result.stderr.splitlines() if "--save-failures" in line]
    assert said == [f"qkv: --save-failures: nothing written for {CH30}: a later chapter's "
                    "fixture, which qkv check replays from its own file"]
    assert not [path for path in out.iterdir() if "ch30" in path.name]


def _changed(source: str, tmp_path: Path, **changes: Any) -> str:
    data = json.loads(Path(source).read_text())
    for key, value in changes.items():
        if value is None:
            data.pop(key)
        elif isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    path = tmp_path / "changed.json"
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.parametrize(("source", "changes", "said"), [
    (CH27, {"value": [[[3, -3, 1], [1, 3, 2]]], "upstream": None, "single_token": None},
     "$.value: values of width 3 beside queries and keys of width 2: a head's interface takes "
     "three weights of one width; qkv check reads fixtures of chapters 26, 29, 30 and 37, "
     "and of 27 and 28 when d_v = d_k"),
    (CH29, {"rope": {"layout": "half"}},
     "$.rope.layout: \"half\" pairs; qkv check's rope, mha_forward and cache_steps turn "
     "adjacent pairs (docs/protocol.md), so it cannot judge this fixture"),
    (CH30, {"heads": 3}, "$.heads: heads must be at least 1 and divide"),
    (CH37, {"weights": {"output": [[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1]]}},
     "$.weights.output: [4,3], not [d_model, d_model] = [4,4]: qkv check's cache_steps "
     "takes a layer of square weights (docs/protocol.md), so it cannot judge this fixture"),
    (CH30, {"input": [[[1e200, 0, 0, 0], [1e200, 1, 0, 0], [1e200, 0, 1, 0]]]},
     "its mha_forward weights overflows float64; qkv check compares finite results only"),
    (CH30, {"chapter": None}, "$.heads: a multi-head layer fixture; run it with qkv attend"),
], ids=["27-value-width", "29-half-pairs", "30-heads", "37-output-width", "30-overflow",
        "layer"])
def test_what_the_check_cannot_judge_is_one_line_and_exit_2(
        source: str, changes: dict[str, Any], said: str, tmp_path: Path) -> None:
    path = _changed(source, tmp_path, **changes)
    result = check(str(EXAMPLES / "numpy_rope_mha.py"), path)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"Error: {path}: {said}"), result.stderr
    assert result.stderr.count("\n") == 1


def test_max_elements_applies_to_a_later_chapter_fixture() -> None:
    result = check(str(EXAMPLES / "numpy_rope_mha.py"), CH30, "--max-elements", "20")
    assert result.exit_code == 2
    assert result.stderr == (f"Error: {CH30}: its tensors hold 88 elements together, more "
                             "than the limit 20 for one call (raise it with --max-elements)\n")
