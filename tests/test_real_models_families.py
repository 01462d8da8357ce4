"""Model families made of pieces qkv already computes (issue 43), each against its own
attention module: a tiny model from the family's config class, saved, read by ``qkv
init`` and ``qkv attend`` as a user would, and compared in float64 (1e-10: output,
per-head weights, dX and every parameter gradient) with the module the model built.

The RoPE tables the module is given are the model's own rotary module run again in
float64 (``tests/test_real_models_scaling.py``'s ``float64_tables``, checked against the
model's float32 tables), so every family's layout, partial rotary and theta come from
transformers, not from qkv's reading of them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests import test_real_models as real_models  # noqa: E402
from tests.test_real_models import (  # noqa: E402  (after the skips)
    QKVO,
    TOKENS,
    build,
    compare,
    float64_attention,
    float64_softmax,
    model_run,
    own_gradients,
    qkv_layer,
)
from tests.test_real_models_scaling import float64_tables, float64_torch  # noqa: E402

__all__ = ["float64_attention", "float64_softmax"]  # fixtures used by name below

NORMS = (*QKVO, "q_norm", "k_norm")
SLIDING = ["sliding_attention", "full_attention"]


def small(**extra: Any) -> dict[str, Any]:
    """A tiny decoder: 2 heads of 8, one K/V head, 2 layers."""
    return {"hidden_size": 16, "num_attention_heads": 2, "num_key_value_heads": 1,
            "head_dim": 8, "num_hidden_layers": 2, "intermediate_size": 8, "vocab_size": 11,
            "max_position_embeddings": 64, **extra}


_MOE = {"num_experts": 2, "num_experts_per_tok": 1, "moe_intermediate_size": 8}
# id, config class, its arguments, the layer's prefix, its modules, what the fixture must
# say (None: the key absent)
DECODERS = [
    ("arcee-biases", "ArceeConfig", small(attention_bias=True), 0, QKVO, {}),
    ("exaone-theta", "ExaoneConfig", small(), 0, QKVO,
     {"rope": {"theta": 500000.0, "dims": 8, "layout": "half"}}),
    ("internlm3-qkv-bias", "InternLM3Config", small(qkv_bias=True, bias=True), 0, QKVO, {}),
    ("iquestcoder", "IQuestCoderConfig", small(), 1, QKVO, {}),
    ("solar-open-qkv-biases", "SolarOpenConfig",
     small(attention_bias=True, n_routed_experts=2, num_experts_per_tok=1,
           moe_intermediate_size=8, n_shared_experts=1, first_k_dense_replace=0), 0, QKVO, {}),
    ("seed-oss-out-bias", "SeedOssConfig", small(attention_out_bias=True), 0, QKVO, {}),
    ("seed-oss-qkv-bias-only", "SeedOssConfig", small(), 0, QKVO, {}),
    ("hyperclovax-multiplier", "HyperCLOVAXConfig", small(attention_multiplier=0.3), 0, QKVO,
     {"scale": 0.3}),
    ("hyperclovax-default-multiplier", "HyperCLOVAXConfig", small(), 0, QKVO,
     {"scale": 8 ** -0.5}),
    ("granitemoe-multiplier", "GraniteMoeConfig",
     small(attention_multiplier=0.2, num_local_experts=2, num_experts_per_tok=1), 0, QKVO,
     {"scale": 0.2}),
    ("granitemoeshared", "GraniteMoeSharedConfig",
     small(attention_multiplier=0.2, num_local_experts=2, num_experts_per_tok=1,
           shared_intermediate_size=8), 0, QKVO, {"scale": 0.2}),
    ("helium-interleaved", "HeliumConfig", small(head_dim=8), 0, QKVO,
     {"rope": {"theta": 100000.0, "dims": 8, "layout": "interleaved"}}),
    ("glm-interleaved-partial", "GlmConfig", small(pad_token_id=0), 0, QKVO,
     {"rope": {"theta": 10000.0, "dims": 4, "layout": "interleaved"}}),
    ("glm4-interleaved-partial", "Glm4Config", small(attention_bias=False, pad_token_id=0), 1, QKVO,
     {"rope": {"theta": 10000.0, "dims": 4, "layout": "interleaved"}}),
    ("ernie4-5-interleaved-biases", "Ernie4_5Config", small(use_bias=True), 0, QKVO,
     {"rope": {"theta": 500000.0, "dims": 8, "layout": "interleaved"}}),
    ("ministral-sliding", "MinistralConfig", small(sliding_window=2, layer_types=SLIDING), 0,
     QKVO, {"window": 2}),
    ("ministral-full", "MinistralConfig", small(sliding_window=2, layer_types=SLIDING), 1,
     QKVO, {"window": None}),
    ("cwm-sliding-llama3", "CwmConfig", small(sliding_window=3, layer_types=SLIDING), 0, QKVO,
     {"window": 3}),
    ("dots1-qk-norm-sliding", "Dots1Config",
     small(sliding_window=2, layer_types=SLIDING, attention_bias=True, n_routed_experts=2,
           num_experts_per_tok=1, moe_intermediate_size=8, first_k_dense_replace=2), 0, NORMS,
     {"window": 2, "qk_norm": {"span": "head", "eps": 1e-6, "offset": 0.0}}),
    ("olmoe-layer-norm", "OlmoeConfig", small(num_experts=2, num_experts_per_tok=1), 0, NORMS,
     {"qk_norm": {"span": "layer", "eps": 1e-5, "offset": 0.0}}),
    ("flex-olmo-layer-norm", "FlexOlmoConfig",
     small(num_experts=2, num_experts_per_tok=1, pad_token_id=0), 0,
     NORMS, {"qk_norm": {"span": "layer", "eps": 1e-6, "offset": 0.0}}),
    ("glm4-moe-qk-norm-partial", "Glm4MoeConfig",
     small(use_qk_norm=True, attention_bias=True, n_routed_experts=2, num_experts_per_tok=1,
           moe_intermediate_size=8, first_k_dense_replace=2), 0, NORMS,
     {"rope": {"theta": 10000.0, "dims": 4, "layout": "half"}}),
    ("glm4-moe-plain", "Glm4MoeConfig",
     small(n_routed_experts=2, num_experts_per_tok=1, moe_intermediate_size=8,
           first_k_dense_replace=2), 0, QKVO, {"qk_norm": None}),
    ("apertus-qk-norm-llama3", "ApertusConfig", small(), 0, NORMS,
     {"qk_norm": {"span": "head", "eps": 1e-5, "offset": 0.0}}),
    ("ernie4-5-moe-interleaved", "Ernie4_5_MoeConfig",
     small(use_bias=True, moe_num_experts=2, moe_k=1, moe_intermediate_size=8), 0, QKVO,
     {"rope": {"theta": 500000.0, "dims": 8, "layout": "interleaved"}}),
    ("phimoe-window", "PhimoeConfig",
     small(sliding_window=2, attention_bias=True, num_local_experts=2, num_experts_per_tok=1),
     0, QKVO, {"window": 2}),
    ("aria-text", "AriaTextConfig", small(moe_num_experts=2, moe_topk=1), 0, QKVO, {}),
    ("ministral3-yarn-window", "Ministral3Config", small(pad_token_id=0, sliding_window=3), 0,
     QKVO, {"window": 3}),
    ("nemotron-partial", "NemotronConfig", small(attention_bias=True), 0, QKVO,
     {"rope": {"theta": 10000.0, "dims": 4, "layout": "half"}}),
    ("vaultgemma-softcap-sliding", "VaultGemmaConfig",
     small(sliding_window=2, attn_logit_softcapping=3.0, query_pre_attn_scalar=12), 0, QKVO,
     {"window": 2, "softcap": 3.0, "scale": 12 ** -0.5}),
    ("vaultgemma-full", "VaultGemmaConfig", small(sliding_window=2), 1, QKVO,
     {"window": None, "softcap": 50.0}),
    ("mellum-sliding-theta", "MellumConfig",
     small(sliding_window=2, layer_types=SLIDING, attention_bias=True, **_MOE), 0, NORMS,
     {"window": 2, "rope": {"theta": 10000.0, "dims": 8, "layout": "half"}}),
    ("mellum-full-theta", "MellumConfig", small(sliding_window=2, layer_types=SLIDING, **_MOE),
     1, NORMS, {"window": None, "rope": {"theta": 500000.0, "dims": 8, "layout": "half"}}),
    ("qwen2-moe-sliding", "Qwen2MoeConfig",
     small(use_sliding_window=True, sliding_window=2, layer_types=SLIDING,
           shared_expert_intermediate_size=8, **_MOE), 0, QKVO, {"window": 2}),
    ("qwen2-moe-no-window-flag", "Qwen2MoeConfig",
     small(shared_expert_intermediate_size=8, **_MOE), 0, QKVO, {"window": None}),
    ("jais2-biases", "Jais2Config", small(), 0, QKVO, {}),
    ("apertus1p5-text-llama3", "Apertus1p5TextConfig", small(), 1, NORMS,
     {"qk_norm": {"span": "head", "eps": 1e-5, "offset": 0.0}}),
    ("kolibri1-sliding-rotated", "Kolibri1Config", small(sliding_window=2, layer_types=SLIDING),
     0, NORMS, {"window": 2, "rope": {"theta": 10000.0, "dims": 8, "layout": "half"}}),
    ("kolibri1-full-unrotated", "Kolibri1Config", small(sliding_window=2, layer_types=SLIDING),
     1, NORMS, {"window": None, "rope": None}),
    ("olmo-hybrid-layer-norm", "OlmoHybridConfig",
     small(layer_types=["linear_attention", "full_attention"], pad_token_id=0), 1, NORMS,
     {"qk_norm": {"span": "layer", "eps": 1e-6, "offset": 0.0}}),
    ("lara-mini-sliding", "LaraMiniConfig",
     small(layer_types=["linear_attention", "sliding_attention"], sliding_window=2), 1, NORMS,
     {"window": 2}),
    ("minimax-m2-layer-norm-partial", "MiniMaxM2Config",
     small(rotary_dim=4, num_local_experts=2, num_experts_per_tok=1, pad_token_id=0), 0, NORMS,
     {"rope": {"theta": 5000000.0, "dims": 4, "layout": "half"},
      "qk_norm": {"span": "layer", "eps": 1e-6, "offset": 0.0}}),
    ("hy-v3-qk-norm", "HYV3Config", small(attention_bias=True, pad_token_id=0), 0, NORMS,
     {"qk_norm": {"span": "head", "eps": 1e-5, "offset": 0.0}}),
    ("hunyuan-v1-dense-norm-after-rope", "HunYuanDenseV1Config",
     small(attention_bias=True, rms_norm_eps=1e-3), 1,
     (*QKVO, "query_layernorm", "key_layernorm"),
     {"qk_norm": {"span": "head", "eps": 1e-3, "offset": 0.0, "after": "rope"}}),
    ("hunyuan-v1-moe-norm-after-rope", "HunYuanMoEV1Config",
     small(num_experts=2, moe_topk=1, pad_token_id=0), 0,
     (*QKVO, "query_layernorm", "key_layernorm"),
     {"qk_norm": {"span": "head", "eps": 1e-5, "offset": 0.0, "after": "rope"}}),
    ("lfm2-layernorm-per-head", "Lfm2Config",
     small(layer_types=["conv", "full_attention"], norm_eps=1e-3), 1,
     ("q_proj", "k_proj", "v_proj", "out_proj", "q_layernorm", "k_layernorm"),
     {"qk_norm": {"span": "head", "eps": 1e-3, "offset": 0.0}}),
]
# the packed names their checkpoints keep: the stored prefix, the packed and output tensors
STORED = {"GteConfig": ("encoder.layer.0.attention.", "qkv_proj", "o_proj"),
          "NomicBertConfig": ("encoder.layers.0.attn.", "Wqkv", "out_proj"),
          "JinaEmbeddingsV3Config": ("encoder.layers.0.mixer.", "Wqkv", "out_proj")}
ENCODER_ROPE = [
    ("gte-packed-biases", "GteConfig", {}),
    ("nomic-bert-packed", "NomicBertConfig", {}),
    ("jina-embeddings-v3-packed-biases", "JinaEmbeddingsV3Config", {}),
    ("eurobert-gqa-biases", "EuroBertConfig",
     {"num_key_value_heads": 1, "attention_bias": True, "pad_token_id": 0, "bos_token_id": 0,
      "eos_token_id": 0, "mask_token_id": 0}),
]


# RoPE on the sliding layers only: the full layer's fixture has none
ROPE_ON_SLIDING = [
    ("cohere2-sliding-rotated", "Cohere2Config",
     small(sliding_window=2, layer_types=SLIDING, attention_bias=True), 0, QKVO,
     {"window": 2, "rope": {"theta": 10000.0, "dims": 8, "layout": "interleaved"}}),
    ("cohere2-full-unrotated", "Cohere2Config", small(sliding_window=2, layer_types=SLIDING), 1,
     QKVO, {"window": None, "rope": None}),
    ("exaone4-sliding-rotated", "Exaone4Config", small(sliding_window=2, layer_types=SLIDING),
     0, NORMS, {"window": 2, "rope": {"theta": 10000.0, "dims": 8, "layout": "half"}}),
    ("exaone4-full-unrotated", "Exaone4Config", small(sliding_window=2, layer_types=SLIDING),
     1, NORMS, {"window": None, "rope": None}),
    ("exaone-moe-full-unrotated", "ExaoneMoeConfig",
     small(sliding_window=2, layer_types=SLIDING, num_experts=2, num_experts_per_tok=1,
           moe_intermediate_size=8, first_k_dense_replace=2), 1, NORMS, {"rope": None}),
]
DECODERS += ROPE_ON_SLIDING


def _layer_type(model: Any, layer: int) -> str | None:
    rotary = next(m for name, m in model.named_modules() if name.endswith("rotary_emb"))
    return (model.config.layer_types[layer]
            if isinstance(getattr(rotary, "rope_type", None), dict) else None)


@pytest.mark.usefixtures("float64_softmax", "float64_attention")
@pytest.mark.parametrize(("config_name", "arguments", "layer", "modules", "said"),
                         [c[1:] for c in DECODERS], ids=[c[0] for c in DECODERS])
def test_each_decoder_family_matches_its_own_attention_module(
        tmp_path: Path, config_name: str, arguments: dict[str, Any], layer: int,
        modules: tuple[str, ...], said: dict[str, Any]) -> None:
    config = getattr(transformers, config_name)(**arguments)
    if hasattr(config, "moe_num_experts"):  # its experts' eager (float64) form, as build's
        config.num_local_experts = config.moe_num_experts
    model, folder = build(tmp_path, "family", config)
    prefix = f"layers.{layer}.self_attn."
    # EXAONE's checkpoint keeps its own names, which transformers maps onto LLaMA's modules
    stored = f"layers.{layer}.attn.attention." if config_name == "ExaoneConfig" else prefix
    evidence = qkv_layer(folder, stored)
    document = json.loads((folder / "layer.json").read_text())
    for key, value in said.items():
        assert document.get(key) == value, (key, document.get(key))
    if document.get("window") is not None:
        assert TOKENS > document["window"]
    cos, sin = float64_tables(model, prefix, _layer_type(model, layer))
    y, a, x, _ = model_run(model, prefix, evidence, position_embeddings=(cos, sin))
    if document.get("rope") is None:  # a layer that turns nothing: the tables must not count
        assert "rope" not in evidence["config"]
    gradients = own_gradients(model, *(prefix + m for m in modules))
    if config_name == "ExaoneConfig":
        gradients = {name.replace("o_proj", "out_proj"): grad for name, grad in gradients.items()}
    compare(evidence, y, a, x, gradients)


_SEQ2SEQ = {"d_model": 16, "encoder_attention_heads": 2, "decoder_attention_heads": 4,
            "encoder_layers": 1, "decoder_layers": 1, "encoder_ffn_dim": 8, "decoder_ffn_dim": 8,
            "vocab_size": 11, "max_position_embeddings": 16, "pad_token_id": 1,
            "decoder_start_token_id": 2, "bos_token_id": 0, "eos_token_id": 2}
QKV_OUT = ("q_proj", "k_proj", "v_proj", "out_proj")
SEQ2SEQ = [(name, side) for name in (
    "MarianConfig", "PegasusConfig", "BlenderbotConfig", "BlenderbotSmallConfig", "MvpConfig",
    "M2M100Config", "NllbMoeConfig", "MBartConfig", "PLBartConfig") for side in ("encoder",
                                                                                "decoder")]


def _seq2seq_capture(model: Any, module: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments an encoder-decoder passes ``module``, given tokens on both sides."""
    seen: dict[str, Any] = {}

    def hook(_: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        seen["args"], seen["kwargs"] = args, dict(kwargs)

    handle = module.register_forward_pre_hook(hook, with_kwargs=True)
    tokens = torch.arange(TOKENS)[None] % 7 + 3
    with torch.no_grad():
        model(input_ids=tokens, decoder_input_ids=tokens, use_cache=False)
    handle.remove()
    return seen["args"], seen["kwargs"]


@pytest.mark.usefixtures("float64_softmax", "float64_attention")
@pytest.mark.parametrize(("config_name", "side"), SEQ2SEQ,
                         ids=[f"{c[0][:-6].lower()}-{c[1]}" for c in SEQ2SEQ])
def test_each_encoder_decoder_family_matches_its_own_attention_module(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config_name: str, side: str) -> None:
    extra = {"num_experts": 2, "expert_capacity": 4} if config_name == "NllbMoeConfig" else {}
    model, folder = build(tmp_path, "family",
                          getattr(transformers, config_name)(**_SEQ2SEQ, **extra))
    prefix = f"{side}.layers.0.self_attn."
    evidence = qkv_layer(folder, prefix)
    assert evidence["config"]["causal"] is (side == "decoder")
    assert evidence["config"]["heads"] == (4 if side == "decoder" else 2)
    monkeypatch.setattr(real_models, "capture", _seq2seq_capture)
    # MVP's attention returns its weights only when asked
    y, a, x, _ = model_run(model, prefix, evidence, output_attentions=True)
    compare(evidence, y, a, x, own_gradients(model, *(prefix + m for m in QKV_OUT)))


DECODER_ONLY = [
    ("openai-gpt", "OpenAIGPTConfig", {"n_embd": 16, "n_head": 2, "n_layer": 1,
                                       "vocab_size": 11, "n_positions": 16}),
    ("trocr", "TrOCRConfig", {"d_model": 16, "decoder_attention_heads": 2, "decoder_layers": 1,
                              "decoder_ffn_dim": 8, "vocab_size": 11,
                              "max_position_embeddings": 16, "pad_token_id": 1}),
    ("xglm", "XGLMConfig", {"d_model": 16, "attention_heads": 2, "num_layers": 1,
                            "ffn_dim": 8, "vocab_size": 11, "max_position_embeddings": 16}),
    ("biogpt", "BioGptConfig", {"hidden_size": 16, "num_attention_heads": 2,
                                "num_hidden_layers": 1, "intermediate_size": 8,
                                "vocab_size": 11, "max_position_embeddings": 16}),
]


@pytest.mark.usefixtures("float64_softmax", "float64_attention")
@pytest.mark.parametrize(("config_name", "arguments"), [c[1:] for c in DECODER_ONLY],
                         ids=[c[0] for c in DECODER_ONLY])
def test_each_unrotated_decoder_family_matches_its_own_attention_module(
        tmp_path: Path, config_name: str, arguments: dict[str, Any]) -> None:
    prefix, head = {"OpenAIGPTConfig": ("h.0.attn.", None),
                    "TrOCRConfig": ("model.decoder.layers.0.self_attn.",
                                    transformers.AutoModelForCausalLM)}.get(
        config_name, ("layers.0.self_attn.", None))
    model, folder = build(tmp_path, "family", getattr(transformers, config_name)(**arguments),
                          head)
    evidence = qkv_layer(folder, prefix)
    assert evidence["config"]["causal"] is True and "rope" not in evidence["config"]
    # XGLM clamps its scores with torch.full((), finfo(float64).min) in the default dtype
    saved = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        y, a, x, _ = model_run(model, prefix, evidence, output_attentions=True)
    finally:
        torch.set_default_dtype(saved)
    gradients = (real_models.gpt2_gradients(model, prefix) if config_name == "OpenAIGPTConfig"
                 else own_gradients(model, *(prefix + m for m in QKV_OUT)))
    compare(evidence, y, a, x, gradients)


_BERT = {"hidden_size": 16, "num_attention_heads": 2, "num_hidden_layers": 1,
         "intermediate_size": 8, "vocab_size": 11, "max_position_embeddings": 16,
         "pad_token_id": 1}
# id, config class, extra arguments, whether is_decoder makes the model causal
ENCODERS = [
    ("camembert", "CamembertConfig", {}, True), ("data2vec-text", "Data2VecTextConfig", {}, True),
    ("ernie", "ErnieConfig", {}, True), ("megatron-bert", "MegatronBertConfig", {}, True),
    ("xlm-roberta-xl", "XLMRobertaXLConfig", {}, True),
    ("roberta-prelayernorm", "RobertaPreLayerNormConfig", {}, True),
    ("rembert", "RemBertConfig", {"input_embedding_size": 16, "output_embedding_size": 16},
     True),
    ("tapas", "TapasConfig", {}, False), ("xmod", "XmodConfig", {}, True),
    ("roc-bert", "RoCBertConfig", {"pronunciation_vocab_size": 11, "shape_vocab_size": 11},
     True),
    ("bert-generation", "BertGenerationConfig", {}, True),
    ("layoutlm", "LayoutLMConfig", {}, False), ("splinter", "SplinterConfig", {}, False),
    ("markuplm", "MarkupLMConfig", {}, False),
]
ENCODER_CASES = [(*case, decoder) for case in ENCODERS for decoder in (False, True)]


@pytest.mark.usefixtures("float64_softmax", "float64_attention")
@pytest.mark.parametrize(("config_name", "arguments", "causal", "decoder"),
                         [c[1:] for c in ENCODER_CASES],
                         ids=[f"{c[0]}{'-is-decoder' if c[4] else ''}" for c in ENCODER_CASES])
def test_each_bert_like_family_matches_its_own_attention_module(
        tmp_path: Path, config_name: str, arguments: dict[str, Any], causal: bool,
        decoder: bool) -> None:
    config = getattr(transformers, config_name)(**_BERT, **arguments, is_decoder=decoder)
    model, folder = build(tmp_path, "family", config)
    if config_name == "XmodConfig":  # its adapters need a language to run the model
        model.set_default_language(config.languages[0])
    prefix = "encoder.layer.0.attention.self."
    evidence = qkv_layer(folder, prefix)
    assert evidence["config"]["causal"] is (causal and decoder)
    out = "encoder.layer.0.attention.output.dense"
    # TAPAS's attention returns its weights only when asked
    extra = {"output_attentions": True} if config_name == "TapasConfig" else {}
    y, a, x, _ = model_run(model, prefix, evidence, out=out, **extra)
    compare(evidence, y, a, x, own_gradients(model, *(prefix + short for short in (
        "query", "key", "value")), out))


@pytest.mark.usefixtures("float64_softmax", "float64_attention")
@pytest.mark.parametrize(("config_name", "arguments"), [c[1:] for c in ENCODER_ROPE],
                         ids=[c[0] for c in ENCODER_ROPE])
def test_each_rotated_encoder_family_matches_its_own_attention_module(
        tmp_path: Path, config_name: str, arguments: dict[str, Any]) -> None:
    config = getattr(transformers, config_name)(
        hidden_size=16, num_attention_heads=2, num_hidden_layers=1, intermediate_size=8,
        vocab_size=11, max_position_embeddings=16, **arguments)
    model, folder = build(tmp_path, "family", config)
    prefix = "layers.0.self_attn."
    stored, packed, out = STORED.get(config_name, (prefix, None, "o_proj"))
    evidence = qkv_layer(folder, stored)
    assert evidence["config"]["causal"] is False
    cos, sin = float64_tables(model, prefix)
    y, a, x, _ = model_run(model, prefix, evidence, position_embeddings=(cos, sin))
    gradients = own_gradients(model, *(prefix + m for m in QKVO))
    if packed is not None:  # transformers' q_proj, k_proj, v_proj are the packed rows
        for part in ("weight", "bias"):
            rows = [gradients.pop(f"{m}_{part}_gradient", None) for m in QKVO[:3]]
            if rows[0] is not None:
                gradients[f"{packed}_{part}_gradient"] = torch.cat(rows)
                gradients |= {f"{b}_{part}_gradient": None for b in ("query", "key", "value")}
        gradients = {name.replace("o_proj", out): grad for name, grad in gradients.items()}
    compare(evidence, y, a, x, gradients)


_ESMC = {"hidden_size": 16, "num_attention_heads": 2, "num_hidden_layers": 2,
         "intermediate_size": 8, "vocab_size": 11, "max_position_embeddings": 16,
         "mask_token_id": 3}


@pytest.mark.usefixtures("float64_softmax", "float64_attention")
@pytest.mark.parametrize("arguments", [{}, {"attention_bias": True, "rope_theta": 500.0}],
                         ids=["esmc", "esmc-biases-theta"])
def test_esmc_matches_its_own_attention_module(tmp_path: Path,
                                               arguments: dict[str, Any]) -> None:
    """ESMC: a bidirectional LLaMA attention whose projected Q and K (after the biases,
    before RoPE) pass ``EsmcLayerNorm(hidden_size, bias=False)`` over a token's whole
    width, eps nn.LayerNorm's 1e-5 (no config key gives it): the fixture's ``qk_norm``
    of kind layer over the layer. Its ``input_layernorm`` and residual scaling sit in
    ``EsmcLayer``, outside the attention module the fixture is."""
    config = transformers.EsmcConfig(**_ESMC, **arguments)
    model, folder = build(tmp_path, "esmc", config, transformers.AutoModelForMaskedLM)
    prefix = "esmc.layers.1.self_attn."
    evidence = qkv_layer(folder, prefix)
    document = json.loads((folder / "layer.json").read_text())
    assert document["qk_norm"] == {"kind": "layer", "span": "layer", "eps": 1e-5,
                                   "offset": 0.0}
    assert document["rope"] == {"theta": arguments.get("rope_theta", 10000.0), "dims": 8,
                                "layout": "half"}
    assert evidence["config"]["causal"] is False
    assert model.get_submodule(prefix + "q_norm").bias is None
    cos, sin = float64_tables(model, prefix)
    y, a, x, _ = model_run(model, prefix, evidence, position_embeddings=(cos, sin))
    compare(evidence, y, a, x, own_gradients(model, *(prefix + m for m in NORMS)))


@pytest.mark.parametrize(("config_name", "arguments", "words"), [
    ("EsmcConfig", {**_ESMC, "head_dim": 4},
     "config head_dim 4: ESMC's q_norm and k_norm are LayerNorms hidden_size (16) wide"),
    ("LlamaConfig", small(), "config num_key_value_heads 1: ESMC's config refuses "
     "grouped-query heads"),
], ids=["esmc-narrow-heads", "esmc-grouped-query"])
def test_an_esmc_config_its_model_cannot_run_is_refused_by_its_key(
        tmp_path: Path, config_name: str, arguments: dict[str, Any], words: str) -> None:
    """ESMC's q/k norms are hidden_size wide: heads that do not fill it cannot run
    (transformers' LayerNorm raises), and EsmcConfig refuses grouped-query heads."""
    from tests.test_real_models import _edit_config, _init

    model, folder = build(tmp_path, "esmc", getattr(transformers, config_name)(**arguments))
    if config_name == "EsmcConfig":
        with pytest.raises(RuntimeError):
            model(input_ids=torch.tensor([[3, 4, 5]]))
    else:  # a grouped-query checkpoint under an ESMC config.json (EsmcConfig raises)
        _edit_config(folder, model_type="esmc", architectures=["EsmcModel"])
    made = _init(folder, "--prefix", "layers.0.self_attn.", "--tokens", str(TOKENS))
    assert made.exit_code == 2 and made.stderr.count("\n") == 1, made.output
    assert words in made.stderr, made.stderr


_MOBILEBERT = {"hidden_size": 16, "num_attention_heads": 2, "num_hidden_layers": 2,
               "intermediate_size": 8, "intra_bottleneck_size": 8, "embedding_size": 8,
               "vocab_size": 11, "max_position_embeddings": 16, "num_feedforward_networks": 2}
# id, its settings, the width Q and K read, the width of V's own input (None: Q's)
MOBILEBERT = [
    ("released-bottleneck", {}, 8, 16),
    ("released-bottleneck-equal-widths", {"intra_bottleneck_size": 16}, 16, 16),
    ("released-bottleneck-is-decoder-layernorm", {"is_decoder": True,
                                                  "normalization_type": "layer_norm"}, 8, 16),
    ("bottleneck-attention", {"use_bottleneck_attention": True}, 8, None),
    ("unshared-bottleneck", {"key_query_shared_bottleneck": False, "intra_bottleneck_size": 16},
     16, None),
    ("no-bottleneck", {"use_bottleneck": False}, 16, None),
    ("no-bottleneck-attention-flag", {"use_bottleneck": False,
                                      "use_bottleneck_attention": True}, 16, None),
]


@pytest.mark.usefixtures("float64_softmax", "float64_attention")
@pytest.mark.parametrize(("arguments", "width", "value_width"), [c[1:] for c in MOBILEBERT],
                         ids=[c[0] for c in MOBILEBERT])
def test_mobilebert_matches_its_own_attention_module(
        tmp_path: Path, arguments: dict[str, Any], width: int,
        value_width: int | None) -> None:
    """MobileBERT's self-attention takes Q and K from one input and V from another where
    its config says (use_bottleneck and key_query_shared_bottleneck without
    use_bottleneck_attention: Q and K from the shared bottleneck, V from the layer's input,
    the fixture's ``value_input``), and one input otherwise; the module is run on qkv's
    inputs (the joined input split back) and its output dense, its gradients to both
    inputs compared with qkv's ``input_gradient`` columns. Which tensors its layer passes
    the module is the model's own (captured), so qkv's reading of the config is checked
    against the wiring too. Never causal (``is_decoder`` changes nothing)."""
    config = transformers.MobileBertConfig(**{**_MOBILEBERT, **arguments})
    model, folder = build(tmp_path, "mobilebert", config)
    prefix = "encoder.layer.1.attention.self."
    evidence = qkv_layer(folder, prefix)
    document = json.loads((folder / "layer.json").read_text())
    assert document["input"]["generate"]["shape"] == [1, TOKENS, width]
    assert (document["value_input"]["generate"]["shape"][-1] if "value_input" in document
            else None) == value_width
    assert evidence["config"]["causal"] is False
    assert evidence["config"]["d_model"] == width + (value_width or 0)
    module = model.get_submodule(prefix.rstrip("."))
    args, kwargs = real_models.capture(model, module)
    assert args[0] is args[1] and (args[2] is args[0]) is (value_width is None)
    assert args[0].shape[-1] == width and args[2].shape[-1] == (value_width or width)
    joined = real_models.tensor(evidence, "input")
    x = torch.tensor(joined[..., :width], requires_grad=True)
    x_v = x if value_width is None else torch.tensor(joined[..., width:], requires_grad=True)
    model.zero_grad()
    y, a = module(x, x, x_v, *args[3:], **kwargs)
    out = "encoder.layer.1.attention.output.dense"
    y = model.get_submodule(out)(y)
    (y * torch.tensor(real_models.tensor(evidence, "upstream_output"))).sum().backward()
    grad = x.grad if value_width is None else torch.cat([x.grad, x_v.grad], dim=-1)
    compare(evidence, y, a, SimpleNamespace(grad=grad), own_gradients(
        model, *(prefix + short for short in ("query", "key", "value")), out))


@pytest.mark.parametrize(("edits", "words"), [
    ({"key_query_shared_bottleneck": False},
     "config key_query_shared_bottleneck false with use_bottleneck true and "
     "use_bottleneck_attention false: MobileBERT's query, key and value then read the "
     "layer's input (hidden_size 16), but its query and key are built for "
     "intra_bottleneck_size 8 (transformers cannot run it); refused"),
    ({"true_hidden_size": 16}, "config true_hidden_size 16 and intra_bottleneck_size 8 "
     "disagree (MobileBERT's config derives true_hidden_size from intra_bottleneck_size "
     "with use_bottleneck true); refused"),
    ({"use_bottleneck": False, "true_hidden_size": None},
     "config hidden_size 16 (use_bottleneck false) is the width MobileBERT's query and key "
     "read, but the layer's query reads inputs 8 wide"),
    ({"hidden_size": 12}, 'tensor "value.weight" has shape [8,16], the layer needs [8,12]'),
    ({"use_bottleneck_attention": True},
     'tensor "value.weight" has shape [8,16], the layer needs [8,8]'),
], ids=["unshared-bottleneck-unrunnable", "true-hidden-size-disagrees",
        "bottleneck-off-under-bottlenecked-weights", "hidden-size-not-the-values-width",
        "bottleneck-attention-under-layer-input-values"])
def test_a_mobilebert_config_qkv_does_not_compute_is_refused_by_its_key(
        tmp_path: Path, edits: dict[str, Any], words: str) -> None:
    """A setting MobileBERT's model cannot run, a config that contradicts itself, and a
    config that does not describe the checkpoint's widths: one line naming the key."""
    from tests.test_real_models import _edit_config, _init

    _, folder = build(tmp_path, "mobilebert", transformers.MobileBertConfig(**_MOBILEBERT))
    _edit_config(folder, **edits)
    made = _init(folder, "--prefix", "encoder.layer.0.attention.self.", "--tokens",
                 str(TOKENS))
    assert made.exit_code == 2 and made.stderr.count("\n") == 1, made.output
    assert words in made.stderr, made.stderr


_TWO_SIDED = {"hidden_size": 16, "num_attention_heads": 2, "num_hidden_layers": 3,
              "intermediate_size": 8, "vocab_size": 11, "max_position_embeddings": 16,
              "attention_bias": True, "pad_token_id": 0, "bos_token_id": 0, "eos_token_id": 0}
_MODERNBERT = {**_TWO_SIDED, "local_attention": 2, "cls_token_id": 0, "sep_token_id": 0}
_ULTRABERT = {**_TWO_SIDED, "num_key_value_heads": 1, "sliding_window": 1}
# id, config class, its arguments, the layer's prefix, its modules, what the fixture must say
TWO_SIDED = [
    ("modernbert-sliding", "ModernBertConfig", _MODERNBERT, "layers.1.attn.", ("Wqkv", "Wo"),
     {"window": 2, "rope": {"theta": 10000.0, "dims": 8, "layout": "half"}}),
    ("modernbert-full", "ModernBertConfig", _MODERNBERT, "layers.0.attn.", ("Wqkv", "Wo"),
     {"window": None, "rope": {"theta": 160000.0, "dims": 8, "layout": "half"}}),
    ("modernbert-wide-window", "ModernBertConfig", {**_MODERNBERT, "local_attention": 5},
     "layers.2.attn.", ("Wqkv", "Wo"), {"window": 3}),
    ("ultrabert-sliding", "UltrabertConfig", _ULTRABERT, "layers.0.self_attn.", QKVO,
     {"window": 2, "kv_heads": 1, "rope": {"theta": 10000.0, "dims": 8, "layout": "half"}}),
    ("ultrabert-full", "UltrabertConfig", _ULTRABERT, "layers.2.self_attn.", QKVO,
     {"window": None, "rope": {"theta": 2560000.0, "dims": 8, "layout": "half"}}),
]


@pytest.mark.usefixtures("float64_softmax", "float64_attention")
@pytest.mark.parametrize(("config_name", "arguments", "prefix", "modules", "said"),
                         [c[1:] for c in TWO_SIDED], ids=[c[0] for c in TWO_SIDED])
def test_a_two_sided_window_encoder_matches_its_own_attention_module(
        tmp_path: Path, config_name: str, arguments: dict[str, Any], prefix: str,
        modules: tuple[str, ...], said: dict[str, Any]) -> None:
    """ModernBERT's and UltraBERT's local layers: transformers' bidirectional sliding mask
    ``|i - j| <= sliding_window`` is the fixture's two-sided ``window`` ``sliding_window +
    1`` (ModernBERT's ``sliding_window`` is ``local_attention // 2``); their global
    layers are plain bidirectional attention, each layer type with its own theta."""
    model, folder = build(tmp_path, "two-sided", getattr(transformers, config_name)(**arguments))
    evidence = qkv_layer(folder, prefix)
    document = json.loads((folder / "layer.json").read_text())
    for key, value in said.items():
        assert document.get(key) == value, (key, document.get(key))
    assert "causal" not in document or document["causal"] is False
    assert evidence["config"]["causal"] is False
    if document.get("window") is not None:  # the band hides keys at these lengths
        assert TOKENS > document["window"]
        assert evidence["mask"] == {"applicable": True, "max_masked_weight": 0.0}
    layer = int(prefix.split(".")[1])
    cos, sin = float64_tables(model, prefix, model.config.layer_types[layer])
    y, a, x, _ = model_run(model, prefix, evidence, position_embeddings=(cos, sin))
    if document.get("window") is not None:  # the module's own weights are zero off the band
        band = torch.ones(TOKENS, TOKENS).triu(document["window"]).bool()
        assert float(a.detach()[..., band | band.T].abs().max()) == 0.0
    gradients = own_gradients(model, *(prefix + m for m in modules))
    if "Wqkv" in modules:  # the packed tensor's per-branch views, stated as digests
        gradients |= {f"{b}_{part}_gradient": None for b in ("query", "key", "value")
                      for part in ("weight", "bias")}
    compare(evidence, y, a, x, gradients)


@pytest.mark.parametrize(("config_name", "prefix", "edits", "words"), [
    ("ModernBertConfig", "layers.1.attn.", {"sliding_window": 3},
     "config sliding_window 3 and local_attention 2 disagree"),
    ("ModernBertConfig", "layers.1.attn.", {"local_attention": None},
     "config local_attention must be a positive integer"),
    ("UltrabertConfig", "layers.0.self_attn.", {"rope_theta": 5000.0},
     "config rope_theta 5000.0: UltraBERT's rope_theta is a theta per layer type"),
    ("UltrabertConfig", "layers.0.self_attn.", {"attention_windows": [4, 0, 4]},
     "config attention_windows [4, 0, 4]: UltraBERT's attention_windows"),
], ids=["modernbert-two-spellings", "modernbert-null-window", "ultrabert-flat-theta",
        "ultrabert-attention-windows"])
def test_a_two_sided_window_config_qkv_cannot_read_is_refused_by_its_key(
        tmp_path: Path, config_name: str, prefix: str, edits: dict[str, Any],
        words: str) -> None:
    from tests.test_real_models import _edit_config, _init

    arguments = _MODERNBERT if config_name == "ModernBertConfig" else _ULTRABERT
    _, folder = build(tmp_path, "two-sided", getattr(transformers, config_name)(**arguments))
    _edit_config(folder, **edits)
    made = _init(folder, "--prefix", prefix, "--tokens", str(TOKENS))
    assert made.exit_code == 2 and made.stderr.count("\n") == 1, made.output
    assert words in made.stderr, made.stderr


def test_hunyuans_ntk_alpha_rope_is_refused_naming_it(tmp_path: Path) -> None:
    """HunYuan's rotary module reads a ``dynamic`` type with ``alpha`` as its own fixed
    NTK scaling: not transformers' ``dynamic``, so never read as it."""
    from tests.test_real_models import _edit_config, _init

    _, folder = build(tmp_path, "hunyuan", transformers.HunYuanDenseV1Config(**small()))
    _edit_config(folder, rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0,
                                          "factor": 1.0, "alpha": 1000.0})
    made = _init(folder, "--prefix", "layers.0.self_attn.", "--tokens", str(TOKENS))
    assert made.exit_code == 2 and made.stderr.count("\n") == 1, made.output
    assert "config rope_parameters.alpha 1000.0: NTK alpha scaling" in made.stderr, made.stderr


