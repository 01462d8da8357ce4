"""Chapter 37, incremental attention: the KV cache, the chapter's evidence and its report."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from qkvcli.attention import engine
from qkvcli.attention.cache import DecodingLayer, KvCache, step
from qkvcli.attention.errors import (
    AppendedShapeMismatch,
    CacheFull,
    CacheLayerRevisionMismatch,
    CapacityExceedsPositions,
    IncrementalBatchMismatch,
    IncrementalInputRank,
    IncrementalProjectionRefusal,
    IncrementalSoftmaxRefusal,
    IncrementalWidthMismatch,
    NonFiniteAppend,
    SingleTokenRequired,
    ZeroCacheBatch,
    ZeroCacheCapacity,
)
from qkvcli.chapters import ch37
from qkvcli.cli import main
from qkvcli.reading.json_values import parse_json_text
from qkvcli.reading.load import bundled_fixture_text
from qkvcli.reading.problems import FixtureError
from qkvcli.render.chapters import ch37 as report

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "ch37"
TOLERANCE = 1e-12


def document() -> dict[str, Any]:
    loaded: dict[str, Any] = parse_json_text(bundled_fixture_text(ch37.FIXTURE))
    return loaded


def bundled() -> ch37.IncrementalEvidence:
    return ch37.build(ch37.parse(document()))


def test_the_bundled_fixture_is_shipped_twice_alike() -> None:
    assert (ROOT / "fixtures" / ch37.FIXTURE).read_bytes() == (
        ROOT / "qkvcli" / "data" / ch37.FIXTURE).read_bytes()


def test_text_and_trace_are_the_anchors_byte_for_byte() -> None:
    evidence = bundled()
    assert report.text(evidence) == (GOLDEN / "expected.txt").read_text(encoding="utf-8")
    assert report.trace(evidence) == (GOLDEN / "diagram-trace.txt").read_text(encoding="utf-8")


@pytest.mark.parametrize(("args", "name"), [
    (["report", "--chapter", "37", "--format", "text"], "expected.txt"),
    (["report", "--chapter", "37", "--format", "trace"], "diagram-trace.txt"),
    (["run", "--chapter", "37", "--format", "text"], "expected.txt"),
    (["run", str(ROOT / "fixtures" / "ch37-incremental-attention.json"), "--format", "text"],
     "expected.txt"),
], ids=["report-text", "report-trace", "run-text", "run-file"])
def test_the_commands_print_the_anchors(args: list[str], name: str) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert result.stdout == (GOLDEN / name).read_text(encoding="utf-8")


def test_every_family_of_the_bundled_fixture_passes() -> None:
    evidence = bundled()
    assert [c.name for c in evidence.checks] == [
        "steps", "growth", "offset", "work", "reset", "replay", "errors"]
    assert evidence.passed
    assert [e.case for e in evidence.errors] == list(report.ERROR_CASES)


def test_the_refusals_are_the_courses_messages() -> None:
    messages = {e.case: e.message for e in bundled().errors}
    assert messages == {
        "two_tokens": "incremental attention needs exactly one new token, got 2",
        "full_cache": "KV cache is full at capacity 1",
        "model_mismatch": "KV cache model width 8 must match attention layer width 4",
        "head_mismatch": "KV cache head count 1 must match attention layer head count 2",
        "layer_mismatch": "KV cache parameter identity does not match this attention layer",
        "rope_mismatch": "KV cache RoPE configuration (2 features, 5 positions, base 100.0) "
                         "does not match layer configuration (2 features, 5 positions, base "
                         "200.0)",
        "rope_positions_mismatch": "KV cache RoPE configuration (2 features, 5 positions, base "
                                   "100.0) does not match layer configuration (2 features, 6 "
                                   "positions, base 100.0)",
        "nonfinite_projection": "incremental softmax: logit at group 0, class 0 is positive "
                                "infinity",
    }


def test_the_json_document_validates_against_its_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    from qkvcli.render.schemas import report_schema

    result = CliRunner().invoke(main, ["report", "--chapter", "37", "-f", "json"])
    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout)
    jsonschema.Draft202012Validator(report_schema("run")).validate(found)
    assert list(found) == list(report.JSON_KEYS)
    first = found["checks"][0]
    assert (first["name"], first["family"], first["operation"]) == (
        "cached-steps", "cached-step", "kv-cache")


def test_each_refusal_says_beside_what_it_raised_whether_its_cache_was_unchanged() -> None:
    errors = json.loads(CliRunner().invoke(main, ["report", "--chapter", "37", "-f",
                                                  "json"]).stdout)["errors"]
    assert [list(e) for e in errors] == [
        ["case", "expected", "raised", "rejected", "unchanged", "message"]] * 8
    assert all(e["unchanged"] is True for e in errors)


def test_a_bad_step_that_moves_its_cache_is_neither_refused_nor_unchanged(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The two-token step writes into its cache before it raises: the chapter's call
    raises CacheChanged, the refusal fails, and its ``unchanged`` (and the text's) is
    false while the other seven stay true."""
    real = ch37.step

    def moving(layer: DecodingLayer, cache: KvCache, x: np.ndarray) -> Any:
        if x.shape[1] == 2:
            cache.keys[...] = 7.0
        return real(layer, cache, x)

    monkeypatch.setattr(ch37, "step", moving)
    evidence = bundled()
    first = evidence.errors[0]
    assert (first.case, first.raised, first.rejected) == ("two_tokens", "CacheChanged", False)
    assert evidence.kept == (False, *[True] * 7) and not evidence.unchanged
    assert not evidence.passed
    errors = report.json_document(evidence)["errors"]
    assert [e["unchanged"] for e in errors] == [False, *[True] * 7]
    assert "errors=two_tokens:false full_cache:true" in report.text(evidence)
    assert " unchanged:false\n" in report.text(evidence)
    assert "|unchanged=false\n" in report.trace(evidence)


