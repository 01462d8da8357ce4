"""``qkv check``'s facts: the numbers each failure compared, the slips named, a passing
gradient check's worst point, and the views that read them and nothing else."""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from qkvcli.check.result import CheckResult
from qkvcli.cli import main
from qkvcli.core.results import Clause, Failure, FamilyCheck
from qkvcli.render.check import check_json, pieces
from qkvcli.render.schemas import report_schema
from qkvcli.render.views import Asked

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "implementations"


def _result(*failures: Failure, checks: tuple[FamilyCheck, ...] = ()) -> CheckResult:
    named = {f.family for f in failures}
    return CheckResult("impl.py", ("chapter",), checks or tuple(
        FamilyCheck(name, False, "failed", first=next(f for f in failures if f.family == name))
        for name in sorted(named)), failures)


def test_a_value_finding_publishes_the_numbers_it_compared() -> None:
    value = Clause("value-differs", ("grad_input", "[0,1,2]", 0.5, 3.0, 0.8333, 1e-9))
    result = _result(Failure("reverse", "chapter", "grad_input[0,1,2]", code="slip-differs",
                             facts=(("dv-uses-a",), value)))
    failure = check_json(result)["failures"][0]
    assert failure["compared"] == {
        "against": "engine", "tensor": "grad_input", "coordinate": [0, 1, 2], "actual": 0.5,
        "expected": 3.0, "scaled_error": 0.8333, "tolerance": 1e-9}
    words = "grad_value is computed with A instead of A^T (dV = A dO)"
    assert failure["slips"] == [words]
    assert check_json(result)["slips"] == [{"slip": words, "checks": ["reverse"]}]
    # the text repeats it above its verdict, from the same facts
    assert "".join(pieces(result, "text", Asked())).splitlines()[-2] == f"slip: {words} (reverse)"


def test_a_failing_gradient_checks_point_is_judged_by_its_findings_tolerance() -> None:
    point = Clause("point", ("grad_w_key[1,0]", -0.5, 1.5, 1.33, "near a kink"))
    found = check_json(_result(Failure("gradcheck", "chapter", "grad_w_key[1,0]",
                                       code="gradcheck-worst", facts=(point, 2e-6))))
    assert found["failures"][0]["compared"] == {
        "against": "central-difference", "tensor": "grad_w_key", "coordinate": [1, 0],
        "analytic": -0.5, "numerical": 1.5, "scaled_error": 1.33, "tolerance": 2e-6,
        "note": "near a kink"}
    assert found["failures"][0]["slips"] == [] and found["slips"] == []


def test_a_cache_finding_is_judged_by_its_absolute_error_and_the_steps_tolerance() -> None:
    step = Failure("cache-steps", "chapter", "output[0,3]", code="step-differs",
                   facts=(2, "output[0,3]", "0.25", "-0.5"))
    refused = Failure("cache-refusals", "chapter", "keys[0,1,0,1]", code="refusal-differs",
                      facts=("a step of two tokens", "keys[0,1,0,1]", "shape [1]", "shape [2]"))
    checks = (FamilyCheck("cache-steps", False, "failed", tolerance=1e-9, first=step),
              FamilyCheck("cache-refusals", False, "failed", first=refused))
    found = check_json(_result(step, refused, checks=checks))
    assert found["failures"][0]["compared"] == {
        "against": "causal-pass", "tensor": "output", "coordinate": [0, 3], "position": 2,
        "actual": 0.25, "expected": -0.5, "absolute_error": 0.75, "tolerance": 1e-9}
    assert found["failures"][1]["compared"] is None  # it compared shapes


def test_a_non_finite_number_is_json_s_spelling() -> None:
    value = Clause("value-differs", ("weights", "[0,0,0]", math.nan, 1.0, math.inf, 1e-9))
    found = check_json(_result(Failure("head-forward", "chapter", "weights[0,0,0]",
                                       code="value-differs", facts=value.facts)))
    compared = found["failures"][0]["compared"]
    assert (compared["actual"], compared["scaled_error"]) == ("NaN", "Infinity")
    json.dumps(found, allow_nan=False)  # nothing JSON cannot hold


def test_a_passing_gradient_checks_worst_point_is_published() -> None:
    result = CliRunner().invoke(main, ["check", str(EXAMPLES / "numpy_qkv.py"), "--random", "0",
                                       "-f", "json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert [w["check"] for w in document["worst"]] == ["gradcheck"]
    worst = document["worst"][0]
    assert worst["fixture"] in document["fixtures"]
    compared = worst["compared"]
    assert compared["against"] == "central-difference" and compared["tolerance"] == 2e-6
    assert compared["scaled_error"] <= compared["tolerance"]
    scaled = abs(compared["analytic"] - compared["numerical"]) / max(
        1.0, abs(compared["analytic"]), abs(compared["numerical"]))
    assert scaled == pytest.approx(compared["scaled_error"], rel=1e-6)
    assert document["slips"] == [] and document["failures"] == []
    assert "fixtures" in report_schema("check")["required"]


def test_the_views_read_the_document_not_the_record() -> None:
    """The page and the rich view touch the CheckResult only to hand it to check_json."""
    for module in ("explorer/check.py", "rich/check.py"):
        tree = ast.parse((ROOT / "qkvcli" / "render" / module).read_text(encoding="utf-8"))
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        assert not names & {"Clause", "Failure", "FamilyCheck"}, module
        uses = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == "result"]
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
                 and getattr(n.func, "id", "") == "check_json"]
        passed = [a for call in calls for a in call.args if isinstance(a, ast.Name)]
        assert uses and len(uses) == len(passed), module
