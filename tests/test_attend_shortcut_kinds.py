"""The gradient check's shortcuts on every layer kind: RoPE, grouped K/V heads, a given scale.

For each kind (RoPE half and interleaved, partial rotary, GQA, MQA, a given scale, and
RoPE with GQA and a causal mask together; with and without biases and an output
projection) and every checked tensor, every shortcut's ``L`` equals the full forward's
within :func:`~qkvcli.attention.shortcuts.shortcut_bound`, over every column of each weight;
the blocked softmax gives the same at any block size; the verdicts and derivatives match
full recomputation; a wrong gradient fails; a real checkpoint (tiny Hugging Face models
written by ``qkv init --from-safetensors``) passes end to end through the shortcuts.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from qkvcli.attention.gradcheck import (
    _copy_point,
    _tensor_objective,
    _tensors,
    analytic_of,
    evaluation_cost,
    gradcheck_attention,
    reaches_far,
)
from qkvcli.attention.head import AttentionHead, Rope
from qkvcli.attention.multihead import MultiHeadLayer
from qkvcli.attention.shortcuts import Shortcuts, shortcut_bound
from qkvcli.cli import main
from tests.test_attend_shortcuts import assert_same_checks

# name: heads, kv_heads, rope, scale, causal only
KINDS: dict[str, tuple[int, int, Rope | None, float | None, bool]] = {
    "rope-half": (2, 2, Rope(10.0, 6, "half"), None, False),
    "rope-interleaved": (2, 2, Rope(7.0, 6, "interleaved"), None, False),
    "rope-partial": (2, 2, Rope(3.0, 2, "half"), None, False),
    "grouped-query": (4, 2, None, None, False),
    "multi-query": (3, 1, None, None, False),
    "given-scale": (2, 2, None, 0.37, False),
    "rope-gqa-causal": (4, 2, Rope(10.0, 4, "half"), None, True),
    "everything": (4, 2, Rope(5.0, 4, "interleaved"), 0.21, False),
}
D_MODEL, D_K = 5, 6


def model(kind: str, bias: bool, out: bool, seed: int = 0, tokens: int = 7) -> tuple[
    MultiHeadLayer, np.ndarray, np.ndarray
]:
    heads, kv, rope, scale, _ = KINDS[kind]
    rng = np.random.default_rng(seed)
    widths = (heads * D_K, kv * D_K, kv * D_K)
    biases: list[Any] = [rng.normal(size=w) for w in widths] if bias else [None] * 3
    head = AttentionHead.from_arrays(*(rng.normal(size=(D_MODEL, w)) for w in widths),
                                     biases=biases, scale=scale, rope=rope,
                                     kv_groups=heads // kv)
    e_out = 5
    layer = MultiHeadLayer.build(head, heads, rng.normal(size=(heads * D_K, e_out)) if out
                                 else None, rng.normal(size=e_out) if out and bias else None,
                                 kv_heads=kv)
    x = rng.normal(size=(2, tokens, D_MODEL))
    upstream = rng.normal(size=(2, tokens, layer.e_out))
    return layer, x, upstream


def coordinates(name: str, values: np.ndarray, rng: np.random.Generator) -> list[int]:
    """Every column of a weight (a random row each), else a dozen random elements."""
    if name.startswith("w_"):
        rows, columns = values.shape
        return [int(rng.integers(rows)) * columns + c for c in range(columns)]
    return [int(i) for i in rng.choice(values.size, size=min(values.size, 12), replace=False)]


def assert_within_bound(layer: MultiHeadLayer, x: np.ndarray, upstream: np.ndarray,
                        causal: bool, fast: Shortcuts, seed: int) -> None:
    bound = shortcut_bound(layer, x, upstream, causal)
    assert 0.0 < bound < 1e-8
    rng = np.random.default_rng(seed)
    for name, values in _tensors(layer, x):
        full = _copy_point(_tensor_objective(layer, x, upstream, causal, name), values)
        short = fast.objective(name)
        for index in coordinates(name, values, rng):
            for delta in (-1e-6, 0.0, 0.3):
                value = float(values.reshape(-1)[index]) + delta
                assert abs(short(index, value) - full(index, value)) <= bound, (
                    name, index, delta)


CASES = [(kind, bias, out, causal) for kind, spec in KINDS.items() for bias in (False, True)
         for out in (False, True) for causal in ((True,) if spec[4] else (False, True))]


@pytest.mark.parametrize(("kind", "bias", "out", "causal"), CASES,
                         ids=[f"{k}-{'bias' if b else 'nobias'}-{'out' if o else 'noout'}-"
                              f"{'causal' if c else 'full'}" for k, b, o, c in CASES])
def test_every_shortcut_of_every_kind_gives_the_full_forwards_loss(
    kind: str, bias: bool, out: bool, causal: bool
) -> None:
    layer, x, upstream = model(kind, bias, out)
    # blocks of 3 rows over 7 tokens: two whole blocks and a short one
    fast = Shortcuts(layer, x, upstream, causal, block_rows=3)
    assert_within_bound(layer, x, upstream, causal, fast, seed=len(kind))


@pytest.mark.parametrize("block_rows", [1, 2, 4, 9, 100, None])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_the_blocked_softmax_gives_the_same_at_any_block_size(block_rows: int | None,
                                                              causal: bool) -> None:
    layer, x, upstream = model("everything", True, True, seed=4, tokens=9)
    fast = Shortcuts(layer, x, upstream, causal, block_rows=block_rows)
    assert_within_bound(layer, x, upstream, causal, fast, seed=5)


@pytest.mark.parametrize("tokens", [1, 2])
def test_a_few_tokens_take_one_small_block(tokens: int) -> None:
    layer, x, upstream = model("rope-gqa-causal", True, True, seed=6, tokens=tokens)
    fast = Shortcuts(layer, x, upstream, True)
    assert fast.block_rows == tokens and fast.triangle.shape == (tokens, tokens)
    assert_within_bound(layer, x, upstream, True, fast, seed=7)


def test_a_rope_column_changes_its_partner_and_ignoring_it_is_caught(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    layer, x, upstream = model("rope-half", False, False)
    fast = Shortcuts(layer, x, upstream, False)
    f = fast.heads[0]
    fresh = f.query[:, :, 1] + 0.3
    assert [c for c, _ in fast._turned(f.query, f.rotated_query, 1, fresh)] == [1, 4]
    assert [c for c, _ in fast._turned(f.query, f.rotated_query, 4, fresh)] == [4, 1]
    partial, x2, u2 = model("rope-partial", False, False)
    short = Shortcuts(partial, x2, u2, False)
    g = short.heads[0]
    assert [c for c, _ in short._turned(g.query, g.rotated_query, 3, fresh)] == [3]  # >= dims
    # the same check with the partner left out fails: the test can see a missing column
    turned = Shortcuts._turned
    monkeypatch.setattr(Shortcuts, "_turned",
                        lambda self, *args: turned(self, *args)[:1])
    broken = Shortcuts(layer, x, upstream, False)
    bound = shortcut_bound(layer, x, upstream, False)
    values = layer.projections.weights[0]
    full = _copy_point(_tensor_objective(layer, x, upstream, False, "w_query"), values)
    index = 2 * values.shape[1] + 1
    value = float(values.reshape(-1)[index]) + 0.3
    assert abs(broken.objective("w_query")(index, value) - full(index, value)) > 1e3 * bound


@pytest.mark.parametrize("kind", list(KINDS))
def test_shortcuts_and_full_recomputation_reach_the_same_verdicts(kind: str) -> None:
    layer, x, upstream = model(kind, True, True, seed=2)
    causal = True
    grads = analytic_of(layer.backward(x, layer.forward(x, causal), upstream))
    short = gradcheck_attention(layer, x, upstream, grads, causal, 1e-6, 2e-6, mode="full",
                                shortcuts=True)
    full = gradcheck_attention(layer, x, upstream, grads, causal, 1e-6, 2e-6, mode="full",
                               shortcuts=False)
    assert short.passed and full.passed
    assert_same_checks(short, full)


@pytest.mark.parametrize("name", ["input", "w_query", "w_key", "w_value", "b_query", "b_key",
                                  "b_value", "w_out", "b_out"])
def test_a_wrong_gradient_fails_through_every_shortcut_of_a_real_layer_kind(name: str) -> None:
    layer, x, upstream = model("everything", True, True, seed=3)
    grads = analytic_of(layer.backward(x, layer.forward(x, True), upstream))
    wrong = np.array(grads[name], copy=True)
    wrong.reshape(-1)[-1] += 0.5  # the last K/V head's group, the last token
    result = gradcheck_attention(layer, x, upstream, {**grads, name: wrong}, True, 1e-6, 2e-6,
                                 mode="full", shortcuts=True)
    assert [t.tensor for t in result.tensors if not t.passed] == [name]


def test_every_kind_reaches_far_and_a_group_costs_its_heads() -> None:
    for kind in KINDS:
        layer, x, _ = model(kind, False, False, tokens=64)
        assert reaches_far(layer, x), kind
    gqa, x, _ = model("grouped-query", False, False, tokens=64)  # 4 heads, 2 K/V heads
    plain, _, _ = model("given-scale", False, False, tokens=64)
    scores = 2 * 64 * 64
    key, _ = evaluation_cost(gqa, x, "w_key", True)
    query, _ = evaluation_cost(gqa, x, "w_query", True)
    assert key - query == 8 * scores  # a key column reaches both heads of its group
    value, _ = evaluation_cost(gqa, x, "w_value", True)
    assert value - evaluation_cost(plain, x, "w_value", True)[0] == scores
    rope, _, _ = model("rope-half", False, False, tokens=64)
    turned, _ = evaluation_cost(rope, x, "w_query", True)
    assert turned - evaluation_cost(plain, x, "w_query", True)[0] == scores + 4 * 2 * 64


# --- real checkpoints, end to end -----------------------------------------------------------

TOKENS = 40  # 4 heads x 40 x 40 scores: past AUTO_FULL_LIMIT, so the shortcuts run


def checkpoint(tmp_path: Path, config: Any) -> Path:
    """A tiny Hugging Face model from ``config``, saved with its config.json."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(23)
    model = transformers.AutoModel.from_config(config, attn_implementation="eager")
    with torch.no_grad():
        for p in model.parameters():
            p.uniform_(-0.5, 0.5)
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    return folder


