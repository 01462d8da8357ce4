"""``qkv attend --decode`` on real checkpoints, built as the real-model tests build them:
a tiny model from a transformers config (random weights, ``save_pretrained``), read by
``qkv inspect``, ``qkv init --from-safetensors`` and ``qkv attend --decode`` as a user
would. Each layer, decoded one token at a time through qkv's KV cache, matches its full
causal pass to 1e-12, the cache holding the config's K/V heads and, for a sliding
window, a ring of the window. Two layers are decoded by the model itself too, with its
own cache (transformers' ``past_key_values``), and qkv's steps match the module's.
A layer no cache can serve is refused by name. Skipped without torch and transformers.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from qkvcli.attention import engine  # noqa: E402  (after the skips)
from qkvcli.attention.decode import decode  # noqa: E402
from qkvcli.attention.fixture import load_layer  # noqa: E402
from tests.test_real_models import build, invoke  # noqa: E402
from tests.test_real_models_scaling import float64_torch, rotary_of  # noqa: E402

TOKENS = 9
"""Longer than every window below, so each ring wraps."""


def small(**extra: Any) -> dict[str, Any]:
    return {"hidden_size": 16, "num_attention_heads": 4, "num_hidden_layers": 1,
            "intermediate_size": 8, "vocab_size": 11, "max_position_embeddings": 64, **extra}


def decoded(folder: Path, prefix: str, *init: str) -> tuple[dict[str, Any], Path]:
    """``inspect`` -> ``init --tokens 9`` -> ``attend --decode -f json``: the document and
    the fixture."""
    path = folder / "model.safetensors"
    listing = invoke("inspect", str(path))
    assert listing.exit_code == 0 and prefix in listing.output, listing.output
    layer = folder / "layer.json"
    made = invoke("init", "--from-safetensors", str(path), "--prefix", prefix, "--tokens",
                  str(TOKENS), "-o", str(layer), *init)
    assert made.exit_code == 0, made.output
    run = invoke("attend", str(layer), "-f", "json", "--decode", "--mode", "sampled")
    assert run.exit_code == 0, run.output
    return json.loads(run.stdout), layer


# id, config class, its arguments, the layer's prefix, (K/V heads, window) it must have
MODELS = [
    ("llama", "LlamaConfig", small(), "layers.0.self_attn.", (4, None)),
    ("llama-gqa", "LlamaConfig", small(num_key_value_heads=2), "layers.0.self_attn.", (2, None)),
    ("llama-multi-query", "LlamaConfig", small(num_key_value_heads=1), "layers.0.self_attn.",
     (1, None)),
    ("mistral-sliding", "MistralConfig", small(num_key_value_heads=2, sliding_window=3),
     "layers.0.self_attn.", (2, 3)),
    ("qwen2-sliding", "Qwen2Config",
     small(num_key_value_heads=2, use_sliding_window=True, sliding_window=4,
           max_window_layers=0), "layers.0.self_attn.", (2, 4)),
    ("gemma2-softcap-sliding", "Gemma2Config",
     small(head_dim=8, num_key_value_heads=2, num_hidden_layers=2, sliding_window=2,
           attn_logit_softcapping=1.5, query_pre_attn_scalar=20), "layers.0.self_attn.", (2, 2)),
    ("llama-yarn", "LlamaConfig",
     small(num_key_value_heads=2, rope_parameters={
         "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
         "original_max_position_embeddings": 4}), "layers.0.self_attn.", (2, None)),
    ("llama3-scaled", "LlamaConfig",
     small(rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 4}),
     "layers.0.self_attn.", (4, None)),
    ("gpt-neox-partial", "GPTNeoXConfig",
     {"hidden_size": 16, "num_attention_heads": 2, "num_hidden_layers": 1,
      "intermediate_size": 8, "vocab_size": 11, "rotary_pct": 0.5},
     "layers.0.attention.", (2, None)),
    ("phi-partial-qk-layernorm", "PhiConfig",
     small(hidden_size=32, partial_rotary_factor=0.5, qk_layernorm=True),
     "layers.0.self_attn.", (4, None)),
    ("qwen3-qk-norm-gqa", "Qwen3Config", small(num_key_value_heads=2, head_dim=4),
     "layers.0.self_attn.", (2, None)),
    ("olmo-clip-qkv", "OlmoConfig", small(clip_qkv=0.8), "layers.0.self_attn.", (4, None)),
    ("gpt2", "GPT2Config", {"n_embd": 16, "n_head": 4, "n_layer": 1, "vocab_size": 11,
                            "n_positions": 16, "bos_token_id": 0, "eos_token_id": 0},
     "h.0.attn.", (4, None)),
    ("bloom-alibi", "BloomConfig", {"hidden_size": 16, "n_head": 4, "n_layer": 1,
                                    "vocab_size": 11}, "h.0.self_attention.", (4, None)),
    ("falcon-multi-query", "FalconConfig",
     {"hidden_size": 16, "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 11},
     "h.0.self_attention.", (1, None)),
]


@pytest.mark.parametrize(("config_name", "arguments", "prefix", "cache"),
                         [c[1:] for c in MODELS], ids=[c[0] for c in MODELS])
def test_each_checkpoint_decodes_as_its_full_pass(tmp_path: Path, config_name: str,
                                                  arguments: dict[str, Any], prefix: str,
                                                  cache: tuple[int, int | None]) -> None:
    _, folder = build(tmp_path, "model", getattr(transformers, config_name)(**arguments))
    evidence, _ = decoded(folder, prefix)
    kv, window = cache
    config = evidence["config"]
    assert config.get("kv_heads", config["heads"]) == kv
    assert config.get("window") == window
    found = evidence["decode"]
    assert found["passed"] and evidence["passed"]
    assert len(found["steps"]) == TOKENS
    assert max(step["worst"] for step in found["steps"]) <= 1e-12
    assert found["held_worst"] <= 1e-12
    d_k = config["d_k"]
    for t, step in enumerate(found["steps"]):
        held = t + 1 if window is None else min(t + 1, window)
        assert step["keys"] == [1, kv, held, d_k]  # the config's K/V heads, not its heads
    capacity = TOKENS if window is None else window
    assert found["storage"]["keys"] == [1, kv, capacity, d_k]
    assert found["storage"]["bytes"] == 8 * kv * capacity * (d_k + config["d_v"])


def _hf_decode(model: Any, module: Any, tokens: Any) -> tuple[Any, Any, Any]:
    """The attention module's input and output of the full pass, and its outputs when
    the model decodes the same tokens one at a time with its own cache, in float64."""
    seen: list[tuple[Any, Any]] = []

    def hook(_: Any, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        given = kwargs.get("hidden_states", args[0] if args else None)
        seen.append((given.detach().clone(), output[0].detach().clone()))

    handle = module.register_forward_hook(hook, with_kwargs=True)
    with torch.no_grad():
        model(input_ids=tokens, use_cache=False)
        full_in, full_out = seen.pop()
        past = None
        for t in range(tokens.shape[1]):
            step = model(input_ids=tokens[:, t:t + 1], past_key_values=past, use_cache=True)
            past = step.past_key_values
    handle.remove()
    return full_in, full_out, torch.cat([out for _, out in seen], dim=1)


ANCHORED = [
    ("llama-gqa", "LlamaConfig", small(num_key_value_heads=2)),
    ("mistral-sliding", "MistralConfig", small(num_key_value_heads=2, sliding_window=3)),
]


@pytest.mark.parametrize(("config_name", "arguments"), [c[1:] for c in ANCHORED],
                         ids=[c[0] for c in ANCHORED])
def test_the_model_decoding_with_its_own_cache_agrees(tmp_path: Path, config_name: str,
                                                      arguments: dict[str, Any]) -> None:
    """The model decodes with transformers' cache (its sliding window's too), its rotary
    tables and its softmax in float64; qkv's cached steps over the same input are the
    module's outputs, and both are the module's full pass."""
    model, folder = build(tmp_path, "model", getattr(transformers, config_name)(**arguments))
    rotary_path = next(name for name, _ in model.named_modules() if name.endswith("rotary_emb"))
    with float64_torch():  # the rotary tables and the softmax's upcast in float64
        fresh = type(rotary_of(model))(model.config)
        model.set_submodule(rotary_path, fresh)
        tokens = torch.arange(TOKENS)[None] % 7
        module = model.get_submodule("layers.0.self_attn")
        full_in, full_out, steps = _hf_decode(model, module, tokens)
    assert float((steps - full_out).abs().max()) <= 1e-12  # the model's own decode
    _, fixture = decoded(folder, "layers.0.self_attn.")
    document = json.loads(fixture.read_text())
    document["input"] = full_in.numpy().tolist()  # the module's own input, exactly
    fixture.write_text(json.dumps(document))
    loaded, layer = load_layer(fixture)
    ours = decode(layer, loaded.input).output
    assert np.max(np.abs(ours - steps.numpy())) <= 1e-12
    if layer.window is not None:  # the window matters here: every key seen gives another
        unwindowed = engine.forward(layer, loaded.input, True, window=TOKENS).output
        assert np.max(np.abs(unwindowed - steps.numpy())) > 1e-6
    run = invoke("attend", str(fixture), "-f", "json", "--decode", "--mode", "sampled")
    assert run.exit_code == 0 and json.loads(run.stdout)["decode"]["passed"], run.output


def test_a_dynamic_scaling_past_its_length_is_refused(tmp_path: Path) -> None:
    config = transformers.LlamaConfig(**small(max_position_embeddings=4, rope_parameters={
        "rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}))
    _, folder = build(tmp_path, "model", config)
    layer = folder / "layer.json"
    made = invoke("init", "--from-safetensors", str(folder / "model.safetensors"), "--prefix",
                  "layers.0.self_attn.", "--tokens", str(TOKENS), "-o", str(layer))
    assert made.exit_code == 0, made.output
    plain = invoke("attend", str(layer), "-f", "json", "--mode", "sampled")
    assert plain.exit_code == 0, plain.output  # the full pass itself is fine
    run = invoke("attend", str(layer), "-f", "json", "--decode")
    assert run.exit_code == 2 and run.stdout == "" and run.stderr.count("\n") == 1
    assert "its RoPE scaling 'dynamic' changes every frequency once a sequence passes 4 " \
           "positions and this one reaches 9" in run.stderr


def test_an_encoder_is_refused_for_its_missing_causal_mask(tmp_path: Path) -> None:
    config = transformers.BertConfig(hidden_size=16, num_attention_heads=2, num_hidden_layers=1,
                                     intermediate_size=8, vocab_size=11,
                                     max_position_embeddings=16)
    _, folder = build(tmp_path, "model", config)
    layer = folder / "layer.json"
    made = invoke("init", "--from-safetensors", str(folder / "model.safetensors"), "--prefix",
                  "encoder.layer.0.attention.self.", "-o", str(layer))
    assert made.exit_code == 0, made.output
    run = invoke("attend", str(layer), "--decode")
    assert run.exit_code == 2 and run.stdout == "" and run.stderr.count("\n") == 1
    assert "a KV cache cannot decode this layer: it has no causal mask" in run.stderr
