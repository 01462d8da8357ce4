"""Falcon's ALiBi form: the bias added to the raw scores and scaled with them, and rounded
to bfloat16 as transformers builds it (:class:`~qkvcli.attention.maths.AlibiForm`). The
engine against the same function written with the bias pre-divided by ``sqrt(d_k)``, the
gradient check through it, and a fixture's refusals at their ``$.path``."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from qkvcli.attention.gradcheck import gradcheck_attention
from qkvcli.attention.head import AttentionHead
from qkvcli.attention.maths import AlibiForm, alibi_bias, bfloat16
from qkvcli.attention.multihead import MultiHeadLayer

D_MODEL, D_K, HEADS = 6, 4, 4
SLOPES = np.array([0.5, 0.3, 0.125, 0.07])  # 0.3 and 0.07 are no bfloat16 numbers


def _layer(slopes: np.ndarray, form: AlibiForm | None, kv: int = 1) -> MultiHeadLayer:
    rng = np.random.default_rng(2)
    weights = [rng.uniform(-1, 1, (D_MODEL, n * D_K)) for n in (HEADS, kv, kv)]
    projections = AttentionHead.from_arrays(weights[0], weights[1], weights[2],
                                            kv_groups=HEADS // kv)
    return MultiHeadLayer.build(projections, HEADS, rng.uniform(-1, 1, (HEADS * D_K, 5)),
                                kv_heads=kv, alibi=slopes, alibi_form=form)


@pytest.mark.parametrize("kv", [1, 2, 4], ids=["multi-query", "grouped", "multi-head"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_a_scaled_bias_is_the_bias_over_sqrt_dk(kv: int, causal: bool) -> None:
    """``(S + b) / sqrt(d_k)`` is ``S / sqrt(d_k) + b / sqrt(d_k)``: Falcon's layer is a
    BLOOM-form layer with the slopes divided by ``sqrt(d_k)``, up to rounding; the
    reverse does not change (the bias is a constant)."""
    x = np.random.default_rng(3).uniform(-1, 1, (2, 7, D_MODEL))
    upstream = np.random.default_rng(4).uniform(-1, 1, (2, 7, 5))
    falcon = _layer(SLOPES, AlibiForm(scaled=True), kv)
    bloom = _layer(SLOPES / math.sqrt(D_K), None, kv)
    ours, theirs = falcon.forward(x, causal), bloom.forward(x, causal)
    assert np.max(np.abs(ours.output - theirs.output)) < 1e-13
    assert not np.array_equal(ours.output, _layer(SLOPES, None, kv).forward(x, causal).output)
    grads = falcon.backward(x, ours, upstream)
    assert np.max(np.abs(grads.grad_input - bloom.backward(x, theirs, upstream).grad_input)) < 1e-12
    # the engine's blockwise path (no records) computes the same rows
    from qkvcli.attention import engine
    with np.errstate(over="ignore", invalid="ignore"):
        blocks = engine.forward(falcon, x, causal, records=False)
    assert np.max(np.abs(blocks.output - ours.output)) < 1e-14
    result = gradcheck_attention(falcon, x, upstream, grads, causal, 1e-6, 1e-6, mode="full")
    assert result.passed


def test_a_rounded_bias_rounds_slopes_positions_and_products() -> None:
    bias = alibi_bias(SLOPES, 250, 262, "bfloat16")[:, 0, :]
    positions = np.arange(250, 262, dtype=np.float64)
    assert np.array_equal(bias, bfloat16(bfloat16(SLOPES)[:, None] * bfloat16(positions)))
    assert bfloat16(np.array([257.0]))[0] == 256.0  # past 256, not every position is held
    assert not np.array_equal(bias, alibi_bias(SLOPES, 250, 262)[:, 0, :])
    layer = _layer(SLOPES, AlibiForm(scaled=True, rounding="bfloat16"))
    x = np.random.default_rng(3).uniform(-1, 1, (1, 5, D_MODEL))
    upstream = np.random.default_rng(4).uniform(-1, 1, (1, 5, 5))
    forward = layer.forward(x, True)
    result = gradcheck_attention(layer, x, upstream, layer.backward(x, forward, upstream), True,
                                 1e-6, 1e-6, mode="full")
    assert result.passed


def _fixture(**changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "heads": 2, "causal": True, "input": {"generate": {"seed": 1, "shape": [1, 4, 4]}},
        "weights": {branch: {"generate": {"seed": i, "shape": [4, 8]}}
                    for i, branch in enumerate(("query", "key", "value"))},
        "alibi": [0.5, 0.25], "alibi_scaled": True, "alibi_rounding": "bfloat16"}
    document.update(changes)
    return {key: value for key, value in document.items() if value is not None}


def test_a_falcon_fixture_says_its_form(tmp_path: Any) -> None:
    import json

    from tests.hostile_helpers import invoke, write

    path = write(tmp_path / "f.json", _fixture())
    run = invoke("attend", str(path), "-f", "json")
    assert run.exit_code == 0, run.output
    evidence = json.loads(run.stdout)
    assert evidence["passed"]
    assert (evidence["config"]["alibi_scaled"], evidence["config"]["alibi_rounding"]) == (
        True, "bfloat16")
    text = invoke("attend", str(path)).stdout
    assert "alibi:0.5,0.25 alibi_scaled:true alibi_rounding:bfloat16" in text
    assert "formula=O = softmax((Q K^T + bf16(slope_h j)) / sqrt(d_k)) V" in text


BAD = [
    ("scaled-without-alibi", {"alibi": None, "alibi_rounding": None},
     "$.alibi_scaled: alibi_scaled describes an ALiBi bias: the fixture needs \"alibi\""),
    ("scaled-not-boolean", {"alibi_scaled": 1}, "$.alibi_scaled: expected true or false, got"),
    ("rounding-unknown", {"alibi_rounding": "float16"},
     "$.alibi_rounding: \"bfloat16\" (slopes, positions and their products rounded to "
     "bfloat16), got 'float16'"),
]


@pytest.mark.parametrize(("changes", "words"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_a_bad_alibi_form_is_one_line_at_its_path(tmp_path: Any, changes: dict[str, Any],
                                                  words: str) -> None:
    from tests.hostile_helpers import invoke, write

    path = write(tmp_path / "f.json", _fixture(**changes))
    for command in (("attend", str(path)), ("validate", "--attend", str(path))):
        run = invoke(*command)
        assert run.exit_code == 2, (command, run.output)
        assert words in run.stderr or words in run.output, (command, run.output)