REAL = [
    ("llama-gqa-rope", "LlamaConfig", {"num_key_value_heads": 2, "intermediate_size": 8},
     "layers.0.self_attn."),
    ("qwen2-mqa-biases", "Qwen2Config", {"num_key_value_heads": 1, "intermediate_size": 8},
     "layers.0.self_attn."),
    ("neox-partial-rotary", "GPTNeoXConfig", {"rotary_pct": 0.5, "intermediate_size": 8},
     "layers.0.attention."),
    ("gpt2-given-scale", "GPT2Config", {"scale_attn_by_inverse_layer_idx": True,
                                        "n_positions": 64}, "h.0.attn."),
]


@pytest.mark.parametrize(("config_name", "extra", "prefix"), [c[1:] for c in REAL],
                         ids=[c[0] for c in REAL])
def test_a_real_checkpoint_passes_through_the_shortcuts(tmp_path: Path, config_name: str,
                                                        extra: dict[str, Any],
                                                        prefix: str) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    transformers = pytest.importorskip("transformers")
    config_class = getattr(transformers, config_name)
    if config_name == "GPT2Config":
        config = config_class(n_embd=16, n_head=4, n_layer=1, vocab_size=11, **extra)
    else:
        config = config_class(hidden_size=16, num_attention_heads=4, num_hidden_layers=1,
                              vocab_size=11, **extra)
    folder = checkpoint(tmp_path, config)
    fixture = folder / "layer.json"
    runner = CliRunner()
    made = runner.invoke(main, ["init", "--from-safetensors", str(folder / "model.safetensors"),
                                "--prefix", prefix, "--tokens", str(TOKENS), "-o", str(fixture)])
    assert made.exit_code == 0, made.output
    run = runner.invoke(main, ["attend", str(fixture), "-f", "json", "--tensors", "none"])
    assert run.exit_code == 0, run.output
    evidence = json.loads(run.stdout)
    assert evidence["passed"]
    described = evidence["config"]
    assert described.get("rope") or described.get("kv_heads") or described.get("scale_given")
    recomputes = {t["tensor"]: t["recomputes"] for t in evidence["gradcheck"]["tensors"]}
    assert "full forward" not in recomputes.values(), recomputes
    assert all(t["checks"] for t in evidence["gradcheck"]["tensors"])
