"""``qkv check --command`` owns every process it starts: grandchildren that linger or hold
the pipes, Ctrl-C before hello, and replies whose size or shapes no request needs.

Each test starts small shell or Python programs in ``tmp_path``, asserts that every
process they started is gone afterwards (its pid no longer exists) and that qkv
finished within a bounded wall time, far below any ``--timeout`` given.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qkvcli.protocol.client import CommandClient
from qkvcli.protocol.wire import Malformed, decode_tensor, reply_budget, reply_values
from tests.hostile_helpers import invoke

ROOT = Path(__file__).resolve().parent.parent
PYTHON = shlex.quote(sys.executable)
REFERENCE = ROOT / "examples" / "implementations" / "command_qkv.py"


def gone(pid: int, within: float = 5.0) -> bool:
    """Whether ``pid`` no longer exists (or is a zombie nobody will wait for) within ``within`` s."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        with contextlib.suppress(OSError):  # a zombie re-parented to init, not yet reaped
            if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
                return True
        time.sleep(0.05)
    return False


def pids(path: Path) -> list[int]:
    """The pids a program wrote to ``path`` (one a line), waiting for the file to appear."""
    for _ in range(200):
        if path.exists() and path.read_text().endswith("\n"):
            break
        time.sleep(0.05)
    return [int(line) for line in path.read_text().split()]


@pytest.fixture
def reap() -> Any:
    """Collect pids to kill after the test whatever it asserted (no test leaves a process)."""
    started: list[int] = []
    yield started
    for pid in started:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def python_program(tmp_path: Path, body: str, name: str = "prog.py") -> str:
    path = tmp_path / name
    path.write_text("import json, os, sys, time\n" + body, encoding="utf-8")
    return f"{PYTHON} {shlex.quote(str(path))}"


def with_sleeper(tmp_path: Path, command: str) -> str:
    """``sh -c 'sleep 300 & echo $! > pids; exec COMMAND'``: a grandchild holding every pipe."""
    script = f"sleep 300 & echo $! > {shlex.quote(str(tmp_path / 'pids'))}; exec {command}"
    return f"sh -c {shlex.quote(script)}"


def timed(*args: str) -> tuple[Any, float]:
    start = time.monotonic()
    result = invoke("check", *args)
    return result, time.monotonic() - start


def protocol_line(result: Any) -> str:
    return next(line for line in result.stdout.splitlines() if line.startswith("protocol "))


def test_a_grandchild_left_running_after_bye_is_ended(tmp_path, reap):
    command = with_sleeper(tmp_path, f"{PYTHON} {shlex.quote(str(REFERENCE))}")
    result, seconds = timed("--command", command, "--random", "1", "-f", "text")
    reap.extend(pids(tmp_path / "pids"))
    assert result.exit_code == 0, result.output
    assert "the program exited with status 0" in protocol_line(result)
    assert gone(reap[0]), "the sleeping grandchild outlived qkv check"
    assert seconds < 20


def test_a_crash_is_seen_although_a_grandchild_holds_stdout(tmp_path, reap):
    # The program exits at the first forward; its grandchild keeps stdout open, so the
    # pipe never ends: qkv must notice the exit, not wait for the end of output.
    crash = python_program(tmp_path, (
        "for line in sys.stdin:\n"
        "    if json.loads(line)['op'] == 'hello':\n"
        "        print(json.dumps({'id': 0, 'version': 1}), flush=True)\n"
        "    else:\n"
        "        sys.stderr.write('crashed\\n'); sys.exit(3)\n"))
    result, seconds = timed("--command", with_sleeper(tmp_path, crash), "--timeout", "60",
                            "--random", "0", "-f", "text")
    reap.extend(pids(tmp_path / "pids"))
    assert result.exit_code == 1
    assert "request 1 (forward): the program exited with status 3; stderr: crashed" in (
        protocol_line(result))
    assert gone(reap[0])
    assert seconds < 20  # not the 60 s timeout


