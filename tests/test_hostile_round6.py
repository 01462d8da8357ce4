"""Hostile input, round 6: outputs compared as files (through links, ``..`` after a link,
hard links, the implementation's own source and every file the run writes), and every
process group a checked program makes ended with it."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from .hostile_helpers import invoke, refused
from .test_hostile_processes import REFERENCE, gone, pids
from .test_hostile_processes import reap as reap  # a fixture

OUT = "-o/--output"
"""How an error line names the ``-o`` option."""

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "implementations"
WRONG = str(EXAMPLES / "wrong_no_value_path.py")
CHAPTER = ROOT / "qkvcli" / "data" / "ch26-qkv-projections.json"
PYTHON = shlex.quote(sys.executable)


@pytest.fixture
def linked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``real/`` and ``lnk -> real`` in ``tmp_path``, the working directory; ``deep/in/up ->
    ../../real``, so ``deep/in/up/../x`` is ``real/../x``, beside ``real``, not in ``deep``."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "real").mkdir()
    (tmp_path / "lnk").symlink_to("real")
    (tmp_path / "deep" / "in").mkdir(parents=True)
    (tmp_path / "deep" / "in" / "up").symlink_to("../../real")
    return tmp_path


def nothing_written(tmp_path: Path) -> None:
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == []
    assert not (tmp_path / "x").exists()


SAME_FILE = [
    pytest.param(["run", "-o", "lnk/out", "--html", "real/out"], "--html real/out",
                 f"{OUT} lnk/out", id="run-o-html"),
    pytest.param(["run", "-f", "rich", "-o", "lnk/out", "--export-svg", "real/out"],
                 "--export-svg real/out", f"{OUT} lnk/out", id="run-o-export-svg"),
    pytest.param(["run", "-f", "rich", "--export-html", "real/out", "--export-svg", "lnk/./out"],
                 "--export-html real/out", "--export-svg lnk/out", id="export-svg-first-then-html"),
    pytest.param(["run", "--chapter", "27", "-o", "x", "--html", "deep/in/up/../x"],
                 "--html deep/in/up/../x", f"{OUT} x", id="dotdot-after-a-link"),
    pytest.param(["run", str(CHAPTER), str(CHAPTER), "-o", "lnk/s", "--junit", "real/s"],
                 "--junit real/s", f"{OUT} lnk/s", id="batch-summary-junit"),
    pytest.param(["attend", "-o", "real/a", "--html", "lnk/a"], "--html lnk/a", f"{OUT} real/a",
                 id="attend"),
    pytest.param(["gradcheck", "-o", "real/g", "--html", "lnk/g"], "--html lnk/g",
                 f"{OUT} real/g", id="gradcheck"),
    pytest.param(["check", str(EXAMPLES / "numpy_qkv.py"), "--random", "0", "-o", "real/c",
                  "--junit", "lnk/c"], "--junit lnk/c", f"{OUT} real/c", id="check-o-junit"),
]


@pytest.mark.parametrize(("args", "second", "first"), SAME_FILE)
def test_two_outputs_that_are_one_new_file_are_refused_before_any_work(
        linked: Path, args: list[str], second: str, first: str) -> None:
    result = invoke(*args)
    assert result.stderr == f"Error: {second}: named twice as an output (the same file as {first})\n"
    assert result.exit_code == 2
    nothing_written(linked)


def test_two_outputs_that_are_one_existing_file_through_a_link(linked: Path) -> None:
    (linked / "real" / "out").write_text("mine\n")
    result = invoke("run", "-o", "lnk/out", "--html", "real/out")
    refused(result, "--html real/out: named twice as an output (the same file as -o/--output lnk/out)")
    assert (linked / "real" / "out").read_text() == "mine\n"


def test_a_dangling_link_and_the_file_it_would_create_are_one_output(linked: Path) -> None:
    (linked / "dangling").symlink_to("real/new")
    result = invoke("run", "-o", "dangling", "--html", "real/new")
    refused(result, "--html real/new: named twice as an output (the same file as -o/--output "
                    "dangling)")
    assert not (linked / "real" / "new").exists()


def test_different_files_beside_a_link_are_both_written(linked: Path) -> None:
    result = invoke("run", "-o", "lnk/out", "--html", "real/page.html")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (linked / "real").iterdir()) == ["out", "page.html"]


# --- qkv init --npy: the fixture is never written over its own tensors ------------------


def test_init_npy_never_writes_the_fixture_over_one_of_its_tensors(linked: Path) -> None:
    result = invoke("init", "--npy", ".", "-o", "lnk/input.npy")
    assert result.exit_code == 2
    assert result.stderr == (f"Error: -o/--output lnk/input.npy: named twice as an output (the "
                             f"same file as {linked / 'real' / 'input.npy'})\n")
    assert list((linked / "real").iterdir()) == []


def test_init_npy_with_force_never_replaces_a_tensor_by_the_fixture(linked: Path) -> None:
    assert invoke("init", "--npy", "t", "-o", "real/f.json").exit_code == 0
    tensor = linked / "real" / "t" / "input.npy"
    before = tensor.read_bytes()
    result = invoke("init", "--npy", ".", "-o", "real/t/input.npy", "--force")
    refused(result, "real/t/input.npy: named twice as an output")
    assert tensor.read_bytes() == before


# --- the implementation's own source is an input -----------------------------------------


def test_a_command_programs_script_is_never_an_output(tmp_path: Path) -> None:
    program = tmp_path / "mine.py"
    shutil.copy(EXAMPLES / "command_qkv.py", program)
    before = program.read_bytes()
    for option in ("-o", "--html", "--junit"):
        result = invoke("check", "--command", f"{PYTHON} {shlex.quote(str(program))}",
                        "--random", "0", option, str(program))
        named = OUT if option == "-o" else option
        assert result.stderr == (f"Error: {named} {program}: refusing to overwrite a file this "
                                 "command reads\n")
        assert result.exit_code == 2
    assert program.read_bytes() == before


def test_a_command_program_itself_is_never_an_output(tmp_path: Path) -> None:
    program = tmp_path / "mine"
    program.write_text(f"#!/bin/sh\nexec {PYTHON} {shlex.quote(str(REFERENCE))}\n")
    program.chmod(0o755)
    linked = tmp_path / "hard"
    os.link(program, linked)
    result = invoke("check", "--command", str(program), "--random", "0", "-o", str(linked))
    refused(result, "refusing to overwrite a file this command reads")
    assert program.read_text().startswith("#!/bin/sh")


def test_a_module_given_by_name_is_never_an_output(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    shutil.copy(EXAMPLES / "numpy_qkv.py", tmp_path / "pkg" / "mine.py")
    os.link(tmp_path / "pkg" / "mine.py", tmp_path / "hard.py")
    before = (tmp_path / "pkg" / "mine.py").read_bytes()
    for target in ("pkg/mine.py", "hard.py"):
        result = invoke("check", "pkg.mine", "--random", "0", "--html", target)
        assert result.stderr == f"Error: --html {target}: refusing to overwrite a file this command reads\n"
        assert result.exit_code == 2
    result = invoke("check", "--command", f"{PYTHON} -m pkg.mine", "--random", "0", "-o",
                    "hard.py")
    refused(result, "hard.py: refusing to overwrite a file this command reads")
    assert (tmp_path / "pkg" / "mine.py").read_bytes() == before


# --- --save-failures: the names checked up front are the names written -------------------


def test_save_failures_names_are_the_ones_checked_before_any_work(tmp_path: Path) -> None:
    # The head's contrast case is not a projections case: a projections implementation
    # skips it, and the random case after it once took its number, 03 where 04 was checked.
    folder = tmp_path / "sf"
    folder.mkdir()
    result = invoke("check", WRONG, "--random", "1", "-f", "text", "--save-failures", str(folder))
    assert result.exit_code == 1, result.output
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["01-chapter.json", "01-chapter.requests.jsonl",
                     "02-precision-1-3-4-2.json", "02-precision-1-3-4-2.requests.jsonl",
                     "04-random-1-2-3-5-3.json", "04-random-1-2-3-5-3.requests.jsonl"]
    for name in names:
        report = folder / name
        report.write_text("my report\n")
        result = invoke("check", WRONG, "--random", "1", "-f", "text", "--save-failures",
                        str(folder), "-o", str(report))
        refused(result, f"{report}: named twice as an output (also by -o/--output)")
        assert report.read_text() == "my report\n"


# --- every process group of the program's session ends with qkv check -------------------


def test_a_grandchild_in_a_process_group_of_its_own_is_ended(tmp_path: Path, reap: Any) -> None:
    record = shlex.quote(str(tmp_path / "pids"))
    escape = shlex.quote("import os, time; os.setpgid(0, 0); time.sleep(300)")
    script = (f"{PYTHON} -c {escape} & echo $! > {record}; "
              f"exec {PYTHON} {shlex.quote(str(REFERENCE))}")
    result = invoke("check", "--command", f"sh -c {shlex.quote(script)}", "--random", "0",
                    "-f", "text")
    reap.extend(pids(tmp_path / "pids"))
    assert result.exit_code == 0, result.output
    assert os.getpgid(reap[0]) == reap[0] if not gone(reap[0], 0.0) else True
    assert gone(reap[0]), "a grandchild in its own process group outlived qkv check"


# --- bounds that protect memory, checked before the allocation ---------------------------


def _rope_fixture(tmp_path: Path, **rope: Any) -> Path:
    import json

    data = json.loads((ROOT / "qkvcli" / "data" / "ch29-rope.json").read_text())
    data["rope"].update(rope)
    path = tmp_path / "rope.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("features", [2 ** 32, 10 ** 30, 2 ** 27 + 2])
def test_a_rope_feature_width_over_the_limit_is_refused_before_any_table(
        tmp_path: Path, features: int) -> None:
    path = _rope_fixture(tmp_path, features=features)
    for command in ("run", "validate"):
        result = invoke(command, str(path))
        assert result.stderr == (f"Error: {path}: $.rope.features: {features} features, more than "
                                 "the limit 134217728 (raise it with --max-elements)\n"), command
        assert result.exit_code == 2
    result = invoke("run", str(path), "--max-elements", "1000")
    assert "more than the limit 1000 (raise it with --max-elements)" in result.stderr


@pytest.mark.parametrize("chapter", ["27", "28", "29", "30"])
def test_max_evaluations_caps_a_later_chapter_s_gradient_check(chapter: str) -> None:
    """--max-evaluations is a limit a chapter's check keeps, as chapter 26's does: over
    it, one error naming the chapter's bundled fixture and what to do, exit 2, no report;
    within it, the report as without it, and no warning."""
    from qkvcli.core.names import CHAPTER_IDS

    over = invoke("run", "--chapter", chapter, "--max-evaluations", "1", "-f", "text")
    line = refused(over, f"<bundled ch{CHAPTER_IDS[int(chapter)]}.json>: the gradient check "
                   "would", "more than the limit 1 (raise it with --max-evaluations, or check "
                   "less with --samples)")
    assert "--mode fast" not in line and over.stdout == ""
    within = invoke("run", "--chapter", chapter, "--max-evaluations", "100000", "-f", "text")
    plain = invoke("run", "--chapter", chapter, "-f", "text")
    assert within.exit_code == plain.exit_code == 0
    assert within.stdout == plain.stdout and within.stderr == ""
    checked = invoke("gradcheck", str(ROOT / "fixtures" / f"ch{CHAPTER_IDS[int(chapter)]}.json"),
                     "--max-evaluations", "1")
    refused(checked, "more than the limit 1")


# --- a batch: every error that makes the exit status 2 is one line on stderr -------------


@pytest.fixture
def bad_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import json

    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "b"
    folder.mkdir()
    shutil.copy(CHAPTER, folder / "a.json")
    (folder / "d.json").symlink_to("nowhere.json")
    os.mkfifo(folder / "f.json")
    data = json.loads(CHAPTER.read_text())
    (folder / "m.json").write_text(json.dumps({**data, "input": {"npy": "missing.npy"}}))
    (folder / "w.json").write_text(json.dumps({**data, "input": [[[1, 2]]]}))
    return folder


BATCH_ERRORS = [
    "Error: b/d.json: a symbolic link to nowhere.json, which does not exist",
    "Error: b/f.json: is a FIFO, not a fixture file",
    "Error: b/m.json: $.input.npy: no such file: missing.npy",
    "Error: b/w.json: $.input: Q/K/V input final width must equal model width 3, got 2",
]


@pytest.mark.parametrize("jobs", ["1", "2"])
@pytest.mark.parametrize("to_file", [False, True], ids=["stdout", "-o"])
def test_every_bad_fixture_of_a_batch_is_one_line_on_stderr(bad_batch: Path, jobs: str,
                                                            to_file: bool) -> None:
    result = invoke("run", "b", "-f", "text", "--jobs", jobs, *(["-o", "t.txt"] if to_file else []))
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert [line for line in lines if line.startswith("Error: ")] == BATCH_ERRORS
    assert lines == BATCH_ERRORS + (["qkv: wrote t.txt"] if to_file else [])
    table = (bad_batch.parent / "t.txt").read_text() if to_file else result.stdout
    rows = [line for line in table.splitlines() if "ERROR: " in line]
    assert [row.split()[0] for row in rows] == [line.split()[1].rstrip(":") for line in BATCH_ERRORS]


@pytest.mark.parametrize("chapter", ["29-rope", "30-multi-head-attention"])
@pytest.mark.parametrize("positions", [2 ** 53, 2 ** 53 + 1, 10 ** 30])
def test_a_rope_capacity_past_exact_positions_is_bad_input_not_a_failed_check(
        tmp_path: Path, chapter: str, positions: int) -> None:
    import json

    data = json.loads((ROOT / "qkvcli" / "data" / f"ch{chapter}.json").read_text())
    data["rope"]["positions"] = positions
    path = tmp_path / "rope.json"
    path.write_text(json.dumps(data))
    result = invoke("run", str(path), "-f", "text")
    assert result.stderr == (f"Error: {path}: $.rope.positions: {positions} positions, more than "
                             "2^53 - 1 (9007199254740991): the positions just past the table "
                             "must be exact in binary64\n")
    assert result.exit_code == 2
    data["rope"]["positions"] = 2 ** 53 - 1
    path.write_text(json.dumps(data))
    assert invoke("run", str(path), "-f", "text").exit_code == 0