def test_gradcheck_says_in_one_line_that_the_chapter_has_no_reverse_pass() -> None:
    path = str(ROOT / "fixtures" / ch37.FIXTURE)
    result = CliRunner().invoke(main, ["gradcheck", path])
    assert result.exit_code == 2
    assert result.stderr == (f"Error: {path}: chapter 37-incremental-attention has no reverse "
                             "pass: no gradients to check (qkv run shows its evidence)\n")


def test_validate_accepts_the_bundled_fixture() -> None:
    result = CliRunner().invoke(main, ["validate", str(ROOT / "fixtures" / ch37.FIXTURE)])
    assert result.exit_code == 0, result.output


# --- the fixture's errors -----------------------------------------------------------------


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d.update(capacity=0), "$.capacity: KV cache capacity must be nonzero"),
    (lambda d: d.update(capacity=6), "$.capacity: KV cache capacity 6 exceeds RoPE position "
                                     "capacity 5"),
    (lambda d: d.update(capacity=2), "$.input: 3 tokens do not fit the cache: a step per token, "
                                     "and the capacity is 2"),
    (lambda d: d["rope"].update(offset=1), "$.rope: unknown key \"offset\""),
    (lambda d: d.update(suffix=[1, 2, 3, 4]), "$: unknown key \"suffix\""),
], ids=["zero-capacity", "capacity-past-table", "tokens-past-capacity", "offset", "suffix"])
def test_a_bad_fixture_is_one_path_and_message(change: Any, message: str) -> None:
    data = copy.deepcopy(document())
    change(data)
    with pytest.raises(FixtureError) as raised:
        ch37.parse(data)
    assert str(raised.value).startswith(message.split(" \"")[0])
    if "unknown key" not in message:
        assert str(raised.value) == message


def test_a_bad_fixture_is_one_line_and_exit_2(tmp_path: Path) -> None:
    data = copy.deepcopy(document())
    data["capacity"] = 0
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    result = CliRunner().invoke(main, ["run", str(path)])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "$.capacity" in result.stderr
    assert "Traceback" not in result.output


# --- the cache ----------------------------------------------------------------------------


def layer_of(spec: ch37.MultiHeadSpec) -> DecodingLayer:
    return ch37.decoding_layer(spec)


def fixture_layer() -> DecodingLayer:
    return layer_of(ch37.parse(document()).spec)


def test_construction_refusals_come_in_the_courses_order() -> None:
    layer = fixture_layer()
    with pytest.raises(ZeroCacheBatch, match=r"^KV cache batch size must be nonzero$"):
        KvCache.for_layer(layer, 0, 0)
    with pytest.raises(ZeroCacheCapacity):
        KvCache.for_layer(layer, 1, 0)
    with pytest.raises(CapacityExceedsPositions) as raised:
        KvCache.for_layer(layer, 1, 6)
    assert raised.value == CapacityExceedsPositions(6, 5)