def test_a_program_that_forks_and_exits_before_hello(tmp_path, reap):
    record = tmp_path / "pids"
    command = python_program(tmp_path, (
        f"child = os.fork()\n"
        f"if child == 0:\n"
        f"    time.sleep(300)\n"
        f"    os._exit(0)\n"
        f"open({str(record)!r}, 'w').write(f'{{child}}\\n')\n"
        f"sys.exit(0)\n"))
    result, seconds = timed("--command", command, "--timeout", "60", "--random", "0",
                            "-f", "text")
    reap.extend(pids(record))
    assert result.exit_code == 1
    assert "request 0 (hello): the program exited with status 0" in protocol_line(result)
    assert gone(reap[0]), "the forked child holding stdout outlived qkv check"
    assert seconds < 20


def test_a_timeout_ends_the_whole_group(tmp_path, reap):
    silent = python_program(tmp_path, "time.sleep(300)\n")
    result, seconds = timed("--command", with_sleeper(tmp_path, silent), "--timeout", "0.5",
                            "--random", "0", "-f", "text")
    reap.extend(pids(tmp_path / "pids"))
    assert result.exit_code == 1
    assert "request 0 (hello): no reply within 0.5 s" in protocol_line(result)
    assert gone(reap[0])
    assert seconds < 20


def test_a_program_ignoring_sigterm_is_killed(tmp_path, reap):
    record = tmp_path / "pids"
    stubborn = python_program(tmp_path, (
        "import signal\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"open({str(record)!r}, 'w').write(f'{{os.getpid()}}\\n')\n"
        "time.sleep(300)\n"))
    result, seconds = timed("--command", stubborn, "--timeout", "0.5", "--random", "0",
                            "-f", "text")
    reap.extend(pids(record))
    assert result.exit_code == 1
    assert gone(reap[0])
    assert seconds < 20