REFUSED_BY_NAME = ["gpt_oss", "qwen3_next", "deberta-v2", "big_bird", "zamba", "diffllama",
                   "llama4_text"]


@pytest.fixture(scope="module")
def saved_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _, folder = build(tmp_path_factory.mktemp("llama"), "llama",
                      transformers.LlamaConfig(**small()))
    return folder


@pytest.mark.parametrize("model_type", REFUSED_BY_NAME)
def test_a_family_that_needs_a_new_piece_is_refused_naming_it(
        saved_llama: Path, tmp_path: Path, model_type: str) -> None:
    from qkvcli.authoring.model_families import REFUSED_MODELS
    from tests.test_real_models import _init

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes((saved_llama / "model.safetensors").read_bytes())
    (folder / "config.json").write_text(json.dumps({"model_type": model_type}))
    made = _init(folder, "--prefix", "layers.0.self_attn.", "--tokens", str(TOKENS))
    assert made.exit_code == 2 and made.stderr.count("\n") == 1, made.output
    assert f'config model_type "{model_type}"' in made.stderr
    assert REFUSED_MODELS[model_type] in made.stderr


_ESM = {"vocab_size": 11, "hidden_size": 16, "num_attention_heads": 2,
        "num_hidden_layers": 2, "intermediate_size": 8, "max_position_embeddings": 16,
        "pad_token_id": 1, "mask_token_id": 2}
