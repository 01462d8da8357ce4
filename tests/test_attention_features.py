"""Engine features of real layers: causal, grouped-query K/V heads, RoPE and a given scale.

Each is checked against an independent reference (torch autograd in float64, written from
the formulas, not from qkv's code) and by the central-difference check of the layer.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkvcli.attention.errors import GroupedWidthMismatch, KvHeadsMismatch, ScaleError
from qkvcli.attention.gradcheck import gradcheck_attention
from qkvcli.attention.head import AttentionHead
from qkvcli.attention.maths import rotate
from qkvcli.attention.multihead import MultiHeadLayer
from qkvcli.core.errors import RopeError
from qkvcli.core.rope import Rope

RNG = np.random.default_rng(19)


def _layer(heads: int, kv_heads: int, d_k: int, rope: Rope | None, scale: float | None,
           bias: bool = True) -> MultiHeadLayer:
    d_model = 6
    groups = heads // kv_heads
    wq = RNG.uniform(-1, 1, (d_model, heads * d_k))
    wk = RNG.uniform(-1, 1, (d_model, kv_heads * d_k))
    wv = RNG.uniform(-1, 1, (d_model, kv_heads * d_k))
    biases = [RNG.uniform(-1, 1, w.shape[1]) if bias else None for w in (wq, wk, wv)]
    projections = AttentionHead.from_arrays(wq, wk, wv, biases, scale=scale, rope=rope,
                                            kv_groups=groups)
    out = RNG.uniform(-1, 1, (heads * d_k, 5))
    return MultiHeadLayer.build(projections, heads, out, RNG.uniform(-1, 1, 5),
                                kv_heads=None if kv_heads == heads else kv_heads)


def _torch_reference(layer: MultiHeadLayer, x: np.ndarray, upstream: np.ndarray,
                     causal: bool) -> dict[str, np.ndarray]:
    """The layer from its formulas in torch float64, with autograd for every gradient."""
    torch = pytest.importorskip("torch")
    p = layer.projections
    t = {name: torch.tensor(a, dtype=torch.float64, requires_grad=True) for name, a in (
        ("x", x), ("wq", p.weights[0]), ("wk", p.weights[1]), ("wv", p.weights[2]),
        ("bq", p.biases[0]), ("bk", p.biases[1]), ("bv", p.biases[2]),
        ("wo", layer.out_weight), ("bo", layer.out_bias)) if a is not None}
    batch, tokens, _ = x.shape
    heads, kv, dk, dv = layer.heads, layer.kv_heads, layer.d_k, layer.d_v

    def split(y: Any, n: int, d: int) -> Any:
        return y.view(batch, tokens, n, d).transpose(1, 2)

    q = split(t["x"] @ t["wq"] + t["bq"], heads, dk)
    k = split(t["x"] @ t["wk"] + t["bk"], kv, dk)
    v = split(t["x"] @ t["wv"] + t["bv"], kv, dv)
    rope = p.rope
    if rope is not None:
        r = rope.dims
        inv = 1.0 / (rope.theta ** (torch.arange(0, r, 2, dtype=torch.float64) / r))
        ang = torch.arange(tokens, dtype=torch.float64)[:, None] * inv[None, :]
        cos, sin = torch.cos(ang), torch.sin(ang)

        def turn(z: Any) -> Any:
            rot, rest = z[..., :r], z[..., r:]
            if rope.layout == "half":
                a, b = rot[..., : r // 2], rot[..., r // 2:]
                return torch.cat([a * cos - b * sin, b * cos + a * sin, rest], dim=-1)
            a, b = rot[..., 0::2], rot[..., 1::2]
            turned = torch.stack([a * cos - b * sin, b * cos + a * sin], dim=-1).flatten(-2)
            return torch.cat([turned, rest], dim=-1)

        q, k = turn(q), turn(k)
    k = k.repeat_interleave(heads // kv, dim=1)
    v = v.repeat_interleave(heads // kv, dim=1)
    scale = p.scale if p.given_scale is not None else 1.0 / math.sqrt(dk)
    z = (q @ k.transpose(-1, -2)) * scale
    if causal:
        z = z.masked_fill(torch.triu(torch.ones(tokens, tokens, dtype=torch.bool), 1),
                          float("-inf"))
    a = torch.softmax(z, dim=-1)
    c = (a @ v).transpose(1, 2).reshape(batch, tokens, heads * dv)
    y = c @ t["wo"] + t["bo"]
    (y * torch.tensor(upstream)).sum().backward()
    found = {"output": y.detach().numpy(), "attention": a.detach().numpy()}
    found |= {f"grad_{n}": tensor.grad.numpy() for n, tensor in t.items()}
    return found


CASES = [
    ("gqa-rope-half-causal", 4, 2, 4, Rope(10000.0, 4, "half"), None, True),
    ("mqa-partial-rope-interleaved", 4, 1, 4, Rope(500.0, 2, "interleaved"), None, False),
    ("scale-no-rope", 2, 2, 3, None, 0.7, True),
    ("gqa-scale-rope", 4, 2, 4, Rope(10000.0, 2, "half"), 1.0, True),
]


@pytest.mark.parametrize(("heads", "kv", "dk", "rope", "scale", "causal"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_layer_features_match_an_independent_reference(
    heads: int, kv: int, dk: int, rope: Rope | None, scale: float | None, causal: bool
) -> None:
    layer = _layer(heads, kv, dk, rope, scale)
    x = RNG.uniform(-1, 1, (2, 5, 6))
    upstream = RNG.uniform(-1, 1, (2, 5, 5))
    forward = layer.forward(x, causal)
    grads = layer.backward(x, forward, upstream)
    ref = _torch_reference(layer, x, upstream, causal)

    def close(ours: np.ndarray, theirs: np.ndarray) -> None:
        assert ours.shape == theirs.shape
        assert np.max(np.abs(ours - theirs)) <= 1e-12 * max(1.0, float(np.max(np.abs(theirs))))

    close(forward.output, ref["output"])
    close(forward.attention, ref["attention"])
    close(grads.grad_input, ref["grad_x"])
    for ours, name in ((grads.grad_w_query, "wq"), (grads.grad_w_key, "wk"),
                       (grads.grad_w_value, "wv"), (grads.grad_b_query, "bq"),
                       (grads.grad_b_key, "bk"), (grads.grad_b_value, "bv"),
                       (grads.grad_out_weight, "wo"), (grads.grad_out_bias, "bo")):
        assert ours is not None
        close(ours, ref[f"grad_{name}"])
    result = gradcheck_attention(layer, x, upstream, grads, causal, 1e-6, 1e-6)
    assert result.passed


def test_rope_changes_the_output_and_its_inverse_undoes_it() -> None:
    rope = Rope(10000.0, 4, "half")
    z = RNG.uniform(-1, 1, (1, 6, 4))
    turned = rotate(z, rope)
    assert np.max(np.abs(turned[:, 1:] - z[:, 1:])) > 1e-3  # position 0 does not turn
    assert np.array_equal(turned[:, 0], z[:, 0])
    assert np.max(np.abs(rotate(turned, rope, inverse=True) - z)) < 1e-15


def test_a_layer_without_features_is_bit_for_bit_the_old_one() -> None:
    plain = _layer(2, 2, 3, None, None)
    x = RNG.uniform(-1, 1, (1, 4, 6))
    f = plain.forward(x, True)
    p = plain.projections
    old = MultiHeadLayer.build(AttentionHead.from_arrays(*p.weights, p.biases), 2,
                               plain.out_weight, plain.out_bias)
    assert f.output.tobytes() == old.forward(x, True).output.tobytes()
    assert f.heads[0].rotated_query is None


def test_feature_errors_name_what_is_wrong() -> None:
    w = RNG.uniform(-1, 1, (3, 4))
    with pytest.raises(ScaleError) as scale:
        AttentionHead.from_arrays(w, w, w, scale=-1.0)
    assert str(scale.value) == "scale must be finite and positive, got -1.0"
    with pytest.raises(RopeError) as rope:
        AttentionHead.from_arrays(w, w, w, rope=Rope(10000.0, 3))
    assert str(rope.value) == ("rope dims must be even, at least 2 and at most the head's key "
                               "width 4, got 3")
    with pytest.raises(GroupedWidthMismatch) as grouped:
        AttentionHead.from_arrays(w, w, w, kv_groups=2)
    assert "grouped-query attention with 2 query heads per K/V head" in str(grouped.value)
    wq = RNG.uniform(-1, 1, (3, 8))
    head = AttentionHead.from_arrays(wq, w, w, kv_groups=2)
    with pytest.raises(KvHeadsMismatch) as kv:
        MultiHeadLayer.build(head, 4, kv_heads=3)
    assert str(kv.value) == "kv_heads must be at least 1 and divide heads 4, got 3"
    with pytest.raises(RopeError):
        MultiHeadLayer.build(AttentionHead.from_arrays(wq, wq, wq, rope=Rope(1e4, 4)), 4)


# --- the fixture keys -------------------------------------------------------------------

def _fixture(tmp_path: Any, **extra: Any) -> Any:
    import json

    r = np.random.default_rng(7)
    data = {"heads": 4, "input": r.uniform(-1, 1, (1, 3, 4)).tolist(), "weights": {
        "query": {"layout": "torch", "values": r.uniform(-1, 1, (8, 4)).tolist()},
        "key": {"layout": "torch", "values": r.uniform(-1, 1, (4, 4)).tolist()},
        "value": {"layout": "torch", "values": r.uniform(-1, 1, (4, 4)).tolist()}}, **extra}
    path = tmp_path / "layer.json"
    path.write_text(json.dumps(data))
    return path


def _attend(*args: str) -> Any:
    from click.testing import CliRunner

    from qkvcli.cli import main

    return CliRunner().invoke(main, ["attend", *args])


def test_a_grouped_fixture_runs_and_one_without_kv_heads_is_told_why(tmp_path: Any) -> None:
    import json

    path = _fixture(tmp_path, kv_heads=2, causal=True,
                    rope={"theta": 10000, "dims": 2, "layout": "interleaved"}, scale=0.25)
    result = _attend(str(path), "-f", "json")
    assert result.exit_code == 0, result.output
    config = json.loads(result.stdout)["config"]
    assert (config["kv_heads"], config["causal"], config["scale"]) == (2, True, 0.25)
    assert config["rope"] == {"theta": 10000.0, "dims": 2, "layout": "interleaved"}
    bare = _fixture(tmp_path)
    result = _attend(str(bare))
    assert result.exit_code == 2
    assert result.stderr == (
        f"Error: {bare}: $.weights: the query projection is 8 wide, the key and value "
        'projections 4: grouped-query attention needs "kv_heads" (the K/V heads the query '
        "heads share)\n")


def test_the_command_line_cannot_contradict_the_fixture(tmp_path: Any) -> None:
    path = _fixture(tmp_path, kv_heads=2, causal=False)
    heads = _attend(str(path), "--heads", "2")
    assert heads.exit_code == 2
    assert heads.stderr == (f"Error: {path}: $.heads: the fixture says 4 heads, --heads says 2: "
                            "drop --heads (the fixture describes the layer)\n")
    causal = _attend(str(path), "--causal")
    assert causal.exit_code == 2
    assert causal.stderr == (f'Error: {path}: $.causal: the fixture says "causal": false, '
                             "--causal says true: drop --causal (the fixture describes the "
                             "layer)\n")
    assert _attend(str(path), "--heads", "4").exit_code == 0


@pytest.mark.parametrize(("extra", "message"), [
    ({"kv_heads": 3}, "$.kv_heads: kv_heads must divide heads 4, got 3"),
    ({"kv_heads": 2, "rope": {"theta": 1e4, "dims": 4}},
     "$.rope: rope dims must be even, at least 2 and at most the head's key width 2, got 4"),
    ({"kv_heads": 2, "rope": {"theta": 1e4, "dims": 2, "layout": "spiral"}},
     '$.rope.layout: expected "half" or "interleaved", got "spiral"'),
    ({"kv_heads": 2, "scale": 0}, "$.scale: must be a finite positive number, got 0"),
    ({"kv_heads": 2, "causal": "yes"}, "$.causal: expected true or false, got string"),
], ids=["kv-heads", "rope-dims", "rope-layout", "scale", "causal"])
def test_bad_feature_keys_are_one_line_naming_the_key(
    tmp_path: Any, extra: dict[str, Any], message: str
) -> None:
    path = _fixture(tmp_path, **extra)
    result = _attend(str(path))
    assert result.exit_code == 2
    assert result.stderr == f"Error: {path}: {message}\n"


# --- for all shapes ------------------------------------------------------------------------

@settings(max_examples=25, deadline=None)
@given(kv=st.integers(1, 3), groups=st.integers(1, 3), half_dims=st.integers(1, 2),
       tokens=st.integers(1, 4), layout=st.sampled_from(("half", "interleaved")),
       scale=st.one_of(st.none(), st.floats(0.05, 2.0)), causal=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
def test_every_grouped_rotary_layer_passes_its_gradient_check(
    kv: int, groups: int, half_dims: int, tokens: int, layout: str, scale: float | None,
    causal: bool, seed: int,
) -> None:
    rng = np.random.default_rng(seed)
    heads, d_k, d_model = kv * groups, 4, 3
    rope = Rope(float(rng.uniform(2.0, 1e4)), 2 * half_dims, layout)
    weights = [rng.uniform(-1, 1, (d_model, n * d_k)) for n in (heads, kv, kv)]
    biases = [rng.uniform(-1, 1, w.shape[1]) for w in weights]
    projections = AttentionHead.from_arrays(*weights, biases, scale=scale, rope=rope,
                                            kv_groups=groups)
    layer = MultiHeadLayer.build(projections, heads, rng.uniform(-1, 1, (heads * d_k, 2)),
                                 kv_heads=kv)
    x = rng.uniform(-1, 1, (1, tokens, d_model))
    upstream = rng.uniform(-1, 1, (1, tokens, 2))
    forward = layer.forward(x, causal)
    turned = forward.heads[0].rotated_query
    assert turned is not None  # a rotation keeps every position's norm
    assert np.allclose(np.linalg.norm(turned, axis=-1),
                       np.linalg.norm(forward.heads[0].query, axis=-1), rtol=1e-13)
    grads = layer.backward(x, forward, upstream)
    assert gradcheck_attention(layer, x, upstream, grads, causal, 1e-6, 1e-6).passed


def test_run_sends_a_real_layers_keys_to_attend(tmp_path: Any) -> None:
    import json

    from click.testing import CliRunner

    from qkvcli.cli import main

    data = json.loads((Path(__file__).parent.parent / "fixtures" / "ch26-qkv-projections.json")
                      .read_text())
    data["rope"] = {"theta": 100, "dims": 2}
    path = tmp_path / "f.json"
    path.write_text(json.dumps(data))
    result = CliRunner().invoke(main, ["run", str(path)])
    assert result.exit_code == 2
    assert result.stderr == (f"Error: {path}: $.rope: an attention fixture's key (the chapter "
                             "has no attention); run it with qkv attend\n")
