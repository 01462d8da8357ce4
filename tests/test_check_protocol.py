"""The --command client: exact float round trips, and every way a program can break the protocol."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from qkvcli.check.cases import Case, chapter_case
from qkvcli.check.run import run_checks
from qkvcli.protocol.client import CommandClient
from qkvcli.protocol.errors import Broken, CommandNotStarted
from qkvcli.protocol.wire import Malformed, decode, decode_tensor, encode, encode_tensor
from qkvcli.render.check import family_detail

ROOT = Path(__file__).resolve().parent.parent
CORRECT = f"{shlex.quote(sys.executable)} {ROOT / 'examples' / 'implementations' / 'command_qkv.py'}"
FAKE = f"{shlex.quote(sys.executable)} {Path(__file__).resolve().parent / 'programs' / 'fake_qkv.py'}"


@pytest.fixture(scope="module")
def chapter() -> list[Case]:
    return [chapter_case()]


def test_tensors_round_trip_float64_exactly() -> None:
    values = np.array([0.1, -0.0, 1e-310, 2.0**-1074, 1.7976931348623157e308, 1 / 3])
    line = encode({"id": 1, "t": encode_tensor(values.reshape(2, 3))})
    back = decode_tensor(decode(line), "t", 100)
    assert back.shape == (2, 3)
    assert back.reshape(-1).tobytes() == values.tobytes()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b'{"t": {"shape": [1], "values": [NaN]}}', "NaN is not a finite number"),
        (b'{"t": {"shape": [1], "values": [1e400]}}', "too large for float64"),
        (b'{"t": {"shape": [2], "values": [1]}}', "1 values for shape [2]"),
        (b'{"t": {"shape": [1], "values": ["1"]}}', "is not a number"),
        (b'{"t": {"shape": [2, 2], "values": [[1, 2], [3, 4]]}}',
         '"t.values[0]" is a list: "values" is flat, row-major'),
        (b"[1]", "not a JSON object"),
        (b"nope", 'not JSON (Expecting value at column 1): "nope"'),
    ],
    ids=["nan", "overflow", "count", "string", "nested", "array", "text"],
)
def test_malformed_tensors_are_refused(line: bytes, message: str) -> None:
    with pytest.raises(Malformed, match=re.escape(message)):
        decode_tensor(decode(line), "t", 100)


def test_a_bare_minus_zero_keeps_its_sign() -> None:
    back = decode_tensor(decode(b'{"t": {"shape": [3], "values": [-0, 0, -0.0]}}'), "t", 10)
    assert [np.signbit(value) for value in back] == [True, False, True]


def test_nan_is_refused_on_the_way_out() -> None:
    with pytest.raises(ValueError):
        encode({"t": encode_tensor(np.array([np.nan]))})


def test_the_correct_program_passes_with_the_protocol_family(chapter: list[Case]) -> None:
    with CommandClient(CORRECT, 5.0) as client:
        result = run_checks(client, chapter, 1e-9)
    checks = {c.name: c for c in result.checks}
    assert result.passed, result.checks
    assert family_detail(checks["purity"]).startswith("not applicable")
    assert family_detail(checks["protocol"]).endswith("the program exited with status 0")
    assert client.process.returncode == 0


@pytest.mark.parametrize(
    ("mode", "detail"),
    [
        # A request on a fixture names it; hello is on none.
        ("crash", "chapter: request 1 (forward): the program exited with status 3; "
                  "stderr: fake_qkv: segmentation fault (pretend)"),
        ("sleep", "chapter: request 1 (forward): no reply within 0.3 s (--timeout)"),
        ("garbage", "chapter: request 1 (forward): malformed reply: not JSON"),
        ("nan", "chapter: request 1 (forward): malformed reply: NaN is not a finite number"),
        ("wrong-id", 'chapter: request 1 (forward): malformed reply: "id" is 101, expected 1'),
        ("bad-version", "request 0 (hello): the program speaks version 2, not the integer 1"),
        ("version-true", "request 0 (hello): the program speaks version true, not the integer 1"),
        ("version-null", "request 0 (hello): the program speaks version null, not the integer 1"),
    ],
    ids=["crash", "timeout", "garbage", "nan", "wrong-id", "bad-version", "version-true",
         "version-null"],
)
def test_a_broken_program_fails_protocol_and_the_family_being_checked(
    chapter: list[Case], mode: str, detail: str
) -> None:
    with CommandClient(f"{FAKE} {mode}", 0.3) as client:
        result = run_checks(client, chapter, 1e-9)
    checks = {c.name: c for c in result.checks}
    assert not checks["protocol"].passed
    assert family_detail(checks["protocol"]).startswith(detail)
    assert not checks["forward"].passed
    assert client.process.poll() is not None  # ended, not left behind
    if mode == "crash":
        assert "segmentation fault" in result.stderr


def test_a_program_that_does_not_exit_after_bye_is_ended(chapter: list[Case]) -> None:
    with CommandClient(f"{FAKE} linger", 0.5) as client:
        result = run_checks(client, chapter, 1e-9)
    protocol = result.checks[0]
    assert protocol.name == "protocol" and not protocol.passed
    assert "did not exit" in family_detail(protocol)
    assert client.process.poll() is not None


def test_closing_early_ends_the_program_as_ctrl_c_does() -> None:
    client = CommandClient(f"{FAKE} sleep", 5.0)
    with pytest.raises(KeyboardInterrupt), client:
        raise KeyboardInterrupt
    assert client.process.poll() is not None


def test_calls_after_a_breakage_fail_without_waiting() -> None:
    with CommandClient(f"{FAKE} crash", 5.0) as client:
        zeros = np.zeros((1, 1, 1))
        with pytest.raises(Broken):
            client.call("forward", (zeros, np.ones((1, 1)), np.ones((1, 1)), np.ones((1, 1))))
        with pytest.raises(Broken, match="stopped earlier"):
            client.call("forward", (zeros, np.ones((1, 1)), np.ones((1, 1)), np.ones((1, 1))))


@pytest.mark.parametrize("command", ["", "/nonexistent/qkv-program", "'unbalanced"],
                         ids=["empty", "missing", "quotes"])
def test_a_program_that_cannot_start(command: str) -> None:
    with pytest.raises(CommandNotStarted):
        CommandClient(command, 1.0)


def test_a_program_that_advertises_no_backward(chapter: list[Case]) -> None:
    with CommandClient(f"{FAKE} forward-only", 5.0) as client:
        result = run_checks(client, chapter, 1e-9)
    checks = {c.name: c for c in result.checks}
    assert not client.has_backward
    for family in ("reverse", "gradcheck"):
        assert family_detail(checks[family]) == "not applicable: no backward"
        assert not checks[family].passed and not checks[family].applicable
    assert checks["forward"].passed and checks["shapes"].passed and checks["replay"].passed
    assert family_detail(checks["shapes"]).startswith("forward keeps empty batch")
    assert checks["protocol"].passed, checks["protocol"].detail  # never sent a backward
    assert not result.passed


def test_malformed_ops_in_hello_fail_the_protocol(chapter: list[Case]) -> None:
    with CommandClient(f"{FAKE} bad-ops", 5.0) as client:
        result = run_checks(client, chapter, 1e-9)
    assert family_detail(result.checks[0]) == (
        'request 0 (hello): malformed reply: "ops" must be a list of strings')


def test_ctrl_c_ends_qkv_and_the_program_cleanly(tmp_path: Path) -> None:
    """A real SIGINT to qkv only (not to the program's group) while it waits for a reply."""
    ready = tmp_path / "pid"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FAKE_QKV_READY": str(ready)}
    qkv = subprocess.Popen(
        [sys.executable, "-m", "qkvcli", "check", "--command", f"{FAKE} sleep",
         "--timeout", "60", "--random", "0", "-f", "text"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True,
    )
    pid = None
    try:
        for _ in range(400):  # up to 20 s for start-up on a slow machine; not a timing test
            if ready.exists() or qkv.poll() is not None:
                break
            time.sleep(0.05)
        assert ready.exists(), qkv.communicate()
        pid = int(ready.read_text())
        qkv.send_signal(signal.SIGINT)
        out, err = qkv.communicate(timeout=30)
        assert qkv.returncode == 130
        assert err == "qkv: interrupted\n"
        assert out == ""
        with pytest.raises(ProcessLookupError):  # ended and reaped, not orphaned
            os.kill(pid, 0)
    finally:
        if qkv.poll() is None:
            qkv.kill()
            qkv.wait()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_the_worked_exchange_in_the_protocol_doc_is_what_the_reference_program_says() -> None:
    text = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    block = text.split("## A complete worked exchange", 1)[1].split("```\n", 1)[1]
    block = block.split("```", 1)[0]
    sent = [line[2:] for line in block.splitlines() if line.startswith("> ")]
    wanted = [line[2:] for line in block.splitlines() if line.startswith("< ")]
    program = ROOT / "examples" / "implementations" / "command_qkv.py"
    done = subprocess.run([sys.executable, str(program)], input="\n".join(sent) + "\n",
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0
    assert done.stdout.splitlines() == wanted


LOSSY = f"{shlex.quote(sys.executable)} {Path(__file__).resolve().parent / 'programs' / 'lossy_qkv.py'}"


@pytest.mark.parametrize(
    ("mode", "named"),
    [("decimals", "query is written with 6 decimal places (largest scaled error 4.3e-07)"),
     ("float32", "query agrees only to 2.3e-08 and every value is a float32: float32 arithmetic")],
    ids=["decimals", "float32"],
)
def test_a_lossy_writer_fails_the_precision_fixture_with_its_measured_error(
    mode: str, named: str,
) -> None:
    from qkvcli.check.cases import precision_case

    chapter = chapter_case()
    cases = [chapter, precision_case(chapter.step, chapter.tolerance)]  # what --random 0 checks
    with CommandClient(f"{LOSSY} {mode}", 5.0) as client:
        result = run_checks(client, cases, 1e-9)
    checks = {c.name: c for c in result.checks}
    assert family_detail(checks["forward"]).startswith("precision[1,3,4->2]: query[0,0,0] = ")
    assert named in family_detail(checks["forward"])
    assert "written with" in family_detail(checks["reverse"]) or "float32" in family_detail(
        checks["reverse"])
    # Central differences of a lossy forward measure its rounding: not run, not a failure.
    assert checks["gradcheck"].outcome == "not-run"
    assert family_detail(checks["gradcheck"]).startswith("not run: forward agrees only to a lossy")
    assert not result.passed


def test_the_precision_fixture_is_exact_neither_in_6_decimals_nor_in_float32() -> None:
    from qkvcli.check.cases import precision_case

    case = precision_case(1e-6, 2e-6)
    for values in (case.input, *case.weights, *case.upstream):
        flat = values.reshape(-1)
        assert all(float(f"{v:.6f}") != v for v in flat)
        assert not np.any(flat.astype(np.float32).astype(np.float64) == flat)


def test_a_tolerance_below_float64_rounding_is_said_to_be_the_tolerance() -> None:
    from qkvcli.check.cases import precision_case, random_cases

    chapter = chapter_case()
    cases = [chapter, precision_case(chapter.step, chapter.tolerance),
             *random_cases(4, 26, chapter.step, chapter.tolerance)]
    with CommandClient(CORRECT, 5.0) as client:
        result = run_checks(client, cases, 0.0)
    details = [family_detail(c) for c in result.checks if c.outcome == "failed"]
    assert details, "the reference differs from qkv's engine in the last bits somewhere"
    assert all("float64 rounding: a tolerance of 0.0 is below float64 precision" in d
               for d in details), details
    assert not any("float32" in d for d in details)


def test_the_runner_s_binary_tensors_are_exact_and_checked() -> None:
    values = np.array([0.1, -0.0, 1e-310, 2.0**-1074, 1.7976931348623157e308, 1 / 3])
    line = encode({"t": encode_tensor(values.reshape(2, 3), binary=True)})
    assert b'"float64"' in line and b'"values"' not in line
    back = decode_tensor(decode(line), "t", 100, binary=True)
    assert back.shape == (2, 3) and back.reshape(-1).tobytes() == values.tobytes()
    with pytest.raises(Malformed, match="must be"):  # a --command reply may not use it
        decode_tensor(decode(line), "t", 100)
    short = b'{"t": {"shape": [2], "float64": "AAAAAAAA8D8="}}'
    with pytest.raises(Malformed, match="does not hold 2 float64 values"):
        decode_tensor(decode(short), "t", 100, binary=True)
    infinite = encode({"t": {"shape": [1], "float64": "AAAAAAAA8H8="}})
    with pytest.raises(Malformed, match="not finite"):
        decode_tensor(decode(infinite), "t", 100, binary=True)


def test_a_bad_result_s_tensors_cross_only_from_qkv_s_runner_as_bytes() -> None:
    """NaN crosses in a bad-result reply's ``"results"`` (float64 bytes), each shaped
    within the reply's budget; anything else there is no tensors at all."""
    from qkvcli.protocol.wire import decode_unfinished

    nan = np.array([[np.nan, 1.0], [np.inf, -2.5]])
    reply = decode(encode({"id": 1, "error": "x", "bad_result": True,
                           "results": {"t": encode_tensor(nan, binary=True)}}))
    back = decode_unfinished(reply, ("t",), 100)
    assert back is not None and back[0].tobytes() == nan.tobytes()
    assert decode_unfinished(reply, ("t",), 3) is None  # four values claimed: beyond budget
    assert decode_unfinished(reply, ("t", "u"), 100) is None  # not every result
    assert decode_unfinished({"results": {"t": encode_tensor(np.ones(2))}},
                             ("t",), 100) is None  # decimal values: not the runner's
    assert decode_unfinished({}, ("t",), 100) is None


def test_a_python_result_holding_nan_fails_carrying_its_tensors(tmp_path: Path) -> None:
    """The runner still refuses a result holding NaN (a failed call, said so), and gives
    qkv the tensors it returned, for the diagnosis; a program's NaN stays malformed."""
    from qkvcli.protocol.errors import BadResult
    from qkvcli.protocol.runner import start_python

    path = tmp_path / "nan_rope.py"
    path.write_text("import numpy as np\n\ndef rope(x, base, offset):\n"
                    "    y = np.array(x)\n    y[..., 0, 0] = np.nan\n    return y\n",
                    encoding="utf-8")
    client = start_python(str(path), 10.0)
    try:
        x = np.arange(8.0).reshape(1, 2, 4)
        with pytest.raises(BadResult, match="rope's rotated holds NaN or infinity") as raised:
            client.call("rope", (x, 100.0, 0))
        results = raised.value.results
        assert results is not None and len(results) == 1
        assert np.isnan(results[0][0, 0, 0]) and np.array_equal(results[0][0, 1], x[0, 1])
    finally:
        client.close()
