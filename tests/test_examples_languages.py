"""The Rust, Node and C ``--command`` examples: they build, pass ``qkv check``, and keep floats exact.

Each language is skipped (with the reason) when its toolchain is missing; each program
is built once per module into a temporary directory, never into ``examples/``. A
wrong-on-purpose run per language proves the checks can fail and that the failure
names the bug the ``--wrong`` flag plants.
"""

from __future__ import annotations

import json
import shlex
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from qkvcli.cli import main

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
BUILD_TIMEOUT = 240  # seconds: a cold cargo build on a busy 2-core machine
RUN_TIMEOUT = 60
LANGUAGES = ["rust", "node", "c"]


def _tool(*names: str) -> str:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    pytest.skip(f"{' or '.join(names)} not found: this language's example is not checked")


def _build(argv: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=BUILD_TIMEOUT,
                            check=False)
    assert result.returncode == 0, f"{shlex.join(argv)} failed:\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def rust(tmp_path_factory: pytest.TempPathFactory, rust_example: Path) -> list[str]:
    cargo = _tool("cargo")
    target = tmp_path_factory.mktemp("rust-target")
    manifest = str(rust_example)  # a copy: cargo writes Cargo.lock beside it
    _build([cargo, "build", "--offline", "--release", "--quiet", "--manifest-path", manifest,
            "--target-dir", str(target)])
    return [str(target / "release" / "qkv_projections")]


@pytest.fixture(scope="module")
def node() -> list[str]:
    return [_tool("node"), str(EXAMPLES / "node" / "qkv_projections.js")]


