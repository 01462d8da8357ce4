"""Fixture parsing: tensor forms, defaults, and problems reported with their JSON location."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qkvcli.reading.json_values import parse_json_text
from qkvcli.reading.limits import DEFAULT_SEED
from qkvcli.reading.load import bundled_fixture_text, load_fixture
from qkvcli.reading.parse import fixture_problems, parse_fixture
from qkvcli.reading.problems import FixtureError

from .conftest import CHAPTER_FIXTURE


def base() -> dict[str, Any]:
    return {
        "input": [[[1, 2, -1], [0, 1, 2]]],
        "weights": {
            "query": [[1, 0], [0, 1], [1, -1]],
            "key": [[0, 1], [1, 0], [-1, 1]],
            "value": [[1, 1], [1, -1], [0, 2]],
        },
    }


def test_bundled_fixture_equals_the_repository_copy() -> None:
    assert bundled_fixture_text() == CHAPTER_FIXTURE.read_text(encoding="utf-8")


def test_chapter_fixture_loads() -> None:
    fixture = load_fixture(CHAPTER_FIXTURE)
    assert fixture.chapter == "26-qkv-projections"
    assert fixture.seed == 26
    assert (fixture.batch, fixture.tokens, fixture.d_model, fixture.d_head) == (1, 2, 3, 2)
    assert fixture.upstream[2].reshape(-1).tolist() == [2, 1, 0, -0.5]
    assert (fixture.step, fixture.tolerance, fixture.samples) == (1e-6, 2e-6, None)


def test_defaults() -> None:
    fixture = parse_fixture(base(), default_chapter="mine")
    assert fixture.chapter == "mine"
    assert fixture.seed == DEFAULT_SEED
    assert all(u.shape == (1, 2, 2) and np.all(u == 1) for u in fixture.upstream)
    assert fixture.names[0] == "decoder.block.0.attention.query.weight"


def test_tensor_forms_agree() -> None:
    doc = base()
    doc["weights"]["query"] = {"shape": [3, 2], "values": [1, 0, 0, 1, 1, -1]}
    doc["weights"]["key"] = {"values": [[0, 1], [1, 0], [-1, 1]], "name": "k.w"}
    doc["input"] = {"shape": [1, 2, 3], "values": [1, 2, -1, 0, 1, 2]}
    fixture = parse_fixture(doc)
    reference = parse_fixture(base())
    for a, b in zip(fixture.weights, reference.weights, strict=True):
        assert a.tobytes() == b.tobytes()
    assert fixture.input.tobytes() == reference.input.tobytes()
    assert fixture.names[1] == "k.w"


def test_empty_axes_are_valid() -> None:
    doc = base()
    doc["input"] = {"shape": [0, 2, 3], "values": []}
    assert parse_fixture(doc).input.shape == (0, 2, 3)
    doc["input"] = [[]]
    with pytest.raises(FixtureError) as caught:
        parse_fixture(doc)
    assert str(caught.value) == (
        "$.input: Q/K/V input must have rank three [batch, tokens, model_width], got rank 2; "
        "an empty nested list cannot show its inner axes, so write an empty input as "
        '{"shape": [0, tokens, d_model], "values": []}'
    )
    doc["input"] = {"shape": [2, 0, 3], "values": []}
    assert parse_fixture(doc).input.shape == (2, 0, 3)


def test_bom_is_accepted() -> None:
    data = parse_json_text("\ufeff" + json.dumps(base()))
    assert parse_fixture(data).d_model == 3


def mutate(path: str, value: Any) -> dict[str, Any]:
    doc = base()
    target: Any = doc
    keys = path.split(".")
    for key in keys[:-1]:
        target = target[key]
    target[keys[-1]] = value
    return doc


BAD = [
    ("unknown-top-key", {**base(), "inptu": 1},
     '$: unknown key "inptu" (did you mean "input"?); expected one of chapter, seed, input, '
     "weights, upstream, gradcheck, expect, value_width"),
    ("missing-weights", {"input": [[[1]]]}, '$: missing key "weights"'),
    ("model-mismatch", mutate("weights.key", [[0, 1], [1, 0], [-1, 1], [0, 0]]),
     "$.weights: Q/K/V model widths must match, got query 3, key 4, value 3"),
    ("head-mismatch", mutate("weights.key", [[0, 1, 0], [1, 0, 0], [-1, 1, 0]]),
     "$.weights: Q/K/V head widths must match, got query 2, key 3, value 2"),
    ("duplicate-names", mutate("weights.key", {"name": "decoder.block.0.attention.query.weight",
                                               "values": [[0, 1], [1, 0], [-1, 1]]}),
     '$.weights.key.name: parameter name "decoder.block.0.attention.query.weight" first appears '
     "at index 0 and repeats at index 1"),
    ("bad-name", mutate("weights.value", {"name": "Value", "values": [[1, 1], [1, -1], [0, 2]]}),
     "$.weights.value.name: parameter name byte 0 must be lowercase ASCII, a digit, underscore, "
     "or dot; got 'V' (0x56)"),
    ("input-width", mutate("input", [[[1, 2, -1, 0]]]),
     "$.input: Q/K/V input final width must equal model width 3, got 4"),
    ("ragged", mutate("input", [[[1, 2, -1], [0, 1]]]),
     "$.input[0][1]: ragged nesting: expected length 3, got 2"),
    ("boolean", mutate("input", [[[1, True, -1]]]), "$.input[0][0][1]: expected a number, got boolean"),
    ("count-mismatch", mutate("weights.query", {"shape": [3, 2], "values": [1, 2, 3]}),
     "$.weights.query.values: shape [3,2] needs 6 values, got 3"),
    ("negative-dim", mutate("weights.query", {"shape": [3, -2], "values": []}),
     "$.weights.query.shape[1]: expected a non-negative integer, got -2"),
    ("float-dim", mutate("weights.query", {"shape": [3, 2.5], "values": []}),
     "$.weights.query.shape[1]: expected a non-negative integer, got 2.5"),
    ("absurd-shape", mutate("input", {"shape": [100000, 100000, 100000], "values": []}),
     "$.input.shape: shape [100000,100000,100000] has 1000000000000000 elements, more than the "
     "limit 134217728 (raise it with --max-elements)"),
    ("overflow", mutate("input", [[[1e400, 0, 0]]]),
     "$.input[0][0][0]: number is too large for binary64"),
    ("upstream-shape", mutate("upstream", {"key": [[[1, 2, 3], [4, 5, 6]]]}),
     "$.upstream.key: expected shape [1,2,2] (batch, tokens, d_head), got [1,2,3]"),
    ("bad-step", mutate("gradcheck", {"step": 0}),
     "$.gradcheck.step: central-difference step 0.0 must be positive and finite"),
    ("bad-samples", mutate("gradcheck", {"samples": 0}),
     "$.gradcheck.samples: gradient check needs at least one sample per tensor"),
    ("bad-seed", mutate("seed", -1), "$.seed: seed must be between 0 and 18446744073709551615"),
    ("not-object", [1, 2], "$: expected an object, got array"),
]


@pytest.mark.parametrize(("doc", "message"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_fixtures_name_the_location(doc: Any, message: str) -> None:
    with pytest.raises(FixtureError) as caught:
        parse_fixture(doc)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": NaN}',
         "$.a: line 1 column 7: NaN is not a number JSON allows; write a finite number"),
        ('{"a": 1, "a": 2}', '$: line 1 column 10: duplicate key "a"'),
        ('{"a": ', "line 1 column 7: invalid JSON: expecting value"),
        ("[" * 100000, "invalid JSON: nested too deeply"),
    ],
    ids=["nan", "duplicate-key", "truncated", "deep"],
)
def test_strict_json(text: str, message: str) -> None:
    with pytest.raises(FixtureError) as caught:
        parse_json_text(text)
    assert str(caught.value) == message


def test_non_utf8_file(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    path.write_bytes(b'{"input": "\xff"}')
    with pytest.raises(FixtureError) as caught:
        load_fixture(path)
    assert str(caught.value) == "not UTF-8 text (byte 11 is 0xff)"


def test_null_weights_are_a_problem_not_a_silent_skip() -> None:
    # Found by the fuzz test: "weights": null once gave no problem, yet no fixture either.
    data = {"input": [[[1, 2, -1], [0, 1, 2]]], "weights": None}
    assert [str(p) for p in fixture_problems(data)] == ["$.weights: expected an object, got null"]
    with pytest.raises(FixtureError, match=r"^\$\.weights: expected an object, got null$"):
        parse_fixture(data)


@pytest.mark.parametrize(
    ("name", "got"),
    [("Decoder.q", "got 'D' (0x44)"), ("déc", "got 'é' (U+00E9)"), ("a\x1bb", "got '\\x1b' (0x1b)")],
    ids=["ascii", "non-ascii", "control"],
)
def test_a_bad_name_character_is_named(name: str, got: str) -> None:
    from qkvcli.reading.weights import check_name

    with pytest.raises(FixtureError) as caught:
        check_name(name, "$.weights.query.name")
    index = 0 if name[0] == "D" else 1
    assert str(caught.value) == (
        f"$.weights.query.name: parameter name byte {index} must be lowercase ASCII, a digit, "
        f"underscore, or dot; {got}"
    )