_ESM_TABLE = "rotary_embeddings.inv_freq"
# id, its settings, the model class, the layer's prefix, how the checkpoint holds the
# table: "saved" (as transformers 5 saves it, one copy), "per-layer" (an older checkpoint's
# copy under each layer, each another table), "beside-and-per-layer" (one beside the
# encoder too)
ESM = [
    ("rotary-float16", {"position_embedding_type": "rotary"}, None,
     "encoder.layer.1.attention.self.", "saved"),
    ("rotary-decoder-masked-lm", {"position_embedding_type": "rotary", "is_decoder": True},
     "AutoModelForMaskedLM", "esm.encoder.layer.1.attention.self.", "saved"),
    ("rotary-per-layer-tables", {"position_embedding_type": "rotary"}, None,
     "encoder.layer.1.attention.self.", "per-layer"),
    ("rotary-table-beside-and-per-layer", {"position_embedding_type": "rotary"}, None,
     "encoder.layer.0.attention.self.", "beside-and-per-layer"),
    ("absolute", {}, None, "encoder.layer.1.attention.self.", "saved"),
]


def _esm_tables(folder: Path, layout: str) -> None:
    """The checkpoint's RoPE table rewritten as ``layout`` says, each copy another table
    (the saved one times 1, 1/2, 1/4...), so only the one the model loads can match."""
    safetensors_torch = pytest.importorskip("safetensors.torch")
    path = folder / "model.safetensors"
    tensors = safetensors_torch.load_file(path)
    saved = next(name for name in tensors if name.endswith(_ESM_TABLE))
    table = tensors.pop(saved).double()
    base = saved[:saved.index("encoder.layer.")]
    names = [f"{base}encoder.layer.{i}.attention.self.{_ESM_TABLE}" for i in (1, 0)]
    if layout == "beside-and-per-layer":
        names.insert(0, base + _ESM_TABLE)
    for i, name in enumerate(names):
        tensors[name] = (table / 2 ** i).half()
    safetensors_torch.save_file(tensors, path, metadata={"format": "pt"})


