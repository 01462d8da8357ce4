"""The published JSON Schema and the code's validation agree.

Every bundled and example fixture validates against the schema; a set of bad fixtures
is refused by both; random valid fixtures are accepted by both; and the schema names
exactly the keys the code knows. (The schema cannot say everything: equal weight
shapes, widths, rectangular nesting and value counts are the code's alone.)
"""

from __future__ import annotations

import copy
import json
from importlib.resources import files
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from qkvcli.attention.fixture import parse_attend_fixture
from qkvcli.cli import main
from qkvcli.core.names import BRANCHES
from qkvcli.reading.attend import UPSTREAM_OUTPUT
from qkvcli.reading.expect import EXPECT_KEYS
from qkvcli.reading.fixture import (
    GRADCHECK_KEYS,
    LAYER_TOP_KEYS,
    PACKED_KEYS,
    SCHEMA_NAME,
    TOP_KEYS,
    WEIGHT_KEYS,
)
from qkvcli.reading.json_values import parse_json_text
from qkvcli.reading.layouts import (
    C_ATTN_KEYS,
    CODEGEN_KEYS,
    NEOX_KEYS,
    NORM_KEYS,
    OUT_KEYS,
    QKV_PROJ_KEYS,
    WEIGHT_OBJECT_KEYS,
)
from qkvcli.reading.limits import DEFAULT_MAX_ELEMENTS
from qkvcli.reading.load import bundled_fixture_text
from qkvcli.reading.parse import parse_fixture
from qkvcli.reading.problems import FixtureError
from qkvcli.reading.tensors import TENSOR_KEYS
from tests.conftest import shipped_fixtures

ROOT = Path(__file__).resolve().parent.parent
SCHEMA: dict[str, Any] = json.loads(files("qkvcli.data").joinpath(SCHEMA_NAME).read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
FIXTURE_FILES = shipped_fixtures(recursive=True)  # chapter 26's and attend's reader
CHAPTER_FILES = sorted(path for path in (ROOT / "fixtures").glob("ch*.json")
                       if path not in FIXTURE_FILES)  # chapters 27-30, read by their modules
PROJECTIONS: dict[str, Any] = SCHEMA["$defs"]["projections"]


def test_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_there_are_example_fixtures() -> None:
    names = {path.name for path in FIXTURE_FILES}
    assert {"ch26-qkv-projections.json", "wide-head.json", "empty-batch.json",
            "chapter-with-expect.json"} <= names


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=[p.name for p in FIXTURE_FILES])
def test_repository_fixtures_validate_against_schema_and_code(path: Path) -> None:
    data = parse_json_text(path.read_text(encoding="utf-8"))
    assert list(VALIDATOR.iter_errors(data)) == []
    if uses_attend_only_keys(data):
        # Biases and an independent value width are for `qkv attend`; its reader must accept them.
        parse_attend_fixture(data)
    else:
        parse_fixture(data)


@pytest.mark.parametrize("path", CHAPTER_FILES, ids=[p.name for p in CHAPTER_FILES])
def test_chapter_fixtures_validate_against_schema_and_their_chapter(path: Path) -> None:
    from qkvcli.chapters.registry import chapter_of
    from qkvcli.core.names import chapter_of_id

    data = parse_json_text(path.read_text(encoding="utf-8"))
    assert list(VALIDATOR.iter_errors(data)) == []
    chapter_of(chapter_of_id(data["chapter"])).parse(data, DEFAULT_MAX_ELEMENTS, None)


def test_every_chapter_schema_names_the_keys_its_chapter_knows() -> None:
    from qkvcli.chapters import ch29, ch30
    from qkvcli.chapters.head_fixture import CAUSAL_KEYS, HEAD_KEYS

    defs = SCHEMA["$defs"]
    assert tuple(defs["chapter27"]["properties"]) == HEAD_KEYS
    assert tuple(defs["chapter28"]["properties"]) == HEAD_KEYS + CAUSAL_KEYS
    assert tuple(defs["chapter29"]["properties"]) == ch29.DOCUMENT_KEYS
    assert tuple(defs["chapter29"]["properties"]["rope"]["properties"]) == ch29.ROPE_KEYS
    assert tuple(defs["chapter30"]["properties"]) == ch30.DOCUMENT_KEYS
    assert tuple(defs["chapter30"]["properties"]["rope"]["properties"]) == ch30.ROPE_KEYS
    assert tuple(defs["chapter30"]["properties"]["weights"]["properties"]) == ch30.WEIGHT_KEYS


