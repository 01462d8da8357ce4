"""Weight layouts: torch [out,in], packed in_proj_weight and separate give the same Q, K, V."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qkvcli.attention.fixture import head_of, parse_attend_fixture
from qkvcli.check.chapter26 import projections_of
from qkvcli.reading.fixture import uses_extensions
from qkvcli.reading.layouts import canonicalize, chapter_weights
from qkvcli.reading.load import load_fixture
from qkvcli.reading.parse import parse_fixture
from qkvcli.reading.problems import FixtureError

RNG = np.random.default_rng(2026)
X = RNG.normal(size=(2, 3, 4))
WQ, WK, WV = (RNG.normal(size=(4, 4)) for _ in range(3))
BQ, BK, BV = (RNG.normal(size=4) for _ in range(3))


def separate(bias: bool = False) -> dict[str, Any]:
    weights: dict[str, Any] = {
        "query": {"values": WQ.tolist()}, "key": {"values": WK.tolist()},
        "value": {"values": WV.tolist()},
    }
    if bias:
        for branch, b in zip(("query", "key", "value"), (BQ, BK, BV), strict=True):
            weights[branch]["bias"] = b.tolist()
    return {"input": X.tolist(), "weights": weights}


def transposed(bias: bool = False) -> dict[str, Any]:
    data = separate(bias)
    for branch, w in zip(("query", "key", "value"), (WQ, WK, WV), strict=True):
        data["weights"][branch]["values"] = w.T.tolist()  # torch.nn.Linear.weight: [out, in]
        data["weights"][branch]["layout"] = "torch"
    return data


def packed(bias: bool = False) -> dict[str, Any]:
    # nn.MultiheadAttention: in_proj_weight [3E, E] = rows of W_Q^T, then W_K^T, then W_V^T
    weights: dict[str, Any] = {"in_proj_weight": np.concatenate([WQ.T, WK.T, WV.T]).tolist()}
    if bias:
        weights["in_proj_bias"] = np.concatenate([BQ, BK, BV]).tolist()
    return {"input": X.tolist(), "weights": weights}


FORMS = {"separate": separate, "torch": transposed, "packed": packed}


@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
def test_packed_transposed_and_separate_give_identical_qkv(bias: bool) -> None:
    results = {}
    for name, build in FORMS.items():
        fixture = parse_attend_fixture(build(bias))
        results[name] = head_of(fixture.parameters, fixture.function).forward(fixture.input)
    reference = results["separate"]
    expected_q = X @ WQ + (BQ if bias else 0.0)
    np.testing.assert_allclose(reference.query, expected_q, rtol=0, atol=1e-12)
    for name in ("torch", "packed"):
        got_qkv = (results[name].query, results[name].key, results[name].value)
        for got, want in zip(got_qkv, (reference.query, reference.key, reference.value),
                             strict=True):
            assert got.tobytes() == want.tobytes(), name  # transposing is exact


def test_chapter_reader_accepts_layouts_and_labels_them() -> None:
    labels = {}
    for name, build in FORMS.items():
        fixture = parse_fixture(build())
        labels[name] = fixture.layout
        q, _, v = projections_of(fixture).forward(fixture.input)
        assert q.tobytes() == (X @ WQ).tobytes()
        assert v.tobytes() == (X @ WV).tobytes()
    assert labels == {"separate": "separate", "torch": "separate-torch", "packed": "packed"}


def test_mixed_layout_label() -> None:
    data = separate()
    data["weights"]["key"] = {"values": WK.T.tolist(), "layout": "torch"}
    assert canonicalize(data["weights"]).layout == "separate-mixed"
    assert parse_attend_fixture(data).parameters.layout == "separate-mixed"


def test_plain_fixtures_skip_the_hook() -> None:
    assert not uses_extensions(separate())
    assert uses_extensions(transposed())
    assert uses_extensions(packed())
    assert uses_extensions({**separate(), "value_width": "shared"})


def test_bundled_chapter_fixture_keeps_its_layout() -> None:
    assert load_fixture().layout == "separate"


@pytest.mark.parametrize(
    ("mutate", "location", "message"),
    [
        (lambda d: d["weights"]["query"].update(layout="pytorch"), "$.weights.query.layout",
         'expected "qkv" or "torch", got "pytorch"'),
        (lambda d: d["weights"]["key"].update(bias=[1.0, 2.0]), "$.weights.key.bias",
         "key bias must have shape [4] (the branch's output width), got [2]"),
        (lambda d: d["weights"]["value"].update(colour=1), "$.weights.value",
         'unknown key "colour"; expected one of name, shape, values, bias, layout'),
        (lambda d: d["weights"].update(in_proj_weight=[[1.0]]), "$.weights",
         'use either query/key/value or in_proj_weight (packed), not both; found "query" and '
         '"in_proj_weight"'),
        (lambda d: d.update(value_width="wide"), "$.value_width",
         'expected "shared" or "independent", got "wide"'),
        (lambda d: d["weights"]["query"].update(values=[1.0, 2.0], layout="torch"),
         "$.weights.query", "query projection: linear weight must have rank two, got rank 1"),
    ],
    ids=["layout-name", "bias-shape", "unknown-key", "both-forms", "value-width", "rank"],
)
def test_layout_errors_name_their_location(mutate: Any, location: str, message: str) -> None:
    data = separate()
    mutate(data)
    with pytest.raises(FixtureError) as caught:
        parse_attend_fixture(data)
    assert (caught.value.location, caught.value.message) == (location, message)


@pytest.mark.parametrize(
    ("weights", "location", "message"),
    [
        ({"in_proj_weight": [[1.0, 2.0]] * 5}, "$.weights.in_proj_weight",
         "in_proj_weight rows must stack query, key and value (a positive multiple of 3), "
         "got 5 rows"),
        ({"in_proj_weight": [[[1.0]]] * 3}, "$.weights.in_proj_weight",
         "in_proj_weight must have rank two [3*d_out,d_model], got rank 3"),
        ({"in_proj_weight": [[1.0]] * 3, "in_proj_bias": [0.0, 1.0]},
         "$.weights.in_proj_bias", "in_proj_bias must have shape [3] (the branch's output "
         "width), got [2]"),
        ({"in_proj_bias": [0.0, 1.0, 2.0]}, "$.weights",
         'missing key "in_proj_weight" (in_proj_bias needs it)'),
    ],
    ids=["rows", "rank", "bias", "bias-alone"],
)
def test_packed_errors(weights: dict[str, Any], location: str, message: str) -> None:
    with pytest.raises(FixtureError) as caught:
        canonicalize(weights)
    assert (caught.value.location, caught.value.message) == (location, message)


def test_packed_split_order_is_query_key_value() -> None:
    rows = np.arange(18.0).reshape(6, 3)  # [3*2, 3]
    canonical = canonicalize({"in_proj_weight": rows.tolist()})
    for index, branch in enumerate(canonical.branches):
        np.testing.assert_array_equal(branch.weight, rows[2 * index:2 * index + 2].T)


def test_chapter_refuses_bias_with_a_pointer_to_attend() -> None:
    with pytest.raises(FixtureError) as caught:
        parse_fixture(separate(bias=True))
    assert caught.value.location == "$.weights.query.bias"
    assert "run `qkv attend` on this fixture" in caught.value.message


def test_chapter_refuses_an_independent_value_width_that_differs() -> None:
    data = separate()
    data["weights"]["value"] = {"values": RNG.normal(size=(4, 3)).tolist()}
    data["value_width"] = "independent"
    with pytest.raises(FixtureError) as caught:
        chapter_weights(data)
    assert caught.value.location == "$.value_width"
    assert caught.value.message.startswith("value width 3 differs from the query/key width 4")
    fixture = parse_attend_fixture(data)
    assert head_of(fixture.parameters, fixture.function).d_v == 3


def test_without_the_opt_in_unequal_widths_are_the_chapters_error() -> None:
    data = separate()
    data["weights"]["key"] = {"values": RNG.normal(size=(4, 3)).tolist()}
    expected = "Q/K/V head widths must match, got query 4, key 3, value 4"
    for parse in (parse_fixture, parse_attend_fixture):
        with pytest.raises(FixtureError) as caught:
            parse(data)
        assert (caught.value.location, caught.value.message) == ("$.weights", expected)


def test_independent_value_width_still_needs_matching_query_and_key() -> None:
    data = separate()
    data["weights"]["key"] = {"values": RNG.normal(size=(4, 3)).tolist()}
    data["value_width"] = "independent"
    with pytest.raises(FixtureError) as caught:
        parse_attend_fixture(data)
    assert caught.value.message == (
        "query and key widths must match for the dot product, got query 4, key 3")


def test_layout_fixture_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "packed.json"
    path.write_text(json.dumps(packed()), encoding="utf-8")
    assert load_fixture(path).layout == "packed"