def test_ctrl_c_before_hello_is_answered_ends_program_and_grandchild(tmp_path, reap):
    record = tmp_path / "pids"
    silent = python_program(tmp_path, (
        f"open({str(record) + '.me'!r}, 'w').write(f'{{os.getpid()}}\\n')\n"
        "time.sleep(300)\n"))
    script = (f"sleep 300 & echo $! > {shlex.quote(str(record))}; "
              f"exec {silent}")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    qkv = subprocess.Popen(
        [sys.executable, "-m", "qkvcli", "check", "--command", f"sh -c {shlex.quote(script)}",
         "--timeout", "60", "--random", "0", "-f", "text"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True,
    )
    try:
        reap.extend(pids(record) + pids(Path(str(record) + ".me")))
        qkv.send_signal(signal.SIGINT)
        out, err = qkv.communicate(timeout=30)
    finally:
        if qkv.poll() is None:
            qkv.kill()
            qkv.wait()
    assert qkv.returncode == 130, err
    assert err == "qkv: interrupted\n"
    assert out == ""
    for pid in reap:
        assert gone(pid), f"process {pid} outlived the interrupted qkv check"


def test_closing_the_client_during_hello_ends_the_program(tmp_path, reap, monkeypatch):
    # KeyboardInterrupt raised while hello waits: the client ends the group before the
    # exception leaves the constructor (no `with` owns it yet).
    record = tmp_path / "pids"
    silent = python_program(tmp_path, (
        f"open({str(record)!r}, 'w').write(f'{{os.getpid()}}\\n')\n"
        "time.sleep(300)\n"))
    from qkvcli.protocol import client as module

    real = module.CommandClient._read_line

    def interrupted(self: CommandClient, limit: int, deadline: float) -> bytes:
        reap.extend(pids(record))
        raise KeyboardInterrupt

    monkeypatch.setattr(module.CommandClient, "_read_line", interrupted)
    with pytest.raises(KeyboardInterrupt):
        CommandClient(silent, 60.0)
    monkeypatch.setattr(module.CommandClient, "_read_line", real)
    assert reap and gone(reap[0])


# --- replies bounded by their requests ------------------------------------------------

def reply_program(tmp_path: Path, forward_reply: str) -> str:
    """A program answering hello, then every request with ``forward_reply`` (``%d``: the id)."""
    return python_program(tmp_path, (
        "for line in sys.stdin:\n"
        "    message = json.loads(line)\n"
        "    if message['op'] == 'hello':\n"
        "        print(json.dumps({'id': 0, 'version': 1}), flush=True)\n"
        "        continue\n"
        f"    sys.stdout.write({forward_reply!r} % message['id'] + '\\n'); sys.stdout.flush()\n"))


@pytest.mark.parametrize("shape", [
    [0, 2**62, 2**62], [0, 10**30], [1] * 99 + [0], [0] * 40, [2**70],
], ids=["2^62", "10^30", "100-dims", "40-empty-dims", "2^70"])
def test_absurd_reply_shapes_fail_the_check_without_an_internal_error(tmp_path, shape):
    tensor = json.dumps({"shape": shape, "values": []})
    body = '{"id": %d, ' + ", ".join(f'"{name}": {tensor}' for name in (
        "query", "key", "value", "grad_input", "grad_w_query", "grad_w_key", "grad_w_value"))
    result, seconds = timed("--command", reply_program(tmp_path, body + "}"), "-f", "text")
    assert result.exit_code == 1, result.output
    line = protocol_line(result)
    assert "request 1 (forward): malformed reply" in line
    assert "dimensions, more than 32" in line or "is larger than any reply" in line
    assert "internal error" not in result.output
    assert seconds < 20


def test_a_huge_reply_line_is_refused_while_it_is_read(tmp_path):
    # 250 MB of numbers for a request whose reply holds 12: refused after its budget,
    # long before the line ends; the program is ended while it still writes.
    flood = python_program(tmp_path, (
        "for line in sys.stdin:\n"
        "    message = json.loads(line)\n"
        "    if message['op'] == 'hello':\n"
        "        print(json.dumps({'id': 0, 'version': 1}), flush=True)\n"
        "        continue\n"
        "    sys.stdout.write('{\"id\": %d, \"query\": {\"shape\": [1, 2, 2], \"values\": [' "
        "% message['id'])\n"
        "    chunk = '0.1234567890123456, ' * 50000\n"
        "    for _ in range(250_000_000 // len(chunk)):\n"
        "        sys.stdout.write(chunk)\n"))
    probe = (
        "import resource, subprocess, sys\n"
        "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
        "print(done.stdout)\n")
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", probe, sys.executable, "-m", "qkvcli", "check", "--command",
         flood, "--random", "0", "-f", "text"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    seconds = time.monotonic() - start
    status, peak_kb = (int(word) for word in done.stdout.split("\n", 1)[0].split())
    assert status == 1
    budget = reply_budget(24)  # the chapter forward: 12 values back, 24 sent
    assert (f"request 1 (forward): reply longer than {budget} bytes, the most a reply to it "
            "may take") in done.stdout
    assert peak_kb < 200_000, f"qkv check peaked at {peak_kb} KB reading a refused line"
    assert seconds < 60


def test_reply_values_follow_the_request_shapes():
    x, w = np.zeros((2, 3, 4)), np.zeros((4, 5))
    tensors = {"input": x, "w_query": w, "w_key": w, "w_value": w}
    assert reply_values("forward", tensors) == 3 * 2 * 3 * 5 == 90
    upstream = {f"grad_{b}": np.zeros((2, 3, 5)) for b in ("query", "key", "value")}
    assert reply_values("backward", {**tensors, **upstream}) == 24 + 3 * 30 + 60  # as sent
    empty = {"input": np.zeros((0, 3, 4)), "w_query": w, "w_key": w, "w_value": w}
    # An empty batch's [0,3,5] reply tensors each claim 15 axes' worth; 72 were sent.
    assert reply_values("forward", empty) == max(3 * 3 * 5, 3 * 4 + 3 * 20) == 72
    reply = {"t": {"shape": [0, 3, 5], "values": []}}
    assert decode_tensor(reply, "t", 45).shape == (0, 3, 5)
    with pytest.raises(Malformed, match="larger than any reply"):
        decode_tensor(reply, "t", 14)
