"""``qkv run`` with several fixtures, a directory, ``--junit`` and ``--expect GOLDEN``."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from qkvcli.cli import main
from qkvcli.cli.batch import run_one
from qkvcli.reading.load import bundled_fixture_text

GOOD = json.loads(bundled_fixture_text())
FAILING = {**GOOD, "expect": {"loss": 99.0}}  # the chapter's loss is -2.0
CHECKS = ["forward", "reverse", "shapes", "errors", "initialization", "independence", "replay",
          "gradcheck"]


def invoke(args: list[str], cwd: Path) -> Any:
    old = os.getcwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(main, args)
    finally:
        os.chdir(old)


@pytest.fixture
def three(tmp_path: Path) -> Path:
    (tmp_path / "a.json").write_text(json.dumps(GOOD))
    (tmp_path / "b.json").write_text(json.dumps(FAILING))
    (tmp_path / "c.json").write_text('{"input": []}')
    return tmp_path


def test_several_fixtures_print_a_summary_and_exit_with_the_worst(three: Path) -> None:
    result = invoke(["run", "a.json", "b.json", "c.json"], three)
    assert result.exit_code == 2
    assert result.stdout == (
        "fixture  checks  result\n"
        "a.json   8/8     passed\n"
        "b.json   8/9     FAILED: expect\n"
        'c.json   -       ERROR: $: missing key "weights"\n'
        "3 fixtures: 1 passed, 1 failed, 1 bad input\n"
        "verdict: FAIL (1 of 3 fixtures could not be read; 16 of 17 checks passed)\n"
    )
    # The row in the table, and the error that makes the exit status 2 on stderr (issue 44).
    assert result.stderr == 'Error: c.json: $: missing key "weights"\n'


def test_a_failed_check_without_bad_input_exits_1(three: Path) -> None:
    result = invoke(["run", "a.json", "b.json"], three)
    assert result.exit_code == 1
    assert result.stderr == ""
    assert result.stdout.splitlines()[-2] == "2 fixtures: 1 passed, 1 failed, 0 bad input"


def test_all_passing_exits_0(three: Path) -> None:
    result = invoke(["run", "a.json", "a.json"], three)
    assert result.exit_code == 0
    assert result.stdout.splitlines()[-2] == "2 fixtures: 2 passed, 0 failed, 0 bad input"


def test_a_directory_means_its_json_fixtures_in_name_order(three: Path) -> None:
    (three / "notes.txt").write_text("ignored")
    (three / "sub.json").mkdir()  # a directory named like a fixture is not one
    result = invoke(["run", "."], three)
    assert result.exit_code == 2
    rows = [line.split()[0] for line in result.stdout.splitlines()[1:-2]]
    assert rows == ["a.json", "b.json", "c.json"]


def test_a_directory_with_one_fixture_still_gives_the_summary(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "only.json").write_text(json.dumps(GOOD))
    result = invoke(["run", "d"], tmp_path)
    assert result.exit_code == 0
    assert result.stdout.splitlines()[-2] == "1 fixture: 1 passed, 0 failed, 0 bad input"


def test_junit_report(three: Path) -> None:
    result = invoke(["run", "a.json", "b.json", "c.json", "--junit", "report.xml"], three)
    assert result.exit_code == 2
    root = ET.parse(three / "report.xml").getroot()
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("18", "1", "1")
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["a.json", "b.json", "c.json"]
    # JUnit names each check as the JSON publishes it (run's errors: rejected-inputs).
    published = ["rejected-inputs" if name == "errors" else name for name in CHECKS]
    assert [c.get("name") for c in suites[0].findall("testcase")] == published
    assert [c.get("name") for c in suites[1].findall("testcase")] == [*published, "expect"]
    failure = suites[1].find("testcase[@name='expect']/failure")
    assert failure is not None
    assert failure.get("message") == (
        "1 of 1 quantity differs: loss: expected 99.0, got -2.0 (tolerance 0.0)"
    )
    error = suites[2].find("testcase[@name='load']/error")
    assert error is not None and error.get("message") == '$: missing key "weights"'
    assert sorted(p.name for p in three.iterdir()) == ["a.json", "b.json", "c.json", "report.xml"]


def test_junit_with_one_fixture(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps(GOOD))
    result = invoke(["run", "a.json", "--junit", "r.xml"], tmp_path)
    assert result.exit_code == 0
    root = ET.parse(tmp_path / "r.xml").getroot()
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("8", "0", "0")


@pytest.mark.parametrize("fmt", ["json", "rich"])
@pytest.mark.parametrize("args", [["a.json", "b.json"], ["."], ["a.json", "--junit", "r.xml"]])
def test_batch_refuses_a_format_it_cannot_show(tmp_path: Path, args: list[str], fmt: str) -> None:
    """A batch shows one summary table: -f json or rich is refused before any fixture runs
    (it printed the text table under -f json), and nothing is written."""
    (tmp_path / "a.json").write_text(json.dumps(GOOD))
    (tmp_path / "b.json").write_text(json.dumps(GOOD))
    result = invoke(["run", *args, "-f", fmt], tmp_path)
    assert result.exit_code == 2
    assert f"-f {fmt} shows one fixture's report" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json"]


def test_junit_without_fixtures_runs_the_bundled_one(tmp_path: Path) -> None:
    result = invoke(["run", "--junit", "r.xml"], tmp_path)
    assert result.exit_code == 0
    assert result.stdout.splitlines()[1].split() == [
        "<bundled", "ch26-qkv-projections.json>", "8/8", "passed"
    ]
    suite = ET.parse(tmp_path / "r.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("name") == "<bundled ch26-qkv-projections.json>"


def test_junit_refuses_to_overwrite_a_fixture(three: Path) -> None:
    before = (three / "a.json").read_text()
    result = invoke(["run", "a.json", "b.json", "--junit", "a.json"], three)
    assert result.exit_code == 2
    assert result.stderr == "Error: --junit a.json: refusing to overwrite a file this command reads\n"
    assert (three / "a.json").read_text() == before


@pytest.mark.parametrize(
    "fixtures", [["a.json", "b.json"], ["."]], ids=["several", "directory"]
)
def test_expect_with_several_fixtures_is_a_usage_error(three: Path, fixtures: list[str]) -> None:
    result = invoke(["run", *fixtures, "--expect", "g.txt"], three)
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1] == (
        "Error: --expect takes a single fixture file, not several fixtures, a directory, "
        "or --junit"
    )
    assert result.stdout == ""


def test_output_saves_the_summary_of_several_fixtures(three: Path) -> None:
    printed = invoke(["run", "a.json", "b.json", "c.json"], three)
    result = invoke(["run", "a.json", "b.json", "c.json", "-o", "summary.txt"], three)
    assert result.exit_code == 2  # the worst status, as without -o
    assert result.stdout == ""
    assert (three / "summary.txt").read_text() == printed.stdout
    assert result.stderr.splitlines() == [
        'Error: c.json: $: missing key "weights"',
        "qkv: wrote summary.txt",
    ]
    assert [p.name for p in three.iterdir() if p.name.startswith(".")] == []  # no temp file left


def test_output_of_a_directory_run_with_junit_writes_both(three: Path) -> None:
    (three / "c.json").unlink()
    result = invoke(["run", ".", "-o", "out/summary.txt", "--junit", "out/junit.xml"], three)
    assert result.exit_code == 2  # out/ does not exist: refused before any fixture runs
    assert result.stderr == "Error: -o/--output out/summary.txt: no such directory out\n"
    assert result.stdout == ""
    (three / "out").mkdir()
    result = invoke(["run", ".", "-o", "out/summary.txt", "--junit", "out/junit.xml"], three)
    assert result.exit_code == 1
    assert (three / "out" / "summary.txt").read_text().endswith(
        "2 fixtures: 1 passed, 1 failed, 0 bad input\nverdict: FAIL (16 of 17 checks passed)\n")
    ET.parse(three / "out" / "junit.xml")


def test_output_never_overwrites_a_fixture_or_the_junit_file(three: Path) -> None:
    before = (three / "a.json").read_text()
    result = invoke(["run", "a.json", "b.json", "-o", "a.json"], three)
    assert result.exit_code == 2
    assert result.stderr == "Error: -o/--output a.json: refusing to overwrite a file this command reads\n"
    assert (three / "a.json").read_text() == before
    result = invoke(["run", "a.json", "b.json", "-o", "x.txt", "--junit", "./x.txt"], three)
    assert result.exit_code == 2
    assert result.stderr == "Error: --junit x.txt: named twice as an output (also by -o/--output)\n"
    assert not (three / "x.txt").exists()


# --- golden files ------------------------------------------------------------------------


def test_expect_golden_match_prints_one_line_on_stderr(tmp_path: Path) -> None:
    report = invoke(["report"], tmp_path).stdout
    (tmp_path / "golden.txt").write_text(report)
    result = invoke(["run", "--expect", "golden.txt"], tmp_path)
    assert result.exit_code == 0
    assert result.stdout == ""
    assert result.stderr == "qkv: the report matches golden.txt\n"


def test_expect_golden_mismatch_prints_a_unified_diff(tmp_path: Path) -> None:
    report = invoke(["report"], tmp_path).stdout
    golden = report.replace("seed:26", "seed:27")
    (tmp_path / "golden.txt").write_text(golden)
    result = invoke(["run", "--expect", "golden.txt"], tmp_path)
    assert result.exit_code == 1
    assert result.stderr == "qkv: FAILED: the report differs from golden.txt\n"
    lines = result.stdout.splitlines()
    assert lines[:2] == ["--- golden.txt", "+++ actual"]
    assert "-initialization=seed:27 transactional:true independent:true" in lines
    assert "+initialization=seed:26 transactional:true independent:true" in lines


def test_expect_golden_in_another_format(tmp_path: Path) -> None:
    trace = invoke(["report", "-f", "trace"], tmp_path).stdout
    (tmp_path / "golden.txt").write_text(trace)
    assert invoke(["run", "-f", "trace", "--expect", "golden.txt"], tmp_path).exit_code == 0
    assert invoke(["run", "--expect", "golden.txt"], tmp_path).exit_code == 1


def test_expect_golden_with_output_writes_the_report_too(tmp_path: Path) -> None:
    (tmp_path / "golden.txt").write_text("old\n")
    result = invoke(["run", "--expect", "golden.txt", "-o", "new.txt"], tmp_path)
    assert result.exit_code == 1
    assert (tmp_path / "new.txt").read_text() == invoke(["report"], tmp_path).stdout


def test_expect_golden_missing_file_is_bad_input(tmp_path: Path) -> None:
    result = invoke(["run", "--expect", "nope.txt"], tmp_path)
    assert result.exit_code == 2
    assert result.stderr == "Error: nope.txt: no such file\n"


def test_expect_golden_not_utf8_is_bad_input(tmp_path: Path) -> None:
    (tmp_path / "golden.txt").write_bytes(b"\xff\n")
    result = invoke(["run", "--expect", "golden.txt"], tmp_path)
    assert result.exit_code == 2
    assert result.stderr == "Error: golden.txt: not UTF-8 text (byte 0)\n"


# --- the expect section through run --------------------------------------------------------


def test_expect_section_mismatch_fails_run_showing_expected_and_actual(tmp_path: Path) -> None:
    data = {**GOOD, "expect": {"query": [[[0, 3], [2, 1]]], "loss": -2.0}}
    (tmp_path / "f.json").write_text(json.dumps(data))
    result = invoke(["run", "f.json"], tmp_path)
    assert result.exit_code == 1
    assert result.stderr == (
        "qkv: FAILED: expect\n"
        "  expect: 1 of 2 quantities differs: query[0,1,1]: expected 1.0, got -1.0 "
        "(tolerance 0.0)\n"
    )
    # the report itself is still shown, unchanged by the expect section, and a failing
    # report ends with the failed check (issue 14: a saved report says why); the text
    # report is the course's format: no verdict line, passing or not (issue 33)
    assert result.stdout == invoke(["report"], tmp_path).stdout + (
        "failed=expect 1 of 2 quantities differs: query[0,1,1]: expected 1.0, got -1.0 "
        "(tolerance 0.0)\n"
    )


def test_expect_section_tolerance_admits_close_values(tmp_path: Path) -> None:
    data = {**GOOD, "expect": {"loss": -2.0000001, "tolerance": 1e-6}}
    (tmp_path / "f.json").write_text(json.dumps(data))
    assert invoke(["run", "f.json"], tmp_path).exit_code == 0
    data["expect"]["tolerance"] = 1e-9
    (tmp_path / "f.json").write_text(json.dumps(data))
    assert invoke(["run", "f.json"], tmp_path).exit_code == 1


def test_expect_check_is_last_in_json_output(tmp_path: Path) -> None:
    data = {**GOOD, "expect": {"loss": -2.0}}
    (tmp_path / "f.json").write_text(json.dumps(data))
    result = invoke(["run", "f.json", "-f", "json"], tmp_path)
    assert result.exit_code == 0
    checks = json.loads(result.stdout)["checks"]
    # the JSON's names (the names table), as JUnit's (above)
    assert [c["name"] for c in checks] == [
        "rejected-inputs" if name == "errors" else name for name in [*CHECKS, "expect"]]
    assert checks[-1]["detail"] == "1 quantity, 1 value as expected (tolerance 0.0)"


def test_batch_runs_honour_the_gradcheck_mode(tmp_path: Path) -> None:
    from tests.conftest import CHAPTER_FIXTURE as CHAPTER

    junit = tmp_path / "report.xml"
    result = CliRunner().invoke(
        main, ["run", str(CHAPTER), str(CHAPTER), "--mode", "fast", "--junit", str(junit)]
    )
    assert result.exit_code == 0, result.output
    text = junit.read_text()
    assert "fast" in text and "directions" in text


# --- --jobs: a worker that dies ---------------------------------------------------------

def _dies_on_b(path: Any, *settings: Any) -> Any:
    """run_one, except that the worker running ``b.json`` is killed (as the OOM killer does)."""
    import signal

    if path is not None and path.name == "b.json":
        os.kill(os.getpid(), signal.SIGKILL)
    return run_one(path, *settings)


def test_a_killed_worker_is_a_failed_row_and_every_other_row_is_printed(
    three: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from qkvcli.cli import batch

    (three / "b.json").write_text(json.dumps(GOOD))
    (three / "c.json").write_text(json.dumps(FAILING))
    (three / "d.json").write_text(json.dumps(GOOD))
    monkeypatch.setattr(batch, "run_one", _dies_on_b)  # the workers are forked: they see it
    result = invoke(["run", "a.json", "b.json", "c.json", "d.json", "--jobs", "2"], three)
    died = ("its worker process was killed by SIGKILL before giving a result "
            "(out of memory?)")
    assert result.exit_code == 2, result.output
    assert result.stdout == (
        "fixture  checks  result\n"
        "a.json   8/8     passed\n"
        f"b.json   -       ERROR: {died}\n"
        "c.json   8/9     FAILED: expect\n"
        "d.json   8/8     passed\n"
        "4 fixtures: 2 passed, 1 failed, 1 bad input\n"
        "verdict: FAIL (1 of 4 fixtures could not be read; 24 of 25 checks passed)\n"
    )
    assert result.stderr == f"Error: b.json: {died}\n"  # the row, and its line on stderr


def test_a_killed_worker_is_its_own_fixtures_row_and_the_others_run(tmp_path: Path) -> None:
    """With one worker per fixture, the fixture whose worker is killed gets status 2 and
    the signal in its row; the fixtures before and after it pass."""
    from qkvcli.cli import batch
    from qkvcli.cli.options import CheckOverrides

    paths = []
    for name in ("a.json", "b.json", "c.json"):
        paths.append(tmp_path / name)
        paths[-1].write_text(json.dumps(GOOD))
    outcomes = list(batch.outcomes_of(paths, 3, 1 << 20, CheckOverrides(), work=_dies_on_b))
    assert [o.label for o in outcomes] == [str(p) for p in paths]
    assert [o.status for o in outcomes] == [0, 2, 0]
    assert outcomes[1].error is not None and "killed by SIGKILL" in outcomes[1].error


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_out_of_memory_in_one_fixture_is_its_row_and_the_batch_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: str,
) -> None:
    from qkvcli.check import chapter26 as build_module  # run_one imports it when it runs

    original = build_module.build_evidence

    def build(fixture: Any) -> Any:
        if fixture.chapter == "too-big":
            raise MemoryError
        return original(fixture)

    monkeypatch.setattr(build_module, "build_evidence", build)  # forked workers see it too
    chapter = json.loads(bundled_fixture_text())
    (tmp_path / "a.json").write_text(json.dumps({**chapter, "chapter": "too-big"}))
    (tmp_path / "b.json").write_text(json.dumps(chapter))
    result = invoke(["run", "a.json", "b.json", "--jobs", jobs], tmp_path)
    assert result.exit_code == 2, result.output
    assert "a.json   -       ERROR: out of memory: the input's tensors are too large" in result.stdout
    assert "b.json   8/8     passed" in result.stdout
    assert result.stderr.startswith("Error: a.json: out of memory: the input's tensors are too large")
    assert result.stderr.count("\n") == 1  # one line, as the row says it


def test_junit_names_a_chapter_check_as_its_json_does(tmp_path: Path) -> None:
    # A batch of chapter 28's fixture: each testcase is the published name (`prefix`,
    # `future-zero`), never the chapter's internal id (`prefix_invariance`, `masked_rows`).
    from qkvcli.reading.load import bundled_fixture_text

    bundled = tmp_path / "ch28.json"
    bundled.write_text(bundled_fixture_text("ch28-causal-masking.json"))
    result = invoke(["run", str(bundled), "--junit", "r.xml"], tmp_path)
    assert result.exit_code == 0, result.output
    names = [c.get("name") for c in ET.parse(tmp_path / "r.xml").getroot().iter("testcase")]
    document = json.loads(invoke(["run", str(bundled), "--format", "json"], tmp_path).stdout)
    assert names == [check["name"] for check in document["checks"]]
    assert "prefix" in names and "prefix_invariance" not in names


@pytest.mark.parametrize(("extra", "said"), [
    (["--junit", "out.xml"], "--chapter does not take --junit"),
    (["a.json", "b.json"], "--chapter takes one fixture; with several"),
])
def test_chapter_with_a_batch_says_which_option_made_it_a_batch(
        tmp_path: Path, extra: list[str], said: str) -> None:
    for name in ("a.json", "b.json"):
        (tmp_path / name).write_text(bundled_fixture_text(), encoding="utf-8")
    result = invoke(["run", "--chapter", "26", *extra], tmp_path)
    assert result.exit_code == 2 and said in result.output
    assert not (tmp_path / "out.xml").exists()