def test_the_request_checks_come_first_and_in_order() -> None:
    layer = fixture_layer()
    cache = KvCache.for_layer(layer, 1, 1)
    step(layer, cache, np.ones((1, 1, 4)))
    cases = [  # each on the full cache: the request's checks win over the full cache
        (np.ones((1, 4)), IncrementalInputRank(2)),
        (np.ones((1, 2, 4)), SingleTokenRequired(2)),
        (np.ones((2, 1, 4)), IncrementalBatchMismatch(1, 2)),
        (np.ones((1, 1, 3)), IncrementalWidthMismatch(4, 3)),
        (np.ones((1, 1, 4)), CacheFull(1)),
    ]
    for x, expected in cases:
        before = cache.state()
        with pytest.raises(type(expected)) as raised:
            step(layer, cache, x)
        assert raised.value == expected
        assert cache.unchanged(before)
    assert str(IncrementalInputRank(2)) == ("incremental attention input must have rank three "
                                            "[batch, 1, model_width], got rank 2")


def test_an_update_in_place_is_a_revision_mismatch_and_reset_does_not_help() -> None:
    layer = fixture_layer()
    cache = KvCache.for_layer(layer, 1, 4)
    step(layer, cache, np.ones((1, 1, 4)))
    cache.reset()
    with pytest.raises(CacheLayerRevisionMismatch) as raised:
        step(layer.updated(0), cache, np.ones((1, 1, 4)))
    assert str(raised.value) == ("KV cache parameter revision 0 at stable index 0 does not "
                                 "match layer revision 1")


def test_the_append_checks_and_their_messages() -> None:
    assert str(AppendedShapeMismatch("key", (1, 2, 1, 2), (1, 2, 2, 2))) == (
        "appended key must have shape [1, 2, 1, 2], got [1, 2, 2, 2]")
    assert str(NonFiniteAppend("key value", 3, float("nan"))) == (
        "appended key value at flat index 3 must be finite, got NaN")
    assert str(NonFiniteAppend("value", 0, float("inf"))) == (
        "appended value at flat index 0 must be finite, got inf")
    assert str(IncrementalSoftmaxRefusal(1, 2, "negative infinity")) == (
        "incremental softmax: logit at group 1, class 2 is negative infinity")


def test_an_overflowing_value_projection_is_refused_before_the_write() -> None:
    spec = ch37.parse(document()).spec
    huge = np.eye(4) * np.finfo(np.float64).max * 4  # inf: only the value projection
    layer = layer_of(spec._replace(w_value=np.where(np.isinf(huge), 1e308, huge)))
    cache = KvCache.for_layer(layer, 1, 4)
    before = cache.state()
    with pytest.raises(IncrementalProjectionRefusal) as raised:
        step(layer, cache, np.array([[[10.0, 0.0, 0.0, 0.0]]]))
    assert str(raised.value) == ("incremental Q/K/V projection: value projection: matmul "
                                 "produced non-finite value inf at flat index 0")
    assert cache.unchanged(before)


def test_an_overflowing_output_projection_is_refused_before_the_write() -> None:
    spec = ch37.parse(document()).spec
    layer = layer_of(spec._replace(w_out=np.full((4, 4), -1e308)))
    cache = KvCache.for_layer(layer, 1, 4)
    before = cache.state()
    with pytest.raises(IncrementalProjectionRefusal, match=r"^incremental output projection: "
                       r"matmul produced non-finite value -inf at flat index 0$"):
        step(layer, cache, np.array([[[10.0, 10.0, 10.0, 10.0]]]))
    assert cache.unchanged(before)


@pytest.mark.parametrize(("column", "refused"), [((0.8, 0.5, -0.6), True),
                                                  ((0.8, -0.6, 0.5), False)])
def test_a_projection_near_the_largest_float_adds_its_terms_in_order(
        column: tuple[float, ...], refused: bool) -> None:
    # first to last, 0.8 + 0.5 passes the largest float; 0.8 - 0.6 + 0.5 never does
    big = np.finfo(np.float64).max
    w_query = np.zeros((6, 6))
    w_query[:3, 0] = np.array(column) * big
    eye = np.eye(6)
    layer = DecodingLayer(ch37.build_layer(w_query, eye, eye, eye, 1, 100.0, "half"), 4)
    cache = KvCache.for_layer(layer, 1, 4)
    x = np.array([[[1.0, 1.0, 1.0, 0.0, 0.0, 0.0]]])
    if refused:
        with pytest.raises(IncrementalProjectionRefusal, match=r"query projection: matmul "
                           r"produced non-finite value inf at flat index 0$"):
            step(layer, cache, x)
        assert cache.length == 0
    else:
        step(layer, cache, x)  # no projection refused (its score, 0 against a zero key, is read)
        assert cache.length == 1


@pytest.mark.parametrize(("heads", "d_h", "base"), [(1, 6, 100.0), (1, 2, 100.0),
                                                     (2, 2, 1e308), (3, 2, 7.0)])
