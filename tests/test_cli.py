"""The qkv command through click's CliRunner: outputs, exit statuses, and error lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from qkvcli import __version__
from qkvcli.cli import main

from .conftest import CHAPTER_FIXTURE, GOLDEN

EXPECTED = (GOLDEN / "ch26" / "expected.txt").read_text(encoding="utf-8")
TRACE = (GOLDEN / "ch26" / "diagram-trace.txt").read_text(encoding="utf-8")


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["report", "--format", "text"], EXPECTED),
        (["report"], EXPECTED),
        (["report", "--format", "trace"], TRACE),
        (["run", str(CHAPTER_FIXTURE), "--format", "text"], EXPECTED),
        (["report", str(CHAPTER_FIXTURE), "-f", "trace"], TRACE),
    ],
    ids=["report-text", "report-default", "report-trace", "run-file-text", "report-file-trace"],
)
def test_chapter_outputs_equal_the_anchors(runner: CliRunner, args: list[str], expected: str) -> None:
    result = runner.invoke(main, args)
    assert result.exit_code == 0, result.output
    assert result.stdout == expected
    assert result.stderr == ""


def test_json_report(runner: CliRunner) -> None:
    result = runner.invoke(main, ["report", "--format", "json"])
    assert result.exit_code == 0
    document = json.loads(result.stdout)
    assert document["passed"] is True
    assert document["tensors"]["query"]["values"] == [0.0, 3.0, 2.0, -1.0]


def test_gradcheck_table(runner: CliRunner) -> None:
    result = runner.invoke(main, ["gradcheck"])
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["tensor", "coordinate", "analytic", "numerical", "scaled_error",
                                "pass"]
    assert sum(line.endswith("PASS") for line in lines[1:]) == 24
    assert lines[-2].startswith("gradcheck=checks:24 input:6 query_weight:6 key_weight:6 ")
    assert lines[-1] == "verdict: PASS (24 of 24 checks passed)"


def test_gradcheck_samples_and_json(runner: CliRunner) -> None:
    result = runner.invoke(main, ["gradcheck", "--samples", "2", "--format", "json"])
    assert result.exit_code == 0
    document = json.loads(result.stdout)
    assert document["count"] == 8
    assert [c["flat_index"] for c in document["tensors"][0]["checks"]] == [0, 5]


def test_failed_check_exits_one(runner: CliRunner, tmp_path: Path) -> None:
    fixture = tmp_path / "f.json"
    # Finite inputs whose projections overflow to infinity: the forward check must fail.
    fixture.write_text(json.dumps({
        "input": [[[1e308, 1e308]]],
        "weights": {"query": [[10], [10]], "key": [[1], [0]], "value": [[0], [1]]},
    }))
    result = runner.invoke(main, ["run", str(fixture)])
    assert result.exit_code == 1
    assert result.stderr.startswith("qkv: FAILED: forward")
    assert result.stdout.splitlines()[7] == "query=shape:[1,1,1] values:[inf]"


def test_a_wrong_setting_is_a_usage_error(runner: CliRunner) -> None:
    result = runner.invoke(main, ["gradcheck", "--step", "0"])
    assert result.exit_code == 2
    assert "--step': central-difference step 0.0 must be positive and finite" in result.stderr
    result = runner.invoke(main, ["gradcheck", "--tolerance", "nan"])
    assert result.exit_code == 2


@pytest.mark.parametrize(
    ("content", "first_line"),
    [
        ("{", "Error: {path}: line 1 column 2: invalid JSON: expecting property name enclosed "
              "in double quotes"),
        ('{"input": [[[1]]], "weights": {"query": [[1]], "key": [[1]], "value": [[NaN]]}}',
         "Error: {path}: $.weights.value[0][0]: line 1 column 73: NaN is not a number JSON "
         "allows; write a finite number"),
        ('{"input": [[[1, 2]]], "weights": {"query": [[1]], "key": [[1]], "value": [[1]]}}',
         "Error: {path}: $.input: Q/K/V input final width must equal model width 1, got 2"),
    ],
    ids=["malformed", "nan", "width"],
)
def test_bad_input_is_one_line_and_exit_two(
    runner: CliRunner, tmp_path: Path, content: str, first_line: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    result = runner.invoke(main, ["run", str(path)])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [first_line.format(path=path)]
    assert result.stdout == ""


def test_missing_file_and_directory(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(main, ["report", str(tmp_path / "nope.json")])
    assert (result.exit_code, result.stderr) == (2, f"Error: {tmp_path / 'nope.json'}: no such file\n")
    result = runner.invoke(main, ["gradcheck", str(tmp_path)])
    assert result.exit_code == 2
    assert result.stderr == f"Error: {tmp_path}: is a directory, not a fixture file\n"


def test_output_is_written_atomically(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "report.txt"
    result = runner.invoke(main, ["report", "-o", str(out)])
    assert result.exit_code == 0
    assert result.stdout == ""
    assert out.read_text() == EXPECTED
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.txt"]


def test_output_refuses_to_overwrite_the_fixture(runner: CliRunner, tmp_path: Path) -> None:
    fixture = tmp_path / "f.json"
    original = CHAPTER_FIXTURE.read_text()
    fixture.write_text(original)
    result = runner.invoke(main, ["report", str(fixture), "-o", str(fixture)])
    assert result.exit_code == 2
    assert result.stderr == f"Error: -o/--output {fixture}: refusing to overwrite a file this command reads\n"
    assert fixture.read_text() == original


def test_version_and_help(runner: CliRunner) -> None:
    result = runner.invoke(main, ["--version"])
    assert result.stdout == f"qkv {__version__}\n"
    for args in (["-h"], ["run", "-h"], ["report", "--help"], ["gradcheck", "-h"]):
        result = runner.invoke(main, args)
        assert result.exit_code == 0
        assert "Usage:" in result.stdout


def test_python_dash_m_runs_from_any_directory(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONWARNINGS": "error"}
    result = subprocess.run(
        [sys.executable, "-m", "qkvcli", "report", "--format", "trace"],
        cwd=tmp_path, capture_output=True, text=True, env=env, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == TRACE


def test_entry_keeps_exit_statuses_and_freezes_only_at_exit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    import gc

    from qkvcli.cli import GC_THRESHOLD, entry

    missing = tmp_path / "missing.json"
    monkeypatch.setattr(sys, "argv", ["qkv", "report", str(missing)])
    assert gc.get_freeze_count() == 0
    threshold = gc.get_threshold()
    try:
        with pytest.raises(SystemExit) as exit_info:
            entry()
        assert exit_info.value.code == 2
        assert gc.get_freeze_count() > 0  # the final collections are skipped
        assert gc.get_threshold()[0] == GC_THRESHOLD
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
    assert "missing.json" in capsys.readouterr().err


def test_console_script_and_dash_m_use_entry() -> None:
    import tomllib

    root = Path(__file__).resolve().parents[1]
    scripts = tomllib.loads((root / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"qkv": "qkvcli.cli:entry"}
    assert "entry()" in (root / "qkvcli" / "__main__.py").read_text()


def test_written_files_get_the_usual_mode(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "report.txt"
    old = os.umask(0o022)
    try:
        result = runner.invoke(main, ["report", "-o", str(out)])
    finally:
        os.umask(old)
    assert result.exit_code == 0
    assert out.stat().st_mode & 0o777 == 0o644
