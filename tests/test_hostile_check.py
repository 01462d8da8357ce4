"""``qkv check`` under hostile input: IMPL paths and names, limits on its options, given
fixtures, and programs that flood their output or never answer."""

from __future__ import annotations

import json
import os
import shlex
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from qkvcli.protocol import client
from qkvcli.reading import limits
from tests.hostile_helpers import BASE, fixture, invoke, refused, write

ROOT = Path(__file__).resolve().parent.parent
NUMPY = str(ROOT / "examples" / "implementations" / "numpy_qkv.py")


def program(tmp_path: Path, body: str) -> str:
    """A --command line running ``body`` as a Python program."""
    path = tmp_path / "prog.py"
    path.write_text("import json, sys\n" + body, encoding="utf-8")
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(path))}"


def protocol_line(result: Any) -> str:
    lines = [line for line in result.stdout.splitlines() if line.startswith("protocol ")]
    assert lines, result.stdout
    return lines[0]


def test_an_impl_fifo_is_refused_without_hanging(tmp_path):
    fifo = tmp_path / "impl.py"
    os.mkfifo(fifo)
    outcome: list[Any] = []
    thread = threading.Thread(target=lambda: outcome.append(invoke("check", str(fifo))),
                              daemon=True)
    thread.start()
    thread.join(20)
    assert outcome, "qkv check blocked on a FIFO"
    refused(outcome[0], "implementation", "is a FIFO, not a Python file")


@pytest.mark.parametrize(("make", "words"), [
    (lambda p: (p / "d.py").mkdir() or p / "d.py", "is a directory"),
    (lambda p: Path("/dev/zero"), "is a character device"),
    (lambda p: p / "missing.py", "no such file"),
], ids=["directory", "device", "missing"])
def test_impl_paths_that_are_not_python_files(tmp_path, make, words):
    refused(invoke("check", str(make(tmp_path))), "implementation", words)


def test_an_impl_over_the_byte_limit_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "MAX_FILE_BYTES", 100)
    path = write(tmp_path / "big.py", "#" * 200 + "\n")
    refused(invoke("check", str(path)), "implementation", "limited to 100")


@pytest.mark.parametrize("name", ["os\x1bx", "..x", "", "a..b", "x y", "a-b"],
                         ids=["escape", "relative", "empty", "double-dot", "space", "dash"])
def test_odd_module_names_are_refused_in_one_escaped_line(name):
    line = refused(invoke("check", name), "implementation", "module name")
    assert "\x1b" not in line


def test_nul_in_impl_or_fixture_arguments_is_refused():
    refused(invoke("check", "x\0y.py"), "NUL byte")
    refused(invoke("check", NUMPY, "f\0.json"), "NUL byte")
    refused(invoke("check", "--command", "a\0b"), "cannot be started")


@pytest.mark.parametrize(("option", "value", "words"), [
    ("--random", "99999999", "--random"),
    ("--timeout", "0", "greater than zero"),
    ("--timeout", "inf", "finite"),
    ("--timeout", "nan", "finite"),
    ("--timeout", "1e300", "at most 86400"),
    ("--tolerance", "-1", "finite number, zero or more"),
], ids=["random", "timeout-0", "timeout-inf", "timeout-nan", "timeout-huge", "tolerance"])
def test_option_limits(option, value, words):
    refused(invoke("check", NUMPY, option, value), words)


