"""The fused engine ([W_Q|W_K|W_V] in one GEMM each way) against three separate products."""

from __future__ import annotations

import numpy as np
import pytest

from qkvcli.core.arrays import all_finite, check_finite
from qkvcli.core.errors import GradientShapeMismatch, InputRank, InputWidthMismatch, NonFiniteValue
from qkvcli.core.projections import QkvProjections

EPS = np.finfo(np.float64).eps


def _separate(x, weights, upstream):
    """The straightforward computation: one product per branch, dX accumulated."""
    batch, tokens, d_model = x.shape
    outputs = [x @ w for w in weights]  # [B,T,d] @ [d,h] -> [B,T,h]
    grad_input = np.zeros_like(x)
    rows = x.reshape(batch * tokens, d_model)
    grads = []
    for w, g in zip(weights, upstream, strict=True):
        grad_input += g @ w.T
        grads.append(rows.T @ g.reshape(batch * tokens, g.shape[2]))
    return outputs, grad_input, grads


def _random_case(seed, batch, tokens, d_model, d_head):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (batch, tokens, d_model))
    weights = [rng.uniform(-1, 1, (d_model, d_head)) for _ in range(3)]
    upstream = [rng.uniform(-1, 1, (batch, tokens, d_head)) for _ in range(3)]
    return x, weights, upstream


SHAPES = [(1, 2, 3, 2), (2, 16, 32, 8), (3, 7, 5, 11), (0, 4, 6, 2), (2, 0, 6, 2), (1, 1, 1, 1)]


@pytest.mark.parametrize("shape", SHAPES, ids=["chapter", "small", "odd", "empty-batch",
                                               "empty-tokens", "one"])
def test_fused_equals_separate_to_rounding(shape):
    x, weights, upstream = _random_case(1, *shape)
    layer = QkvProjections.from_arrays(*weights)
    forward = layer.forward(x)
    grads = layer.backward(x, *upstream)
    outputs, grad_input, weight_grads = _separate(x, weights, upstream)
    d_model, d_head = shape[2], shape[3]
    # Standard dot-product error bound: |fl(sum) - sum| <= n*eps*sum|terms|.
    abs_x = np.abs(x)
    for fused, plain, w in zip(forward, outputs, weights, strict=True):
        bound = d_model * EPS * (abs_x @ np.abs(w))
        assert fused.shape == plain.shape
        assert np.all(np.abs(fused - plain) <= bound)
    terms = sum(np.abs(g) @ np.abs(w).T for g, w in zip(upstream, weights, strict=True))
    assert np.all(np.abs(grads.grad_input - grad_input) <= 3 * d_head * EPS * terms + 0.0)
    rows = abs_x.reshape(-1, d_model)
    for fused, plain, g in zip(list(grads)[1:], weight_grads, upstream, strict=True):
        bound = rows.shape[0] * EPS * (rows.T @ np.abs(g.reshape(rows.shape[0], d_head)))
        assert np.all(np.abs(fused - plain) <= bound)


def test_fused_equals_separate_exactly_for_small_integers():
    rng = np.random.default_rng(7)
    x = rng.integers(-4, 5, (2, 5, 6)).astype(float)
    weights = [rng.integers(-4, 5, (6, 3)).astype(float) for _ in range(3)]
    upstream = [rng.integers(-4, 5, (2, 5, 3)).astype(float) / 2 for _ in range(3)]
    layer = QkvProjections.from_arrays(*weights)
    outputs, grad_input, weight_grads = _separate(x, weights, upstream)
    forward = layer.forward(x)
    grads = layer.backward(x, *upstream)
    for fused, plain in zip(forward, outputs, strict=True):
        assert np.array_equal(fused, plain)
    assert np.array_equal(grads.grad_input, grad_input)
    for fused, plain in zip(list(grads)[1:], weight_grads, strict=True):
        assert np.array_equal(fused, plain)


def test_outputs_and_weights_are_views_of_one_packed_matrix():
    x, weights, upstream = _random_case(2, 2, 3, 4, 5)
    layer = QkvProjections.from_arrays(*weights)
    assert layer.packed.shape == (4, 15) and layer.packed.flags.c_contiguous
    for index, weight in enumerate(layer.weights):
        assert np.shares_memory(weight, layer.packed)
        assert np.array_equal(weight, weights[index])
        assert not weight.flags.writeable
    forward = layer.forward(x)
    assert forward.query.base is not None
    assert forward.query.base is forward.key.base is forward.value.base
    grads = layer.backward(x, *upstream)
    assert grads.grad_w_query.base is not None
    assert grads.grad_w_query.base is grads.grad_w_key.base is grads.grad_w_value.base