@pytest.fixture(scope="module")
def c(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    compiler = _tool("cc", "gcc", "clang")
    binary = tmp_path_factory.mktemp("c-build") / "qkv_projections"
    # The README's one-line build; a learner copying it should see no warnings either.
    built = _build([compiler, "-std=c99", "-O2", "-Wall", "-Wextra", "-pedantic", "-o", str(binary),
                    str(EXAMPLES / "c" / "qkv_projections.c"), "-lm"])
    assert built.stderr == "", built.stderr
    return [str(binary)]


@pytest.fixture(params=LANGUAGES)
def program(request: pytest.FixtureRequest) -> list[str]:
    argv: list[str] = request.getfixturevalue(request.param)
    return argv


def check(argv: list[str], *options: str) -> Any:
    return CliRunner().invoke(main, ["check", "--command", shlex.join(argv), *options])


@pytest.fixture
def pytest_request(request: pytest.FixtureRequest) -> pytest.FixtureRequest:
    """pytest's request, under a name that leaves ``request`` to the protocol's."""
    return request


HEADS = {"rust": True, "node": True, "c": True}  # which examples implement a head too
ROPE_MHA = {"rust": True, "node": True, "c": True}  # ... and RoPE and multi-head attention


def offered(request: pytest.FixtureRequest) -> list[str]:
    """The operations the example under test lists in its hello reply."""
    language = request.node.callspec.params["program"]
    return ["forward", "backward", *(["head_forward", "head_backward"] if HEADS[language] else []),
            *(["rope", "rope_reverse", "mha_forward", "mha_backward"] if ROPE_MHA[language]
              else [])]


@pytest.mark.parametrize("options", [[], ["--random", "2"]], ids=["defaults", "random-2"])
def test_the_example_passes_every_check(program: list[str], options: list[str],
                                        request: pytest.FixtureRequest) -> None:
    result = check(program, "--format", "text", *options)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    head = HEADS[request.node.callspec.params["program"]]
    counted = 19 if head else 8  # a head adds 12 families, head-purity N/A for a program
    # RoPE's 9 families and multi-head attention's 10, each with its purity N/A for a program
    counted += 17 if ROPE_MHA[request.node.callspec.params["program"]] else 0
    assert any(line.split()[:2] == ["head-forward", "PASS"] for line in lines) is head
    assert lines[-1] == f"verdict: PASS ({counted} of {counted} checks passed)", result.stdout
    protocol = [line for line in lines if line.startswith("protocol ")]
    assert protocol and protocol[0].split()[1] == "PASS", result.stdout
    contrast = "contrast[2,4,5->3]," if head else ""  # a head's slips told apart there
    assert lines[1].startswith(f"fixtures=chapter,precision[1,3,4->2],{contrast}random-1[")
    assert lines[1].count(",random-") == (2 if options else 4)


# (language, flag value, families that must fail, family naming the bug, the name it gives)
WRONG = [
    ("rust", "value-uses-key-weight", {"forward", "reverse", "independence", "gradcheck",
                                       "head-forward", "head-reverse", "head-gradcheck"},
     "forward",
     "value equals X W_K: computed with the key weight"),
    ("rust", "head-no-rowsum", {"head-reverse", "head-gradcheck", "head-single-token"},
     "head-reverse",
     "the softmax backward lacks its row-sum term (dZ = A * dA)"),
    ("node", "no-value-path", {"reverse", "gradcheck", "head-reverse", "head-gradcheck"}, "reverse",
     "grad_input misses the value path"),
    ("node", "head-no-rowsum", {"head-reverse", "head-gradcheck", "head-single-token"},
     "head-reverse",
     "the softmax backward lacks its row-sum term (dZ = A * dA)"),
    ("node", "rope-half-split", {"rope", "rope-reverse", "multi-head", "multi-head-reverse"},
     "rope", "RoPE pairs coordinate i with i + d/2 (half-split) instead of the adjacent"),
    ("c", "head-dk-uses-ds", {"head-reverse", "head-gradcheck"}, "head-reverse",
     "grad_key is computed with dS instead of dS^T (dK = dS Q)"),
    ("c", "key-path-uses-query-weight", {"reverse", "gradcheck", "head-reverse", "head-gradcheck"},
     "reverse",
     "grad_input's key path uses W_Q instead of W_K (dL/dK W_Q^T)"),
]


@pytest.mark.parametrize(("language", "flag", "failing", "family", "named"), WRONG,
                         ids=[f"{row[0]}-{row[1]}" for row in WRONG])
def test_a_wrong_on_purpose_run_fails_and_names_the_bug(
        request: pytest.FixtureRequest, language: str, flag: str, failing: set[str], family: str,
        named: str) -> None:
    argv = [*request.getfixturevalue(language), "--wrong", flag]
    result = check(argv, "--format", "json", "--random", "2")
    assert result.exit_code == 1, result.output
    document = json.loads(result.stdout)
    assert document["passed"] is False
    assert {c["name"] for c in document["checks"] if c["outcome"] == "failed"} == failing
    details = [f["detail"] for f in document["failures"] if f["check"] == family]
    assert details and all(named in detail for detail in details), details
    assert document["stderr"] == ""


# Doubles a digit-losing writer or a sloppy reader gets wrong (the sign of zero apart:
# every sum starts at +0.0, as NumPy's does, so no projection ever yields -0.0).
AWKWARD = [0.1, 1 / 3, 2.0**-1074, 1e-310, 2.2250738585072014e-308, 1.7976931348623157e308,
           1e21, 1e-7, 0.30000000000000004, -123.456, 2.0**60, 1e16, 2.0**53 + 2, -1.5e-300, 3.0]


def _bits(value: float) -> bytes:
    return struct.pack("<d", value)


def _digits(token: str) -> int:
    """Significant digits of a JSON number's text: ``"1.50e-7"`` has 2."""
    mantissa = token.lower().split("e")[0].lstrip("-").replace(".", "")
    return len(mantissa.strip("0")) or 1


def test_numbers_cross_the_pipe_exactly_and_shortest(program: list[str],
                                                     pytest_request: pytest.FixtureRequest) -> None:
    # Q = X I, K = X (-I), V = X I: exact in IEEE arithmetic, so what comes back must be
    # the very doubles sent, bit for bit, spelled with no more digits than Python's repr.
    width = len(AWKWARD)
    identity = [1.0 if i == j else 0.0 for i in range(width) for j in range(width)]
    negated = [-v for v in identity]
    request = {"id": 1, "op": "forward", "input": {"shape": [1, 1, width], "values": AWKWARD},
               "w_query": {"shape": [width, width], "values": identity},
               "w_key": {"shape": [width, width], "values": negated},
               "w_value": {"shape": [width, width], "values": identity}}
    lines = [{"id": 0, "op": "hello", "version": 1}, request]
    # No bye: closing stdin must end the program too (status 0).
    sent = "".join(json.dumps(line) + "\n" for line in lines)
    done = subprocess.run(program, input=sent, capture_output=True, text=True, timeout=RUN_TIMEOUT,
                          check=False)
    assert done.returncode == 0, done.stderr
    hello, reply = done.stdout.splitlines()
    assert json.loads(hello) == {"id": 0, "version": 1, "ops": offered(pytest_request)}
    raw = json.loads(reply, parse_float=str, parse_int=str)
    assert raw["id"] == "1"
    for name, sign in (("query", 1.0), ("key", -1.0), ("value", 1.0)):
        assert raw[name]["shape"] == ["1", "1", str(width)]  # integers, not 1.0
        for token, sent_value in zip(raw[name]["values"], AWKWARD, strict=True):
            expected = sign * sent_value
            assert _bits(float(token)) == _bits(expected), (name, token, expected)
            assert _digits(token) <= _digits(repr(expected)), (name, token, repr(expected))


def test_the_rust_json_unit_tests_pass(rust: list[str], rust_example: Path) -> None:
    cargo = _tool("cargo")
    target = Path(rust[0]).parent.parent
    done = _build([cargo, "test", "--offline", "--release", "--quiet", "--manifest-path",
                   str(rust_example), "--target-dir", str(target)])
    assert "test result: ok. 5 passed" in done.stdout, done.stdout


def test_node_writes_negative_zero_with_its_sign_and_refuses_infinity(node: list[str]) -> None:
    script = ("const m = require(process.argv[1]);"
              "const out = [-0, 0.1, 1e21, 5e-324].map(m.formatNumber);"
              "for (const bad of [NaN, Infinity]) {"
              "  try { m.encode({v: [bad]}); out.push('accepted'); } catch (e) { out.push(e.message); } }"
              "process.stdout.write(JSON.stringify(out));")
    done = subprocess.run([node[0], "-e", script, node[1]], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        "-0.0", "0.1", "1e+21", "5e-324",
        "a result overflowed: NaN is not a number JSON can hold",
        "a result overflowed: Infinity is not a number JSON can hold"]
    assert struct.pack("<d", json.loads("[-0.0]")[0]) == struct.pack("<d", -0.0)


def test_an_overflowing_result_is_an_error_reply_not_a_broken_line(program: list[str]) -> None:
    big = {"id": 1, "op": "forward", "input": {"shape": [1, 1, 1], "values": [10.0]},
           **{name: {"shape": [1, 1], "values": [1.7976931348623157e308]}
              for name in ("w_query", "w_key", "w_value")}}
    done = subprocess.run(program, input=json.dumps(big) + "\n", capture_output=True, text=True,
                          timeout=RUN_TIMEOUT, check=False)
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout)
    assert list(reply) == ["id", "error"] and reply["id"] == 1
    # From finite inputs only an overflow makes a non-finite result.
    assert "overflowed" in reply["error"] and "not a number JSON can hold" in reply["error"], reply