def test_a_fixture_of_any_width_and_base_runs_every_bad_step(heads: int, d_h: int,
                                                             base: float) -> None:
    # one head of 6 (the other head count 3) or of 2 (no layer of another count can turn
    # its heads: the cache alone is made), and a base that doubled would not be finite
    document = random_document(5, (1, 3, heads, d_h, 3, 4, base))
    evidence = ch37.build(ch37.parse(document))
    assert all(e.rejected for e in evidence.errors), evidence.errors
    assert evidence.passed, evidence.checks


# --- seeded random fixtures ----------------------------------------------------------------

SHAPES = [  # batch, tokens, heads, head width, capacity, positions, base
    (1, 3, 2, 2, 4, 5, 100.0),
    (2, 4, 2, 4, 5, 7, 10000.0),
    (3, 2, 3, 2, 2, 2, 50.5),
    (1, 5, 1, 4, 6, 6, 10000.0),
]


def random_document(seed: int, shape: tuple[Any, ...]) -> dict[str, Any]:
    batch, tokens, heads, d_h, capacity, positions, base = shape
    rng = np.random.default_rng(seed)
    d_model = heads * d_h

    def weight() -> list[Any]:
        values: list[Any] = (rng.standard_normal((d_model, d_model)) / 2).tolist()
        return values

    return {"chapter": ch37.NAME, "heads": heads,
            "rope": {"positions": positions, "base": base, "layout": "half"},
            "input": rng.standard_normal((batch, tokens, d_model)).tolist(),
            "weights": {name: weight() for name in ("query", "key", "value", "output")},
            "capacity": capacity}


@pytest.mark.parametrize("shape", SHAPES, ids=[f"shape{i}" for i in range(len(SHAPES))])
def test_a_random_fixture_keeps_every_claim(shape: tuple[Any, ...]) -> None:
    fixture = ch37.parse(random_document(37 + len(str(shape)), shape))
    evidence = ch37.build(fixture)
    assert evidence.passed, evidence.checks
    layer = layer_of(fixture.spec)
    x = fixture.input
    batch, tokens, _ = x.shape
    heads, d_h = fixture.spec.heads, fixture.spec.table.features
    for t, s in enumerate(evidence.steps):
        full = engine.forward(layer.layer, x[:, :t + 1], True)
        assert np.allclose(s.output, full.output[:, -1], rtol=0.0, atol=TOLERANCE)
        assert np.allclose(s.keys, full.stacked["rotated_key"], rtol=0.0, atol=TOLERANCE)
        assert np.allclose(s.values, full.stacked["value"], rtol=0.0, atol=TOLERANCE)
        assert (s.cache_before, s.cache_after) == (t, t + 1)
        assert s.cache_shape == (batch, heads, t + 1, d_h)
        assert s.storage_shape == (batch, heads, fixture.capacity, d_h)
        assert (s.full_prefix_rows, s.incremental_rows, s.reused_rows) == (t + 1, 1, t)
    work = evidence.work
    assert work.full_rows_per_projection == tokens * (tokens + 1) // 2
    assert work.incremental_rows_per_projection == tokens
    assert work.avoided_rows_across_kv == tokens * (tokens - 1)
    assert evidence.history.newest_query_key_rows == tuple(range(1, tokens + 1))
    assert (evidence.reset.before, evidence.reset.after) == (tokens, 0)
    assert evidence.reset.allocation_reused and evidence.reset.storage_unchanged
    assert evidence.replay_bitwise
    assert all(e.rejected for e in evidence.errors), evidence.errors


@pytest.mark.parametrize("shape", SHAPES, ids=[f"shape{i}" for i in range(len(SHAPES))])
def test_every_refusal_of_a_random_fixture_leaves_its_cache_unchanged(
        shape: tuple[Any, ...]) -> None:
    fixture = ch37.parse(random_document(7, shape))
    for case, _, call in ch37.bad_steps(fixture):
        # the chapter's call raises CacheChanged when a refused step moved its cache
        with pytest.raises(Exception) as raised:
            call()
        assert type(raised.value).__name__ != "CacheChanged", case


def test_the_steps_family_fails_when_a_step_is_wrong() -> None:
    """The family compares two computations: a cache whose steps are off by more than the
    tolerance fails it, and the report's verdict with it."""
    from qkvcli.check.incremental import CACHE, check_cached_steps

    session = ch37.judge_session(ch37.parse(document()))
    chapter = session.implementation
    assert isinstance(chapter, ch37.ChapterCache)
    honest = chapter.run
    chapter._functions["cache_run"] = lambda x: (honest(x)[0] + 1e-9, *honest(x)[1:])
    found, failures = check_cached_steps(session, CACHE)
    assert not found.passed
    assert failures[0].code == "step-differs" and failures[0].facts[0] == 0
