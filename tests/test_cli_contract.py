"""Issue 18: one contract for every command (ARCHITECTURE.md, "The command contract").

One test per point of the contract, each parametrised over every command it applies to.
Device nodes are made inside ``tmp_path`` (never the system's own ``/dev`` files).
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from qkvcli.cli import main
from tests.conftest import CHAPTER_FIXTURE

ROOT = Path(__file__).resolve().parent.parent
NUMPY = str(ROOT / "examples" / "implementations" / "numpy_qkv.py")
VIEW_COMMANDS = ["run", "report", "gradcheck", "attend", "variance", "check"]


def invoke(args: list[str], cwd: Path | None = None, stdin: str | None = None) -> Result:
    """Run ``qkv ARGS`` in-process (in ``cwd`` when given)."""
    runner = CliRunner()
    if cwd is None:
        return runner.invoke(main, args, input=stdin)
    old = os.getcwd()
    os.chdir(cwd)
    try:
        return runner.invoke(main, args, input=stdin)
    finally:
        os.chdir(old)


def command_args(command: str, fixture: str | None = None) -> list[str]:
    """The arguments that run ``command`` on ``fixture`` (its default without one)."""
    if command == "variance":
        return ["variance", "--max", "8", "--samples", "64"]
    if command == "check":
        return ["check", NUMPY, "--random", "0", *([fixture] if fixture else [])]
    return [command, *([fixture] if fixture else [])]


def one_error_line(result: Result, *parts: str) -> str:
    """Assert exit 2 and exactly one stderr line, ``Error: ...`` with every part."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    for part in parts:
        assert part in lines[0], (part, lines[0])
    assert "Traceback" not in result.output
    return lines[0]


# --- help and typos ---------------------------------------------------------------------


def test_bare_qkv_prints_help_on_stdout_and_exits_0() -> None:
    result = invoke([])
    assert result.exit_code == 0
    assert result.stdout.startswith("Usage: ") and "qkv run [FIXTURE]" in result.stdout
    assert result.stderr == ""


@pytest.mark.parametrize(("typo", "meant"), [
    ("chek", "check"), ("reprot", "report"), ("atend", "attend"), ("varience", "variance"),
    ("gradchek", "gradcheck"), ("valdiate", "validate"), ("inspcet", "inspect"),
])
def test_a_mistyped_command_gets_a_suggestion(typo: str, meant: str) -> None:
    result = invoke([typo])
    assert result.exit_code == 2
    assert result.stderr.endswith(f"Error: No such command '{typo}'. Did you mean '{meant}'?\n")


def test_a_command_like_nothing_gets_no_suggestion() -> None:
    result = invoke(["zzzzzz"])
    assert result.exit_code == 2
    assert result.stderr.endswith("Error: No such command 'zzzzzz'.\n")


# --- standard input ---------------------------------------------------------------------


@pytest.mark.parametrize("args", [
    ["validate", "-"], ["attend", "-"], ["run", "-"], ["report", "-"], ["gradcheck", "-"],
    ["quiz", "-"], ["check", NUMPY, "-"],
], ids=["validate", "attend", "run", "report", "gradcheck", "quiz", "check"])
def test_standard_input_is_called_stdin(args: list[str]) -> None:
    result = invoke(args, stdin="{")
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("Error: <stdin>: "), result.stderr
    assert "Error: -:" not in result.stderr


def test_quiz_answers_from_stdin_are_called_stdin() -> None:
    result = invoke(["quiz", "--answers", "-"], stdin="[1, 2]")
    assert "<stdin> answers 2 of 9 questions" in result.stderr


# --- the same view options ----------------------------------------------------------------


@pytest.mark.parametrize("command", VIEW_COMMANDS)
def test_auto_is_the_default_format_and_is_text_off_a_terminal(command: str) -> None:
    default = invoke(command_args(command))
    auto = invoke([*command_args(command), "-f", "auto"])
    text = invoke([*command_args(command), "-f", "text"])
    assert default.exit_code == auto.exit_code == text.exit_code == 0, default.output
    assert default.stdout == auto.stdout == text.stdout != ""