@pytest.mark.usefixtures("float64_softmax", "float64_attention")
@pytest.mark.parametrize(("arguments", "head", "prefix", "layout"), [c[1:] for c in ESM],
                         ids=[c[0] for c in ESM])
def test_esm_matches_its_own_attention_module(
        tmp_path: Path, arguments: dict[str, Any], head: str | None, prefix: str,
        layout: str) -> None:
    """ESM: BERT's attention (its pre-LayerNorm and residual outside the module), causal
    when ``is_decoder``, Q scaled by ``1/sqrt(d_head)`` before RoPE and the scores not
    after (RoPE is linear: qkv's scale of the scores, up to one rounding). With
    ``position_embedding_type: rotary`` its RoPE frequencies are the table its model loads
    from the checkpoint as stored, float16 here, not ``rope_theta``'s: the fixture's
    ``rope.frequencies`` references that tensor. The model is loaded from the checkpoint
    (so the table is the one transformers picks among several copies), and its tables
    are its own rotary module run in float64."""
    config = transformers.EsmConfig(**_ESM, **arguments)
    cls = getattr(transformers, head) if head else transformers.AutoModel
    _, folder = build(tmp_path, "esm", config, cls, torch.float16)
    if layout != "saved":
        _esm_tables(folder, layout)
    model = cls.from_pretrained(folder, attn_implementation="eager").double().eval()
    evidence = qkv_layer(folder, prefix)
    document = json.loads((folder / "layer.json").read_text())
    assert evidence["config"]["causal"] is bool(arguments.get("is_decoder"))
    extra: dict[str, Any] = {}
    if "position_embedding_type" not in arguments:
        assert "rope" not in document and "rope" not in evidence["config"]
    else:
        loaded = model.get_submodule(prefix.split("encoder.")[0] + "rotary_embeddings").inv_freq
        assert document["rope"]["frequencies"]["tensor"].endswith(_ESM_TABLE)
        assert evidence["config"]["rope"]["frequencies"] == loaded.tolist()
        formula = 1.0 / 10000.0 ** (torch.arange(0, 8, 2, dtype=torch.float64) / 8)
        assert float((loaded.double() - formula).abs().max()) > 1e-6  # not theta's table
        rotary = model.get_submodule(prefix.split("encoder.")[0] + "rotary_embeddings")
        _, kwargs = real_models.capture(model, model.get_submodule(prefix.rstrip(".")))
        with float64_torch():  # its own module, in float64, on the table it loaded
            tables = rotary(torch.zeros(1, dtype=torch.float64), torch.arange(TOKENS)[None])
        for ours, theirs in zip(tables, kwargs["position_embeddings"], strict=True):
            assert ours.dtype == torch.float64
            assert float((ours - theirs.double()).abs().max()) < 1e-6
        extra["position_embeddings"] = tables
    out = prefix.removesuffix("self.") + "output.dense"
    y, a, x, _ = model_run(model, prefix, evidence, out=out, **extra)
    compare(evidence, y, a, x, own_gradients(model, *(prefix + m for m in (
        "query", "key", "value")), out))