def test_given_fixtures_are_read_like_runs(tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    refused(invoke("check", NUMPY, str(fifo)), "FIFO")
    bad = write(tmp_path / "abs.json", fixture(input={"npy": "/etc/passwd"}))
    refused(invoke("check", NUMPY, str(bad)), "$.input.npy", "absolute path")
    text = '{"input": [[[1e400, 0, 0]]], "weights": {"query": [[1]], "key": [[1]], "value": [[1]]}}'
    refused(invoke("check", NUMPY, str(write(tmp_path / "inf.json", text))), "$.input")


def test_a_fixture_too_large_for_one_call_names_max_elements(tmp_path):
    path = write(tmp_path / "f.json", BASE)
    refused(invoke("check", NUMPY, str(path), "--max-elements", "10"), "--max-elements")
    refused(invoke("check", NUMPY, str(path), "--max-elements", "20"),
            "elements together", "--max-elements")


def test_a_reply_longer_than_the_limit_breaks_the_session(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "MAX_FILE_BYTES", 1000)
    command = program(tmp_path, "sys.stdout.write('x' * 100000 + '\\n'); sys.stdout.flush()\n"
                      "sys.stdin.read()\n")
    result = invoke("check", "--command", command, "--random", "0", "-f", "text")
    assert result.exit_code == 1
    assert "reply longer than 1000 bytes" in protocol_line(result)


def test_a_program_flooding_lines_is_read_with_bounded_memory(tmp_path):
    # Thousands of lines arrive before any request: at most one waits, the rest block the
    # program; the session breaks on the first wrong reply and the program is ended.
    command = program(tmp_path, "for _ in range(100000): print('{}')\n")
    result = invoke("check", "--command", command, "--random", "0", "-f", "text")
    assert result.exit_code == 1
    assert "malformed reply" in protocol_line(result)


def test_stderr_is_kept_as_a_short_escaped_tail(tmp_path):
    command = program(tmp_path, (
        "for _ in range(3000): sys.stderr.write('noise \\x1b[31m' * 50 + '\\n')\n"
        "sys.stderr.write('last words\\n'); sys.exit(3)\n"))
    result = invoke("check", "--command", command, "--random", "0", "-f", "text")
    assert result.exit_code == 1
    assert "\x1b" not in result.output
    assert "last words" in result.stderr
    assert len(result.stderr) < 3 * client.STDERR_LIMIT


def test_a_program_that_never_answers_hello(tmp_path):
    command = program(tmp_path, "import time; time.sleep(60)\n")
    result = invoke("check", "--command", command, "--random", "0", "--timeout", "0.3",
                    "-f", "text")
    assert result.exit_code == 1
    assert "request 0 (hello): no reply within 0.3 s" in protocol_line(result)


def test_a_reply_with_an_integer_too_long_is_malformed(tmp_path):
    command = program(tmp_path, "print('{\"id\": 0, \"version\": ' + '9' * 5000 + '}', "
                      "flush=True)\nsys.stdin.read()\n")
    result = invoke("check", "--command", command, "--random", "0", "-f", "text")
    assert result.exit_code == 1
    assert "malformed reply: not usable JSON" in protocol_line(result)


def test_what_an_implementation_says_is_escaped_and_capped(tmp_path):
    impl = write(tmp_path / "loud.py", (
        "def forward(x, wq, wk, wv):\n"
        "    raise ValueError('\\x1b[2J' + 'x' * 100000)\n"))
    result = invoke("check", str(impl), "--random", "0", "-f", "text")
    assert result.exit_code == 1
    assert "\x1b" not in result.output
    assert "\\x1b[2J" in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) < 2000


def test_a_nonzero_weight_gradient_on_the_empty_batch_is_a_failed_check(tmp_path):
    # The default --random includes batch 0: X^T dY is then all zeros, and the diagnosis
    # of a wrong dW must still name it instead of failing to reshape an empty array.
    impl = write(tmp_path / "ones.py", (
        "import numpy as np\n"
        "def forward(x, wq, wk, wv):\n"
        "    return x @ wq, x @ wk, x @ wv\n"
        "def backward(x, wq, wk, wv, dq, dk, dv):\n"
        "    return (dq @ wq.T + dk @ wk.T + dv @ wv.T, np.ones_like(wq), np.ones_like(wk),\n"
        "            np.ones_like(wv))\n"))
    result = invoke("check", str(impl), "-f", "text")
    assert result.exit_code == 1, result.output
    assert "internal error" not in result.output
    empty = [line for line in result.stdout.splitlines()
             if line.startswith("  reverse [random-2[0,")]
    assert empty and "grad_w_query is not X^T dL/dQ" in empty[0], result.stdout


# --- a Python IMPL runs in a child process qkv owns -----------------------------------------

CORRECT = (
    "import sys\n"
    f"sys.path.insert(0, {str(ROOT / 'examples' / 'implementations')!r})\n"
    "from numpy_qkv import forward, backward\n"
)


def impl(tmp_path: Path, body: str, name: str = "hostile.py") -> str:
    """A Python IMPL: the correct projections, then ``body`` (which may replace them)."""
    return str(write(tmp_path / name, CORRECT + body))


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_an_endless_loop_in_forward_is_ended_by_the_timeout(tmp_path):
    path = impl(tmp_path, "def forward(x, wq, wk, wv):\n    while True: pass\n")
    result = invoke("check", path, "--random", "0", "--timeout", "0.5", "-f", "text")
    assert result.exit_code == 1, result.output
    assert "no reply within 0.5 s" in protocol_line(result)


SECOND_CALL_HANGS = (
    "import time\n_calls = []\n_f = forward\n"
    "def forward(x, wq, wk, wv):\n"
    "    _calls.append(1)\n"
    "    if len(_calls) == 2:\n"
    "        time.sleep(30)\n"
    "    {change}\n"
    "    return _f(x, wq, wk, wv)\n"
)
"""Its second forward (the precision fixture's, request 2) never answers."""


