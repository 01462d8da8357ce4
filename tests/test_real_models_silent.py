"""Configs that qkv once computed as another function and reported PASS (issue 43).

Each case builds a tiny model from a config, edits what was saved into the trap, and
runs ``qkv init`` as a user would: either refused in one line naming the key or tensor,
or computed and equal to the model transformers loads from that folder (float64, 1e-10:
output, per-head weights, dX). The float64 set-up is ``tests/test_real_models.py``'s.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

from tests.test_real_models import (  # noqa: E402  (after the skips)
    _edit_config,
    _init,
    _small,
    build,
    float64_attention,
    float64_softmax,
)
from tests.test_real_models_traps import _loaded, _numbers_or_refusal  # noqa: E402

__all__ = ["float64_attention", "float64_softmax"]  # fixtures used by name below

SLIDING = ["sliding_attention", "full_attention"]

# id, config class, its arguments, the edit to the saved config.json, the prefix, the key
# the refusal must name. Each edit makes a layer transformers' layer_types (or GPT-Neo's
# attention_layers) calls sliding with no window: the model's sliding mask cannot be
# built (transformers raises), and qkv used to compute full attention there.
NULL_WINDOWS = [
    ("gemma2", "Gemma2Config", _small(head_dim=8, num_hidden_layers=2, sliding_window=2),
     {"sliding_window": None}, "layers.0.self_attn."),
    ("qwen2", "Qwen2Config", _small(num_hidden_layers=2),
     {"use_sliding_window": True, "sliding_window": None, "layer_types": SLIDING},
     "layers.0.self_attn."),
    ("qwen3", "Qwen3Config", _small(num_hidden_layers=2, head_dim=4),
     {"use_sliding_window": True, "sliding_window": None, "layer_types": SLIDING},
     "layers.0.self_attn."),
    ("smollm3", "SmolLM3Config", _small(num_hidden_layers=2, pad_token_id=0),
     {"sliding_window": None, "layer_types": SLIDING}, "layers.0.self_attn."),
    ("gpt-neo-local", "GPTNeoConfig",
     {"hidden_size": 16, "num_heads": 2, "num_layers": 2, "vocab_size": 11,
      "attention_types": [[["global", "local"], 1]], "window_size": 2,
      "max_position_embeddings": 16, "intermediate_size": 8},
     {"window_size": None}, "h.1.attn.attention."),
]


@pytest.mark.parametrize(("config_name", "arguments", "edit", "prefix"),
                         [c[1:] for c in NULL_WINDOWS], ids=[c[0] for c in NULL_WINDOWS])
def test_a_sliding_layer_without_a_window_is_refused(
        tmp_path: Path, config_name: str, arguments: dict[str, Any], edit: dict[str, Any],
        prefix: str) -> None:
    _, folder = build(tmp_path, "family", getattr(transformers, config_name)(**arguments))
    _edit_config(folder, **edit)
    made = _init(folder, "--prefix", prefix, "--tokens", "4")
    assert made.exit_code == 2 and made.stderr.count("\n") == 1, made.output
    key = "window_size" if config_name == "GPTNeoConfig" else "sliding_window"
    assert f"config {key} null, but this layer is a sliding one" in made.stderr


@pytest.mark.usefixtures("float64_softmax", "float64_attention")
def test_smollm3_slides_a_sliding_layer_whatever_use_sliding_window_says(tmp_path: Path) -> None:
    """SmolLM3's model builds a sliding layer's mask from sliding_window alone: with
    use_sliding_window false the layer still slides (qkv once computed it full)."""
    model, folder = build(tmp_path, "smollm3", transformers.SmolLM3Config(
        **_small(num_hidden_layers=2, pad_token_id=0, sliding_window=2, layer_types=SLIDING)))
    _edit_config(folder, use_sliding_window=False)
    theta = float(model.config.rope_parameters["rope_theta"])
    _numbers_or_refusal(folder, "layers.0.self_attn.", "sliding_window", theta=theta,
                        model=_loaded(folder))


@pytest.mark.usefixtures("float64_softmax")
@pytest.mark.parametrize("head_dim", [2, 12, 20])
def test_gpt_neox_rotates_as_wide_as_its_table_reads_head_dim(tmp_path: Path,
                                                              head_dim: int) -> None:
    """GPT-NeoX's RoPE table is int(head_dim * rotary_pct) wide with a config head_dim its
    attention does not read otherwise: that width turns (or the model cannot run)."""
    config = transformers.GPTNeoXConfig(hidden_size=32, num_attention_heads=4,
                                        num_hidden_layers=1, intermediate_size=8,
                                        vocab_size=11, rotary_pct=0.5)
    _, folder = build(tmp_path, "neox", config)
    _edit_config(folder, head_dim=head_dim)
    model = _loaded(folder)
    width = int(head_dim * 0.5)
    if width > 8 or width < 2:  # wider than the head (or nothing): the module cannot run it
        made = _init(folder, "--prefix", "layers.0.attention.", "--tokens", "4")
        assert made.exit_code == 2 and "head_dim" in made.stderr, made.output
        return
    _numbers_or_refusal(folder, "layers.0.attention.", "head_dim",
                        theta=float(model.config.rope_parameters["rope_theta"]), model=model)


@pytest.mark.parametrize("dropped", ["weight", "bias"])
def test_bert_without_its_output_dense_or_its_bias_is_refused(tmp_path: Path,
                                                              dropped: str) -> None:
    config = transformers.BertConfig(hidden_size=16, num_attention_heads=2,
                                     num_hidden_layers=1, intermediate_size=8, vocab_size=11,
                                     max_position_embeddings=16)
    _, folder = build(tmp_path, "bert", config)
    path = folder / "model.safetensors"
    tensors = safetensors_torch.load_file(str(path))
    names = [f"encoder.layer.0.attention.output.dense.{part}" for part in (
        ("weight", "bias") if dropped == "weight" else ("bias",))]
    for name in names:
        del tensors[name]
    safetensors_torch.save_file(tensors, str(path), metadata={"format": "pt"})
    made = _init(folder, "--prefix", "encoder.layer.0.attention.self.", "--tokens", "4")
    assert made.exit_code == 2 and made.stderr.count("\n") == 1, made.output
    assert f'"output.dense.{dropped}"' in made.stderr, made.stderr


# Refusals that named another key than the one that caused them (issue 43): each now
# names the config's own spelling.
WRONG_KEYS = [
    ("theta-overflow-nested", {"rope_parameters": {"rope_type": "default", "rope_theta": 5e-324}},
     "config rope_parameters.rope_theta 5e-324 makes the rotation frequencies"),
    ("hidden-size-as-d-model", {"hidden_size": None, "d_model": 32},
     "config d_model 32, but the layer reads inputs 128 wide"),
    ("hidden-size-as-n-embd", {"hidden_size": None, "n_embd": 32},
     "config n_embd 32, but the layer reads inputs 128 wide"),
    ("no-heads", {"num_attention_heads": None}, "config gives no num_attention_heads (or n_head)"),
]


@pytest.mark.parametrize(("edit", "words"), [c[1:] for c in WRONG_KEYS],
                         ids=[c[0] for c in WRONG_KEYS])
def test_a_refusal_names_the_key_the_config_spells(tmp_path: Path, edit: dict[str, Any],
                                                   words: str) -> None:
    # heads of 64: a theta near 0 overflows theta^(-62/64)
    config = transformers.LlamaConfig(**_small(hidden_size=128, num_attention_heads=2))
    _, folder = build(tmp_path, "llama", config)
    _edit_config(folder, **edit)
    made = _init(folder, "--prefix", "layers.0.self_attn.", "--tokens", "4")
    assert made.exit_code == 2 and made.stderr.count("\n") == 1, made.output
    assert words in made.stderr, made.stderr


def test_an_encoder_decoder_without_its_heads_names_its_own_key(tmp_path: Path) -> None:
    config = transformers.BartConfig(
        d_model=16, encoder_attention_heads=2, decoder_attention_heads=4, encoder_layers=1,
        decoder_layers=1, encoder_ffn_dim=8, decoder_ffn_dim=8, vocab_size=11,
        max_position_embeddings=16)
    _, folder = build(tmp_path, "bart", config)
    _edit_config(folder, encoder_attention_heads=None)
    made = _init(folder, "--prefix", "encoder.layers.0.self_attn.", "--tokens", "4")
    assert made.exit_code == 2, made.output
    assert "config gives no encoder_attention_heads" in made.stderr, made.stderr


def test_a_packed_layer_whose_heads_do_not_divide_names_the_hidden_key(tmp_path: Path) -> None:
    config = transformers.Phi3Config(**_small(hidden_size=32, pad_token_id=0))
    _, folder = build(tmp_path, "phi3", config)
    _edit_config(folder, num_attention_heads=3, num_key_value_heads=3)
    made = _init(folder, "--prefix", "layers.0.self_attn.", "--tokens", "4")
    assert made.exit_code == 2, made.output
    assert "do not divide hidden_size 32" in made.stderr, made.stderr


# A family's other spelling of a key (its config class's attribute_map) was refused under
# the key it stands for, which the config does not hold (issue 43's sixth wrong key); and
# MiniMax-M2's rotary_dim was called the family's default, shown as a factor. Each config
# is the one its transformers config class writes, with the one value edited.
SPELLED = [
    ("lfm2-norm-eps", "Lfm2Config",
     {"layer_types": ["full_attention"], "norm_eps": 1e-3}, {"norm_eps": 0},
     "config norm_eps must be a finite positive number, got 0"),
    ("internlm3-qkv-bias", "InternLM3Config", {"qkv_bias": True, "bias": True},
     {"qkv_bias": "true"}, 'config qkv_bias must be true or false, got "true"'),
    ("internlm3-bias-apart", "InternLM3Config", {"qkv_bias": True, "bias": True},
     {"bias": False}, "config qkv_bias true and bias false: InternLM3's config refuses them"),
    ("xglm-attention-heads", "XGLMConfig", {"d_model": 16, "attention_heads": 2, "num_layers": 1},
     {"attention_heads": 2.0}, "config attention_heads must be a positive integer, got 2.0"),
    ("xglm-no-heads", "XGLMConfig", {"d_model": 16, "attention_heads": 2, "num_layers": 1},
     {"attention_heads": None}, "config gives no attention_heads (or num_attention_heads)"),
    ("xglm-num-layers", "XGLMConfig", {"d_model": 16, "attention_heads": 2, "num_layers": 1},
     {"num_layers": 1}, "the prefix names layer 1, but config num_layers is 1"),
    ("minimax-m2-rotary-dim", "MiniMaxM2Config", {"head_dim": 8}, {"rotary_dim": 3},
     "config rotary_dim 3 gives 3 rotary dimensions"),
    ("minimax-m2-rotary-dim-wide", "MiniMaxM2Config", {"head_dim": 8}, {"rotary_dim": 12},
     "config rotary_dim 12 is wider than a head (8)"),
]


@pytest.mark.parametrize(("config_name", "arguments", "edit", "words"),
                         [c[1:] for c in SPELLED], ids=[c[0] for c in SPELLED])
def test_a_refusal_names_the_key_as_the_family_spells_it(
        config_name: str, arguments: dict[str, Any], edit: dict[str, Any], words: str) -> None:
    from qkvcli.authoring.config import model_function
    from qkvcli.authoring.model_families import ALIASES
    from qkvcli.authoring.tensor_names import CheckpointError

    saved = getattr(transformers, config_name)(
        **{"hidden_size": 16, "num_attention_heads": 2, "num_key_value_heads": 2,
           "num_hidden_layers": 1, "vocab_size": 11, **arguments}).to_dict()
    if "rotary_dim" in edit:  # an older MiniMax-M2 config: the rotated width as rotary_dim
        saved["rope_parameters"].pop("partial_rotary_factor", None)
        saved.pop("partial_rotary_factor", None)
    for alias, key in ALIASES.get(saved["model_type"], {}).items():
        if alias in arguments and key in saved:  # a hub config's own spelling
            saved[alias] = saved.pop(key)  # (InternLM3's qkv_bias and bias)
    saved.update(edit)
    saved = {key: value for key, value in saved.items() if value is not None}
    layer = "layers.1.self_attn." if "num_layers" in edit else "layers.0.self_attn."
    with pytest.raises(CheckpointError) as refused:
        model_function(saved, layer, 4, (16, 16))
    assert words in str(refused.value), str(refused.value)