def test_layer_keeps_its_own_copy_of_the_weights():
    weights = [np.ones((3, 2)), np.zeros((3, 2)), np.full((3, 2), 2.0)]
    layer = QkvProjections.from_arrays(*weights)
    weights[0][0, 0] = 99.0
    assert layer.weights[0][0, 0] == 1.0


def test_replay_is_bitwise():
    x, weights, upstream = _random_case(3, 2, 16, 32, 8)
    layer = QkvProjections.from_arrays(*weights)
    first = (*layer.forward(x), *layer.backward(x, *upstream))
    second = (*layer.forward(x), *layer.backward(x, *upstream))
    for a, b in zip(first, second, strict=True):
        assert a.tobytes() == b.tobytes()


# --- validation order survives the shortcuts ----------------------------------------------


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("zero_row", [False, True], ids=["dense-weights", "zero-weight-row"])
@pytest.mark.parametrize("d_model", [2, 40], ids=["narrow", "wide"])
def test_non_finite_input_is_reported_by_forward_and_backward(bad, zero_row, d_model):
    # "wide" makes the input larger than the outputs, so the finite check is proved
    # from the product; a zero weight row forces the up-front check instead.
    x, weights, upstream = _random_case(4, 2, 3, d_model, 2)
    if zero_row:
        for w in weights:
            w[1] = 0.0
    x[1, 2, 1] = bad
    flat = int(np.ravel_multi_index((1, 2, 1), x.shape))
    layer = QkvProjections.from_arrays(*weights)
    expected = NonFiniteValue("input", flat, float(bad))
    for call in (lambda: layer.forward(x), lambda: layer.backward(x, *upstream)):
        with pytest.raises(NonFiniteValue) as caught:
            call()
        assert caught.value == expected


def test_non_finite_input_found_when_its_upstream_row_is_zero():
    x, weights, upstream = _random_case(5, 2, 3, 40, 2)
    for g in upstream:
        g[0, 1] = 0.0  # the row of the bad input value gets no upstream signal
    x[0, 1, 5] = np.inf
    layer = QkvProjections.from_arrays(*weights)
    with pytest.raises(NonFiniteValue) as caught:
        layer.backward(x, *upstream)
    assert caught.value == NonFiniteValue("input", 1 * 40 + 5, np.inf)


def test_input_values_are_checked_before_upstream_shapes_and_values():
    x, weights, upstream = _random_case(6, 1, 2, 30, 2)
    layer = QkvProjections.from_arrays(*weights)
    x[0, 0, 0] = np.nan
    with pytest.raises(NonFiniteValue) as caught:
        layer.backward(x, upstream[0], upstream[1][:, :1], upstream[2])
    assert caught.value.operation == "input"
    bad_upstream = [g.copy() for g in upstream]
    bad_upstream[0][0, 0, 0] = np.inf
    with pytest.raises(NonFiniteValue) as caught:
        layer.backward(x, *bad_upstream)
    assert caught.value.operation == "input"


def test_upstream_errors_name_the_first_branch():
    x, weights, upstream = _random_case(7, 1, 2, 3, 2)
    layer = QkvProjections.from_arrays(*weights)
    bad = [g.copy() for g in upstream]
    bad[1][0, 1, 1] = np.inf
    bad[2][0, 0, 0] = np.nan
    with pytest.raises(NonFiniteValue) as caught:
        layer.backward(x, *bad)
    assert caught.value == NonFiniteValue("key upstream", 3, np.inf)
    with pytest.raises(GradientShapeMismatch) as shape_error:
        layer.backward(x, upstream[0], upstream[1], upstream[2][:, :1])
    assert shape_error.value == GradientShapeMismatch("value", (1, 2, 2), (1, 1, 2))


def test_rank_and_width_come_first():
    layer = QkvProjections.from_arrays(*[np.ones((3, 2))] * 3,
                                       names=("a.weight", "b.weight", "c.weight"))
    with pytest.raises(InputRank):
        layer.forward(np.full((2, 3), np.nan))
    with pytest.raises(InputWidthMismatch):
        layer.backward(np.full((1, 2, 4), np.nan), *[np.ones((1, 2, 2))] * 3)


def test_overflowing_output_is_returned_not_rejected():
    weights = [np.full((4, 1), 1e308)] * 3
    layer = QkvProjections.from_arrays(*weights, names=("a.w", "b.w", "c.w"))
    with np.errstate(over="ignore"):
        out = layer.forward(np.ones((1, 1, 4)))
    assert np.isinf(out.query).all()