@pytest.mark.parametrize("fmt", ["text", "json", "rich"])
@pytest.mark.parametrize("command", VIEW_COMMANDS)
def test_exports_work_with_any_format(command: str, fmt: str, tmp_path: Path) -> None:
    svg, html = tmp_path / "view.svg", tmp_path / "view.html"
    result = invoke([*command_args(command), "-f", fmt, "--export-svg", str(svg),
                     "--export-html", str(html)])
    assert result.exit_code == 0, result.output
    assert svg.read_text(encoding="utf-8").startswith("<svg")
    assert f"<title>qkv {command}</title>" in html.read_text(encoding="utf-8")
    if fmt == "json":
        json.loads(result.stdout)


@pytest.mark.parametrize("command", VIEW_COMMANDS)
def test_width_with_a_text_view_is_refused_with_one_warning(command: str) -> None:
    plain = invoke([*command_args(command), "-f", "text"])
    result = invoke([*command_args(command), "-f", "text", "--width", "90"])
    assert result.exit_code == 0
    assert result.stdout == plain.stdout
    assert result.stderr == ("qkv: warning: --width applies to the rich view (-f rich, "
                             "--export-svg, --export-html); ignored with -f text\n")


@pytest.mark.parametrize("command", VIEW_COMMANDS)
def test_precision_is_honoured_or_refused_with_one_warning(command: str) -> None:
    args = [*command_args(command), "-f", "rich", "--width", "160"]
    base, three = invoke(args), invoke([*args, "--precision", "3"])
    assert base.exit_code == three.exit_code == 0, three.output
    warnings = [line for line in three.stderr.splitlines() if "--precision" in line]
    if command == "check":
        assert three.stdout == base.stdout
        assert len(warnings) == 1
        assert warnings[0].startswith(f"qkv: warning: --precision does not apply to qkv {command} (")
    else:
        assert three.stdout != base.stdout and warnings == []
        assert re.search(r"\b\d+\.\d{3}\b", three.stdout)


def test_variance_full_is_refused_with_one_warning() -> None:
    result = invoke([*command_args("variance"), "--full"])
    assert result.exit_code == 0
    assert result.stderr == ("qkv: warning: --full does not apply to qkv variance "
                             "(its table elides nothing)\n")