@pytest.mark.parametrize(("edits", "drop", "words"), [
    ({"position_embedding_type": "relative_key"}, False,
     'config position_embedding_type "relative_key": esm reads "rotary" (RoPE) or '
     '"absolute" (none); refused'),
    ({}, True, 'config model_type "esm" turns Q and K by the RoPE frequencies its model '
     'loads from the checkpoint ("rotary_embeddings.inv_freq", or a layer\'s copy), and the '
     "checkpoint has none"),
    ({"add_cross_attention": True, "is_decoder": True}, False,
     "config add_cross_attention asks for cross-attention layers"),
    ({"num_attention_heads": 4}, False, 'tensor "encoder.layer.*.attention.self.'
     'rotary_embeddings.inv_freq" has shape [4], the layer needs [2]'),
], ids=["relative-key", "no-stored-table", "cross-attention", "table-not-a-heads"])
def test_an_esm_layer_qkv_does_not_compute_is_refused_by_its_key(
        tmp_path: Path, edits: dict[str, Any], drop: bool, words: str) -> None:
    from tests.test_real_models import _edit_config, _init
    safetensors_torch = pytest.importorskip("safetensors.torch")

    config = transformers.EsmConfig(**_ESM, position_embedding_type="rotary")
    _, folder = build(tmp_path, "esm", config)
    if drop:
        path = folder / "model.safetensors"
        tensors = {name: value for name, value in safetensors_torch.load_file(path).items()
                   if not name.endswith(_ESM_TABLE)}
        safetensors_torch.save_file(tensors, path, metadata={"format": "pt"})
    _edit_config(folder, **edits)
    made = _init(folder, "--prefix", "encoder.layer.0.attention.self.", "--tokens",
                 str(TOKENS))
    assert made.exit_code == 2 and made.stderr.count("\n") == 1, made.output
    assert words in made.stderr, made.stderr


