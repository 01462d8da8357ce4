"""``qkv check`` through CliRunner: exit statuses, the JSON document, files, and no tracebacks."""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from qkvcli import __version__
from qkvcli.cli import main
from qkvcli.cli.options import ViewSettings
from qkvcli.render.names import published
from tests.tolerant import text_differences

from .conftest import CHAPTER_FIXTURE

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "implementations"
NUMPY = str(EXAMPLES / "numpy_qkv.py")
FAKE = f"{shlex.quote(sys.executable)} {Path(__file__).resolve().parent / 'programs' / 'fake_qkv.py'}"
FAMILIES = ["forward", "reverse", "shapes", "errors", "independence", "replay", "purity",
            "gradcheck"]


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def test_a_correct_implementation_exits_0_with_a_verdict(runner: CliRunner) -> None:
    result = runner.invoke(main, ["check", NUMPY, "--format", "text"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"implementation={NUMPY}"
    assert [line.split()[0] for line in lines[2:10]] == FAMILIES
    assert lines[-1] == "verdict: PASS (8 of 8 checks passed)"
    assert result.stderr == ""


def test_json_document_shape(runner: CliRunner) -> None:
    result = runner.invoke(main, ["check", str(EXAMPLES / "wrong_no_value_path.py"), "-f", "json",
                                  str(CHAPTER_FIXTURE), "--random", "0"])
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert list(document) == ["qkv_version", "schema_version", "report", "implementation",
                              "fixtures", "passed", "checks", "failures", "slips", "worst"]
    assert (document["schema_version"], document["report"]) == (2, "check")
    assert document["qkv_version"] == __version__
    assert document["passed"] is False
    assert [c["name"] for c in document["checks"]] == FAMILIES
    assert all(list(c) == ["name", "family", "operation", "passed", "outcome", "detail"]
               for c in document["checks"])
    assert all(c["outcome"] in ("passed", "failed") for c in document["checks"])
    reverse = [f for f in document["failures"] if f["check"] == "reverse"]
    assert reverse[0] == {
        "check": "reverse", "family": "reverse", "fixture": "chapter", "coordinate": "grad_input[0,0,0]",
        "detail": "grad_input misses the value path: grad_input[0,0,0] = 0.0, expected 3.0 "
                  "(scaled error 1 > 1e-09)",
        "slips": ["grad_input misses the value path"],
        "compared": {"against": "engine", "tensor": "grad_input", "coordinate": [0, 0, 0],
                     "actual": 0.0, "expected": 3.0, "scaled_error": 1.0, "tolerance": 1e-09},
    }
    assert document["slips"] == [{"slip": "grad_input misses the value path",
                                  "checks": ["reverse"]}]
    assert reverse[1]["fixture"] == str(CHAPTER_FIXTURE)
    assert "qkv: FAILED: reverse, gradcheck" in result.stderr


def test_command_with_protocol_family(runner: CliRunner) -> None:
    command = f"{shlex.quote(sys.executable)} {EXAMPLES / 'command_qkv.py'}"
    result = runner.invoke(main, ["check", "--command", command, "--random", "4", "-f", "json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert [c["name"] for c in document["checks"]] == [*FAMILIES, "protocol"]
    assert document["stderr"] == ""


def test_purity_is_not_applicable_to_a_command_in_every_view(runner: CliRunner) -> None:
    command = f"{shlex.quote(sys.executable)} {EXAMPLES / 'command_qkv.py'}"
    detail = "not applicable: a --command program cannot change qkv's arrays"
    base = ["check", "--command", command, "--random", "0"]
    document = json.loads(runner.invoke(main, [*base, "-f", "json"]).stdout)
    purity = next(c for c in document["checks"] if c["name"] == "purity")
    assert purity == {"name": "purity", "family": "purity", "operation": "projections",
                      "passed": True, "outcome": "command", "detail": detail}
    assert all(c["outcome"] == "passed" for c in document["checks"] if c["name"] != "purity")
    text = runner.invoke(main, [*base, "-f", "text"]).stdout
    assert f"purity        N/A   {detail}" in text.splitlines()
    assert text.endswith("verdict: PASS (8 of 8 checks passed)\n")
    rich = runner.invoke(main, [*base, "-f", "rich"], env={"COLUMNS": "100"}).stdout
    assert "purity  N/A" in rich and "verdict: PASS (8 of 8 checks passed)" in rich


def test_without_backward_the_json_says_not_applicable_and_failed(
    runner: CliRunner, tmp_path: Path,
) -> None:
    forward_only = tmp_path / "forward_only.py"
    forward_only.write_text(f"import sys\nsys.path.insert(0, {str(EXAMPLES)!r})\n"
                            "from numpy_qkv import forward  # noqa: F401\n")
    result = runner.invoke(main, ["check", str(forward_only), "--random", "0", "-f", "json"])
    assert result.exit_code == 1
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    for family in ("reverse", "gradcheck"):
        assert checks[family] == {"name": family, "family": family, "operation": "projections",
                                  "passed": False, "outcome": "no-backward",
                                  "detail": "not applicable: no backward"}
    assert "qkv: FAILED: reverse, gradcheck" in result.stderr


@pytest.mark.parametrize("mode", ["crash", "sleep", "garbage"])
def test_a_broken_program_exits_1_without_a_traceback(runner: CliRunner, mode: str) -> None:
    result = runner.invoke(main, ["check", "--command", f"{FAKE} {mode}", "--timeout", "0.3",
                                  "--random", "0", "-f", "text"])
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    protocol = [line for line in result.stdout.splitlines() if line.startswith("protocol ")]
    assert protocol and "FAIL" in protocol[0]
    if mode == "crash":
        assert "qkv: the program's stderr:\nfake_qkv: segmentation fault" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["check"], "give IMPL"),
        (["check", "missing.py"], "Error: implementation missing.py: no such file"),
        (["check", "--command", "/nonexistent/qkv"], 'Error: command "/nonexistent/qkv" cannot'),
        (["check", NUMPY, "missing.json"], "Error: missing.json: no such file"),
        (["check", NUMPY, "--tolerance", "nan"], "must be a finite number"),
        (["check", NUMPY, "--timeout", "0"], "greater than zero"),
    ],
    ids=["nothing", "missing-impl", "missing-program", "missing-fixture", "tolerance", "timeout"],
)
def test_usage_and_load_errors_exit_2(runner: CliRunner, args: list[str], message: str) -> None:
    result = runner.invoke(main, args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert "Traceback" not in result.output


def test_junit_reports_a_not_applicable_family_as_skipped(
    runner: CliRunner, tmp_path: Path,
) -> None:
    import xml.etree.ElementTree as ET

    command = f"{shlex.quote(sys.executable)} {EXAMPLES / 'command_qkv.py'}"
    junit = tmp_path / "junit.xml"
    result = runner.invoke(main, ["check", "--command", command, "--random", "0",
                                  "--junit", str(junit)])
    assert result.exit_code == 0, result.output
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    cases = {case.get("name"): case for case in suite.iter("testcase")}
    purity = cases["purity"]
    assert purity.find("skipped") is not None and purity.find("system-out") is None
    assert suite.get("skipped") == "1" and suite.get("failures") == "0"
    assert all(case.find("skipped") is None for name, case in cases.items() if name != "purity")


def test_output_file_and_junit(runner: CliRunner, tmp_path: Path) -> None:
    out, junit = tmp_path / "report.txt", tmp_path / "junit.xml"
    result = runner.invoke(main, ["check", NUMPY, "-o", str(out), "--junit", str(junit),
                                  "--random", "1"])
    assert result.exit_code == 0
    assert result.stdout == ""
    assert out.read_text().endswith("verdict: PASS (8 of 8 checks passed)\n")
    xml = junit.read_text()
    assert 'tests="8"' in xml and 'failures="0"' in xml and 'name="gradcheck"' in xml


def test_rich_cards(runner: CliRunner) -> None:
    result = runner.invoke(main, ["check", str(EXAMPLES / "wrong_accepts_rank2.py"), "-f",
                                  "rich"], env={"COLUMNS": "100"})
    assert result.exit_code == 1
    assert "errors  FAIL" in result.stdout
    assert "forward  PASS" in result.stdout
    assert "verdict: FAIL (7 of 8 checks passed)" in result.stdout


def test_help_lists_check(runner: CliRunner) -> None:
    assert "qkv check IMPL" in runner.invoke(main, ["--help"]).stdout
    assert "--command" in runner.invoke(main, ["check", "--help"]).stdout


def test_rich_view_takes_the_shared_options(runner: CliRunner, tmp_path: Path) -> None:
    svg, html = tmp_path / "check.svg", tmp_path / "check.html"
    args = ["check", str(EXAMPLES / "wrong_float32.py"), "-f", "rich", "--random", "8",
            "--width", "90", "--no-color", "--export-svg", str(svg), "--export-html", str(html)]
    result = runner.invoke(main, args, env={"FORCE_COLOR": "1"})
    assert result.exit_code == 1
    assert "\x1b[1m" in result.stdout  # FORCE_COLOR: bold stays, colour goes (--no-color)
    assert not re.search(r"\x1b\[[0-9;]*\b3[0-7]m", result.stdout)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout)
    assert max(len(line) for line in plain.splitlines()) <= 90
    assert "4 more: --full or --format json" in result.stdout
    assert "<svg" in svg.read_text() and "<title>qkv check</title>" in html.read_text()
    full = runner.invoke(main, [*args[:-4], "--full"])
    assert "more: --full" not in full.stdout
    assert re.search(r"random-8\[1,1,3->1\] +query\[0,0,0\]", full.stdout)


def test_exports_with_a_text_view_and_precision_is_said_to_not_apply(
    runner: CliRunner, tmp_path: Path,
) -> None:
    svg = tmp_path / "check.svg"
    result = runner.invoke(main, ["check", NUMPY, "-f", "text", "--random", "0",
                                  "--export-svg", str(svg), "--precision", "3"])
    assert result.exit_code == 0
    assert result.stdout.endswith("verdict: PASS (8 of 8 checks passed)\n")
    assert "forward" in svg.read_text()
    assert result.stderr == ("qkv: warning: --precision does not apply to qkv check (its "
                             f"details show exact values)\nqkv: wrote {svg}\n")


def test_prints_and_sys_exit_in_an_implementation_do_not_spoil_the_report(
    runner: CliRunner, tmp_path: Path,
) -> None:
    noisy = tmp_path / "noisy.py"
    noisy.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(EXAMPLES)!r})\n"
        "import numpy_qkv\n"
        "def forward(x, wq, wk, wv):\n"
        "    print('debug: forward', x.shape)\n"
        "    if x.ndim != 3:\n"
        "        sys.exit(3)\n"
        "    return numpy_qkv.forward(x, wq, wk, wv)\n"
        "backward = numpy_qkv.backward\n"
    )
    result = runner.invoke(main, ["check", str(noisy), "--random", "0", "-f", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["passed"] is True
    assert "debug: forward (1, 2, 3)" in result.stderr


def test_the_documented_failing_report_is_what_qkv_check_prints(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # docs/check.md shows stdout in its block (tests/test_docs.py runs it) and names the
    # stderr line after it; both are compared here, through the CLI itself.
    root = EXAMPLES.parent.parent
    page = (root / "docs" / "check.md").read_text(encoding="utf-8")
    command = "$ qkv check examples/implementations/wrong_no_value_path.py --random 0 --format text"
    shown = page.split(command + "  # exit 1\n", 1)[1].split("```", 1)[0].splitlines()
    monkeypatch.chdir(root)
    result = runner.invoke(main, command.split()[2:])
    assert result.exit_code == 1
    printed = result.stdout.splitlines()
    assert printed == shown or text_differences("\n".join(printed), "\n".join(shown)) == []
    assert f"(stderr adds `{result.stderr.strip()}`.)" in page


def test_one_protocol_problem_is_said_first_once_and_stops_the_rest(
    runner: CliRunner, tmp_path: Path,
) -> None:
    junit = tmp_path / "junit.xml"
    result = runner.invoke(main, ["check", "--command", f"{FAKE} log-line", "-f", "text",
                                  "--junit", str(junit)])
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[2] == ('protocol      FAIL  request 0 (hello): malformed reply: not JSON '
                        '(Expecting value at column 1): "starting up"; stdout carries only '
                        "replies: write logs to stderr")
    stopped = "not run: the implementation stopped answering (see protocol)"
    assert [line.split()[1] for line in lines[3:11]] == ["SKIP"] * 6 + ["N/A", "SKIP"]
    assert all(line.endswith(stopped) for line in lines[3:9])
    assert lines[11:] == ["failures=1", "  protocol " + lines[2].split("FAIL  ")[1],
                          "verdict: FAIL (0 of 1 checks passed)"]
    assert "qkv: FAILED: protocol\n" in result.stderr
    xml = junit.read_text(encoding="utf-8")
    assert 'failures="1"' in xml and 'skipped="8"' in xml


def test_a_slow_check_draws_a_progress_bar_on_a_terminal_only(runner: CliRunner) -> None:
    import io

    from rich.console import Console

    from qkvcli.check.cases import chapter_case
    from qkvcli.check.run import run_checks
    from qkvcli.cli.check import check_progress
    from qkvcli.cli.console import CheckProgress
    from qkvcli.protocol.runner import start_python

    stream = io.StringIO()
    console = Console(file=stream, force_terminal=True, width=80, color_system=None)
    seen: list[tuple[str, int, int, int]] = []

    def record(family: str, done: int, total: int, calls: int) -> None:
        seen.append((family, done, total, calls))
        bar(family, done, total, calls)

    with CheckProgress(console, delay=0.0) as bar, start_python(NUMPY, 10.0) as client:
        result = run_checks(client, [chapter_case()], 1e-9, record)
    assert result.passed
    assert [family for family, _, _, calls in seen if calls == 0] == ["forward"]
    assert [done for _, done, _, _ in seen] == sorted(done for _, done, _, _ in seen)
    assert seen[-1][0] == "purity" and seen[-1][3] == result.checks[6].calls
    assert "qkv check" in stream.getvalue() and "calls" in stream.getvalue()
    quiet = io.StringIO()
    with CheckProgress(Console(file=quiet, force_terminal=True), delay=3600.0) as late:
        late("forward", 0, 8, 0)
    assert quiet.getvalue() == ""
    assert check_progress(ViewSettings()) is None  # pytest's stderr is no terminal


def test_a_head_is_checked_in_its_own_process_with_the_head_families(runner: CliRunner) -> None:
    result = runner.invoke(main, ["check", str(EXAMPLES / "numpy_head.py"), "-f", "json",
                                  "--random", "0"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    names = [c["name"] for c in document["checks"]]
    assert names[:8] == FAMILIES and names[8:] == [
        "head-forward", "scaling", "softmax", "mask", "head-prefix", "head-single-token",
        "head-reverse", "head-shapes", "head-errors", "head-replay", "head-purity",
        "head-gradcheck"]
    wrong = runner.invoke(main, ["check", str(EXAMPLES / "wrong_head_unstable.py"), "-f", "text",
                                 "--random", "0"])
    assert wrong.exit_code == 1
    softmax = next(line for line in wrong.stdout.splitlines() if line.startswith("softmax "))
    assert "the softmax does not subtract the row maximum before exp" in softmax
    assert wrong.stdout.splitlines()[-1] == "verdict: FAIL (11 of 12 checks passed)"


def test_save_failures_writes_fixtures_and_requests_that_replay_the_case(
    runner: CliRunner, tmp_path: Path,
) -> None:
    import subprocess

    import numpy as np

    from qkvcli.check.cases import precision_case, random_cases
    from qkvcli.reading.load import load_fixture

    saved = tmp_path / "failures"
    wrong = str(EXAMPLES / "wrong_no_value_path.py")
    result = runner.invoke(main, ["check", wrong, "--random", "1", "-f", "text",
                                  "--save-failures", str(saved)])
    assert result.exit_code == 1
    names = sorted(path.name for path in saved.iterdir())
    assert names == ["01-chapter.json", "01-chapter.requests.jsonl",
                     "02-precision-1-3-4-2.json", "02-precision-1-3-4-2.requests.jsonl",
                     "04-random-1-2-3-5-3.json", "04-random-1-2-3-5-3.requests.jsonl"]
    # The fixture holds the case's values exactly, and qkv run takes it.
    case = random_cases(1, 26, 1e-6, 2e-6)[0]
    fixture = load_fixture(saved / "04-random-1-2-3-5-3.json")
    assert fixture.input.tobytes() == case.input.tobytes()
    assert all(a.tobytes() == b.tobytes() for a, b in zip(fixture.upstream, case.upstream,
                                                           strict=True))
    assert runner.invoke(main, ["run", str(saved / "01-chapter.json")]).exit_code == 0
    # Checking the saved file again fails on it, as the learner's loop does.
    again = runner.invoke(main, ["check", wrong, str(saved / "02-precision-1-3-4-2.json"),
                                 "--random", "0", "-f", "json"])
    failed = {f["fixture"] for f in json.loads(again.stdout)["failures"]}
    assert str(saved / "02-precision-1-3-4-2.json") in failed
    # The requests replay the case on a --command program: its replies, exact.
    requests = (saved / "02-precision-1-3-4-2.requests.jsonl").read_text(encoding="utf-8")
    done = subprocess.run([sys.executable, str(EXAMPLES / "command_qkv.py")], input=requests,
                          capture_output=True, text=True, timeout=60, check=True)
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["id"] for r in replies] == [0, 1, 2, 3] and set(replies[1]) == {
        "id", "query", "key", "value"}
    precision = precision_case(1e-6, 2e-6)
    backward = json.loads(requests.splitlines()[2])
    assert backward["op"] == "backward"
    sent = np.array(backward["grad_value"]["values"]).reshape(backward["grad_value"]["shape"])
    assert sent.tobytes() == precision.upstream[2].tobytes()


# --- a head whose call fails on a valid input: a failed family with its reason, never exit 70

HEAD = '''import math

import numpy as np


def softmax(z):
    if z.size == 0:
        return z
    e = np.exp(z - np.max(z, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)


def head_forward(x, w_query, w_key, w_value, causal):
    if x.ndim != 3 or x.shape[2] != w_query.shape[0] or w_key.shape != w_query.shape:
        raise ValueError("bad shapes")
    q, k, v = x @ w_query, x @ w_key, x @ w_value
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(w_query.shape[1])
    tokens = x.shape[1]
    hidden = np.triu(np.ones((tokens, tokens), dtype=bool), k=1)
    weights = softmax(np.where(hidden, -np.inf, scores) if causal else scores)
    return scores, weights, weights @ v
'''
"""A correct head alone (no backward, no projections); the cases below each break it."""

FORGETS_KEEPDIMS = ("    if z.size == 0:\n        return z\n"
                    "    e = np.exp(z - np.max(z, axis=-1, keepdims=True))\n"
                    "    return e / np.sum(e, axis=-1, keepdims=True)",
                    "    e = np.exp(z - np.max(z, axis=-1))\n    return e / np.sum(e, axis=-1)")
FLOAT32 = ("    q, k, v =", "    x, w_query, w_key, w_value = (a.astype(np.float32) for a in "
           "(x, w_query, w_key, w_value))\n    q, k, v =")
GLOBAL_MAX = ("    if z.size == 0:\n        return z\n"
              "    e = np.exp(z - np.max(z, axis=-1, keepdims=True))",
              "    e = np.exp(z - np.max(z))  # the whole array's: none on an empty batch")

REFUSES_CAUSAL = '''import json
import math
import sys

import numpy as np


def tensor(request, key):
    field = request[key]
    return np.array(field["values"], dtype=float).reshape(field["shape"])


def written(array):
    return {"shape": list(array.shape), "values": array.reshape(-1).tolist()}


for line in sys.stdin:
    request = json.loads(line)
    reply = {"id": request["id"]}
    if request["op"] == "hello":
        reply.update(version=1, ops=["head_forward"])
    elif request["op"] == "head_forward" and request["causal"]:
        reply["error"] = "causal heads are not supported"
    elif request["op"] == "head_forward":
        x, wq, wk, wv = (tensor(request, k) for k in ("input", "w_query", "w_key", "w_value"))
        if x.ndim != 3 or x.shape[2] != wq.shape[0] or wk.shape != wq.shape:
            reply["error"] = "bad shapes"
        else:
            q, k, v = x @ wq, x @ wk, x @ wv
            scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(wq.shape[1])
            e = np.exp(scores - np.max(scores, axis=-1, keepdims=True)) if scores.size else scores
            weights = e / np.sum(e, axis=-1, keepdims=True) if scores.size else scores
            reply.update(scores=written(scores), weights=written(weights),
                         output=written(weights @ v))
    print(json.dumps(reply), flush=True)
    if request["op"] == "bye":
        break
'''
"""A --command head that answers every causal request with an error."""


def _numpy_says(*shapes: tuple[int, ...]) -> str:
    """What NumPy raises for ``a - b`` of these shapes, as the runner quotes it."""
    import numpy as np

    try:
        np.zeros(shapes[0]) - np.zeros(shapes[1])
    except ValueError as error:
        return f"ValueError: {error}"
    raise AssertionError("broadcast")


RAISES = "head_forward rejected a valid input [{1}]: {0}"
BROKEN_HEADS = {
    "raises": ([("    if x.ndim", "    if causal:\n        raise NotImplementedError("
                 "\"causal masking\")\n    if x.ndim")],
               "head-forward    FAIL  chapter causal: head_forward rejected a valid input "
               "[1,2,3]: NotImplementedError: causal masking (and 4 more fixtures)",
               ("head-forward", "precision[1,3,4->2] causal",
                RAISES.format("NotImplementedError: causal masking", "1,3,4")),
               "head-replay     SKIP  chapter: not run: its head_forward failed (see "
               "head-forward) (and 4 more fixtures)"),
    # The diagonal hidden too, with -inf: row 0 is NaN, said, and the slip named all the
    # same (the first NaN is the failure's coordinate).
    "nan": ([("k=1)", "k=0)")],
            "head-forward    FAIL  chapter causal: head_forward: the causal mask hides the "
            "diagonal too (a position must see itself): head_forward's weights holds NaN or "
            "infinity (and 3 more fixtures)",
            ("head-forward", "random-1[2,3,5->3] causal",
             "head_forward: the causal mask hides the diagonal too (a position must see "
             "itself): head_forward's weights holds NaN or infinity", "weights[0,0,0]"),
            "softmax         SKIP  chapter causal: not run: its head_forward failed (see "
            "head-forward) (and 3 more fixtures)"),
    "keepdims": ([FORGETS_KEEPDIMS],
                 # 5 fixtures, each failing in both modes: 4 more fixtures, not 9 more runs.
                 # On the chapter's symmetric scores it is the softmax over the query axis,
                 # not on precision's: no slip is named.
                 "head-forward    FAIL  chapter non-causal: weights[0,0,1] = 0.9991513950372889, "
                 "expected 0.9858339641233116 (scaled error 0.0133 > 1e-09) (and 4 more "
                 "fixtures)",
                 ("head-forward", "random-1[2,3,5->3] non-causal",
                  RAISES.format(_numpy_says((2, 3, 3), (2, 3)), "2,3,5")),
                 "head-replay     SKIP  contrast[2,4,5->3]: not run: its head_forward failed "
                 "(see head-forward) (and 2 more fixtures)"),
    "float32-empty-batch": ([FLOAT32, GLOBAL_MAX], None,
                            ("head-forward", "random-2[0,3,4->2] causal",
                             RAISES.format("ValueError: zero-size array to reduction operation "
                                           "maximum which has no identity", "0,3,4")),
                            "head-replay     SKIP  contrast[2,4,5->3]: not run: its "
                            "head_forward failed (see head-forward) (and 1 more fixture)"),
    "command-error": (None,
                      "head-forward    FAIL  chapter causal: head_forward rejected a valid "
                      "input [1,2,3]: causal heads are not supported (and 4 more fixtures)",
                      ("head-forward", "random-2[0,3,4->2] causal",
                       RAISES.format("causal heads are not supported", "0,3,4")),
                      "head-replay     SKIP  chapter: not run: its head_forward failed (see "
                      "head-forward) (and 4 more fixtures)"),
}
"""Each head: its edits of :data:`HEAD` (``None``: the --command program), the head-forward
line when it is the failure's, one failure (family, fixture, detail, and its coordinate
where it has one) and a family not run."""


@pytest.mark.parametrize(("edits", "forward_line", "failure", "skipped"), BROKEN_HEADS.values(),
                         ids=BROKEN_HEADS.keys())
def test_a_head_that_fails_on_a_valid_input_is_a_failed_family_in_every_format(
    runner: CliRunner, tmp_path: Path, edits: list[tuple[str, str]] | None,
    forward_line: str | None, failure: tuple[str, ...], skipped: str,
) -> None:
    source = HEAD
    for old, new in edits or []:
        assert old in source
        source = source.replace(old, new)
    path = tmp_path / ("refuses_causal.py" if edits is None else "head.py")
    path.write_text(REFUSES_CAUSAL if edits is None else source, encoding="utf-8")
    target = (["--command", f"{shlex.quote(sys.executable)} {shlex.quote(str(path))}"]
              if edits is None else [str(path)])
    base = ["check", *target, "--random", "2"]

    text = runner.invoke(main, [*base, "-f", "text"])
    assert text.exit_code == 1, text.output
    assert "internal error" not in text.output
    lines = [" ".join(line.split()) for line in text.stdout.splitlines()]  # columns aside
    family, fixture, detail, *where = failure
    assert " ".join(f"{family} [{fixture}] {detail}".split()) in lines
    assert " ".join(skipped.split()) in lines
    if forward_line is not None:
        assert " ".join(forward_line.split()) in lines

    document = json.loads(runner.invoke(main, [*base, "-f", "json"]).stdout)
    assert {"check": family, "family": published("check", family).family, "fixture": fixture,
            "coordinate": where[0] if where else None, "detail": detail} in [
        {key: f[key] for key in ("check", "family", "fixture", "coordinate", "detail")}
        for f in document["failures"]]
    checks = {c["name"]: c for c in document["checks"]}
    name, word, said = re.split(r" +", skipped, maxsplit=2)
    assert (word, checks[name]) == ("SKIP", {
        "name": name, "family": published("check", name).family,
        "operation": published("check", name).operation, "passed": False,
        "outcome": "not-run", "detail": said})
    if forward_line is not None:
        assert checks["head-forward"]["detail"] == forward_line.split("FAIL  ")[1]

    if edits and ("k=1)", "k=0)") in edits:  # the diagonal hidden with -inf: the mask says so
        assert ("mask FAIL chapter causal: the causal mask hides the diagonal too: with one "
                "token [1,1,3] its weights are not finite") in " ".join(text.stdout.split())

    rich = runner.invoke(main, [*base, "-f", "rich"], env={"COLUMNS": "200"})
    assert rich.exit_code == 1, rich.output
    assert f"{name}  NOT RUN" in rich.stdout and "head-forward  FAIL" in rich.stdout


@pytest.mark.parametrize(("example", "slip", "families"), [
    ("wrong_no_value_path", "grad_input misses the value path", "reverse"),
    ("wrong_head_unscaled", "scores are Q K^T: the 1/sqrt(d_k) scaling is missing",
     "head-forward, scaling"),
    ("wrong_cache_rope_at_zero", "the cache holds the keys unturned", "cache-steps"),
], ids=["projections", "head", "cache"])
def test_a_failing_report_repeats_the_slip_above_its_verdict(
    runner: CliRunner, example: str, slip: str, families: str,
) -> None:
    # a long list of failures scrolls the family lines off a screen: the slip's name
    # is said again in the last lines, once however many findings named it
    result = runner.invoke(main, ["check", str(EXAMPLES / f"{example}.py"), "-f", "text",
                                  "--random", "0"])
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[-1].startswith("verdict: FAIL")
    named = [line for line in lines if line.startswith("slip: ")]
    assert len(named) == 1
    assert named[0] == lines[-2]
    assert named[0].startswith(f"slip: {slip}") and named[0].endswith(f" ({families})")


def test_a_failure_that_names_no_slip_adds_no_slip_line(runner: CliRunner) -> None:
    for example in ("numpy_qkv", "wrong_modifies_input"):
        result = runner.invoke(main, ["check", str(EXAMPLES / f"{example}.py"), "-f", "text",
                                      "--random", "0"])
        assert not any(line.startswith("slip: ") for line in result.stdout.splitlines())


def test_an_argument_changed_on_every_call_is_one_finding_per_change() -> None:
    example = Path(__file__).resolve().parent.parent / "examples" / "implementations"
    found = CliRunner().invoke(main, ["check", str(example / "wrong_modifies_input.py")])
    assert found.exit_code == 1, found.output
    purity = [line for line in found.output.splitlines() if line.startswith("  purity ")]
    assert purity and len(purity) == len(set(purity)), found.output
