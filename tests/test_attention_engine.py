"""The one attention engine and its maths: each piece against a plain reference written here.

The maths (:mod:`qkvcli.attention.maths`): the scale divides as the chapter does, the
mask (causal, sliding window) hides exactly the keys it should, the softmax and its
reverse, RoPE's position offset. The engine (:mod:`qkvcli.attention.engine`): a sliding
window and the query rows from ``first_row`` against a dense reference; the gradient
check's cheaper evaluations (the engine called on one head, one K/V group, one batch item
or one output column) against a fresh forward of the whole perturbed layer, for every
layer kind.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from qkvcli.attention import engine
from qkvcli.attention.errors import ValueInputError
from qkvcli.attention.gradcheck import Reach, checked_tensors, gradcheck_attention, whole_objective
from qkvcli.attention.head import AttentionHead
from qkvcli.attention.maths import (
    QkNorm,
    causal_mask,
    hidden,
    key_span,
    query_span,
    rope_tables,
    rotate,
    scale,
    softmax,
    softmax_backward,
)
from qkvcli.attention.multihead import MultiHeadLayer
from qkvcli.core.errors import RopeError
from qkvcli.core.rope import Rope, check_rope
from tests.test_attention_batched import KINDS, build

RNG = np.random.default_rng(29)


def dense_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, masked: np.ndarray | None,
                    factor: float) -> np.ndarray:
    """Scaled dot-product attention written out plainly: the test's own reference."""
    z = (q @ np.swapaxes(k, -1, -2)) * factor
    if masked is not None:
        z = np.where(masked, -np.inf, z)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


# --- the maths ------------------------------------------------------------------------


def test_scale_divides_by_the_root_as_the_chapter_does() -> None:
    s = RNG.normal(size=(3, 4))
    assert np.array_equal(scale(s, 5, None), s / math.sqrt(5))  # a division, not a product
    assert np.array_equal(scale(s, 5, 0.25), s * 0.25)


@pytest.mark.parametrize("window", [None, 1, 2, 3], ids=["causal", "w1", "w2", "w3"])
def test_the_mask_hides_later_keys_and_keys_outside_the_window(window: int | None) -> None:
    tokens = 6
    masked = causal_mask(tokens, window)
    for i in range(tokens):
        for j in range(tokens):
            seen = j <= i and (window is None or i - j < window)
            assert masked[i, j] == (not seen), (i, j)
    for first in range(tokens):  # a block's key span covers every key its rows see
        start, stop = key_span(first, first + 2, tokens, True, window)
        rows = masked[first:first + 2]
        assert not (~rows[:, :start]).any() and not (~rows[:, stop:]).any()
    assert hidden(0, 3, 0, 3, False, None) is None


@pytest.mark.parametrize("window", [1, 2, 3, 9], ids=["w1", "w2", "w3", "w9"])
def test_a_two_sided_window_hides_the_keys_window_or_more_away_on_either_side(
        window: int) -> None:
    tokens = 7
    masked = causal_mask(tokens, window, causal=False)
    for i in range(tokens):
        for j in range(tokens):
            assert masked[i, j] == (abs(i - j) >= window), (i, j)
    for first in range(tokens):  # the keys a block sees, and the rows a block of keys reaches
        start, stop = key_span(first, first + 2, tokens, False, window)
        rows = masked[first:first + 2]
        assert not (~rows[:, :start]).any() and not (~rows[:, stop:]).any()
        start, stop = query_span(first, first + 2, tokens, False, window)
        columns = masked[:, first:first + 2]
        assert not (~columns[:start]).any() and not (~columns[stop:]).any()


def test_softmax_weighs_masked_keys_exactly_zero_and_its_unshifted_form_overflows() -> None:
    z = np.array([[1000.0, 999.0, -np.inf]])
    a = softmax(z)
    assert a[0, 2] == 0.0 and math.isclose(a.sum(), 1.0)
    with np.errstate(over="ignore", invalid="ignore"):
        assert np.isnan(softmax(z, shift=False)).any()  # the slip a diagnosis names


def test_softmax_backward_is_the_softmax_jacobian_transposed() -> None:
    z = RNG.normal(size=5)
    a = softmax(z[None])[0]
    jacobian = np.diag(a) - np.outer(a, a)
    da = RNG.normal(size=5)
    assert np.allclose(softmax_backward(a[None], da[None])[0], jacobian.T @ da, atol=1e-15)


