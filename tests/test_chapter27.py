"""Chapter 27's evidence against independent references: torch autograd and plain NumPy formulas.

The references are written here, apart from qkv's engine: a softmax of ``Q K^T /
sqrt(d_k)`` mixing ``V``, and its gradients by torch's autograd (skipped without torch)
or by the textbook formulas in NumPy.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qkvcli.attention.operands import attend
from qkvcli.chapters.head import SELF_ATTENTION as ch27
from qkvcli.chapters.head import gradient_check, head_session, scale_probe
from qkvcli.reading.problems import FixtureError

ROOT = Path(__file__).resolve().parent.parent
SHAPES = [(1, 1, 1, 1), (1, 2, 2, 2), (2, 3, 4, 2), (3, 5, 2, 3), (1, 7, 3, 1), (2, 4, 1, 5)]
"""``(batch, tokens, d_k, d_v)`` of the random fixtures."""


def random_document(batch: int, tokens: int, d_k: int, d_v: int, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {
        "chapter": ch27.name,
        "query": rng.normal(size=(batch, tokens, d_k)).tolist(),
        "key": rng.normal(size=(batch, tokens, d_k)).tolist(),
        "value": rng.normal(size=(batch, tokens, d_v)).tolist(),
        "upstream": {"output": rng.normal(size=(batch, tokens, d_v)).tolist()},
    }


def numpy_reference(q: Any, k: Any, v: Any, u: Any) -> dict[str, Any]:
    """Forward and reverse by the textbook formulas, written out here."""
    d_k = q.shape[-1]
    s = np.einsum("bid,bjd->bij", q, k)
    z = s / math.sqrt(d_k)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    a = e / e.sum(axis=-1, keepdims=True)
    o = np.einsum("bij,bjd->bid", a, v)
    da = np.einsum("bid,bjd->bij", u, v)
    dv = np.einsum("bij,bid->bjd", a, u)
    dz = a * (da - (da * a).sum(axis=-1, keepdims=True))
    ds = dz / math.sqrt(d_k)
    dq = np.einsum("bij,bjd->bid", ds, k)
    dk = np.einsum("bij,bid->bjd", ds, q)
    return {"scores": s, "probabilities": a, "output": o, "loss": float((o * u).sum()),
            "grad_query": dq, "grad_key": dk, "grad_value": dv}


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{b}x{t}x{dk}x{dv}" for b, t, dk, dv in SHAPES])
def test_random_fixtures_agree_with_torch(shape: tuple[int, int, int, int]) -> None:
    torch = pytest.importorskip("torch")
    document = random_document(*shape, seed=sum(shape))
    evidence = ch27.build(ch27.parse(document))
    q, k, v = (torch.tensor(document[n], dtype=torch.float64, requires_grad=True)
               for n in ("query", "key", "value"))
    u = torch.tensor(document["upstream"]["output"], dtype=torch.float64)
    a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(shape[2]), dim=-1)
    o = a @ v
    loss = (o * u).sum()
    loss.backward()
    p = evidence.primary
    np.testing.assert_allclose(p.probabilities, a.detach().numpy(), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(p.output, o.detach().numpy(), rtol=1e-13, atol=1e-14)
    assert p.loss == pytest.approx(loss.item(), rel=1e-13, abs=1e-14)
    for mine, theirs in ((p.grad_query, q.grad), (p.grad_key, k.grad), (p.grad_value, v.grad)):
        np.testing.assert_allclose(mine, theirs.numpy(), rtol=1e-12, atol=1e-14)
    assert evidence.passed, [c.name for c in evidence.checks if not c.passed]


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{b}x{t}x{dk}x{dv}" for b, t, dk, dv in SHAPES])
def test_random_fixtures_agree_with_the_formulas(shape: tuple[int, int, int, int]) -> None:
    document = random_document(*shape, seed=100 + sum(shape))
    evidence = ch27.build(ch27.parse(document))
    p = evidence.primary
    ref = numpy_reference(p.query, p.key, p.value, p.upstream)
    np.testing.assert_allclose(p.scores, ref["scores"], rtol=1e-14, atol=1e-14)
    for name in ("probabilities", "output", "grad_query", "grad_key", "grad_value"):
        np.testing.assert_allclose(getattr(p, name), ref[name], rtol=1e-12, atol=1e-14,
                                   err_msg=name)
    np.testing.assert_allclose(p.terms.sum(axis=1), p.output[0], atol=1e-12)
    assert [c.name for c in evidence.checks] == [
        "row_sums", "scale_probe", "single_token", "batch_isolation", "empty_batch",
        "gradcheck", "rejected_inputs", "replay"]
    assert evidence.passed


def test_x_and_weights_give_the_projected_operands() -> None:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(2, 3, 4))
    weights = {b: rng.normal(size=(4, 2)) for b in ("query", "key", "value")}
    document = {"chapter": ch27.name, "input": x.tolist(),
                "weights": {b: {"values": w.tolist()} for b, w in weights.items()}}
    fixture = ch27.parse(document)
    assert fixture.source == "projections"
    for branch, operand in (("query", fixture.query), ("key", fixture.key),
                            ("value", fixture.value)):
        np.testing.assert_allclose(operand, x @ weights[branch], rtol=1e-14)
    evidence = ch27.build(fixture)
    assert evidence.passed
    np.testing.assert_array_equal(evidence.primary.upstream, np.ones((2, 3, 2)))


def test_the_scale_probe_is_the_chapters_and_holds_at_width_one() -> None:
    probe = scale_probe(2)
    assert probe.unscaled_focus == pytest.approx(math.e / (math.e + 1.0), rel=1e-15)
    soft = math.exp(1 / math.sqrt(2))
    assert probe.scaled_focus == pytest.approx(soft / (soft + 1.0), rel=1e-15)
    assert probe.softened and probe.holds
    narrow = scale_probe(1)
    assert not narrow.softened and narrow.holds  # a scale of 1 changes nothing


def test_a_wrong_gradient_fails_the_gradient_check() -> None:
    fixture = ch27.parse(random_document(1, 3, 2, 2, seed=3))
    p = ch27.build(fixture).primary
    broken = p._replace(grad_key=p.grad_key * 1.01)
    judge = head_session(fixture.query, fixture.key, fixture.value, fixture.upstream, False)
    check = gradient_check(judge, broken, 1e-6, 2e-6, None)
    assert not check.passed
    assert [t.passed for t in check.tensors] == [True, False, True]


def test_the_rejected_cases_follow_the_fixture_shapes_and_the_course_order() -> None:
    evidence = ch27.build(ch27.parse(random_document(2, 3, 4, 5, seed=11)))
    assert [(c.case, c.expected, c.fields) for c in evidence.errors] == [
        ("query-rank", "OperandRank", (("operand", "query"), ("rank", 2))),
        ("batch-mismatch", "OperandBatchMismatch", (("query", 2), ("key", 3), ("value", 2))),
        ("token-mismatch", "OperandTokenMismatch", (("query", 3), ("key", 4), ("value", 3))),
        ("empty-tokens", "EmptyTokenAxis", (("tokens", 0),)),
        ("query-key-width", "QueryKeyWidthMismatch", (("query", 4), ("key", 5))),
    ]
    assert all(c.rejected for c in evidence.errors)
    assert evidence.errors[2].message == ("self-attention token counts must match, got query 3, "
                                          "key 4, value 3")


def test_the_operand_checks_run_in_the_declared_order() -> None:
    """Rank before batch before tokens: the first failing check wins."""
    with pytest.raises(Exception) as caught:
        attend(np.zeros((2, 2)), np.zeros((3, 1, 2)), np.zeros((1, 4, 2)), False)
    assert str(caught.value).startswith("self-attention query must have rank three")
    with pytest.raises(Exception) as caught:
        attend(np.zeros((1, 2, 2)), np.zeros((3, 1, 2)), np.zeros((1, 4, 2)), False)
    assert str(caught.value) == ("self-attention batch sizes must match, got query 1, key 3, "
                                 "value 1")


@pytest.mark.parametrize(("change", "location", "message"), [
    ({"chapter": "28-causal-masking"}, "$.chapter", 'expected "27-self-attention"'),
    ({"key": [[[1, 2, 3], [4, 5, 6]]]}, "$.key", "query and key widths must match"),
    ({"value": [[[1, 2]], [[3, 4]]]}, "$.value", "batch sizes must match"),
    ({"query": [[0, 3], [2, -1]]}, "$.query", "must have rank three"),
    ({"upstream": {"output": [[[1, 0]]]}}, "$.upstream.output", "expected shape [1,2,2]"),
    ({"single_token": {"query": [1], "key": [1, 2], "value": [1, 2]}},
     "$.single_token.query", "expected shape [2]"),
    ({"input": [[[1]]]}, "$", "not both"),
    ({"gradcheck": {"step": -1}}, "$.gradcheck.step", ""),
    ({"extra": 1}, "$", 'unknown key "extra"'),
], ids=["chapter", "width", "batch", "rank", "upstream", "single-token", "both", "step", "key"])
def test_a_bad_fixture_names_its_path(change: dict[str, Any], location: str, message: str) -> None:
    document = json.loads((ROOT / "fixtures" / ch27.fixture).read_text())
    document.update(change)
    with pytest.raises(FixtureError) as caught:
        ch27.parse(document)
    assert caught.value.location == location
    assert message in caught.value.message


def test_the_bundled_fixture_is_the_installed_one() -> None:
    assert (ROOT / "fixtures" / ch27.fixture).read_bytes() == (
        ROOT / "qkvcli" / "data" / ch27.fixture).read_bytes()


def test_the_json_report_holds_the_evidence() -> None:
    from qkvcli.render.chapters import dispatch

    evidence = ch27.build(ch27.parse(random_document(2, 3, 2, 4, seed=5)))
    document = json.loads("".join(dispatch.pieces(evidence, "json")))
    p = evidence.primary
    assert document["chapter"] == "27-self-attention" and document["passed"] is True
    assert document["config"] == {"batch": 2, "tokens": 3, "d_k": 2, "d_v": 4,
                                  "scale": 1 / math.sqrt(2), "masked": False,
                                  "softmax_axis": "key", "source": "operands"}
    for name, values in (("output", p.output), ("query_gradient", p.grad_query),
                         ("mixture_terms", p.terms)):
        assert document["tensors"][name]["values"] == values.reshape(-1).tolist()
        assert document["tensors"][name]["shape"] == list(values.shape)
    assert document["gradcheck"]["tensors"][0]["checked"] == 12
    assert document["scale_probe"]["softened"] is True


def test_a_case_is_rejected_only_by_the_expected_error() -> None:
    from qkvcli.attention.operands import OperandRank, QueryKeyWidthMismatch
    from qkvcli.core.results import refused

    def raises_width() -> object:
        raise QueryKeyWidthMismatch(2, 3)

    right = refused("w", QueryKeyWidthMismatch(2, 3), raises_width)
    assert right.rejected and right.message.endswith("got query 2, key 3")
    assert right.fields == (("query", 2), ("key", 3))
    assert not refused("w", QueryKeyWidthMismatch(2, 4), raises_width).rejected  # wrong facts
    assert not refused("w", OperandRank("query", 2), raises_width).rejected  # the wrong error
    assert refused("w", QueryKeyWidthMismatch, raises_width).rejected  # a class: any fields
    accepted = refused("w", OperandRank("query", 2), lambda: None)  # nothing refused it
    assert not accepted.rejected and accepted.raised == ""


def test_a_wide_fixture_keeps_the_mixture_terms_of_its_first_queries() -> None:
    from qkvcli.chapters.head import MIXTURE_LIMIT
    from qkvcli.render.chapters import head as rendered

    document = random_document(1, 100, 3, 512, seed=8)
    document["gradcheck"] = {"samples": 2}
    evidence = ch27.build(ch27.parse(document))
    kept = MIXTURE_LIMIT // (100 * 512)
    assert evidence.primary.terms.shape == (kept, 100, 512) and kept < 100
    assert evidence.passed
    report = rendered.text(evidence)
    assert report.count("\nmixture_query_") == kept
    assert f"mixture_query_{kept - 1}=" in report and f"mixture_query_{kept}=" not in report