@pytest.mark.parametrize(("chapter", "change"), [
    ("ch27-self-attention", {"scale": 1.0}),
    ("ch27-self-attention", {"input": [[[1.0, 2.0]]]}),
    ("ch28-causal-masking", {"upstream": {"query": [[[1.0]]]}}),
    ("ch29-rope", {"rope": {"features": 4, "base": 100}}),
    ("ch29-rope", {"rope": {"features": 4, "positions": 6, "base": 100, "layout": "spiral"}}),
    ("ch30-multi-head-attention", {"heads": -1}),
    ("ch30-multi-head-attention", {"weights": {"query": [[1.0]]}}),
], ids=["unknown-key", "operands-and-input", "upstream-branch", "positions-missing",
        "layout", "negative-heads", "output-weight-missing"])
def test_a_bad_chapter_fixture_is_refused_by_schema_and_chapter(chapter: str,
                                                                change: dict[str, Any]) -> None:
    from qkvcli.chapters.registry import chapter_of
    from qkvcli.core.names import chapter_of_id

    data = {**parse_json_text((ROOT / "fixtures" / f"{chapter}.json").read_text(encoding="utf-8")),
            **change}
    assert list(VALIDATOR.iter_errors(data))
    with pytest.raises(FixtureError):
        chapter_of(chapter_of_id(data["chapter"])).parse(data, DEFAULT_MAX_ELEMENTS, None)


def uses_attend_only_keys(data: dict[str, Any]) -> bool:
    weights = data.get("weights", {})
    return data.get("value_width") == "independent" or "in_proj_bias" in weights or any(
        isinstance(weights.get(b), dict) and weights[b].get("bias") is not None for b in BRANCHES
    )


def test_attend_only_fixtures_are_refused_by_the_chapter_reader() -> None:
    attend_only = [p for p in FIXTURE_FILES
                   if uses_attend_only_keys(parse_json_text(p.read_text(encoding="utf-8")))]
    assert attend_only, "the repository should ship an attend-only example"
    for path in attend_only:
        with pytest.raises(FixtureError, match="qkv attend"):
            parse_fixture(parse_json_text(path.read_text(encoding="utf-8")))


def test_bundled_fixture_validates() -> None:
    data = parse_json_text(bundled_fixture_text())
    assert list(VALIDATOR.iter_errors(data)) == []
    parse_fixture(data)


def test_schema_names_the_keys_the_code_knows() -> None:
    props = PROJECTIONS["properties"]
    assert tuple(props) == TOP_KEYS + LAYER_TOP_KEYS
    assert tuple(props["weights"]["properties"]) == (
        BRANCHES + PACKED_KEYS + C_ATTN_KEYS + NEOX_KEYS + QKV_PROJ_KEYS + CODEGEN_KEYS
        + OUT_KEYS + NORM_KEYS)
    assert tuple(props["upstream"]["properties"]) == (*BRANCHES, UPSTREAM_OUTPUT)
    assert tuple(SCHEMA["$defs"]["gradcheck"]["properties"]) == GRADCHECK_KEYS
    assert tuple(props["expect"]["properties"]) == EXPECT_KEYS
    weight_object = SCHEMA["$defs"]["weight"]["anyOf"][2]["properties"]
    assert set(weight_object) == set(WEIGHT_KEYS) | set(WEIGHT_OBJECT_KEYS)
    tensor_object = SCHEMA["$defs"]["tensor3"]["anyOf"][2]["properties"]
    assert set(tensor_object) == set(TENSOR_KEYS)
    assert PROJECTIONS["required"] == ["input", "weights"]


def test_schema_command_prints_the_shipped_schema() -> None:
    result = CliRunner().invoke(main, ["schema"])
    assert result.exit_code == 0
    assert json.loads(result.stdout) == SCHEMA


GOOD: dict[str, Any] = {
    "input": [[[1, 2, -1], [0, 1, 2]]],
    "weights": {
        "query": [[1, 0], [0, 1], [1, -1]],
        "key": [[0, 1], [1, 0], [-1, 1]],
        "value": [[1, 1], [1, -1], [0, 2]],
    },
}