_HYBRID = {"hidden_size": 16, "num_attention_heads": 2, "num_key_value_heads": 1,
           "num_hidden_layers": 2, "intermediate_size": 8, "vocab_size": 11}
# id, config class, arguments, the softmax layer's prefix, whether it turns Q and K
HYBRIDS = [
    ("jamba-unrotated", "JambaConfig",
     {**_HYBRID, "attn_layer_period": 2, "attn_layer_offset": 1, "expert_layer_period": 2,
      "expert_layer_offset": 1, "num_experts": 2, "num_experts_per_tok": 1,
      "mamba_d_state": 4, "mamba_d_conv": 2, "mamba_expand": 2, "use_mamba_kernels": False},
     "layers.1.self_attn.", False),
    ("granitemoehybrid-rope-multiplier", "GraniteMoeHybridConfig",
     {**_HYBRID, "layer_types": ["mamba", "attention"], "num_local_experts": 2,
      "num_experts_per_tok": 1, "mamba_n_heads": 2, "mamba_d_head": 16, "mamba_d_state": 4,
      "mamba_n_groups": 1, "mamba_chunk_size": 4, "shared_intermediate_size": 8,
      "position_embedding_type": "rope", "attention_multiplier": 0.3},
     "layers.1.self_attn.", True),
    ("granitemoehybrid-nope", "GraniteMoeHybridConfig",
     {**_HYBRID, "layer_types": ["mamba", "attention"], "num_local_experts": 2,
      "num_experts_per_tok": 1, "mamba_n_heads": 2, "mamba_d_head": 16, "mamba_d_state": 4,
      "mamba_n_groups": 1, "mamba_chunk_size": 4, "shared_intermediate_size": 8},
     "layers.1.self_attn.", False),
    ("bamba-partial", "BambaConfig",
     {**_HYBRID, "attn_layer_indices": [1], "mamba_n_heads": 2, "mamba_d_head": 16,
      "mamba_d_state": 4, "mamba_n_groups": 1, "mamba_chunk_size": 4, "mamba_expand": 2,
      "attention_bias": True}, "layers.1.self_attn.", True),
    ("falcon-h1-key-multiplier", "FalconH1Config",
     {**_HYBRID, "head_dim": 8, "key_multiplier": 0.7, "attention_bias": True,
      "mamba_d_ssm": 16, "mamba_n_heads": 2, "mamba_d_head": 8, "mamba_d_state": 4,
      "mamba_n_groups": 1, "mamba_chunk_size": 4, "mamba_d_conv": 2},
     "layers.1.self_attn.", True),
    ("minimax-window", "MiniMaxConfig",
     {**_HYBRID, "head_dim": 8, "layer_types": ["linear_attention", "full_attention"],
      "sliding_window": 2, "num_local_experts": 2, "num_experts_per_tok": 1},
     "layers.1.self_attn.", True),
    ("nemotron-h-mixer", "NemotronHConfig",
     {**_HYBRID, "head_dim": 8, "hybrid_override_pattern": "M*", "mamba_num_heads": 2,
      "mamba_head_dim": 16, "ssm_state_size": 4, "n_groups": 1, "chunk_size": 4},
     "layers.1.mixer.", False),
]


