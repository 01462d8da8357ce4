"""Findings are data: ``qkv check``'s families and ``expect`` build no sentences; render/ words them.

Static checks over the source (an f-string with words in it, a free-text ``detail``, a
code without words) and checks of the records themselves (no free-text field, every
fact plain data).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest

from qkvcli.check.diagnose import Precision
from qkvcli.check.expect import ExpectResult, Mismatch, compare_expectations
from qkvcli.check.reference import BACKWARD_BUGS, FORWARD_BUGS
from qkvcli.check.result import NOT_RUN, call_failure, not_run, not_run_after
from qkvcli.core.results import Clause, Failure, found_at
from qkvcli.protocol.errors import BadResult, Broken, Rejected
from qkvcli.reading.expect import Expectations
from qkvcli.render.check import (
    CLAUSE_WORDS,
    FINDING_WORDS,
    NOT_RUN_WHY,
    REQUEST_WORDS,
    SLIP_WORDS,
    failure_detail,
    say,
)
from qkvcli.render.wording import expect_detail

PACKAGE = Path(__file__).resolve().parents[1] / "qkvcli"
# The transport (client, wire, target) speaks to the implementation, not about it; errors.py
# holds exceptions, whose messages the house style lets format themselves.
TRANSPORT = {"client.py", "wire.py", "target.py", "errors.py"}
SCANNED = sorted(p for p in (PACKAGE / "check").glob("*.py") if p.name not in TRANSPORT)
SCANNED.append(PACKAGE / "reading" / "expect.py")
# Two words side by side in an f-string's own text: a sentence in the making. Names and
# places built from pieces ("W_{letter}[{row},0]", "{label} x{scale}") have none.
WORDS = re.compile(r"[A-Za-z]{2,}\s+\S|\S\s+[A-Za-z]{2,}")


def _exception_arguments(tree: ast.AST) -> set[int]:
    """The ids of the nodes inside a ``raise`` or a ``super().__init__(...)``."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        spot = None
        if isinstance(node, ast.Raise):
            spot = node.exc
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "__init__"):
            spot = node
        if spot is not None:
            inside.update(id(child) for child in ast.walk(spot))
    return inside


