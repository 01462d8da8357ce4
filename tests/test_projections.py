"""The projection engine against independent computations, and its typed errors."""

from __future__ import annotations

import numpy as np
import pytest

from qkvcli.core.errors import (
    BranchInputWidthMismatch,
    BranchOutputWidthMismatch,
    DuplicateName,
    EmptyName,
    EmptyNameSegment,
    GradientShapeMismatch,
    InputRank,
    InputWidthMismatch,
    InvalidNameCharacter,
    NonFiniteValue,
    ProjectionError,
    QkvError,
    WeightRank,
    ZeroInputWidth,
    ZeroOutputWidth,
)
from qkvcli.core.names import DEFAULT_NAMES
from qkvcli.core.outputs import weighted_loss
from qkvcli.core.projections import QkvProjections
from qkvcli.core.splitmix import SplitMix64

WQ = [[1, 0], [0, 1], [1, -1]]
WK = [[0, 1], [1, 0], [-1, 1]]
WV = [[1, 1], [1, -1], [0, 2]]
X = [[[1, 2, -1], [0, 1, 2]]]


def chapter_layer() -> QkvProjections:
    return QkvProjections.from_arrays(WQ, WK, WV)


def loop_project(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Token by token, feature by feature: an independent definition of X W."""
    batch, tokens, d_model = x.shape
    out = np.zeros((batch, tokens, w.shape[1]))
    for b in range(batch):
        for t in range(tokens):
            for j in range(w.shape[1]):
                out[b, t, j] = sum(x[b, t, i] * w[i, j] for i in range(d_model))
    return out


def test_chapter_forward_is_exact() -> None:
    q, k, v = chapter_layer().forward(X)
    assert q.tolist() == [[[0, 3], [2, -1]]]
    assert k.tolist() == [[[3, 0], [-1, 2]]]
    assert v.tolist() == [[[3, -3], [1, 3]]]


def test_chapter_backward_is_exact() -> None:
    layer = chapter_layer()
    uq = [[[1, 0], [-1, 2]]]
    uk = [[[0.5, -1], [1, 0]]]
    uv = [[[2, 1], [0, -0.5]]]
    grads = layer.backward(X, uq, uk, uv)
    assert grads.grad_input.reshape(-1).tolist() == [3, 1.5, 1.5, -1.5, 3.5, -5]
    assert grads.grad_w_query.reshape(-1).tolist() == [1, 0, 1, 2, -3, 4]
    assert grads.grad_w_key.reshape(-1).tolist() == [0.5, -1, 2, -2, 1.5, 1]
    assert grads.grad_w_value.reshape(-1).tolist() == [2, 1, 4, 1.5, -2, -2]
    outputs = layer.forward(X)
    assert weighted_loss(outputs, tuple(np.asarray(u, float) for u in (uq, uk, uv))) == -2.0


@pytest.mark.parametrize(
    ("batch", "tokens", "d_model", "d_head"),
    [(1, 1, 1, 1), (2, 3, 5, 4), (3, 7, 4, 6), (1, 4, 8, 2), (0, 3, 4, 2), (2, 0, 4, 2)],
    ids=["scalar", "wide-head", "head-wider-than-model", "narrow", "empty-batch", "empty-tokens"],
)
def test_forward_and_backward_match_loops(batch: int, tokens: int, d_model: int, d_head: int) -> None:
    rng = np.random.default_rng(batch * 100 + tokens * 10 + d_model)
    x = rng.standard_normal((batch, tokens, d_model))
    weights = [rng.standard_normal((d_model, d_head)) for _ in range(3)]
    upstream = [rng.standard_normal((batch, tokens, d_head)) for _ in range(3)]
    layer = QkvProjections.from_arrays(*weights)
    outputs = layer.forward(x)
    for out, w in zip(outputs, weights, strict=True):
        assert out.shape == (batch, tokens, d_head)
        np.testing.assert_allclose(out, loop_project(x, w), rtol=1e-12, atol=1e-12)
    grads = layer.backward(x, *upstream)
    expected_dx = np.zeros_like(x)
    for w, u in zip(weights, upstream, strict=True):
        expected_dx += np.einsum("bth,dh->btd", u, w)
    np.testing.assert_allclose(grads.grad_input, expected_dx, rtol=1e-12, atol=1e-12)
    for grad, u in zip(list(grads)[1:], upstream, strict=True):
        expected = np.zeros((d_model, d_head))
        for b in range(batch):
            for t in range(tokens):
                expected += np.outer(x[b, t], u[b, t])
        assert grad.shape == (d_model, d_head)
        np.testing.assert_allclose(grad, expected, rtol=1e-12, atol=1e-12)


def test_default_names_and_count() -> None:
    layer = chapter_layer()
    assert layer.names == DEFAULT_NAMES == (
        "decoder.block.0.attention.query.weight",
        "decoder.block.0.attention.key.weight",
        "decoder.block.0.attention.value.weight",
    )
    assert layer.parameter_count == 18
    assert (layer.d_model, layer.d_head) == (3, 2)


def test_weights_are_read_only_copies() -> None:
    source = np.array(WQ, dtype=float)
    layer = QkvProjections.from_arrays(source, WK, WV)
    source[0, 0] = 99.0
    assert layer.weights[0][0, 0] == 1.0
    with pytest.raises(ValueError):
        layer.weights[0][0, 0] = 5.0


def zeros(*shape: int) -> np.ndarray:
    return np.zeros(shape)


ERROR_CASES = [
    ("rank-two-input", lambda: chapter_layer().forward(zeros(2, 3)), InputRank(2),
     "Q/K/V input must have rank three [batch, tokens, model_width], got rank 2"),
    ("input-width", lambda: chapter_layer().forward(zeros(1, 2, 4)), InputWidthMismatch(3, 4),
     "Q/K/V input final width must equal model width 3, got 4"),
    ("rank-before-width", lambda: chapter_layer().forward(zeros(2, 4)), InputRank(2),
     "Q/K/V input must have rank three [batch, tokens, model_width], got rank 2"),
    ("input-nan", lambda: chapter_layer().forward([[[1, np.nan, 0]]]),
     NonFiniteValue("input", 1, float("nan")),
     "input tensor value at flat index 1 must be finite, got NaN"),
    ("width-before-finite", lambda: chapter_layer().forward([[[np.nan, 0, 0, 0]]]),
     InputWidthMismatch(3, 4), "Q/K/V input final width must equal model width 3, got 4"),
    ("model-mismatch", lambda: QkvProjections.from_arrays(zeros(3, 2), zeros(4, 2), zeros(3, 2)),
     BranchInputWidthMismatch(3, 4, 3),
     "Q/K/V model widths must match, got query 3, key 4, value 3"),
    ("head-mismatch", lambda: QkvProjections.from_arrays(zeros(3, 2), zeros(3, 3), zeros(3, 2)),
     BranchOutputWidthMismatch(2, 3, 2),
     "Q/K/V head widths must match, got query 2, key 3, value 2"),
    ("model-before-head",
     lambda: QkvProjections.from_arrays(zeros(3, 2), zeros(4, 3), zeros(3, 2)),
     BranchInputWidthMismatch(3, 4, 3),
     "Q/K/V model widths must match, got query 3, key 4, value 3"),
    ("duplicate-name",
     lambda: QkvProjections.from_arrays(zeros(3, 2), zeros(3, 2), zeros(3, 2),
                                        names=("same", "same", "v")),
     DuplicateName("same", 0, 1),
     'parameter name "same" first appears at index 0 and repeats at index 1'),
    ("duplicate-first-and-last",
     lambda: QkvProjections.from_arrays(zeros(3, 2), zeros(3, 2), zeros(3, 2),
                                        names=("a", "b", "a")),
     DuplicateName("a", 0, 2),
     'parameter name "a" first appears at index 0 and repeats at index 2'),
    ("zero-head-width",
     lambda: QkvProjections.from_arrays(zeros(3, 0), zeros(3, 0), zeros(3, 0)),
     ProjectionError("query", ZeroOutputWidth()),
     "query projection: linear output width must be greater than zero"),
    ("zero-model-width-key",
     lambda: QkvProjections.from_arrays(zeros(3, 2), zeros(0, 2), zeros(3, 2)),
     ProjectionError("key", ZeroInputWidth()),
     "key projection: linear input width must be greater than zero"),
    ("weight-rank",
     lambda: QkvProjections.from_arrays(zeros(3, 2), zeros(3, 2), zeros(6)),
     ProjectionError("value", WeightRank(1)),
     "value projection: linear weight must have rank two, got rank 1"),
    ("name-uppercase",
     lambda: QkvProjections.from_arrays(zeros(3, 2), zeros(3, 2), zeros(3, 2),
                                        names=("Decoder", "k", "v")),
     InvalidNameCharacter(0, 0x44),
     "parameter name byte 0 must be lowercase ASCII, a digit, underscore, or dot; got 0x44"),
    ("name-empty-segment",
     lambda: QkvProjections.from_arrays(zeros(3, 2), zeros(3, 2), zeros(3, 2),
                                        names=("ab..c", "k", "v")),
     EmptyNameSegment(3), "parameter name has an empty dot-separated segment at byte 3"),
    ("name-leading-dot",
     lambda: QkvProjections.from_arrays(zeros(3, 2), zeros(3, 2), zeros(3, 2),
                                        names=("q", ".k", "v")),
     EmptyNameSegment(0), "parameter name has an empty dot-separated segment at byte 0"),
    ("name-trailing-dot",
     lambda: QkvProjections.from_arrays(zeros(3, 2), zeros(3, 2), zeros(3, 2),
                                        names=("q", "k", "v.")),
     EmptyNameSegment(2), "parameter name has an empty dot-separated segment at byte 2"),
    ("name-empty",
     lambda: QkvProjections.from_arrays(zeros(3, 2), zeros(3, 2), zeros(3, 2),
                                        names=("", "k", "v")),
     EmptyName(), "parameter name must not be empty"),
    ("name-non-ascii",
     lambda: QkvProjections.from_arrays(zeros(3, 2), zeros(3, 2), zeros(3, 2),
                                        names=("qé", "k", "v")),
     InvalidNameCharacter(1, 0xC3),
     "parameter name byte 1 must be lowercase ASCII, a digit, underscore, or dot; got 0xc3"),
    ("weight-nan",
     lambda: QkvProjections.from_arrays([[1, np.nan], [0, 0]], zeros(2, 2), zeros(2, 2)),
     NonFiniteValue("parameter", 1, float("nan")),
     "parameter tensor value at flat index 1 must be finite, got NaN"),
    ("weight-inf",
     lambda: QkvProjections.from_arrays(zeros(2, 2), [[0, 0], [0, -np.inf]], zeros(2, 2)),
     NonFiniteValue("parameter", 3, float("-inf")),
     "parameter tensor value at flat index 3 must be finite, got -inf"),
    ("name-before-finite",
     lambda: QkvProjections.from_arrays([[np.inf]], [[1.0]], [[1.0]], names=("Q", "k", "v")),
     InvalidNameCharacter(0, 0x51),
     "parameter name byte 0 must be lowercase ASCII, a digit, underscore, or dot; got 0x51"),
    ("query-before-key",
     lambda: QkvProjections.from_arrays(zeros(3, 0), zeros(0, 2), zeros(3, 2)),
     ProjectionError("query", ZeroOutputWidth()),
     "query projection: linear output width must be greater than zero"),
    ("finite-before-branch-shape",
     lambda: QkvProjections.from_arrays(zeros(3, 2), zeros(6), [[np.inf, 0]]),
     NonFiniteValue("parameter", 0, float("inf")),
     "parameter tensor value at flat index 0 must be finite, got inf"),
    ("upstream-shape",
     lambda: chapter_layer().backward(X, zeros(1, 2, 2), zeros(1, 2, 3), zeros(1, 2, 2)),
     GradientShapeMismatch("key", (1, 2, 2), (1, 2, 3)),
     "key upstream gradient must have shape [1,2,2], got [1,2,3]"),
]


@pytest.mark.parametrize(("attempt", "expected", "message"),
                         [case[1:] for case in ERROR_CASES], ids=[c[0] for c in ERROR_CASES])
def test_errors_are_typed_and_keep_the_reference_wording(
    attempt: object, expected: QkvError, message: str
) -> None:
    with pytest.raises(QkvError) as caught:
        attempt()  # type: ignore[operator]
    assert caught.value == expected
    assert str(caught.value) == message


def test_seeded_construction_is_transactional() -> None:
    rng = SplitMix64(26)
    with pytest.raises(ProjectionError) as caught:
        QkvProjections.from_seed(3, 0, rng)
    assert str(caught.value) == "query projection: linear output width must be greater than zero"
    assert rng.state == 26
    layer = QkvProjections.from_seed(3, 2, rng)
    assert rng.state != 26
    again = QkvProjections.from_seed(3, 2, SplitMix64(26))
    assert all(a.tobytes() == b.tobytes() for a, b in zip(layer.weights, again.weights, strict=True))


def test_seeded_construction_rejects_a_bad_prefix_without_drawing() -> None:
    rng = SplitMix64(1)
    with pytest.raises(InvalidNameCharacter):
        QkvProjections.from_seed(3, 2, rng, prefix="Bad")
    assert rng.state == 1


def test_with_weight_changes_one_branch_only() -> None:
    layer = chapter_layer()
    changed = layer.with_weight("query", np.array(WQ, float) + 1)
    assert changed.weights[1] is not None
    assert changed.weights[1].tobytes() == layer.weights[1].tobytes()
    assert changed.names == layer.names
    assert not np.array_equal(changed.weights[0], layer.weights[0])
