"""The ``expect`` section: parsing, comparing, and its place among the evidence's checks."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from qkvcli.check.chapter26 import build_evidence
from qkvcli.check.expect import ExpectResult, Mismatch, compare_expectations
from qkvcli.reading.expect import Expectations
from qkvcli.reading.load import bundled_fixture_text, load_fixture
from qkvcli.reading.parse import fixture_problems, parse_fixture
from qkvcli.reading.problems import FixtureError
from qkvcli.render.wording import check_rows

CHAPTER: dict[str, Any] = json.loads(bundled_fixture_text())
# The chapter's values as the reference's report prints them (anchors/ch26/expected.txt);
# the loss -2.0 is <Q,U_Q> + <K,U_K> + <V,U_V> = -4 + 0.5 + 1.5 worked by hand.
REFERENCE: dict[str, Any] = {
    "query": [[[0, 3], [2, -1]]],
    "key": [[[3, 0], [-1, 2]]],
    "value": [[[3, -3], [1, 3]]],
    "loss": -2.0,
    "input_gradient": [[[3, 1.5, 1.5], [-1.5, 3.5, -5]]],
    "query_weight_gradient": [[1, 0], [1, 2], [-3, 4]],
    "key_weight_gradient": [[0.5, -1], [2, -2], [1.5, 1]],
    "value_weight_gradient": [[2, 1], [4, 1.5], [-2, -2]],
}


def _evidence(expect: dict[str, Any]) -> Any:
    return build_evidence(parse_fixture({**CHAPTER, "expect": expect}))


def test_reference_values_pass_exactly() -> None:
    evidence = _evidence(REFERENCE)
    check = check_rows(evidence)[-1]
    assert (check.name, check.passed) == ("expect", True)
    assert check.detail == "8 quantities, 37 values as expected (tolerance 0.0)"


def test_chapter_fixture_has_no_expect_check() -> None:
    evidence = build_evidence(load_fixture())
    assert [c.name for c in evidence.checks][-1] == "gradcheck"
    assert len(evidence.checks) == 8


def test_every_quantity_reports_its_first_mismatch_in_declared_order() -> None:
    wrong = dict(REFERENCE)
    wrong["value_weight_gradient"] = [[2, 1], [4, 1.5], [-2, 2]]
    wrong["query"] = [[[0, 3], [5, 6]]]
    wrong["loss"] = -3.0
    wrong["key"] = [[[3, 1], [-1, 2]]]
    check = check_rows(_evidence(wrong))[-1]
    assert not check.passed
    assert check.detail == (
        "4 of 8 quantities differ: query[0,1,0]: expected 5.0, got 2.0; "
        "key[0,0,1]: expected 1.0, got 0.0; loss: expected -3.0, got -2.0; and 1 more "
        "(tolerance 0.0)"
    )
    assert build_evidence(parse_fixture({**CHAPTER, "expect": wrong})).passed is False


def test_tolerance_is_a_scaled_error() -> None:
    expect = Expectations((("query", np.array([100.0, 0.5])),), None, 0.01)
    # |101 - 100| / 101 < 0.01 passes; |0.52 - 0.5| / 1 = 0.02 does not.
    result = compare_expectations(expect, {"query": np.array([101.0, 0.52])})
    assert result.mismatches == (
        Mismatch("query", (1,), 0.5, 0.52, pytest.approx(0.02)),  # type: ignore[arg-type]
    )


def test_non_finite_actual_values_never_pass() -> None:
    expect = Expectations((), 1.0, 1e300)
    result = compare_expectations(expect, {"loss": float("nan")})
    assert not result.passed


def test_empty_expect_section_passes_trivially() -> None:
    result = compare_expectations(Expectations(()), {})
    assert result == ExpectResult((), 0, 0.0, ())
    assert result.passed


def test_expectations_are_parsed_into_the_fixture() -> None:
    fixture = parse_fixture({**CHAPTER, "expect": {"loss": 1, "key": [[[1, 2], [3, 4]]],
                                                   "tolerance": 0.5}})
    assert fixture.expect is not None
    assert fixture.expect.loss == 1.0
    assert fixture.expect.tolerance == 0.5
    assert [name for name, _ in fixture.expect.tensors] == ["key"]


@pytest.mark.parametrize(
    ("expect", "message"),
    [
        ([1], "$.expect: expected an object, got array"),
        ({"loss": True}, "$.expect.loss: expected a number, got boolean"),
        ({"tolerance": "0"}, "$.expect.tolerance: expected a number, got string"),
        ({"value": [[[1, 2, 3], [4, 5, 6]]]},
         "$.expect.value: expected shape [1,2,2] (batch, tokens, d_head), got [1,2,3]"),
        ({"query_weight_gradient": [[1, 2, 3]]},
         "$.expect.query_weight_gradient: expected shape [3,2] (d_model, d_head), got [1,3]"),
    ],
    ids=["not-object", "loss-boolean", "tolerance-string", "value-shape", "weight-grad-shape"],
)
def test_bad_expectations(expect: Any, message: str) -> None:
    with pytest.raises(FixtureError) as raised:
        parse_fixture({**CHAPTER, "expect": expect})
    assert str(raised.value) == message
    assert [str(e) for e in fixture_problems({**CHAPTER, "expect": expect})] == [message]


def test_fixture_problems_is_empty_for_a_valid_fixture() -> None:
    assert fixture_problems({**CHAPTER, "expect": REFERENCE}) == []


def test_fixture_problems_keeps_locations() -> None:
    problems = fixture_problems({"weights": {"query": 1}, "seed": "x"})
    assert [(p.location, p.message) for p in problems] == [
        ("$", 'missing key "input"'),
        ("$.weights.query", "expected a nested array or an object with values, got number"),
        ("$.weights", 'missing key "key"'),
        ("$.weights", 'missing key "value"'),
        ("$.seed", "expected an integer, got string"),
    ]
