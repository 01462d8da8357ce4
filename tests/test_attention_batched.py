"""The batched multi-head engine against the heads run one by one.

``MultiHeadLayer`` runs every head at once (one packed projection GEMM, one ``[B,H,T,T]``
softmax, grouped K/V broadcast). Here each head of random layers of every kind (plain,
biases on some branches, causal, grouped-query and multi-query, RoPE half, interleaved
and partial, a given scale, an output projection, an independent value width) is run
alone as its own ``AttentionHead`` (``layer.head_slices``), and the per-head records,
the concatenation, the output and every layer gradient (``dX`` the sum of the heads'
paths, a K/V head's weights the sum over its group) must agree to float64 rounding.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from qkvcli.attention.engine import BLOCK_ROWS
from qkvcli.attention.head import AttentionHead
from qkvcli.attention.maths import causal_mask
from qkvcli.attention.multihead import MultiHeadLayer
from qkvcli.core.rope import Rope

TOL = 1e-12

# name: heads, kv_heads, d_head, value width, biases, rope, scale, out_proj
KINDS: dict[str, tuple[Any, ...]] = {
    "plain": (4, None, 3, 3, (False, False, False), None, None, False),
    "biases-out": (3, None, 4, 4, (True, True, True), None, None, True),
    "some-biases": (2, None, 4, 4, (True, False, True), None, None, True),
    "gqa": (6, 2, 4, 4, (True, True, True), None, None, True),
    "mqa": (4, 1, 2, 2, (False, True, False), None, None, False),
    "rope-half": (4, 2, 4, 4, (False, False, False), Rope(10000.0, 4, "half"), None, True),
    "rope-interleaved": (2, None, 6, 6, (True, True, True), Rope(500.0, 6, "interleaved"),
                         None, False),
    "rope-partial": (3, None, 8, 8, (False, False, False), Rope(10000.0, 4, "half"), None, True),
    "scale": (2, None, 4, 4, (True, True, False), None, 0.37, True),
    "value-width": (2, None, 3, 5, (False, False, False), None, None, True),
}


def build(kind: str, seed: int, tokens: int = 6) -> tuple[MultiHeadLayer, np.ndarray,
                                                         np.ndarray]:
    heads, kv_heads, dk, dv, bias, rope, scale, out = KINDS[kind]
    rng = np.random.default_rng(seed)
    kv = heads if kv_heads is None else kv_heads
    d_model = 7
    widths = (heads * dk, kv * dk, kv * dv)
    weights = [rng.normal(size=(d_model, w)) for w in widths]
    biases = [rng.normal(size=w) if b else None for w, b in zip(widths, bias, strict=True)]
    head = AttentionHead.from_arrays(*weights, biases=biases, scale=scale, rope=rope,
                                     independent_value_width=dv != dk,
                                     kv_groups=heads // kv)
    e_out = 5
    out_w = rng.normal(size=(heads * dv, e_out)) if out else None
    out_b = rng.normal(size=e_out) if out else None
    layer = MultiHeadLayer.build(head, heads, out_w, out_b, kv_heads)
    x = rng.normal(size=(2, tokens, d_model))
    upstream = rng.normal(size=(2, tokens, layer.e_out))
    return layer, x, upstream


def one_by_one(layer: MultiHeadLayer, x: np.ndarray, upstream: np.ndarray,
               causal: bool) -> dict[str, Any]:
    """The layer's maths with each head alone: the reference."""
    heads = [h.forward(x, causal) for h in layer.head_slices]
    concat = np.concatenate([f.output for f in heads], axis=-1)
    output = concat if layer.out_weight is None else concat @ layer.out_weight
    grad_concat = upstream
    if layer.out_weight is not None:
        output = output + (0.0 if layer.out_bias is None else layer.out_bias)
        grad_concat = upstream @ layer.out_weight.T
    dv = layer.d_v
    grads = [h.backward(x, f, grad_concat[..., i * dv:(i + 1) * dv])
             for i, (h, f) in enumerate(zip(layer.head_slices, heads, strict=True))]
    per = layer.heads // layer.kv_heads

    def gathered(name: str, shared: bool) -> Any:
        parts = [getattr(g, name) for g in grads]
        if parts[0] is None:
            return None
        if shared:
            parts = [sum(parts[k * per:(k + 1) * per]) for k in range(layer.kv_heads)]
        return np.concatenate(parts, axis=-1)

    return {
        "heads": heads, "grads": grads, "concat": concat, "output": output,
        "grad_input": sum(g.grad_input for g in grads),
        "grad_w_query": gathered("grad_w_query", False),
        "grad_w_key": gathered("grad_w_key", True),
        "grad_w_value": gathered("grad_w_value", True),
        "grad_b_query": gathered("grad_b_query", False),
        "grad_b_key": gathered("grad_b_key", True),
        "grad_b_value": gathered("grad_b_value", True),
    }


FORWARD_FIELDS = ("query", "key", "value", "scores", "scaled_scores", "attention", "output",
                  "rotated_query", "rotated_key")