def test_an_unknown_op_is_answered_with_an_error(program: list[str]) -> None:
    lines = [{"id": 5, "op": "layer_forward"}, {"id": 6, "op": "bye"}]
    done = subprocess.run(program, input="".join(json.dumps(m) + "\n" for m in lines),
                          capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False)
    assert done.returncode == 0, done.stderr
    first, bye = (json.loads(line) for line in done.stdout.splitlines())
    assert first == {"id": 5, "error": 'unknown op "layer_forward"'}
    assert bye == {"id": 6}



def test_the_protocol_docs_worked_exchange(program: list[str],
                                           request: pytest.FixtureRequest) -> None:
    text = (EXAMPLES.parent / "docs" / "protocol.md").read_text(encoding="utf-8")
    block = text.split("## A complete worked exchange", 1)[1].split("```\n", 1)[1].split("```", 1)[0]
    sent = [line[2:] for line in block.splitlines() if line.startswith("> ")]
    wanted = [json.loads(line[2:]) for line in block.splitlines() if line.startswith("< ")]
    done = subprocess.run(program, input="\n".join(sent) + "\n", capture_output=True, text=True,
                          timeout=RUN_TIMEOUT, check=False)
    assert done.returncode == 0, done.stderr
    got = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(got) == len(wanted)
    for reply, expected in zip(got, wanted, strict=True):
        if "error" in expected:  # each program words its rejection its own way
            assert set(reply) == {"id", "error"} and reply["id"] == expected["id"], reply
            assert "rank" in reply["error"], reply
        elif "version" in expected:  # the examples also list their operations
            assert reply == {**expected, "ops": offered(request)}
        else:
            assert reply == expected
