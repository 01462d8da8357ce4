"""``qkv check`` under hostile input: IMPL paths and names, limits on its options, given
fixtures, and programs that flood their output or never answer."""

from __future__ import annotations

import os
import shlex
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from qkvcli.conformance import client
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