def _with(path: str, value: Any) -> Any:
    data = copy.deepcopy(GOOD)
    *parents, last = path.split(".")
    node = data
    for key in parents:
        node = node.setdefault(key, {})
    if value is None:
        del node[last]
    else:
        node[last] = value
    return data


BAD = [
    ("not-an-object", [1, 2]),
    ("missing-input", _with("input", None)),
    ("missing-branch", _with("weights.key", None)),
    ("unknown-top-key", _with("wieghts", 1)),
    ("unknown-weight-key", _with("weights", {**GOOD["weights"], "bias": [1]})),
    ("unknown-tensor-key", _with("weights.query", {"valeu": [[1, 0]]})),
    ("boolean-value", _with("input", [[[1, True, -1], [0, 1, 2]]])),
    ("string-value", _with("weights.key", [[0, 1], ["1", 0], [-1, 1]])),
    ("input-rank-two", _with("input", [[1, 2, -1], [0, 1, 2]])),
    ("weight-rank-three", _with("weights.value", [[[1, 1], [1, -1], [0, 2]]])),
    ("negative-dimension", _with("input", {"shape": [-1, 2, 3], "values": []})),
    ("fractional-dimension", _with("input", {"shape": [1, 1.5, 3], "values": []})),
    ("nested-values-with-shape", _with("input", {"shape": [1, 2, 3],
                                                  "values": [[1, 2, -1], [0, 1, 2]]})),
    ("bad-name", _with("weights.query", {"name": "Query", "values": GOOD["weights"]["query"]})),
    ("empty-name-segment", _with("weights.query", {"name": "a..b",
                                                   "values": GOOD["weights"]["query"]})),
    ("upstream-not-object", _with("upstream", [1])),
    ("step-zero", _with("gradcheck", {"step": 0})),
    ("negative-tolerance", _with("gradcheck", {"tolerance": -1})),
    ("samples-zero", _with("gradcheck", {"samples": 0})),
    ("samples-boolean", _with("gradcheck", {"samples": True})),
    ("seed-negative", _with("seed", -1)),
    ("seed-too-large", _with("seed", 2**64)),
    ("seed-string", _with("seed", "26")),
    ("chapter-empty", _with("chapter", "")),
    ("chapter-two-lines", _with("chapter", "a\nb")),
    ("expect-unknown-key", _with("expect", {"los": 1})),
    ("expect-loss-string", _with("expect", {"loss": "3"})),
    ("expect-negative-tolerance", _with("expect", {"tolerance": -0.5})),
]


@pytest.mark.parametrize("data", [case[1] for case in BAD], ids=[case[0] for case in BAD])
def test_bad_fixtures_are_refused_by_schema_and_code(data: Any) -> None:
    assert list(VALIDATOR.iter_errors(data)), "the schema accepted it"
    with pytest.raises(FixtureError):
        parse_fixture(data)


@pytest.mark.parametrize(
    "tensor",
    [{"npy": "weights/query.npy"}, {"generate": {"seed": 1, "shape": [3, 2]}},
     {"generate": {"seed": 1, "shape": [3, 2], "distribution": "normal"}},
     {"name": "q.weight", "npy": "q.npy"}],
    ids=["npy", "generate", "generate-normal", "named-npy"],
)
def test_schema_admits_file_and_generated_tensors(tensor: Any) -> None:
    assert list(VALIDATOR.iter_errors(_with("weights.query", tensor))) == []


@pytest.mark.parametrize(
    "tensor",
    [{"npy": 3}, {"npy": "a.npy", "values": [1]}, {"generate": {"seed": -1, "shape": [2]}},
     {"generate": {"shape": [2]}}, {"generate": {"seed": 1, "shape": [2], "distribution": "x"}}],
    ids=["npy-number", "npy-and-values", "generate-negative-seed", "generate-no-seed",
         "generate-unknown-distribution"],
)
def test_schema_refuses_malformed_file_and_generated_tensors(tensor: Any) -> None:
    assert list(VALIDATOR.iter_errors(_with("weights.query", tensor)))


NUMBERS = st.one_of(
    st.integers(-1000, 1000),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
)


