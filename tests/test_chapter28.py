"""Chapter 28's evidence against independent references: torch autograd and plain NumPy formulas.

The reference masks with ``torch.triu(..., diagonal=1)`` (or NumPy's ``triu``), written
here apart from qkv's engine; the chapter's own probes (prefix invariance, the zero
suffix gradient) are checked against fresh reference runs of the perturbed inputs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qkvcli.chapters.head import CAUSAL_MASKING as ch28
from qkvcli.reading.problems import FixtureError

ROOT = Path(__file__).resolve().parent.parent
SHAPES = [(1, 1, 1, 1), (1, 3, 2, 2), (2, 4, 3, 2), (3, 6, 2, 3), (1, 9, 4, 1), (2, 2, 1, 4)]
"""``(batch, tokens, d_k, d_v)`` of the random fixtures."""


def random_document(batch: int, tokens: int, d_k: int, d_v: int, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {
        "chapter": ch28.name,
        "query": rng.normal(size=(batch, tokens, d_k)).tolist(),
        "key": rng.normal(size=(batch, tokens, d_k)).tolist(),
        "value": rng.normal(size=(batch, tokens, d_v)).tolist(),
        "upstream": {"output": rng.normal(size=(batch, tokens, d_v)).tolist()},
        "suffix_perturbation": {"key": rng.normal(size=d_k).tolist(),
                                "value": rng.normal(size=d_v).tolist()},
    }


def numpy_forward(q: Any, k: Any, v: Any) -> tuple[Any, Any]:
    tokens = q.shape[1]
    z = np.einsum("bid,bjd->bij", q, k) / math.sqrt(q.shape[-1])
    z = np.where(np.triu(np.ones((tokens, tokens), dtype=bool), k=1), -np.inf, z)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    a = e / e.sum(axis=-1, keepdims=True)
    return a, np.einsum("bij,bjd->bid", a, v)


def torch_run(torch: Any, q: Any, k: Any, v: Any, u: Any) -> dict[str, Any]:
    qt, kt, vt = (torch.tensor(np.asarray(a), dtype=torch.float64, requires_grad=True)
                  for a in (q, k, v))
    tokens = qt.shape[1]
    z = qt @ kt.transpose(-1, -2) / math.sqrt(qt.shape[-1])
    future = torch.triu(torch.ones(tokens, tokens, dtype=torch.bool), diagonal=1)
    a = torch.softmax(z.masked_fill(future, float("-inf")), dim=-1)
    o = a @ vt
    loss = (o * torch.tensor(np.asarray(u), dtype=torch.float64)).sum()
    loss.backward()
    return {"probabilities": a.detach().numpy(), "output": o.detach().numpy(),
            "loss": loss.item(), "grad_query": qt.grad.numpy(), "grad_key": kt.grad.numpy(),
            "grad_value": vt.grad.numpy()}


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{b}x{t}x{dk}x{dv}" for b, t, dk, dv in SHAPES])
def test_random_fixtures_agree_with_torch(shape: tuple[int, int, int, int]) -> None:
    torch = pytest.importorskip("torch")
    document = random_document(*shape, seed=sum(shape))
    fixture = ch28.parse(document)
    evidence = ch28.build(fixture)
    p, x = evidence.primary, evidence.prefix
    ref = torch_run(torch, p.query, p.key, p.value, p.upstream)
    np.testing.assert_allclose(p.probabilities, ref["probabilities"], rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(p.output, ref["output"], rtol=1e-13, atol=1e-14)
    assert p.loss == pytest.approx(ref["loss"], rel=1e-13, abs=1e-14)
    for name in ("grad_query", "grad_key", "grad_value"):
        np.testing.assert_allclose(getattr(p, name), ref[name], rtol=1e-12, atol=1e-14)
    seeded = torch_run(torch, p.query, p.key, p.value, x.seed)
    for name in ("grad_query", "grad_key", "grad_value"):
        np.testing.assert_allclose(getattr(x, name), seeded[name], rtol=1e-12, atol=1e-14)
    assert evidence.passed, [c.name for c in evidence.checks if not c.passed]


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{b}x{t}x{dk}x{dv}" for b, t, dk, dv in SHAPES])
def test_random_fixtures_agree_with_the_formulas(shape: tuple[int, int, int, int]) -> None:
    document = random_document(*shape, seed=50 + sum(shape))
    evidence = ch28.build(ch28.parse(document))
    p, x = evidence.primary, evidence.prefix
    a, o = numpy_forward(p.query, p.key, p.value)
    np.testing.assert_allclose(p.probabilities, a, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(p.output, o, rtol=1e-13, atol=1e-14)
    tokens = shape[1]
    future = np.triu(np.ones((tokens, tokens), dtype=bool), k=1)
    assert np.all(p.probabilities[:, future] == 0.0) and evidence.future_zero
    key, value = np.array(p.key), np.array(p.value)
    key[0, -1], value[0, -1] = document["suffix_perturbation"]["key"], \
        document["suffix_perturbation"]["value"]
    _, perturbed = numpy_forward(p.query, key, value)
    np.testing.assert_allclose(x.perturbed_output, perturbed, rtol=1e-13, atol=1e-14)
    assert len(x.unchanged) == tokens - 1 and all(x.unchanged) and x.last_changed
    assert [c.name for c in evidence.checks] == [
        "row_sums", "masked_rows", "prefix_invariance", "suffix_gradient", "single_token",
        "empty_batch", "tape_finite", "gradcheck", "rejected_inputs", "replay"]
    assert evidence.passed


def test_the_default_probes_come_from_the_fixture() -> None:
    document = random_document(2, 4, 3, 2, seed=9)
    del document["suffix_perturbation"]
    fixture = ch28.parse(document)
    np.testing.assert_array_equal(fixture.perturbed_key, fixture.inputs.key[0, -1] + 1.0)
    np.testing.assert_array_equal(fixture.perturbed_value, fixture.inputs.value[0, -1] + 1.0)
    expected = np.array(fixture.inputs.upstream)
    expected[:, -1] = 0.0
    np.testing.assert_array_equal(fixture.prefix_seed, expected)
    assert fixture.suffix_start == 3
    assert ch28.build(fixture).passed


def test_a_longer_zero_suffix_has_zero_gradient_throughout() -> None:
    document = random_document(1, 5, 2, 2, seed=4)
    seed = np.array(document["upstream"]["output"])
    seed[:, 2:] = 0.0
    document["prefix_seed"] = seed.tolist()
    evidence = ch28.build(ch28.parse(document))
    x = evidence.prefix
    assert x.suffix_start == 2 and x.suffix_zero
    assert np.any(x.grad_query[:, 1] != 0.0)  # the prefix still gets its gradient


def test_the_rejected_cases_follow_the_fixture_shapes_and_the_course_order() -> None:
    evidence = ch28.build(ch28.parse(random_document(2, 4, 3, 2, seed=12)))
    assert [(c.case, c.expected, c.fields) for c in evidence.errors] == [
        ("attention-empty-tokens", "EmptyTokenAxis", (("tokens", 0),)),
        ("softmax-rank", "CausalSoftmaxRank", (("rank", 1),)),
        ("softmax-shape", "CausalSoftmaxNonSquare", (("queries", 3), ("keys", 4))),
        ("query-rank", "OperandRank", (("operand", "query"), ("rank", 2))),
        ("token-mismatch", "OperandTokenMismatch", (("query", 4), ("key", 3), ("value", 4))),
        ("released-score", "ReleasedOperand", (("operation", "causal-softmax"), ("operand", 0))),
    ]
    assert all(c.rejected for c in evidence.errors)


@pytest.mark.parametrize(("change", "location", "message"), [
    ({"prefix_seed": [[[1, 1], [1, 1], [1, 1]]]}, "$.prefix_seed", "must be zero at the last"),
    ({"prefix_seed": [[[1, 1]]]}, "$.prefix_seed", "expected shape [1,3,2]"),
    ({"suffix_perturbation": {"key": [1, 2, 3]}}, "$.suffix_perturbation.key",
     "expected shape [2]"),
    ({"suffix_perturbation": {"query": [1, 2]}}, "$.suffix_perturbation", 'unknown key "query"'),
    ({"query": {"shape": [0, 3, 2], "values": []}, "key": {"shape": [0, 3, 2], "values": []},
      "value": {"shape": [0, 3, 2], "values": []},
      "upstream": {"output": {"shape": [0, 3, 2], "values": []}}},
     "$.query", "at least one batch item"),
    ({"chapter": "27-self-attention"}, "$.chapter", 'expected "28-causal-masking"'),
], ids=["seed-not-zero", "seed-shape", "key-width", "unknown", "empty-batch", "chapter"])
def test_a_bad_fixture_names_its_path(change: dict[str, Any], location: str, message: str) -> None:
    document = json.loads((ROOT / "fixtures" / ch28.fixture).read_text())
    document.update(change)
    with pytest.raises(FixtureError) as caught:
        ch28.parse(document)
    assert caught.value.location == location
    assert message in caught.value.message


def test_the_bundled_fixture_is_the_installed_one() -> None:
    assert (ROOT / "fixtures" / ch28.fixture).read_bytes() == (
        ROOT / "qkvcli" / "data" / ch28.fixture).read_bytes()


def test_the_json_report_holds_the_evidence() -> None:
    from qkvcli.render.chapters import dispatch

    evidence = ch28.build(ch28.parse(random_document(2, 3, 2, 2, seed=21)))
    document = json.loads("".join(dispatch.pieces(evidence, "json")))
    p = evidence.primary
    assert list(document)[:7] == ["qkv_version", "schema_version", "report", "chapter",
                                  "passed", "checks", "config"]
    assert document["config"]["mask"] == "lower-triangular-inclusive"
    assert document["tensors"]["probabilities"]["values"] == p.probabilities.reshape(-1).tolist()
    assert document["tensors"]["mask"]["values"][:3] == [0.0, "-Infinity", "-Infinity"]
    assert document["suffix_perturbation"]["unchanged_positions"] == [True, True]
    assert [c["name"] for c in document["checks"]] == [
        "row-sums", "future-zero", "prefix", "suffix-gradient", "single-token", "empty-batch",
        "tape-finite", "gradcheck", "rejected-inputs", "replay"]
    assert [c["passed"] for c in document["checks"]] == [c.passed for c in evidence.checks]
    assert [e["case"] for e in document["errors"]] == [c.case for c in evidence.errors]
    assert document["errors"][3]["facts"] == {"input": "query", "rank": 2}