def test_full_means_every_tensor_value_in_the_text_report(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    assert invoke(["init", "--generate", "--tokens", "80", "--d-model", "64", "--d-head", "2",
                   "-o", str(big)]).exit_code == 0
    summary = invoke(["report", str(big), "-f", "text", "--samples", "1"])
    full = invoke(["report", str(big), "-f", "text", "--samples", "1", "--full"])
    assert summary.exit_code == full.exit_code == 0
    assert "sha256" in summary.stdout and len(full.stdout) > len(summary.stdout)
    assert full.stderr == ""  # honoured, so no warning


@pytest.mark.parametrize("command", ["run", "report", "gradcheck", "attend", "variance"])
def test_no_color_is_honoured_everywhere(command: str) -> None:
    result = invoke([*command_args(command), "-f", "rich", "--no-color"])
    assert result.exit_code == 0 and "\x1b[" not in result.stdout
    assert "warning" not in result.stderr


# --- -o ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [
    ["run"], ["report"], ["gradcheck"], ["attend"], ["variance", "--max", "8"],
    ["check", NUMPY, "--random", "0"], ["init"], ["run", str(CHAPTER_FIXTURE), "--jobs", "1",
                                                  "--junit", "JUNIT"],
], ids=["run", "report", "gradcheck", "attend", "variance", "check", "init", "batch"])
def test_every_written_file_is_confirmed_by_one_line(args: list[str], tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    junit = tmp_path / "junit.xml"
    args = [str(junit) if arg == "JUNIT" else arg for arg in args]
    result = invoke([*args, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    expected = [f"qkv: wrote {out}"] + ([f"qkv: wrote {junit}"] if "--junit" in args else [])
    assert result.stderr.splitlines() == expected
    assert out.read_text(encoding="utf-8")


# --- writing --------------------------------------------------------------------------------

WRITERS = [["report"], ["run"], ["gradcheck"], ["attend"], ["variance", "--max", "8"],
           ["check", NUMPY, "--random", "0"]]
WRITER_IDS = ["report", "run", "gradcheck", "attend", "variance", "check"]


@pytest.mark.parametrize("option", ["-o", "--export-svg"])
@pytest.mark.parametrize("args", WRITERS, ids=WRITER_IDS)
def test_a_fifo_with_a_reader_is_written_through(args: list[str], option: str,
                                                 tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    # A reader first (a non-blocking open of the read end needs no writer), and a writer
    # of our own, so the reader sees the end only when we close ours after qkv is done.
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    keeper = os.open(fifo, os.O_WRONLY)
    os.set_blocking(reader, True)
    got: list[bytes] = []

    def drain() -> None:
        with os.fdopen(reader, "rb") as handle:
            got.append(handle.read())

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    try:
        result = invoke([*args, "-f", "text", option, str(fifo)])
    finally:
        os.close(keeper)
    thread.join(30)
    assert result.exit_code == 0, result.output
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still the FIFO, not a file
    assert got and got[0]
    assert os.listdir(tmp_path) == ["pipe"]  # no temporary file


@pytest.mark.parametrize("args", WRITERS, ids=WRITER_IDS)
def test_a_fifo_without_a_reader_is_refused_not_replaced(args: list[str], tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    result = invoke([*args, "-f", "text", "-o", str(fifo)])
    one_error_line(result, str(fifo), "FIFO with no reader")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert os.listdir(tmp_path) == ["pipe"]


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a device needs root")


@needs_root
@pytest.mark.parametrize("option", ["-o", "--export-html"])
@pytest.mark.parametrize("args", WRITERS, ids=WRITER_IDS)
def test_a_null_device_is_written_through(args: list[str], option: str, tmp_path: Path) -> None:
    null = tmp_path / "null"
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # what /dev/null is
    result = invoke([*args, "-f", "text", option, str(null)])
    assert result.exit_code == 0, result.output
    info = os.lstat(null)
    assert stat.S_ISCHR(info.st_mode) and info.st_rdev == os.makedev(1, 3)
    assert os.listdir(tmp_path) == ["null"]


@needs_root
@pytest.mark.parametrize("args", WRITERS, ids=WRITER_IDS)
def test_a_full_device_is_one_error_line_and_stays_a_device(args: list[str],
                                                            tmp_path: Path) -> None:
    full = tmp_path / "full"
    os.mknod(full, 0o666 | stat.S_IFCHR, os.makedev(1, 7))  # what /dev/full is
    result = invoke([*args, "-f", "text", "-o", str(full)])
    one_error_line(result, str(full), "No space left on device")
    assert stat.S_ISCHR(os.lstat(full).st_mode)


def test_a_descriptor_link_is_written_through_not_replaced(tmp_path: Path) -> None:
    link = tmp_path / "stdout"
    link.symlink_to("/proc/self/fd/1")  # as /dev/stdout is, but ours to lose
    done = subprocess.run([sys.executable, "-m", "qkvcli", "report", "-f", "text", "-o",
                           str(link)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == invoke(["report", "-f", "text"]).stdout
    assert link.is_symlink() and os.readlink(link) == "/proc/self/fd/1"
    assert os.listdir(tmp_path) == ["stdout"]


def test_a_symlink_to_a_file_keeps_the_link_and_replaces_the_target(tmp_path: Path) -> None:
    target = tmp_path / "target.txt"
    target.write_text("old\n")
    link = tmp_path / "link.txt"
    link.symlink_to(target.name)
    result = invoke(["report", "-f", "text", "-o", str(link)])
    assert result.exit_code == 0
    assert link.is_symlink() and target.read_text().startswith("chapter=")


def write_fixture(path: Path) -> Path:
    path.write_text(CHAPTER_FIXTURE.read_text(encoding="utf-8"), encoding="utf-8")
    return path


@pytest.mark.parametrize("spelling", ["same", "symlink", "hardlink"])
@pytest.mark.parametrize("option", ["-o", "--export-svg"])
@pytest.mark.parametrize("command", ["run", "report", "gradcheck", "attend", "check"])
def test_an_output_never_names_a_file_the_command_reads(command: str, option: str,
                                                        spelling: str, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    fixture = write_fixture(tmp_path / "f.json")
    before = fixture.read_bytes()
    out = fixture
    if spelling == "symlink":
        out = tmp_path / "link.json"
        out.symlink_to(fixture.name)
    elif spelling == "hardlink":
        out = tmp_path / "hard.json"
        os.link(fixture, out)
    import qkvcli.cli.evidence

    monkeypatch.setattr(qkvcli.cli.evidence, "build_evidence", _no_work)
    result = invoke([*command_args(command, str(fixture)), option, str(out)])
    one_error_line(result, str(out), "refusing to overwrite a file this command reads")
    assert fixture.read_bytes() == before


def _no_work(*args: Any) -> Any:
    raise AssertionError("the output should have been refused before any work")


def test_check_never_writes_over_its_implementation(tmp_path: Path) -> None:
    impl = tmp_path / "mine.py"
    impl.write_text(Path(NUMPY).read_text(encoding="utf-8"), encoding="utf-8")
    before = impl.read_bytes()
    for option in ("-o", "--junit", "--export-html"):
        result = invoke(["check", str(impl), "--random", "0", option, str(impl)])
        one_error_line(result, "refusing to overwrite a file this command reads")
        assert impl.read_bytes() == before


@pytest.mark.parametrize("args", WRITERS, ids=WRITER_IDS)
def test_a_failed_write_leaves_the_old_file_and_no_temporary(args: list[str], tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             ) -> None:
    out = tmp_path / "out.txt"
    out.write_text("old\n")

    def fails(src: Any, dst: Any) -> None:
        raise OSError(28, "No space left on device")

    import qkvcli.cli.io

    monkeypatch.setattr(qkvcli.cli.io.os, "replace", fails)
    result = invoke([*args, "-f", "text", "-o", str(out)])
    one_error_line(result, str(out), "cannot write (No space left on device)")
    assert out.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["out.txt"]


# --- Ctrl-C and broken pipes ------------------------------------------------------------------

INTERRUPTIBLE = [
    (["run"], "qkvcli.cli.evidence.build_evidence"),
    (["report"], "qkvcli.cli.evidence.build_evidence"),
    (["run", str(CHAPTER_FIXTURE), str(CHAPTER_FIXTURE)], "qkvcli.check.chapter26.build_evidence"),
    (["gradcheck"], "qkvcli.cli.gradcheck.gradcheck_projections"),
    (["attend"], "qkvcli.check.attend.build_attend_evidence"),
    (["variance"], "qkvcli.learn.variance.dot_variance"),
    (["quiz"], "qkvcli.learn.quiz.build_questions"),
    (["check", NUMPY], "qkvcli.check.run.run_checks"),
    (["validate", str(CHAPTER_FIXTURE)], "qkvcli.cli.validate.fixture_problems_of"),
    (["init"], "qkvcli.authoring.starter.starter_fixture"),
    (["inspect", str(CHAPTER_FIXTURE)], "qkvcli.cli.inspect.read_entries"),
    (["schema"], "importlib.resources.files"),
]


@pytest.mark.parametrize(("args", "target"), INTERRUPTIBLE,
                         ids=[" ".join(a[:1]) + ("-batch" if len(a) == 3 else "")
                              for a, _ in INTERRUPTIBLE])
def test_ctrl_c_says_interrupted_and_exits_130(args: list[str], target: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupt(*_: Any, **__: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(target, interrupt)
    result = invoke(args)
    assert result.exit_code == 130, (result.exit_code, result.output)
    assert result.stderr.splitlines()[-1] == "qkv: interrupted"
    assert "Aborted!" not in result.output and "Traceback" not in result.output


def test_a_real_sigint_at_the_quiz_prompt_exits_130() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "qkvcli", "quiz"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    while not proc.stdout.readline().startswith("Question 1/"):
        pass  # the first question is out: the prompt waits
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert err.splitlines()[-1] == "qkv: interrupted"
    assert "score=0/9" in out  # the score so far is still shown


def test_end_of_input_in_the_quiz_is_not_an_interrupt() -> None:
    result = invoke(["quiz"], stdin="")
    assert result.exit_code == 1 and "interrupted" not in result.stderr


def test_a_broken_pipe_is_quiet(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    assert invoke(["init", "--generate", "--tokens", "2000", "--d-model", "64",
                   "--d-head", "8", "-o", str(big)]).exit_code == 0
    proc = subprocess.Popen([sys.executable, "-m", "qkvcli", "report", str(big), "-f", "text",
                             "--tensors", "full", "--samples", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(100)
    proc.stdout.close()  # the reader goes away, as `| head` does
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0
    assert err == b""


# --- layer fixtures -------------------------------------------------------------------------


@pytest.mark.parametrize("stdin", [False, True], ids=["file", "stdin"])
@pytest.mark.parametrize("command", ["run", "report", "gradcheck", "quiz"])
def test_a_layer_fixture_points_at_attend(command: str, stdin: bool, tmp_path: Path) -> None:
    data = json.loads(CHAPTER_FIXTURE.read_text(encoding="utf-8"))
    data["heads"] = 2
    text = json.dumps(data)
    path = tmp_path / "layer.json"
    path.write_text(text, encoding="utf-8")
    result = invoke([command, "-" if stdin else str(path)], stdin=text if stdin else None)
    name = "<stdin>" if stdin else str(path)
    line = one_error_line(result, "run it with qkv attend")
    assert line == f"Error: {name}: $.heads: a multi-head layer fixture; run it with qkv attend"


# --- verdict wording, numbers and JSON --------------------------------------------------------

VERDICT = re.compile(r"^verdict: (PASS|FAIL) \((\d+) of (\d+) checks passed\)$")


def test_the_batch_summary_uses_the_verdict_wording(tmp_path: Path) -> None:
    write_fixture(tmp_path / "a.json")
    failing = json.loads(CHAPTER_FIXTURE.read_text(encoding="utf-8"))
    failing["expect"] = {"query": [[[9.0, 9.0], [9.0, 9.0]]]}
    (tmp_path / "b.json").write_text(json.dumps(failing), encoding="utf-8")
    passing = invoke(["run", "a.json", "a.json"], tmp_path)
    failed = invoke(["run", "a.json", "b.json"], tmp_path)
    assert VERDICT.match(passing.stdout.splitlines()[-1]).groups() == ("PASS", "16", "16")
    assert VERDICT.match(failed.stdout.splitlines()[-1]).groups()[0] == "FAIL"


@pytest.mark.parametrize("args", [
    ["report", "-f", "json"], ["run", "-f", "json"], ["gradcheck", "-f", "json"],
    ["attend", "-f", "json"], ["variance", "--max", "8", "-f", "json"],
    ["check", NUMPY, "--random", "0", "-f", "json"],
], ids=["report", "run", "gradcheck", "attend", "variance", "check"])
def test_every_json_output_carries_qkv_version(args: list[str]) -> None:
    from qkvcli import __version__

    result = invoke(args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["qkv_version"] == __version__


FULL_DEVICE_COMMANDS = [
    ["report"], ["report", "-f", "json"], ["report", "-f", "rich"], ["run", "-f", "text"],
    ["gradcheck"], ["attend"], ["variance"], ["schema"],
    ["check", str(ROOT / "examples" / "implementations" / "numpy_qkv.py"), "--random", "0"],
]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
@pytest.mark.parametrize("args", FULL_DEVICE_COMMANDS, ids=lambda a: " ".join(a[:3]))
def test_a_full_standard_output_is_one_line_and_exit_2(args: list[str]) -> None:
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "qkvcli", *args], stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == "Error: standard output: cannot write (No space left on device)\n"


@pytest.mark.parametrize(("args", "expected"), [
    ([], False), (["--help"], False), (["run", "-h"], False), (["--version"], False),
    (["report", "--format", "text"], True), (["run", "f.json"], True), (["check", "x.py"], True),
])
def test_the_program_imports_numpy_first_only_when_a_command_computes(
    args: list[str], expected: bool,
) -> None:
    from qkvcli.cli import computes

    assert computes(args) is expected
