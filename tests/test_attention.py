"""The attention head: worked example, softmax, mask, empty axes, reverse pass, gradcheck."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkvcli.attention.errors import BiasShapeMismatch, KeyWidthMismatch
from qkvcli.attention.fixture import head_of, load_attend_fixture
from qkvcli.attention.gradcheck import gradcheck_attention
from qkvcli.attention.head import AttentionHead
from qkvcli.attention.maths import causal_mask, softmax
from qkvcli.core.errors import (
    BranchInputWidthMismatch,
    BranchOutputWidthMismatch,
    DuplicateName,
    ProjectionError,
    ZeroOutputWidth,
)

ROOT = Path(__file__).resolve().parent.parent
NAMES = ("t.query", "t.key", "t.value")


def random_head(seed: int, d_model: int = 5, d_k: int = 3, d_v: int = 4, bias: bool = True,
                ) -> tuple[AttentionHead, np.random.Generator]:
    rng = np.random.default_rng(seed)
    weights = [rng.normal(size=(d_model, d_k)), rng.normal(size=(d_model, d_k)),
               rng.normal(size=(d_model, d_v))]
    biases = [rng.normal(size=d_k), rng.normal(size=d_k), rng.normal(size=d_v)] if bias else [
        None, None, None]
    head = AttentionHead.from_arrays(*weights, biases=biases, names=NAMES,
                                     independent_value_width=d_v != d_k)
    return head, rng


# --- the primer's worked example ----------------------------------------------------------


def test_primer_worked_example_is_computed() -> None:
    fixture = load_attend_fixture(example="primer")
    forward = head_of(fixture.parameters, fixture.function).forward(fixture.input)
    # The inputs are the primer's; every number below comes out of the engine.
    np.testing.assert_array_equal(forward.query[0], [[2, 0], [0, 2]])
    np.testing.assert_array_equal(forward.value[0], [[1, 3], [3, -1]])
    np.testing.assert_array_equal(forward.scores[0, 0], [4, 0])
    assert forward.scaled_scores[0, 0, 0] == pytest.approx(2.8284, abs=5e-5)
    assert round(float(forward.attention[0, 0, 0]), 4) == 0.9442
    assert round(float(forward.attention[0, 0, 1]), 4) == 0.0558
    assert [round(float(v), 4) for v in forward.output[0, 0]] == [1.1116, 2.7768]
    assert [round(float(v), 3) for v in forward.output[0, 0]] == [1.112, 2.777]


def test_primer_fixture_is_bundled_identically() -> None:
    bundled = (ROOT / "qkvcli" / "data" / "primer-worked-example.json").read_bytes()
    assert (ROOT / "fixtures" / "primer-worked-example.json").read_bytes() == bundled
    data = json.loads(bundled)
    assert data["weights"]["query"] == data["weights"]["key"]  # the primer's W_Q = W_K


# --- softmax and the mask ------------------------------------------------------------------


def test_softmax_subtracts_the_row_max() -> None:
    weights = softmax(np.array([[1000.0, 999.0, -1000.0]]))  # naive exp overflows
    assert np.isfinite(weights).all()
    np.testing.assert_allclose(weights[0, :2], [1 / (1 + math.exp(-1)), 1 / (1 + math.e)])
    assert weights[0, 2] == 0.0


def test_causal_mask_zeroes_the_future_exactly() -> None:
    head, rng = random_head(1)
    x = rng.normal(size=(2, 4, 5))
    forward = head.forward(x, causal=True)
    assert (forward.attention[:, causal_mask(4)] == 0.0).all()
    assert np.isneginf(forward.scaled_scores[:, causal_mask(4)]).all()
    np.testing.assert_array_equal(forward.attention[:, 0, 0], [1.0, 1.0])  # first token: itself
    np.testing.assert_allclose(forward.attention.sum(axis=-1), 1.0, rtol=0, atol=1e-15)


@pytest.mark.parametrize("shape", [(0, 3, 5), (2, 0, 5), (0, 0, 5)], ids=["batch0", "tokens0",
                                                                          "both0"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_empty_axes(shape: tuple[int, int, int], causal: bool) -> None:
    head, _ = random_head(2)
    forward = head.forward(np.zeros(shape), causal)
    batch, tokens, _ = shape
    assert forward.attention.shape == (batch, tokens, tokens)
    assert forward.output.shape == (batch, tokens, 4)
    grads = head.backward(np.zeros(shape), forward, np.zeros(forward.output.shape))
    assert grads.grad_input.shape == shape
    assert grads.grad_w_query.shape == (5, 3) and not grads.grad_w_query.any()
    assert grads.grad_b_value is not None and grads.grad_b_value.shape == (4,)


@settings(max_examples=40, deadline=None)
@given(batch=st.integers(1, 3), tokens=st.integers(1, 5), d_model=st.integers(1, 4),
       d_k=st.integers(1, 3), d_v=st.integers(1, 3), seed=st.integers(0, 2**32 - 1),
       scale=st.sampled_from([0.1, 1.0, 30.0]), causal=st.booleans())
def test_weights_are_distributions_and_outputs_mix_values(
    batch: int, tokens: int, d_model: int, d_k: int, d_v: int, seed: int, scale: float,
    causal: bool,
) -> None:
    rng = np.random.default_rng(seed)
    head = AttentionHead.from_arrays(
        scale * rng.normal(size=(d_model, d_k)), scale * rng.normal(size=(d_model, d_k)),
        rng.normal(size=(d_model, d_v)), names=NAMES, independent_value_width=True)
    forward = head.forward(rng.normal(size=(batch, tokens, d_model)), causal)
    assert (forward.attention >= 0).all()
    np.testing.assert_allclose(forward.attention.sum(axis=-1), 1.0, rtol=0, atol=4 * tokens * 2e-16)
    low = forward.value.min(axis=1, keepdims=True) - 1e-12
    high = forward.value.max(axis=1, keepdims=True) + 1e-12
    assert ((forward.output >= low) & (forward.output <= high)).all()


# --- reverse pass --------------------------------------------------------------------------


def test_softmax_reverse_matches_the_jacobian() -> None:
    head, rng = random_head(3, bias=False)
    x = rng.normal(size=(1, 3, 5))
    forward = head.forward(x)
    upstream = rng.normal(size=forward.output.shape)
    grads = head.backward(x, forward, upstream)
    for i in range(3):  # dZ_i = J_i^T dA_i with J = diag(a) - a a^T, row by row
        a = forward.attention[0, i]
        jacobian = np.diag(a) - np.outer(a, a)
        np.testing.assert_allclose(grads.grad_scaled_scores[0, i],
                                   jacobian.T @ grads.grad_attention[0, i], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(grads.grad_scores, grads.grad_scaled_scores / math.sqrt(3))


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4], ids=lambda s: f"seed{s}")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d_v", [3, 4], ids=["dv=dk", "dv!=dk"])
def test_gradcheck_passes_on_random_heads(seed: int, causal: bool, d_v: int) -> None:
    head, rng = random_head(seed, d_v=d_v, bias=seed % 2 == 0)
    x = rng.normal(size=(2, 3, 5))
    forward = head.forward(x, causal)
    upstream = rng.normal(size=forward.output.shape)
    result = gradcheck_attention(head, x, upstream, head.backward(x, forward, upstream), causal,
                            1e-6, 2e-6)
    assert result.passed, result.worst
    expected_tensors = 4 + (3 if seed % 2 == 0 else 0)
    assert len(result.tensors) == expected_tensors
    assert result.count == 30 + 15 + 15 + 5 * d_v + (6 + d_v if seed % 2 == 0 else 0)


WRONG = {
    "input-scaled": lambda g: g._replace(grad_input=g.grad_input * 1.01),
    "key-gets-query-gradient": lambda g: g._replace(grad_w_key=g.grad_w_query),
    "value-bias-zeroed": lambda g: g._replace(grad_b_value=np.zeros_like(g.grad_b_value)),
    "query-weight-negated": lambda g: g._replace(grad_w_query=-g.grad_w_query),
}


@pytest.mark.parametrize("wrong", list(WRONG), ids=list(WRONG))
def test_gradcheck_fails_on_a_wrong_analytic_gradient(wrong: str) -> None:
    head, rng = random_head(7)
    x = rng.normal(size=(2, 3, 5))
    forward = head.forward(x)
    upstream = rng.normal(size=forward.output.shape)
    grads = WRONG[wrong](head.backward(x, forward, upstream))
    result = gradcheck_attention(head, x, upstream, grads, False, 1e-6, 2e-6)
    assert not result.passed
    assert result.worst is not None and not result.worst.passed


def test_gradcheck_catches_a_softmax_reverse_without_the_rowsum_term() -> None:
    head, rng = random_head(8, bias=False)
    x = rng.normal(size=(1, 3, 5))
    forward = head.forward(x)
    upstream = rng.normal(size=forward.output.shape)
    # The classic slip: dZ = A * dA, forgetting - rowsum(dA * A); push it through to dX.
    wrong_dz = forward.attention * (upstream @ np.swapaxes(forward.value, -1, -2))
    wrong_dq = (wrong_dz / math.sqrt(3)) @ forward.key
    grads = head.backward(x, forward, upstream)
    wrong = grads._replace(grad_w_query=x.reshape(3, 5).T @ wrong_dq.reshape(3, 3))
    assert not gradcheck_attention(head, x, upstream, wrong, False, 1e-6, 2e-6).passed


# --- construction errors -------------------------------------------------------------------


def z(rows: int, cols: int) -> np.ndarray:
    return np.zeros((rows, cols))


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (lambda: AttentionHead.from_arrays(z(3, 2), z(3, 0), z(3, 2), names=NAMES),
         ProjectionError("key", ZeroOutputWidth())),
        (lambda: AttentionHead.from_arrays(z(3, 2), z(4, 2), z(3, 3), names=NAMES),
         BranchInputWidthMismatch(3, 4, 3)),
        (lambda: AttentionHead.from_arrays(z(3, 2), z(3, 2), z(3, 3), names=NAMES),
         BranchOutputWidthMismatch(2, 2, 3)),
        (lambda: AttentionHead.from_arrays(z(3, 2), z(3, 3), z(3, 3), names=NAMES,
                                           independent_value_width=True),
         KeyWidthMismatch(2, 3)),
        (lambda: AttentionHead.from_arrays(z(3, 2), z(3, 2), z(3, 2), biases=(None, [1.0], None),
                                           names=NAMES),
         BiasShapeMismatch("key", 2, (1,))),
        (lambda: AttentionHead.from_arrays(z(3, 2), z(3, 2), z(3, 2), names=("a", "a", "b")),
         DuplicateName("a", 0, 1)),
        # first failure wins: model widths before head widths
        (lambda: AttentionHead.from_arrays(z(3, 2), z(4, 3), z(3, 2), names=NAMES),
         BranchInputWidthMismatch(3, 4, 3)),
    ],
    ids=["zero-width", "model-width", "head-width", "key-width", "bias", "names", "order"],
)
def test_construction_errors(build: object, expected: Exception) -> None:
    with pytest.raises(type(expected)) as caught:
        build()  # type: ignore[operator]
    assert caught.value == expected
    assert str(caught.value) == str(expected)


def test_key_width_message() -> None:
    assert str(KeyWidthMismatch(2, 3)) == (
        "query and key widths must match for the dot product, got query 2, key 3")


def test_parameter_count_includes_biases() -> None:
    head, _ = random_head(0)
    assert head.parameter_count == 5 * (3 + 3 + 4) + (3 + 3 + 4)