@pytest.mark.parametrize(
    ("values", "finite"),
    [([1.0, 2.0], True), ([1e308, 1e308], True), ([np.nan, 1.0], False),
     ([np.inf, -np.inf], False), ([], True)],
    ids=["plain", "overflowing-sum", "nan", "inf-cancels", "empty"],
)
def test_all_finite(values, finite):
    assert all_finite(np.array(values)) is finite


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize(
    ("special", "finite"),
    [(None, True), ("huge", True), (np.nan, False), (np.inf, False), (-np.inf, False)],
    ids=["plain", "squares-overflow", "nan", "inf", "minus-inf"],
)
def test_all_finite_large_arrays(dtype, layout, special, finite):
    # Above SMALL: the summed pass, then the exact check when the sum is not finite.
    values = np.ones((3, 40, 60), dtype=dtype)
    if special is not None:
        values[2, 17, 30] = np.finfo(dtype).max / 2 if special == "huge" else special
    array = values if layout == "contiguous" else values[:, :, ::2]
    assert all_finite(array) is finite


def test_check_finite_names_first_index_even_when_sum_overflows():
    values = np.array([1e308, 1e308, np.inf, np.nan])
    with pytest.raises(NonFiniteValue) as caught:
        check_finite(values, "input")
    assert caught.value == NonFiniteValue("input", 2, np.inf)


def test_float32_layer_for_speed_studies():
    x, weights, upstream = _random_case(8, 2, 4, 8, 3)
    layer = QkvProjections.from_arrays(*weights)
    single = layer.astype("float32")
    assert single.dtype == np.float32 and layer.dtype == np.float64
    assert layer.astype(np.float64) is layer
    out = single.forward(x)
    assert out.query.dtype == np.float32
    assert np.allclose(out.query, layer.forward(x).query, rtol=1e-5, atol=1e-5)
    grads = single.backward(x, *upstream)
    assert grads.grad_input.dtype == np.float32
    with pytest.raises(ValueError, match="float64 or float32"):
        layer.astype(np.int64)


# --- the reverse pass's [dQ|dK|dV]: a view when packed, a reused copy otherwise -------------


def _packed_case(seed: int = 3) -> tuple[QkvProjections, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    layer = QkvProjections.from_arrays(*[rng.uniform(-1, 1, (6, 4)) for _ in range(3)])
    x = rng.uniform(-1, 1, (2, 5, 6))
    packed_upstream = rng.uniform(-1, 1, (2, 5, 12))
    return layer, x, packed_upstream


def _views(packed_upstream: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return packed_upstream[..., :4], packed_upstream[..., 4:8], packed_upstream[..., 8:]


def test_packed_upstream_is_joined_without_a_copy() -> None:
    from qkvcli.core.weights import join_upstream

    _, _, packed_upstream = _packed_case()
    joined = join_upstream(_views(packed_upstream), [])
    assert np.shares_memory(joined, packed_upstream)
    assert not joined.flags.writeable
    assert joined.tobytes() == packed_upstream.reshape(10, 12).tobytes()
    separate = tuple(np.array(v) for v in _views(packed_upstream))
    copied = join_upstream(separate, [])
    assert not any(np.shares_memory(copied, v) for v in separate)
    assert copied.tobytes() == joined.tobytes()


def test_packed_and_separate_upstream_give_the_same_bits() -> None:
    layer, x, packed_upstream = _packed_case()
    views = _views(packed_upstream)
    separate = tuple(np.array(v) for v in views)
    a = layer.backward(x, *views)
    b = layer.backward(x, *separate)
    for left, right in zip(a, b, strict=True):
        assert left.tobytes() == right.tobytes()


def test_reused_buffer_never_aliases_results() -> None:
    # The kept [dQ|dK|dV] copy is scratch: a second pass must not change the first's results.
    layer, x, packed_upstream = _packed_case()
    separate = tuple(np.array(v) for v in _views(packed_upstream))
    first = layer.backward(x, *separate)
    kept = [g.copy() for g in first]
    layer.backward(x, *(2.0 * g for g in separate))
    for before, after in zip(kept, first, strict=True):
        assert before.tobytes() == after.tobytes()


def test_non_finite_packed_upstream_is_still_refused() -> None:
    layer, x, packed_upstream = _packed_case()
    packed_upstream[1, 2, 9] = np.nan
    with pytest.raises(NonFiniteValue, match="value upstream"):
        layer.backward(x, *_views(packed_upstream))