@st.composite
def valid_fixtures(draw: st.DrawFn) -> Any:
    """Fixtures of random sizes in random (but valid) tensor forms."""
    batch, tokens = draw(st.integers(0, 2)), draw(st.integers(0, 3))
    d_model, d_head = draw(st.integers(1, 3)), draw(st.integers(1, 3))

    def tensor(shape: tuple[int, ...], named: str | None = None) -> Any:
        count = 1
        for dim in shape:
            count *= dim
        flat = draw(st.lists(NUMBERS, min_size=count, max_size=count))
        nested: Any = flat
        if count:  # nesting cannot express an empty axis, so empty tensors use the flat form
            for dim in reversed(shape[1:]):
                nested = [nested[i:i + dim] for i in range(0, len(nested), dim)]
        forms = ["flat"] if count == 0 else ["nested", "values", "flat"]
        form = draw(st.sampled_from(forms))
        out: Any = (nested if form == "nested" else {"values": nested} if form == "values"
                    else {"shape": list(shape), "values": flat})
        if named is not None and isinstance(out, dict) and draw(st.booleans()):
            out["name"] = named
        return out

    data: dict[str, Any] = {
        "input": tensor((batch, tokens, d_model)),
        "weights": {b: tensor((d_model, d_head), f"layer.{b}") for b in BRANCHES},
    }
    if draw(st.booleans()):
        data["upstream"] = {b: tensor((batch, tokens, d_head)) for b in BRANCHES
                            if draw(st.booleans())}
    if draw(st.booleans()):
        data["gradcheck"] = {"step": draw(st.floats(1e-8, 1e-2)),
                             "samples": draw(st.one_of(st.none(), st.integers(1, 5)))}
    if draw(st.booleans()):
        data["seed"] = draw(st.integers(0, 2**64 - 1))
    if draw(st.booleans()):
        data["expect"] = {"loss": draw(NUMBERS), "tolerance": draw(st.floats(0, 1)),
                          "value_weight_gradient": tensor((d_model, d_head))}
    return data


@settings(max_examples=60, deadline=None)
@given(data=valid_fixtures())
def test_valid_fixtures_are_accepted_by_schema_and_code(data: Any) -> None:
    assert list(VALIDATOR.iter_errors(data)) == []
    parse_fixture(data)


def test_docs_page_describes_every_field() -> None:
    docs = (ROOT / "docs" / "fixtures.md").read_text(encoding="utf-8")
    props = PROJECTIONS["properties"]
    for key in (*props, *SCHEMA["$defs"]["gradcheck"]["properties"],
                *props["expect"]["properties"]):
        assert f"`{key}`" in docs or f"`gradcheck.{key}`" in docs, key


@pytest.mark.parametrize("weights", [
    {"c_attn_weight": {"safetensors": "gpt2.safetensors", "tensor": "h.0.attn.c_attn.weight"},
     "c_attn_bias": None, "c_proj_weight": [[1.0]], "c_proj_bias": [0.0]},
    {"in_proj_weight": [[1.0]] * 3, "out_proj_weight": [[1.0]], "out_proj_bias": None},
    {"query": {"safetensors": "m.safetensors", "tensor": "q_proj.weight", "layout": "torch"},
     "key": [[1.0]], "value": [[1.0]]},
], ids=["gpt2-c_attn", "in_proj-out_proj", "hf-separate"])
def test_schema_admits_layer_fixtures(weights: dict[str, Any]) -> None:
    data = {"heads": 1, "input": [[[1.0]]], "weights": weights,
            "upstream": {"output": [[[1.0]]]}}
    assert list(VALIDATOR.iter_errors(data)) == []


@pytest.mark.parametrize("weights", [
    {"c_attn_weight": [[1.0, 1.0, 1.0]], "in_proj_weight": [[1.0]] * 3},
    {"in_proj_weight": [[1.0]] * 3, "out_proj_weight": [[1.0]], "c_proj_weight": [[1.0]]},
    {"c_attn_weight": {"safetensors": "gpt2.safetensors"}},
], ids=["two-packed-forms", "two-out-projections", "tensor-name-missing"])
def test_schema_refuses_bad_layer_fixtures(weights: dict[str, Any]) -> None:
    assert list(VALIDATOR.iter_errors({"input": [[[1.0]]], "weights": weights}))
