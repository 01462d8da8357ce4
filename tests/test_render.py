"""Golden tests: the chapter's report and trace equal the reference's output byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from qkvcli.check.chapter26 import build_evidence
from qkvcli.reading.load import load_fixture
from qkvcli.reading.parse import parse_fixture
from qkvcli.render.numbers import fmt_float, fmt_shape, fmt_vector
from qkvcli.render.report import evidence_json, published_tensors, render_json, render_text, render_trace

from .conftest import CHAPTER_FIXTURE, GOLDEN

SHARED_ANCHORS = Path(__file__).resolve().parents[2] / "shared" / "anchors" / "ch26"


@pytest.fixture(scope="module")
def chapter_evidence():  # type: ignore[no-untyped-def]
    return build_evidence(load_fixture(CHAPTER_FIXTURE))


def test_text_report_equals_the_anchor(chapter_evidence) -> None:  # type: ignore[no-untyped-def]
    expected = (GOLDEN / "ch26" / "expected.txt").read_bytes()
    assert render_text(chapter_evidence).encode("utf-8") == expected
    assert expected.count(b"\n") == 28


def test_trace_equals_the_anchor(chapter_evidence) -> None:  # type: ignore[no-untyped-def]
    expected = (GOLDEN / "ch26" / "diagram-trace.txt").read_bytes()
    assert render_trace(chapter_evidence).encode("utf-8") == expected
    assert expected.count(b"\n") == 17


@pytest.mark.skipif(not SHARED_ANCHORS.is_dir(),
                    reason="the course's shared reference outputs are not installed here "
                    "(tests/golden/ch26 holds the copies every other test uses)")
@pytest.mark.parametrize("name", ["expected.txt", "diagram-trace.txt"])
def test_golden_copies_equal_the_shared_anchors(name: str) -> None:
    assert (GOLDEN / "ch26" / name).read_bytes() == (SHARED_ANCHORS / name).read_bytes()


def test_numbers_match_the_reference_spelling() -> None:
    assert fmt_float(-0.0) == "0.000000"  # a zero reads as zero, never as -0.000000
    assert fmt_float(2e-6) == "0.000002"
    assert fmt_float(float("nan")) == "NaN"
    assert fmt_float(float("-inf")) == "-inf"
    assert fmt_vector(np.zeros((0, 3))) == "[]"
    assert fmt_shape((2, 0, 3)) == "[2,0,3]"


def test_other_fixture_reports_describe_that_fixture() -> None:
    rng = np.random.default_rng(0)
    doc = {
        "chapter": "my-fixture",
        "seed": 7,
        "input": rng.standard_normal((2, 3, 4)).tolist(),
        "weights": {b: rng.standard_normal((4, 5)).tolist() for b in ("query", "key", "value")},
    }
    evidence = build_evidence(parse_fixture(doc))
    text = render_text(evidence).splitlines()
    assert len(text) == 28
    assert text[0] == "chapter=my-fixture"
    assert text[2] == "config=batch:2 tokens:3 d_model:4 d_head:5 bias:false"
    assert text[12] == "shape_rule=[2,3,4]->three*[2,3,5]"
    assert text[13] == "batch_probe=[4,3,4]->three*[4,3,5]"
    assert text[14] == "empty_tokens=[2,0,4]->three*[2,0,5]"
    assert text[23] == (
        "gradcheck=input_checks:24 query_checks:20 key_checks:20 value_checks:20 "
        "tolerance:0.000002 passed:true"
    )
    assert text[24] == "initialization=seed:7 transactional:true independent:true"
    trace = render_trace(evidence).splitlines()
    assert len(trace) == 17
    assert trace[0].startswith("META|input_shape=[2,3,4]|model_width=4|head_width=5|")
    assert trace[12] == (
        "ERROR|case=input-width|rejected=true|message=Q/K/V input final width must equal "
        "model width 4, got 5"
    )
    assert trace[10].startswith("EMPTY_SHAPES|batch_input=[0,3,4]|batch_query=[0,3,5]")
    assert "|token_input=[4,0,4]|token_query=[4,0,5]|" in trace[10]


def test_json_report_round_trips_every_tensor(chapter_evidence) -> None:  # type: ignore[no-untyped-def]
    document = json.loads(render_json(chapter_evidence))
    assert document["passed"] is True
    assert document["loss"] == -2.0
    assert [c["name"] for c in document["checks"]] == [
        "forward", "reverse", "shapes", "rejected-inputs", "initialization", "independence",
        "replay", "gradcheck",
    ]
    assert {(c["family"], c["operation"]) for c in document["checks"]} >= {
        ("rejected-inputs", "projections")}
    assert document["config"] == {"batch": 1, "tokens": 2, "d_model": 3, "d_head": 2,
                                  "bias": False, "seed": 26, "layout": "separate"}
    assert set(document["tensors"]) == {
        "input", "query_weight", "key_weight", "value_weight", "query", "key", "value",
        "upstream_query", "upstream_key", "upstream_value", "input_gradient",
        "query_weight_gradient", "key_weight_gradient", "value_weight_gradient",
    }
    assert document["tensors"]["input_gradient"] == {
        "shape": [1, 2, 3], "values": [3.0, 1.5, 1.5, -1.5, 3.5, -5.0]
    }


def test_json_floats_round_trip_exactly() -> None:
    rng = np.random.default_rng(5)
    doc = {
        "input": rng.standard_normal((1, 2, 3)).tolist(),
        "weights": {b: rng.standard_normal((3, 2)).tolist() for b in ("query", "key", "value")},
    }
    evidence = build_evidence(parse_fixture(doc))
    document = json.loads(render_json(evidence))
    for name, array in published_tensors(evidence.primary).items():
        back = np.array(document["tensors"][name]["values"]).reshape(array.shape)
        assert back.tobytes() == array.tobytes(), name


def test_json_spells_non_finite_values_as_strings() -> None:
    doc = {"input": [[[1e308, 1e308]]],
           "weights": {"query": [[10], [10]], "key": [[1], [0]], "value": [[0], [1]]}}
    evidence = build_evidence(parse_fixture(doc))
    document = evidence_json(evidence)
    assert document["tensors"]["query"]["values"] == ["Infinity"]
    json.loads(render_json(evidence))  # valid JSON, no bare Infinity


def test_run_s_facts_publish_each_probe_s_verdict_and_the_expect_mismatches() -> None:
    data = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "examples"
                       / "chapter-with-expect.json").read_text(encoding="utf-8"))
    document = evidence_json(build_evidence(parse_fixture(data)))
    assert all(probe["kept"] is True for probe in document["shapes"].values())
    assert document["expect"] == {"names": list(data["expect"])[:-1], "values": 37,
                                  "tolerance": 0.0, "passed": True, "mismatches": []}
    data["expect"]["query"]["values"][3] = 5
    data["expect"]["loss"] = -1.5
    found = evidence_json(build_evidence(parse_fixture(data)))["expect"]
    assert not found["passed"] and found["mismatches"] == [
        {"name": "query", "coordinate": [0, 1, 1], "expected": 5.0, "actual": -1.0, "error": 1.2},
        {"name": "loss", "coordinate": [], "expected": -1.5, "actual": -2.0, "error": 0.25}]
    del data["expect"]
    assert "expect" not in evidence_json(build_evidence(parse_fixture(data)))


def test_a_probe_that_lost_a_shape_is_not_kept(chapter_evidence) -> None:  # type: ignore[no-untyped-def]
    shapes = chapter_evidence.shapes
    refused = shapes._replace(rule=shapes.rule._replace(refusal="rank"))
    document = evidence_json(chapter_evidence._replace(shapes=refused))
    assert document["shapes"]["rule"]["kept"] is False
    assert document["shapes"]["batch"]["kept"] is True


def test_the_gradient_check_publishes_its_worst_point(chapter_evidence) -> None:  # type: ignore[no-untyped-def]
    gradcheck = evidence_json(chapter_evidence)["gradcheck"]
    every = [check for tensor in gradcheck["tensors"] for check in tensor["checks"]]
    assert gradcheck["worst"] in every
    assert gradcheck["worst"]["scaled_error"] == max(check["scaled_error"] for check in every)