@pytest.mark.usefixtures("float64_softmax", "float64_attention")
@pytest.mark.parametrize(("config_name", "arguments", "prefix", "rotated"),
                         [c[1:] for c in HYBRIDS], ids=[c[0] for c in HYBRIDS])
def test_a_hybrid_stacks_softmax_layer_matches_its_own_attention_module(
        tmp_path: Path, config_name: str, arguments: dict[str, Any], prefix: str,
        rotated: bool) -> None:
    model, folder = build(tmp_path, "hybrid", getattr(transformers, config_name)(**arguments))
    evidence = qkv_layer(folder, prefix)
    assert ("rope" in evidence["config"]) is rotated
    extra: dict[str, Any] = {}
    if rotated:
        cos, sin = float64_tables(model, prefix)
        extra["position_embeddings"] = (cos, sin)
    y, a, x, _ = model_run(model, prefix, evidence, **extra)
    compare(evidence, y, a, x, own_gradients(model, *(prefix + m for m in QKVO)))
    if config_name != "FalconH1Config":  # its every layer holds attention beside its mamba
        made = real_models._init(folder, "--prefix", prefix.replace(".1.", ".0."), "--force")
        assert made.exit_code == 2  # the hybrid's other kind of layer is no attention to read



_RECURRENT_GEMMA = {"hidden_size": 16, "num_attention_heads": 2, "num_hidden_layers": 3,
                    "intermediate_size": 8, "vocab_size": 11, "lru_width": 16}
# id, its arguments, the attention block's layer, what the fixture must say
RECURRENT_GEMMA = [
    ("mqa-window-partial", {"num_key_value_heads": 1, "attention_window_size": 3}, 2,
     {"kv_heads": 1, "window": 3, "rope": {"theta": 10000.0, "dims": 4, "layout": "half"}}),
    ("biases-theta-first-block", {"attention_bias": True, "attention_window_size": 2,
                                  "block_types": ["attention", "recurrent"],
                                  "rope_parameters": {"rope_type": "default", "rope_theta": 500.0,
                                                      "partial_rotary_factor": 0.25}},
     2, {"window": 2, "rope": {"theta": 500.0, "dims": 2, "layout": "half"}}),
]


class _Float64Rotary(torch.nn.Module):  # type: ignore[misc]
    """A rotary module run with torch's float32 read as float64 (its own code, in float64)."""

    def __init__(self, rotary: Any) -> None:
        super().__init__()
        self.rotary = rotary

    def forward(self, x: Any, position_ids: Any) -> Any:
        with float64_torch():
            return self.rotary(x, position_ids)


@pytest.mark.usefixtures("float64_softmax", "float64_attention")
@pytest.mark.parametrize(("arguments", "layer", "said"), [c[1:] for c in RECURRENT_GEMMA],
                         ids=[c[0] for c in RECURRENT_GEMMA])
def test_recurrent_gemmas_attention_block_matches_its_own_module(
        tmp_path: Path, arguments: dict[str, Any], layer: int, said: dict[str, Any]) -> None:
    """RecurrentGemma's attention blocks (``block_types`` cycled over the layers): grouped
    K/V heads, partial rotary, every block sliding by ``attention_window_size``, ``o_proj``
    always biased. Its rotary module sits inside the attention and computes its tables in
    float32; here the same module class, built and run in float64, replaces it, its
    tables checked against the model's own to float32 rounding."""
    config = transformers.RecurrentGemmaConfig(**_RECURRENT_GEMMA, **arguments)
    model, folder = build(tmp_path, "recurrent-gemma", config)
    prefix = f"layers.{layer}.temporal_block."
    evidence = qkv_layer(folder, prefix)
    document = json.loads((folder / "layer.json").read_text())
    for key, value in said.items():
        assert document.get(key) == value, (key, document.get(key))
    assert TOKENS > document["window"]
    module = model.get_submodule(prefix.rstrip("."))
    with float64_torch():
        fresh = type(module.rotary_emb)(model.config)
    positions = torch.arange(TOKENS)[None]
    x = torch.zeros(1, dtype=torch.float64)
    for ours, theirs in zip(_Float64Rotary(fresh)(x, positions),
                            module.rotary_emb(x, positions), strict=True):
        assert ours.dtype == torch.float64
        assert float((ours - theirs).abs().max()) < 1e-6
    module.rotary_emb = _Float64Rotary(fresh)
    y, a, x, _ = model_run(model, prefix, evidence)
    compare(evidence, y, a, x, own_gradients(model, *(prefix + m for m in QKVO)))