def _sentences(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    allowed = _exception_arguments(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and id(node) not in allowed:
            text = "".join(part.value for part in node.values
                           if isinstance(part, ast.Constant) and isinstance(part.value, str))
            if WORDS.search(text):
                found.append(f"{path.name}:{node.lineno}: {text!r}")
    return found


def test_no_finding_is_a_sentence_built_outside_render() -> None:
    assert len(SCANNED) > 5
    assert [line for path in SCANNED for line in _sentences(path)] == []


def test_the_scan_sees_a_sentence_and_lets_names_and_exceptions_pass(tmp_path: Path) -> None:
    source = tmp_path / "sample.py"
    source.write_text(
        "def f(name, where, spec):\n"
        "    a = f'{name}{where}'\n"
        "    b = f'W_{name}[{where},0]'\n"
        "    c = f'{name} x{where:g}'\n"
        "    if spec:\n"
        "        raise ValueError(f'implementation {spec} cannot be imported')\n"
        "    return f'{name} has the wrong shape'\n", encoding="utf-8")
    assert _sentences(source) == ["sample.py:7: ' has the wrong shape'"]


def _calls(name: str) -> list[tuple[Path, ast.Call]]:
    calls = []
    for path in SCANNED:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == name):
                calls.append((path, node))
    return calls


def test_only_the_protocol_finding_is_free_text() -> None:
    # Failure(family, fixture, coordinate, detail): the detail is the protocol's verdict
    # (the conversation's own, from target.py) and nothing else's.
    free = []
    for path, call in _calls("Failure"):
        detail = len(call.args) > 3 or any(k.arg == "detail" for k in call.keywords)
        family = call.args[0]
        if detail and not (isinstance(family, ast.Constant) and family.value == "protocol"):
            free.append(f"{path.name}:{call.lineno}")
    assert free == []


def _literal_codes() -> set[str]:
    codes = {call.args[0].value for _, call in _calls("Clause")
             if call.args and isinstance(call.args[0], ast.Constant)}
    codes |= {k.value.value for _, call in _calls("Failure") for k in call.keywords
              if k.arg == "code" and isinstance(k.value, ast.Constant)}
    return codes


def test_every_code_the_families_use_has_words() -> None:
    codes = _literal_codes()
    assert {"forward-differs", "reverse-differs", "gradcheck-worst", "slip"} <= codes
    assert codes - {"accepted"} <= set(CLAUSE_WORDS) | set(FINDING_WORDS)
    assert set(FORWARD_BUGS) | set(BACKWARD_BUGS) <= set(SLIP_WORDS)
    assert {"key-width", "grad-output", "rank-2", "input-width"} <= set(REQUEST_WORDS)


def _plain(fact: object) -> bool:
    if isinstance(fact, Clause):
        return all(_plain(f) for f in fact.facts)
    if isinstance(fact, tuple):
        return all(_plain(f) for f in fact)
    return fact is None or isinstance(fact, (str, int, float, Precision))


def test_a_finding_is_a_code_and_plain_facts_worded_by_the_renderer() -> None:
    mismatch = Clause("value-differs", ("key", "[0,0,0]", 0.0, 3.0, 1.0, 1e-9))
    failure = found_at("reverse", "chapter", "grad_input[0,0,0]", Clause(
        "reverse-differs", ((Clause("path-counts", (("value",), ())),
                             Clause("precision", (("grad_w_key",), Precision("float32", 2e-8),
                                                  1e-9))), mismatch)))
    assert (failure.detail, failure.code) == ("", "reverse-differs")
    assert _plain(failure.facts)
    assert failure_detail(failure) == (
        "grad_input misses the value path; grad_w_key agrees only to 2e-08 and every value "
        "is a float32: float32 arithmetic: key[0,0,0] = 0.0, expected 3.0 (scaled error 1 > "
        "1e-09)")
    assert say(mismatch) == failure_detail(found_at("forward", None, None, Clause(
        "forward-differs", (mismatch, None))))


def test_records_hold_no_words() -> None:
    # Failure.detail is the protocol's alone (above); the expect records have no text at all.
    assert Failure.__record_fields__ == ("family", "fixture", "coordinate", "detail",
                                         "no_backward", "not_run", "code", "facts")
    assert Clause.__record_fields__ == ("code", "facts")
    assert Mismatch.__record_fields__ == ("name", "coordinate", "expected", "actual", "error")
    assert ExpectResult.__record_fields__ == ("names", "values", "tolerance", "mismatches")
    for record in (Mismatch, ExpectResult):
        assert not hasattr(record, "detail") and not hasattr(record, "describe")
    result = compare_expectations(Expectations((("query", np.array([[1.0, 2.0]])),), -2.0, 0.0),
                                  {"query": np.array([[1.0, 3.0]]), "loss": -2.5})
    assert result.mismatches == (Mismatch("query", (0, 1), 2.0, 3.0, 1 / 3),
                                 Mismatch("loss", (), -2.0, -2.5, 0.2))
    assert expect_detail(result) == ("2 of 2 quantities differ: query[0,1]: expected 2.0, "
                                     "got 3.0; loss: expected -2.0, got -2.5 (tolerance 0.0)")


def test_every_reason_a_family_did_not_run_has_words_and_no_other_is_taken() -> None:
    assert set(NOT_RUN) == set(NOT_RUN_WHY)
    with pytest.raises(ValueError, match="not one of"):
        not_run("head-replay", "chapter", "head_forwards")


@pytest.mark.parametrize("operation", ["forward", "backward", "head_forward", "head_backward"])
def test_a_failed_call_is_said_one_way_for_every_operation(operation: str) -> None:
    rejected = call_failure("f", "chapter", "[1,2,3]", Rejected(operation, "ValueError: no"))
    assert failure_detail(rejected) == f"{operation} rejected a valid input [1,2,3]: ValueError: no"
    garbage = call_failure("f", "chapter", "[1,2,3]", BadResult(operation, f"{operation} returned int"))
    assert failure_detail(garbage) == f"{operation} returned int"
    stopped = call_failure("f", "chapter", "[1,2,3]", Broken(operation, "request 1: crashed"))
    assert failure_detail(stopped) == "not run: the implementation stopped answering (see protocol)"
    after = not_run_after("replay", "chapter", Rejected(operation, "ValueError: no"))
    assert after.not_run == operation
    assert failure_detail(after).startswith(f"not run: its {operation} failed (see ")
