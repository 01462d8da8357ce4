"""The evidence families, on the chapter fixture and on fixtures of other shapes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from qkvcli.check import chapter26, engine
from qkvcli.check.chapter26 import build_evidence
from qkvcli.reading.load import load_fixture
from qkvcli.reading.parse import parse_fixture
from qkvcli.render.wording import check_rows

from .conftest import CHAPTER_FIXTURE

CHECK_ORDER = ["forward", "reverse", "shapes", "errors", "initialization", "independence",
               "replay", "gradcheck"]


def seeded_doc(batch: int, tokens: int, d_model: int, d_head: int, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {
        "seed": seed,
        # The shape form, because a nested list cannot show the inner axes of an empty axis.
        "input": {"shape": [batch, tokens, d_model],
                  "values": rng.standard_normal(batch * tokens * d_model).tolist()},
        "weights": {b: rng.standard_normal((d_model, d_head)).tolist()
                    for b in ("query", "key", "value")},
        "upstream": {b: {"shape": [batch, tokens, d_head],
                         "values": rng.standard_normal(batch * tokens * d_head).tolist()}
                     for b in ("query", "key", "value")},
    }


def test_chapter_evidence() -> None:
    evidence = build_evidence(load_fixture(CHAPTER_FIXTURE))
    assert [c.name for c in evidence.checks] == CHECK_ORDER
    assert evidence.passed
    assert evidence.primary.loss == -2.0
    assert evidence.independence.row == 0
    assert evidence.errors.rank.message == (
        "Q/K/V input must have rank three [batch, tokens, model_width], got rank 2"
    )
    assert evidence.errors.model_mismatch.message == (
        "Q/K/V model widths must match, got query 3, key 4, value 3"
    )
    assert evidence.errors.head_mismatch.message == (
        "Q/K/V head widths must match, got query 2, key 3, value 2"
    )
    assert evidence.initialization.rejection == (
        "query projection: linear output width must be greater than zero"
    )
    assert evidence.shapes.empty_tokens.input == (2, 0, 3)
    assert evidence.shapes.report_empty_tokens.input == (1, 0, 3)
    assert [evidence.shapes.empty_batch.shape(name) for name in ("query", "key", "value")] == [
        (0, 2, 2)] * 3


@pytest.mark.parametrize(
    "dims", [(2, 3, 5, 4), (1, 1, 1, 1), (3, 4, 2, 6), (0, 3, 4, 2), (2, 0, 4, 2)],
    ids=["d5-h4", "scalar", "head-wider", "empty-batch", "empty-tokens"],
)
def test_other_fixtures_pass_and_describe_themselves(dims: tuple[int, int, int, int]) -> None:
    batch, tokens, d_model, d_head = dims
    evidence = build_evidence(parse_fixture(seeded_doc(*dims, seed=sum(dims))))
    assert evidence.passed, [c for c in evidence.checks if not c.passed]
    assert evidence.config.d_model == d_model
    assert evidence.shapes.batch.input == (2 * batch, tokens, d_model)
    assert evidence.shapes.batch.shape("query") == (2 * batch, tokens, d_head)
    assert evidence.errors.width.message == (
        f"Q/K/V input final width must equal model width {d_model}, got {d_model + 1}"
    )
    assert evidence.errors.head_mismatch.message == (
        f"Q/K/V head widths must match, got query {d_head}, key {d_head + 1}, value {d_head}"
    )
    assert evidence.gradcheck.count == batch * tokens * d_model + 3 * d_model * d_head


def test_independence_is_not_applicable_without_a_live_input_column() -> None:
    doc = seeded_doc(1, 2, 3, 2, seed=1)
    doc["input"] = [[[0, 0, 0], [0, 0, 0]]]
    evidence = build_evidence(parse_fixture(doc))
    assert not evidence.independence.applicable
    assert evidence.independence.passed
    assert "not applicable" in check_rows(evidence)[5].detail


def test_independence_probes_the_first_live_row() -> None:
    doc = seeded_doc(1, 2, 3, 2, seed=1)
    doc["input"] = [[[0, 0, 5], [0, 0, 1]]]
    evidence = build_evidence(parse_fixture(doc))
    assert evidence.independence.row == 2
    assert evidence.independence.query_changed
    assert evidence.independence.key_unchanged and evidence.independence.value_unchanged


def test_replay_detects_a_difference(monkeypatch: pytest.MonkeyPatch) -> None:
    # The engine's forward drifts by one ulp on its second call with the fixture's own
    # arrays (the replay): run's replay is the replay family's bit comparison.
    fixture = load_fixture(CHAPTER_FIXTURE)
    assert build_evidence(fixture).replay_bitwise
    original = engine.forward
    seen: dict[tuple[int, int], int] = {}

    def drifting(*args: np.ndarray) -> tuple[np.ndarray, ...]:
        key = (id(args[0]), id(args[1]))
        seen[key] = seen.get(key, 0) + 1
        query, key_, value = original(*args)
        if seen[key] == 2:
            query = np.nextafter(query, np.inf)
        return query, key_, value

    monkeypatch.setattr(engine, "forward", drifting)
    monkeypatch.setattr(chapter26, "engine_implementation", lambda: engine.PythonImplementation(
        "drifting", drifting, engine.backward))
    evidence = build_evidence(fixture)
    assert not evidence.replay_bitwise
    assert [c.name for c in evidence.checks if not c.passed] == ["replay"]


def test_a_tight_tolerance_fails_honestly() -> None:
    doc = seeded_doc(2, 2, 3, 2, seed=4)
    doc["gradcheck"] = {"tolerance": 0.0, "step": 1e-3}
    evidence = build_evidence(parse_fixture(doc))
    assert not evidence.passed
    assert [c.name for c in evidence.checks if not c.passed] == ["gradcheck"]


def test_overflowing_outputs_fail_forward() -> None:
    doc = seeded_doc(1, 1, 2, 1, seed=2)
    doc["input"] = [[[1e308, 1e308]]]
    doc["weights"] = {"query": [[10], [10]], "key": [[1], [0]], "value": [[0], [1]]}
    evidence = build_evidence(parse_fixture(doc))
    failed = {c.name for c in evidence.checks if not c.passed}
    assert "forward" in failed


@pytest.mark.parametrize("doc", [
    {"input": [[[1e308]]], "weights": {"query": [[-1]], "key": [[10]], "value": [[1]]}},
    {"input": [[[10]]], "weights": {"query": [[1]], "key": [[1]], "value": [[1]]},
     "upstream": {"key": [[[1e308]]]}},
], ids=["infinite-key", "infinite-key-gradient"])
def test_an_infinite_output_that_stays_infinite_has_not_moved(doc: dict[str, Any]) -> None:
    # inf beside the same inf is no change: independence is not failed by it (forward,
    # reverse and the gradient check say what is wrong with such a fixture).
    evidence = build_evidence(parse_fixture(doc))
    assert evidence.independence.passed
    assert "independence" not in {c.name for c in evidence.checks if not c.passed}


def _leaky(monkeypatch: pytest.MonkeyPatch) -> None:
    """qkv's engine with a slip: K reads W_V a little (``K = X W_K + 0.001 X W_V``)."""
    original = engine.forward

    def leaky(x: np.ndarray, w_query: np.ndarray, w_key: np.ndarray,
              w_value: np.ndarray) -> tuple[np.ndarray, ...]:
        query, key, value = original(x, w_query, w_key, w_value)
        return query, key + 1e-3 * (x @ w_value), value

    monkeypatch.setattr(chapter26, "engine_implementation", lambda: engine.PythonImplementation(
        "leaky", leaky, engine.backward))


@pytest.mark.parametrize("dims", [(1, 2, 3, 2), (3, 40, 4, 2)], ids=["small", "sliced"])
def test_run_names_a_cross_pair_that_moves(monkeypatch: pytest.MonkeyPatch,
                                           dims: tuple[int, int, int, int]) -> None:
    # K reads W_V: a change of W_V moves K. The W_Q record alone is clean; the family's
    # finding on the other pair fails independence and is said. On 120 rows the family
    # judges a slice of 64 and still finds it.
    _leaky(monkeypatch)
    evidence = build_evidence(parse_fixture(seeded_doc(*dims, seed=3)))
    ind = evidence.independence
    assert ind.query_changed and ind.key_unchanged and ind.value_unchanged
    assert not ind.passed and ind.other is not None and ind.other.code == "moved"
    assert ind.other.facts[0].startswith("W_V[") and ind.other.facts[1].startswith("key[")
    detail = next(c.detail for c in check_rows(evidence) if c.name == "independence")
    assert "; but changing W_V[" in detail and "changed key[" in detail