def test_rope_offset_turns_as_the_later_positions_of_a_longer_sequence() -> None:
    x = RNG.normal(size=(2, 9, 8))
    whole = rotate(x, Rope(100.0, 8))
    later = rotate(x[:, 4:], Rope(100.0, 8, offset=4))
    assert np.array_equal(later, whole[:, 4:])
    assert np.array_equal(rotate(x[:, 4:], Rope(100.0, 8), first=4), later)
    cos, _ = rope_tables(Rope(100.0, 8), 0, 9)
    assert not cos.flags.writeable  # shared by every caller
    with pytest.raises(RopeError, match="offset"):
        check_rope(Rope(100.0, 8, offset=-1), 8)


# --- the engine -----------------------------------------------------------------------


@pytest.mark.parametrize("window", [1, 2, 4], ids=["w1", "w2", "w4"])
def test_a_sliding_window_matches_the_dense_reference_forward_and_reverse(window: int) -> None:
    layer, x, upstream = build("gqa", 3, tokens=300)  # more rows than one block
    x = x[:1]
    upstream = upstream[:1]
    with np.errstate(over="ignore", invalid="ignore"):
        f = engine.forward(layer, x, True, window)
    masked = causal_mask(300, window)
    q = f.stacked["query"]
    k = np.repeat(f.stacked["key"], layer.heads // layer.kv_heads, axis=1)
    v = np.repeat(f.stacked["value"], layer.heads // layer.kv_heads, axis=1)
    expected = dense_attention(q, k, v, masked, 1 / math.sqrt(layer.d_k))
    mixed = np.swapaxes(f.concat.reshape(1, 300, layer.heads, layer.d_v), 1, 2)
    assert np.allclose(mixed, expected, rtol=1e-12, atol=1e-12)
    assert (f.attention[:, :, masked] == 0.0).all()
    # the reverse against central differences along one random direction of dX
    g = engine.backward(layer, x, f, upstream)
    direction = RNG.normal(size=x.shape)
    h = 1e-6

    def loss(at: np.ndarray) -> float:
        return engine.loss(engine.forward(layer, at, True, window), upstream)

    numerical = (loss(x + h * direction) - loss(x - h * direction)) / (2 * h)
    assert math.isclose(float(np.sum(g.grad_input * direction)), numerical, rel_tol=1e-6)


@pytest.mark.parametrize("window", [1, 2, 5], ids=["w1", "w2", "w5"])
def test_a_two_sided_window_matches_the_dense_reference_forward_and_reverse(
        window: int) -> None:
    """A bidirectional layer's window (ModernBERT's local layers): ``|i - j| < window``,
    over more rows than one block, forward and reverse, and the gradient check through the
    engine (its reached evaluations and the whole layer's)."""
    layer, x, upstream = build("gqa", 3, tokens=300)  # more rows than one block
    layer = MultiHeadLayer.build(layer.projections, layer.heads, layer.out_weight, layer.out_bias,
                                 layer.kv_heads, window=window)
    x, upstream = x[:1], upstream[:1]
    with np.errstate(over="ignore", invalid="ignore"):
        f = engine.forward(layer, x, False)
        quick = engine.forward(layer, x, False, records=False)
    assert f.window == window and not f.causal
    masked = causal_mask(300, window, causal=False)
    q = f.stacked["query"]
    k = np.repeat(f.stacked["key"], layer.heads // layer.kv_heads, axis=1)
    v = np.repeat(f.stacked["value"], layer.heads // layer.kv_heads, axis=1)
    expected = dense_attention(q, k, v, masked, 1 / math.sqrt(layer.d_k))
    mixed = np.swapaxes(f.concat.reshape(1, 300, layer.heads, layer.d_v), 1, 2)
    assert np.allclose(mixed, expected, rtol=1e-12, atol=1e-12)
    assert np.allclose(quick.output, f.output, rtol=1e-13, atol=1e-13)
    assert (f.attention[:, :, masked] == 0.0).all()
    assert (f.attention[:, :, ~masked] > 0.0).all()
    g = engine.backward(layer, x, f, upstream)
    h = 1e-6

    def loss(at: np.ndarray) -> float:
        return engine.loss(engine.forward(layer, at, False), upstream)

    for _ in range(2):  # central differences along random directions of dX
        direction = RNG.normal(size=x.shape)
        numerical = (loss(x + h * direction) - loss(x - h * direction)) / (2 * h)
        assert math.isclose(float(np.sum(g.grad_input * direction)), numerical, rel_tol=1e-6)


def _each_reached_evaluation_is_the_whole(layer: Any, x: np.ndarray, upstream: np.ndarray,
                                          causal: bool) -> None:
    """Each tensor's reached evaluation (the engine on what a coordinate reaches) equals
    the whole layer's loss at three moved coordinates, and at the unmoved point."""
    reach = Reach(layer, x, upstream, causal)
    for name, values in checked_tensors(layer, x):
        whole = whole_objective(layer, x, upstream, causal, name)
        point = reach.objective(name)
        for index in sorted({0, values.size // 2, values.size - 1}):
            moved = np.array(values, copy=True)
            moved.reshape(-1)[index] += 0.125
            got = point(index, float(moved.reshape(-1)[index]))
            assert math.isclose(got, whole(moved), rel_tol=1e-12, abs_tol=1e-12), (name, index)
        assert point(0, float(values.reshape(-1)[0])) == pytest.approx(
            engine.loss(engine.forward(layer, x, causal), upstream), rel=1e-12, abs=1e-12)


def test_a_two_sided_windows_gradient_check_passes_through_the_engine() -> None:
    base, x, upstream = build("rope-half", 7, tokens=9)
    layer = MultiHeadLayer.build(base.projections, base.heads, base.out_weight, base.out_bias,
                                 base.kv_heads, window=3)
    _each_reached_evaluation_is_the_whole(layer, x, upstream, False)
    with np.errstate(over="ignore", invalid="ignore"):
        f = engine.forward(layer, x, False)
        g = engine.backward(layer, x, f, upstream)
    check = gradcheck_attention(layer, x, upstream, g, False, 1e-6, 1e-6)
    assert check.passed


@pytest.mark.parametrize(("kind", "per_head"), [("rms", False), ("rms", True), ("layer", True)],
                         ids=["rms-shared", "rms-per-head", "layernorm-per-head"])
def test_a_norm_after_rope_normalises_the_rotated_heads_and_checks_through_the_engine(
        kind: str, per_head: bool) -> None:
    """Hunyuan V1's order: RoPE, then each head's norm; the scores read the normalised
    rotated Q and K, and the reverse goes back through the norm, then the rotation."""
    base, x, upstream = build("rope-half", 13, tokens=6)  # 4 heads over 2 K/V heads, d_k 4
    rng = np.random.default_rng(5)
    shape = ((4, 4), (2, 4)) if per_head else ((4,), (4,))
    weights = [rng.uniform(0.5, 1.5, size=s) for s in shape]
    biases = [rng.normal(size=s) for s in shape] if kind == "layer" else [None, None]
    norm = QkNorm(weights[0], weights[1], 1e-3, "head", 0.0, kind, biases[0], biases[1],
                  after_rope=True)
    layer = MultiHeadLayer.build(base.projections, base.heads, base.out_weight, base.out_bias,
                                 base.kv_heads, qk_norm=norm)
    with np.errstate(over="ignore", invalid="ignore"):
        f = engine.forward(layer, x, True)
    rope = layer.rope
    assert rope is not None
    projected = f.stacked["projected"]
    q = rotate(engine.heads_axis(projected[..., :16], 4), rope)
    k = rotate(engine.heads_axis(projected[..., 16:24], 2), rope)

    def normed(v: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        v = np.swapaxes(v, 1, 2)
        if kind == "layer":
            v = v - v.mean(axis=-1, keepdims=True)
        out = v / np.sqrt((v * v).mean(axis=-1, keepdims=True) + 1e-3) * w
        return np.swapaxes(out if b is None else out + b, 1, 2)

    qn, kn = normed(q, weights[0], biases[0]), normed(k, weights[1], biases[1])
    expected = dense_attention(qn, np.repeat(kn, 2, axis=1),
                               np.repeat(f.stacked["value"], 2, axis=1), causal_mask(6), 0.5)
    mixed = np.swapaxes(f.concat.reshape(2, 6, 4, layer.d_v), 1, 2)
    assert np.allclose(mixed, expected, rtol=1e-12, atol=1e-12)
    with np.errstate(over="ignore", invalid="ignore"):
        g = engine.backward(layer, x, f, upstream)
    assert g.grad_norm_query is not None and g.grad_norm_query.shape == shape[0]
    assert g.grad_norm_key is not None and g.grad_norm_key.shape == shape[1]
    assert (g.grad_norm_key_bias is not None) is (kind == "layer")
    check = gradcheck_attention(layer, x, upstream, g, True, 1e-6, 1e-6)
    assert check.passed, [t.tensor for t in check.tensors if not t.passed]


def _value_input_layer(kv_heads: int | None, rope: Rope | None) -> tuple[
        MultiHeadLayer, np.ndarray, np.ndarray, np.ndarray, tuple[np.ndarray, ...]]:
    """A layer of 4 heads whose values read an input of their own (9 wide) beside the
    queries' and keys' (5 wide): the layer, the two inputs, U, and its parameters."""
    rng = np.random.default_rng(43)
    kv = 4 if kv_heads is None else kv_heads
    weights = (rng.normal(size=(5, 4 * 3)), rng.normal(size=(5, kv * 3)),
               rng.normal(size=(9, kv * 2)))
    biases = tuple(rng.normal(size=w.shape[1]) for w in weights)
    out = (rng.normal(size=(4 * 2, 6)), rng.normal(size=6))
    head = AttentionHead.from_arrays(*weights, biases=biases, independent_value_width=True,
                                     rope=rope, kv_groups=4 // kv, value_input=True)
    layer = MultiHeadLayer.build(head, 4, *out, kv_heads)
    x_qk, x_v = rng.normal(size=(2, 6, 5)), rng.normal(size=(2, 6, 9))
    return layer, x_qk, x_v, rng.normal(size=(2, 6, 6)), (*weights, *biases, *out)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(("kv_heads", "rope"), [(None, None), (2, Rope(100.0, 2))],
                         ids=["plain", "grouped-rotated"])
def test_values_from_an_input_of_their_own_match_the_plain_reference(
        causal: bool, kv_heads: int | None, rope: Rope | None) -> None:
    """MobileBERT's wiring: Q and K from one input, V from another. The layer's input is
    the two joined (queries' columns first); forward and reverse against the layer written
    out plainly here, each weight's gradient its own shape (the block matrix's zeros are
    no parameters), and the gradient check through the engine."""
    layer, x_qk, x_v, upstream, params = _value_input_layer(kv_heads, rope)
    w_q, w_k, w_v, b_q, b_k, b_v, w_o, b_o = params
    x = np.concatenate([x_qk, x_v], axis=-1)
    assert layer.d_model == 14
    assert layer.input_columns() == (slice(0, 5), slice(0, 5), slice(5, 14))
    kv = 4 if kv_heads is None else kv_heads

    def split(flat: np.ndarray, n: int) -> np.ndarray:
        return np.swapaxes(flat.reshape(2, 6, n, -1), 1, 2)

    q, k = split(x_qk @ w_q + b_q, 4), split(x_qk @ w_k + b_k, kv)
    v = split(x_v @ w_v + b_v, kv)
    if rope is not None:
        q, k = rotate(q, rope), rotate(k, rope)
    groups = 4 // kv
    mixed = dense_attention(q, np.repeat(k, groups, axis=1), np.repeat(v, groups, axis=1),
                            causal_mask(6) if causal else None, 3 ** -0.5)
    expected = np.swapaxes(mixed, 1, 2).reshape(2, 6, 8) @ w_o + b_o
    with np.errstate(over="ignore", invalid="ignore"):
        f = engine.forward(layer, x, causal)
        g = engine.backward(layer, x, f, upstream)
    assert np.allclose(f.output, expected, rtol=1e-12, atol=1e-12)
    assert [a.shape for a in (g.grad_w_query, g.grad_w_key, g.grad_w_value)] == [
        w_q.shape, w_k.shape, w_v.shape]

    def loss(at_qk: np.ndarray, at_v: np.ndarray) -> float:
        joined = np.concatenate([at_qk, at_v], axis=-1)
        return engine.loss(engine.forward(layer, joined, causal), upstream)

    h = 1e-6
    for _ in range(2):  # central differences of each input along random directions
        for side in (0, 1):
            direction = RNG.normal(size=(x_qk, x_v)[side].shape)
            moved = [[x_qk, x_v], [x_qk, x_v]]
            moved[0][side] = moved[0][side] + h * direction
            moved[1][side] = moved[1][side] - h * direction
            numerical = (loss(*moved[0]) - loss(*moved[1])) / (2 * h)
            part = g.grad_input[..., :5] if side == 0 else g.grad_input[..., 5:]
            assert math.isclose(float(np.sum(part * direction)), numerical, rel_tol=1e-6)
    _each_reached_evaluation_is_the_whole(layer, x, upstream, causal)
    check = gradcheck_attention(layer, x, upstream, g, causal, 1e-6, 1e-6, reached=True)
    assert check.passed, [t.tensor for t in check.tensors if not t.passed]
    assert {t.tensor: t.shape for t in check.tensors}["w_value"] == w_v.shape


def test_a_value_input_needs_the_query_and_key_to_read_one_input() -> None:
    rng = np.random.default_rng(3)
    weights = (rng.normal(size=(5, 4)), rng.normal(size=(6, 4)), rng.normal(size=(9, 4)))
    with pytest.raises(ValueInputError, match="query 5, key 6"):
        AttentionHead.from_arrays(*weights, value_input=True)


@pytest.mark.parametrize(("rope", "words"), [
    (Rope(None, 4), "rope needs a theta or a table of frequencies, and not both"),
    (Rope(100.0, 4, frequencies=(1.0, 0.5)), "and not both"),
    (Rope(None, 4, frequencies=(1.0,)), "rope frequencies must give one per pair, 2 for dims 4"),
    (Rope(None, 4, frequencies=(1.0, math.inf)), "finite and positive, got inf at pair 1"),
    (Rope(None, 4, scaling=None, frequencies=(1.0, 0.5), angles="float32"), None),
], ids=["neither", "both", "count", "infinite", "float32-angles"])
def test_a_table_of_frequencies_is_judged_by_check_rope(rope: Rope, words: str | None) -> None:
    if words is None:  # a table in float32 angles: each angle t * f_i rounded to float32
        check_rope(rope, 4)
        cos, _ = rope_tables(rope, 0, 3)
        angles = np.arange(3, dtype=np.float32)[:, None] * np.array([1.0, 0.5], np.float32)
        assert np.array_equal(cos, np.cos(angles).astype(np.float64))
        return
    with pytest.raises(RopeError, match=words.replace("(", r"\(")):
        check_rope(rope, 4)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_the_query_rows_from_first_row_are_the_whole_passs_rows(causal: bool) -> None:
    layer, x, _ = build("rope-half", 5, tokens=11)
    whole = engine.forward(layer, x, causal)
    part = engine.forward(layer, x, causal, first_row=4)
    assert np.allclose(part.output, whole.output[:, 4:], rtol=1e-13, atol=1e-13)
    assert np.allclose(part.attention, whole.attention[:, :, 4:], rtol=1e-13, atol=1e-13)


# --- the gradient check's cheaper evaluations: the engine called on less ----------------


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_reached_evaluation_is_the_whole_layers_loss(kind: str, causal: bool) -> None:
    layer, x, upstream = build(kind, 11, tokens=7)
    _each_reached_evaluation_is_the_whole(layer, x, upstream, causal)


def test_a_large_layers_check_uses_the_reached_evaluations_and_passes() -> None:
    layer, x, upstream = build("gqa", 2, tokens=40)
    f = layer.forward(x, True)
    g = layer.backward(x, f, upstream)
    result = gradcheck_attention(layer, x, upstream, g, True, 1e-6, 2e-6, samples=3,
                                 reached=True)
    assert result.passed
    assert {t.recomputes for t in result.tensors} == {
        "perturbed batch item", "perturbed head", "perturbed K/V group",
        "perturbed output column"}


@pytest.mark.parametrize(("tokens", "d_model", "heads", "kv_heads", "rope"), [
    (1024, 768, 12, 12, None), (512, 2048, 32, 8, Rope(10000.0, 64))],
    ids=["gpt2-small-1024", "llama-like-512"])
def test_a_real_layers_default_check_fits_the_default_budget(
        tokens: int, d_model: int, heads: int, kv_heads: int, rope: Rope | None) -> None:
    # What `qkv init --from-safetensors` writes (16 samples), causal, with biases and an
    # output projection: planned (no evaluation runs), within --max-evaluations' default.
    from qkvcli.attention.gradcheck import plan_check
    from qkvcli.attention.head import AttentionHead
    from qkvcli.attention.multihead import MultiHeadLayer
    from qkvcli.gradcheck.settings import MAX_EVALUATIONS

    d = d_model // heads
    widths = (heads * d, kv_heads * d, kv_heads * d)
    head = AttentionHead.from_arrays(*(np.zeros((d_model, w)) for w in widths),
                                     biases=[np.zeros(w) for w in widths], rope=rope,
                                     kv_groups=heads // kv_heads)
    layer = MultiHeadLayer.build(head, heads, np.zeros((d_model, d_model)), np.zeros(d_model),
                                 kv_heads)
    plan = plan_check(layer, np.zeros((1, tokens, d_model)), 1e-6, 2e-6, 16, causal=True,
                      limit=MAX_EVALUATIONS)
    assert plan.reached and plan.units <= MAX_EVALUATIONS