HEAD_GRAD_FIELDS = ("grad_attention", "grad_scaled_scores", "grad_scores", "grad_query",
                    "grad_key", "grad_value")
LAYER_GRAD_FIELDS = ("grad_input", "grad_w_query", "grad_w_key", "grad_w_value",
                     "grad_b_query", "grad_b_key", "grad_b_value")


def close(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=TOL, atol=TOL))


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_batched_layer_equals_its_heads_run_one_by_one(kind: str, causal: bool) -> None:
    layer, x, upstream = build(kind, seed=len(kind) + 31 * causal)
    f = layer.forward(x, causal)
    g = layer.backward(x, f, upstream)
    ref = one_by_one(layer, x, upstream, causal)
    assert f.stacked is not None and g.stacked is not None  # the batched engine ran
    for h, (mine, theirs) in enumerate(zip(f.heads, ref["heads"], strict=True)):
        for name in FORWARD_FIELDS:
            assert close(getattr(mine, name), getattr(theirs, name)), (h, name)
    for h, (mine, theirs) in enumerate(zip(g.heads, ref["grads"], strict=True)):
        for name in HEAD_GRAD_FIELDS:
            assert close(getattr(mine, name), getattr(theirs, name)), (h, name)
    assert close(f.concat, ref["concat"]) and close(f.output, ref["output"])
    assert close(f.attention, np.stack([r.attention for r in ref["heads"]], axis=1))
    for name in LAYER_GRAD_FIELDS:
        assert close(getattr(g, name), ref[name]), name


@pytest.mark.parametrize("kind", ["gqa", "rope-half", "scale", "biases-out"])
def test_causal_blocks_give_the_whole_matrix_maths(kind: str) -> None:
    # More tokens than one block, not a multiple of it: the causal engine works in blocks
    # of query rows that stop at their last unmasked key, and must still be the heads'
    # maths; every masked entry of A, dZ and dS is exactly +0.0.
    tokens = 2 * BLOCK_ROWS + 37
    layer, x, upstream = build(kind, seed=7, tokens=tokens)
    f = layer.forward(x, True)
    g = layer.backward(x, f, upstream)
    ref = one_by_one(layer, x, upstream, True)
    for h, (mine, theirs) in enumerate(zip(g.heads, ref["grads"], strict=True)):
        for name in HEAD_GRAD_FIELDS:
            assert close(getattr(mine, name), getattr(theirs, name)), (h, name)
    assert close(f.output, ref["output"])
    for name in LAYER_GRAD_FIELDS:
        assert close(getattr(g, name), ref[name]), name
    assert g.stacked is not None
    masked = causal_mask(tokens)
    for array in (f.attention, g.stacked["grad_scaled_scores"], g.stacked["grad_scores"]):
        above = array[:, :, masked]
        assert not np.any(above) and not np.any(np.signbit(above))
    assert np.all(np.isneginf(f.stacked["scaled_scores"][:, :, masked]))  # type: ignore[index]
    assert np.any(f.stacked["scores"][:, :, masked])  # type: ignore[index]  # S stays whole


@pytest.mark.parametrize("kind", ["gqa", "rope-partial", "value-width"])
@pytest.mark.parametrize("shape", [(0, 6), (2, 0)], ids=["no-batch", "no-tokens"])
def test_empty_batches_and_sequences_keep_their_shapes(kind: str, shape: tuple[int, int]) -> None:
    layer, _, _ = build(kind, 4)
    x = np.zeros((*shape, layer.d_model))
    f = layer.forward(x, True)
    g = layer.backward(x, f, np.zeros(f.output.shape))
    assert f.attention.shape == (shape[0], layer.heads, shape[1], shape[1])
    assert f.output.shape == (*shape, layer.e_out) and g.grad_input.shape == x.shape
    assert g.grad_w_key.shape == layer.projections.weights[1].shape
    assert not np.any(g.grad_w_query)


def test_per_head_records_are_views_of_the_batched_arrays() -> None:
    layer, x, upstream = build("gqa", 1)
    f = layer.forward(x, True)
    g = layer.backward(x, f, upstream)
    assert f.stacked is not None and g.stacked is not None
    assert np.shares_memory(f.heads[3].attention, f.stacked["attention"])
    assert np.shares_memory(f.heads[3].key, f.heads[5].key)  # one K head, two query heads
    assert np.shares_memory(g.heads[2].grad_scores, g.stacked["grad_scores"])


def test_a_head_and_its_one_head_layer_are_one_computation() -> None:
    # A head is run as a layer of one head: the same engine call, so the same bits.
    layer, x, upstream = build("plain", 3)
    one = MultiHeadLayer.build(layer.head_slices[0], 1)
    f = one.forward(x, True)
    alone = layer.head_slices[0].forward(x, True)
    assert np.array_equal(f.output, alone.output)
    assert np.array_equal(f.attention[:, 0], alone.attention)
    g = one.backward(x, f, upstream[..., :3])
    assert np.array_equal(g.grad_input, layer.head_slices[0].backward(
        x, alone, upstream[..., :3]).grad_input)