@pytest.mark.parametrize(("edits", "prefix", "words"), [
    ({}, "layers.0.temporal_block.",
     'config block_types makes layer 0 a "recurrent" block'),
    ({"block_types": ["recurrent", "local"]}, "layers.1.temporal_block.",
     'config block_types must be a non-empty list of "attention" and "recurrent"'),
    ({"layer_types": ["sliding_attention"] * 3}, "layers.2.temporal_block.",
     "config layer_types [\"sliding_attention\", \"sliding_attention\", "
     "\"sliding_attention\"]: RecurrentGemma's layer_types is derived from block_types"),
    ({"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}},
     "layers.2.temporal_block.", "config rope_parameters.rope_type is \"linear\""),
    ({"attention_window_size": None}, "layers.2.temporal_block.",
     "config attention_window_size null, but this layer is a sliding one"),
    ({"sliding_window": 5}, "layers.2.temporal_block.",
     "config attention_window_size 3 and sliding_window 5 disagree"),
], ids=["recurrent-block", "unknown-block-type", "layer-types", "rope-scaling", "null-window",
        "two-window-spellings"])
def test_a_recurrent_gemma_layer_qkv_does_not_compute_is_refused_by_its_key(
        tmp_path: Path, edits: dict[str, Any], prefix: str, words: str) -> None:
    from tests.test_real_models import _edit_config, _init

    config = transformers.RecurrentGemmaConfig(**_RECURRENT_GEMMA, num_key_value_heads=1,
                                               attention_window_size=3)
    _, folder = build(tmp_path, "recurrent-gemma", config)
    _edit_config(folder, **edits)
    made = _init(folder, "--prefix", prefix, "--tokens", str(TOKENS))
    assert made.exit_code == 2 and made.stderr.count("\n") == 1, made.output
    assert words in made.stderr, made.stderr


@pytest.mark.parametrize("flat", [1.0, 0.25])
def test_bamba_reads_its_own_factor_over_a_flat_one(tmp_path: Path, flat: float) -> None:
    """BambaConfig writes 0.5 over a flat partial_rotary_factor; rope_parameters' stands."""
    arguments = next(case[2] for case in HYBRIDS if case[0] == "bamba-partial")
    _, folder = build(tmp_path, "bamba", transformers.BambaConfig(**arguments))
    saved = json.loads((folder / "config.json").read_text())
    saved["rope_parameters"].pop("partial_rotary_factor", None)
    saved["partial_rotary_factor"] = flat
    (folder / "config.json").write_text(json.dumps(saved))
    made = real_models._init(folder, "--prefix", "layers.1.self_attn.", "--tokens", str(TOKENS))
    assert made.exit_code == 0, made.output
    document = json.loads((folder / "layer.json").read_text())
    loaded = transformers.AutoConfig.from_pretrained(folder)
    assert loaded.rope_parameters["partial_rotary_factor"] == 0.5
    assert document["rope"]["dims"] == int(8 * 0.5)


# id, config class, model class, the layer's prefix, causal, BERT's names
TOWERS = [
    ("siglip-text", "SiglipTextConfig", "SiglipTextModel", "encoder.layers.0.self_attn.",
     False, False),
    ("siglip2-text", "Siglip2TextConfig", "Siglip2TextModel", "encoder.layers.0.self_attn.",
     False, False),
    ("clipseg-text", "CLIPSegTextConfig", "CLIPSegTextModel", "encoder.layers.0.self_attn.",
     True, False),
    ("owlvit-text", "OwlViTTextConfig", "OwlViTTextModel",
     "text_model.encoder.layers.0.self_attn.", True, False),
    ("owlv2-text", "Owlv2TextConfig", "Owlv2TextModel",
     "text_model.encoder.layers.0.self_attn.", True, False),
    ("groupvit-text", "GroupViTTextConfig", "GroupViTTextModel",
     "text_model.encoder.layers.0.self_attn.", True, False),
    ("metaclip2-text", "MetaClip2TextConfig", "MetaClip2TextModel",
     "encoder.layers.0.self_attn.", True, False),
    ("xclip-text", "XCLIPTextConfig", "XCLIPTextModel", "encoder.layers.0.self_attn.", True,
     False),
    ("chinese-clip-text", "ChineseCLIPTextConfig", "ChineseCLIPTextModel",
     "encoder.layer.0.attention.self.", False, True),
    ("altclip-text", "AltCLIPTextConfig", "AltCLIPTextModel",
     "roberta.encoder.layers.0.attention.self.", False, True),
    ("clap-text", "ClapTextConfig", "ClapTextModel", "encoder.layer.0.attention.self.", False,
     True),
]


@pytest.mark.usefixtures("float64_softmax", "float64_attention")
@pytest.mark.parametrize(("config_name", "model_name", "prefix", "causal", "bert"),
                         [c[1:] for c in TOWERS], ids=[c[0] for c in TOWERS])
def test_each_text_tower_matches_its_own_attention_module(
        tmp_path: Path, config_name: str, model_name: str, prefix: str, causal: bool,
        bert: bool) -> None:
    config = getattr(transformers, config_name)(
        hidden_size=16, num_attention_heads=2, num_hidden_layers=1, intermediate_size=8,
        vocab_size=11, max_position_embeddings=16, pad_token_id=1)
    tower = getattr(transformers, model_name)  # no Auto class maps a tower's own config
    model, folder = build(tmp_path, "tower", config, SimpleNamespace(
        from_config=lambda c, **kw: tower._from_config(c, **kw)))
    evidence = qkv_layer(folder, prefix)
    assert evidence["config"]["causal"] is causal
    if bert:
        out = prefix.removesuffix("self.") + "output.dense"
        y, a, x, _ = model_run(model, prefix, evidence, out=out)
        gradients = own_gradients(model, *(prefix + m for m in ("query", "key", "value")), out)
    else:
        y, a, x, _ = model_run(model, prefix, evidence)
        gradients = own_gradients(model, *(prefix + m for m in QKV_OUT))
    compare(evidence, y, a, x, gradients)


# XLM's and FlauBERT's MultiHeadAttention: DistilBERT's q_lin ... out_lin under
# attentions.N., causal when the config's own causal key says
XLM_CASES = [(name, causal) for name in ("XLMConfig", "FlaubertConfig")
             for causal in (False, True)]


@pytest.mark.usefixtures("float64_softmax", "float64_attention")
@pytest.mark.parametrize(("config_name", "causal"), XLM_CASES,
                         ids=[f"{c[0][:-6].lower()}{'-causal' if c[1] else ''}"
                              for c in XLM_CASES])
def test_xlm_and_flaubert_match_their_own_attention_module(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config_name: str,
        causal: bool) -> None:
    config = getattr(transformers, config_name)(
        emb_dim=16, n_heads=2, n_layers=2, vocab_size=11, max_position_embeddings=16,
        causal=causal)
    model, folder = build(tmp_path, "xlm", config)
    prefix = "attentions.1."
    evidence = qkv_layer(folder, prefix)
    assert evidence["config"]["causal"] is causal
    original = real_models.capture

    def fresh(model: Any, module: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        args, kwargs = original(model, module)
        kwargs["cache"] = None  # the capture's own cache holds its keys already
        # XLMModel counts its pad_index among the capture's tokens as padding at the end:
        # the layer's own mask is the model's choice, the function here is unpadded
        seen = torch.ones(1, TOKENS, TOKENS, dtype=torch.bool)
        return (args[0], torch.tril(seen) if causal else seen[:, 0]), kwargs

    monkeypatch.setattr(real_models, "capture", fresh)
    y, a, x, _ = model_run(model, prefix, evidence, output_attentions=True)
    compare(evidence, y, a, x, own_gradients(model, *(prefix + m for m in (
        "q_lin", "k_lin", "v_lin", "out_lin"))))


@pytest.mark.parametrize("config_name", ["XLMConfig", "FlaubertConfig"])
def test_xlm_as_a_decoder_is_refused_naming_is_encoder(tmp_path: Path,
                                                       config_name: str) -> None:
    """XLMModel and FlaubertModel raise for ``is_encoder`` false: no function to compute."""
    from tests.test_real_models import _edit_config, _init

    config = getattr(transformers, config_name)(emb_dim=16, n_heads=2, n_layers=1,
                                                vocab_size=11, max_position_embeddings=16)
    _, folder = build(tmp_path, "xlm", config)
    _edit_config(folder, is_encoder=False)
    made = _init(folder, "--prefix", "attentions.0.", "--tokens", str(TOKENS))
    assert made.exit_code == 2 and made.stderr.count("\n") == 1, made.output
    assert "config is_encoder false" in made.stderr, made.stderr


@pytest.mark.usefixtures("float64_softmax", "float64_attention")
@pytest.mark.parametrize("layer", [0, 1], ids=["inner-layer", "last-layer-dense-bias"])
def test_gpt_neox_japanese_matches_its_own_attention_module(tmp_path: Path,
                                                            layer: int) -> None:
    """GPT-NeoX's packing without biases, partial rotary by ``rotary_pct``; the last
    layer's ``dense_bias`` (a parameter beside ``dense``, which the module returns and its
    block adds) is the output projection's bias."""
    config = transformers.GPTNeoXJapaneseConfig(
        hidden_size=16, num_attention_heads=2, num_hidden_layers=2,
        intermediate_multiple_size=1, vocab_size=11, max_position_embeddings=16,
        bos_token_id=0, eos_token_id=0, rotary_pct=0.5, rotary_emb_base=500.0)
    model, folder = build(tmp_path, "neox-japanese", config)
    prefix = f"layers.{layer}.attention."
    evidence = qkv_layer(folder, prefix)
    assert evidence["config"]["rope"]["dims"] == 4
    module = model.get_submodule(prefix.rstrip("."))
    _, kwargs = real_models.capture(model, module)
    kwargs.update(position_embeddings=float64_tables(model, prefix), output_attentions=True,
                  layer_past=None)
    x = torch.tensor(real_models.tensor(evidence, "input"), requires_grad=True)
    model.zero_grad()
    y, attention, bias = module(x, **kwargs)
    assert (bias is not None) is (layer == 1)
    if bias is not None:  # bias_dropout_add: the block adds it to the layer's output
        y = y + bias
    (y * torch.tensor(real_models.tensor(evidence, "upstream_output"))).sum().backward()
    gradients = own_gradients(model, prefix + "query_key_value", prefix + "dense",
                              prefix.rstrip("."))
    # the packed tensor's per-branch views, stated as digests
    gradients |= {f"{branch}_weight_gradient": None for branch in ("query", "key", "value")}
    compare(evidence, y, attention, x, gradients)


@pytest.mark.parametrize("layer", [0, 1], ids=["stray-on-inner-layer", "missing-on-last"])
def test_gpt_neox_japanese_dense_bias_only_on_its_last_layer(tmp_path: Path,
                                                             layer: int) -> None:
    """A ``dense_bias`` on a layer whose module has none is left unread by transformers;
    the last layer without it lacks a bias the model adds: both refused, naming it."""
    from tests.test_real_models import _init
    safetensors_torch = pytest.importorskip("safetensors.torch")

    config = transformers.GPTNeoXJapaneseConfig(
        hidden_size=16, num_attention_heads=2, num_hidden_layers=2,
        intermediate_multiple_size=1, vocab_size=11, max_position_embeddings=16,
        bos_token_id=0, eos_token_id=0)
    _, folder = build(tmp_path, "neox-japanese", config)
    path = folder / "model.safetensors"
    tensors = safetensors_torch.load_file(path)
    name = next(n for n in tensors if n.endswith("layers.1.attention.dense_bias"))
    if layer == 0:
        tensors[name.replace(".1.", ".0.")] = tensors[name].clone()
    else:
        del tensors[name]
    safetensors_torch.save_file(tensors, path, metadata={"format": "pt"})
    made = _init(folder, "--prefix", f"layers.{layer}.attention.", "--tokens", str(TOKENS))
    assert made.exit_code == 2 and made.stderr.count("\n") == 1, made.output
    assert '"dense_bias"' in made.stderr and "num_hidden_layers is 2" in made.stderr, made.stderr