@pytest.mark.parametrize(("change", "purity"), [
    ("pass", "purity        SKIP  not run: the implementation stopped answering (see protocol)"),
    # Found before the hang, and only there: no call after it is said to change anything.
    ("x *= 2", "purity        FAIL  chapter: forward changed its argument x[0,0,0] from 1.0 to "
               "2.0"),
], ids=["pure", "impure-before"])
def test_a_timeout_names_its_fixture_and_option_and_purity_judges_only_what_ran(
        tmp_path, change, purity):
    # 2 s, not 0.3: on a busy machine importing NumPy in the child took longer than 0.3 s
    # and the timeout hit the import instead of the call (the outcome hung on wall time)
    path = impl(tmp_path, SECOND_CALL_HANGS.format(change=change))
    base = ("check", path, "--random", "0", "--timeout", "2")
    result = invoke(*base, "-f", "text")
    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    said = "request 2 (forward): no reply within 2 s (--timeout)"
    assert lines[2] == f"protocol      FAIL  precision[1,3,4->2]: {said}"
    assert f"  protocol [precision[1,3,4->2]] {said}" in lines
    assert purity in lines  # not a pass: the calls it would judge never completed
    assert len([line for line in lines if line.startswith("  purity ")]) == (change != "pass")
    document = json.loads(invoke(*base, "-f", "json").stdout)
    assert document["failures"][0] == {"check": "protocol", "family": "protocol",
                                       "fixture": "precision[1,3,4->2]",
                                       "coordinate": None, "detail": said, "slips": [],
                                       "compared": None}
    check = next(c for c in document["checks"] if c["name"] == "purity")
    assert (check["passed"], check["outcome"] != "not-run") == (False, change != "pass")


def test_a_timeout_in_a_head_call_leaves_head_purity_not_run(tmp_path):
    head = str(ROOT / "examples" / "implementations" / "numpy_head.py")
    path = impl(tmp_path, "import time\nimport runpy\n_calls = []\n"
                f"_head = runpy.run_path({head!r})\n"
                "def head_forward(x, wq, wk, wv, causal):\n"
                "    _calls.append(1)\n"
                "    if len(_calls) == 3:\n"
                "        time.sleep(300)\n"
                "    return _head['head_forward'](x, wq, wk, wv, causal)\n")
    # 2 s, not 0.3: a busy machine's import of the implementation must not hit the timeout
    result = invoke("check", path, "--random", "0", "--timeout", "2", "-f", "text")
    assert result.exit_code == 1, result.output
    lines = [" ".join(line.split()) for line in result.stdout.splitlines()]
    assert lines[2] == ("protocol FAIL precision[1,3,4->2]: request 169 (head_forward): "
                        "no reply within 2 s (--timeout)")
    # The projections' calls all completed before it: their purity is judged, the head's not.
    assert "purity PASS arguments unchanged after all 166 calls" in lines
    assert ("head-purity SKIP not run: the implementation stopped answering (see "
            "protocol)") in lines


def test_an_endless_loop_at_import_is_a_clear_error(tmp_path):
    path = impl(tmp_path, "while True: pass\n")
    line = refused(invoke("check", path, "--random", "0", "--timeout", "0.5"),
                   "cannot be imported", "took more than 0.5 s (--timeout)")
    assert "Traceback" not in line


@pytest.mark.parametrize("code", [0, 3], ids=["status-0", "status-3"])
def test_os_exit_at_import_is_a_clear_error_not_a_pass(tmp_path, code):
    path = impl(tmp_path, f"import os\nos._exit({code})\n")
    refused(invoke("check", path, "--random", "0"), "cannot be imported",
            f"exited with status {code}")


def test_os_exit_in_forward_is_a_failed_check_not_its_status(tmp_path):
    path = impl(tmp_path, "import os\n_f = forward\n"
                "def forward(x, wq, wk, wv):\n"
                "    if x.ndim != 3: os._exit(3)\n"
                "    return _f(x, wq, wk, wv)\n")
    result = invoke("check", path, "--random", "0", "-f", "text")
    assert result.exit_code == 1, result.output
    assert "exited with status 3" in protocol_line(result)


def test_prints_and_raw_writes_to_stdout_do_not_spoil_json(tmp_path, monkeypatch):
    import json

    path = impl(tmp_path, "import os\nprint('hello at import')\nos.write(1, b'raw at import\\n')\n"
                "_f = forward\n"
                "def forward(x, wq, wk, wv):\n"
                "    os.write(1, b'raw in forward\\n')\n"
                "    return _f(x, wq, wk, wv)\n")
    result = invoke("check", path, "--random", "0", "-f", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["passed"] is True
    assert "hello at import" in result.stderr and "raw in forward" in result.stderr


def test_chdir_at_import_does_not_move_where_output_is_written(tmp_path, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    path = impl(tmp_path, f"import os\nos.chdir({str(elsewhere)!r})\n")
    monkeypatch.chdir(tmp_path)
    result = invoke("check", path, "--random", "0", "-f", "text", "-o", "report.txt")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "report.txt").is_file()
    assert not (elsewhere / "report.txt").exists()


def test_a_non_daemon_thread_does_not_keep_qkv_alive(tmp_path):
    # The thread never ends: had qkv waited for it, the command would never return.
    path = impl(tmp_path, "import threading\n"
                "threading.Thread(target=threading.Event().wait).start()\n")
    result = invoke("check", path, "--random", "0", "-f", "text")
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("error", ["BaseException('deep')", "GeneratorExit()",
                                   "KeyboardInterrupt()", "SystemExit(4)"],
                         ids=["base", "generator-exit", "keyboard", "system-exit"])
def test_any_exception_from_forward_is_a_rejection_without_a_traceback(tmp_path, error):
    path = impl(tmp_path, f"def forward(x, wq, wk, wv):\n    raise {error}\n")
    result = invoke("check", path, "--random", "0", "-f", "text")
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert "forward" in result.stdout and "FAIL" in result.stdout


def test_a_base_exception_at_import_is_a_clear_error(tmp_path):
    path = impl(tmp_path, "raise BaseException('at import')\n")
    refused(invoke("check", path, "--random", "0"), "cannot be imported",
            "BaseException: at import")


HOSTILE_RESULTS = {
    "array-raises": "class R:\n    def __array__(self, *a, **k): raise RuntimeError('no')\n",
    "attribute-raises": "class R:\n    def __getattr__(self, name): raise RuntimeError(name)\n",
    "len-raises": "class R(tuple):\n    def __len__(self): raise RuntimeError('len')\n",
    "str-of-error-raises": ("class R:\n    def __array__(self, *a, **k): raise E()\n"
                            "class E(Exception):\n    def __str__(self): raise RuntimeError()\n"),
}


@pytest.mark.parametrize("body", HOSTILE_RESULTS.values(), ids=HOSTILE_RESULTS.keys())
def test_hostile_results_are_a_failed_check_not_an_internal_error(tmp_path, body):
    made = "R()" if "tuple" not in body else "R((1, 2, 3))"
    path = impl(tmp_path, body + "def forward(x, wq, wk, wv):\n"
                f"    return {made} if 'tuple' in {body!r} else ({made}, {made}, {made})\n")
    result = invoke("check", path, "--random", "0", "-f", "text")
    assert result.exit_code == 1, result.output
    assert "internal error" not in result.output and "Traceback" not in result.output
    assert result.stdout.startswith("implementation=")


def test_monkeypatching_qkv_cannot_forge_the_verdict(tmp_path):
    path = impl(tmp_path, (
        "import qkvcli.check.result as result, qkvcli.render.check as words\n"
        "result.CheckResult.passed = property(lambda self: True)\n"
        "words.check_verdict = lambda r: 'verdict: PASS (8 of 8 checks passed)'\n"
        "def forward(x, wq, wk, wv):\n"
        "    return x @ wq, x @ wq, x @ wv\n"))
    result = invoke("check", path, "--random", "0", "-f", "text")
    assert result.exit_code == 1, result.output
    assert result.stdout.splitlines()[-1].startswith("verdict: FAIL")


def test_the_implementation_and_its_children_are_ended(tmp_path):
    pids = tmp_path / "pids"
    path = impl(tmp_path, (
        "import os, subprocess\n"
        "child = subprocess.Popen(['sleep', '300'])\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"))
    result = invoke("check", path, "--random", "0", "-f", "text")
    assert result.exit_code == 0, result.output
    deadline = time.monotonic() + 5
    started = [int(pid) for pid in pids.read_text().split()]
    while any(alive(pid) for pid in started) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in started)


def test_a_ctrl_c_ends_the_implementation(tmp_path, monkeypatch):
    from qkvcli.check import run

    pids = tmp_path / "pids"
    path = impl(tmp_path, f"import os\nopen({str(pids)!r}, 'w').write(str(os.getpid()))\n")

    def interrupt(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(run, "check_forward", interrupt)
    monkeypatch.setitem(run.PLANS, "forward", (("forward", interrupt),))
    result = invoke("check", path, "--random", "0", "-f", "text")
    assert result.exit_code == 130, result.output
    pid = int(pids.read_text())
    deadline = time.monotonic() + 5
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid)


def test_a_fixture_whose_results_overflow_is_refused_for_check(tmp_path):
    huge = fixture(input=[[[1e200, 2, -1], [0, 1, 2]]],
                   weights={**BASE["weights"], "query": [[1e200, 0], [0, 1], [1, -1]]})
    path = write(tmp_path / "overflow.json", huge)
    refused(invoke("check", NUMPY, str(path), "--random", "0"),
            "overflow.json: its query overflows float64", "finite results only")
