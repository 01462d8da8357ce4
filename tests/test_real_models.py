"""Real checkpoints, honestly: tiny Hugging Face models against qkv, in float64.

Each test builds a tiny model with ``transformers`` from a config (random weights,
``save_pretrained``: a real ``model.safetensors`` with the real tensor names and a real
``config.json``), then runs ``qkv inspect``, ``qkv init --from-safetensors`` and ``qkv
attend -f json`` on it as a user would, and compares qkv's output, per-head attention
weights, dX and every parameter gradient with the model's own attention module.

How float64 is ensured on the Hugging Face side (and checked):

* ``attn_implementation="eager"``: the readable reference implementation, which also
  returns the attention weights; after saving (float32, or bf16), ``model.double()``
  widens every weight exactly, and the test asserts every parameter is float64 and the
  module's attention weights come out float64.
* LLaMA, Mistral, Qwen2, GPT-NeoX and OPT's eager attention upcast the softmax to
  float32 on purpose (``softmax(..., dtype=torch.float32)``, for bf16 training). During
  the comparison that one upcast is made a float64 softmax (``monkeypatch`` on
  ``torch.nn.functional.softmax``, only when the input is float64), so the module runs
  float64 arithmetic throughout.
* The rotary modules compute ``cos``/``sin`` in float32 whatever the model's dtype. The
  test calls the attention module directly with the model's own arguments (captured by
  a forward pre-hook: its mask, its position embeddings), with the ``(cos, sin)`` pair
  recomputed in float64 from the config's theta, and first asserts that pair equals the
  model's rotary output to float32 rounding (1e-6): the same tables, exactly rounded.

The module is always the model's: its projections, its RoPE application, its GQA
``repeat_kv``, its mask, its scaling, its output projection. No hub is contacted
(``HF_HUB_OFFLINE=1``; models are built from configs only).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from qkvcli.cli import main
from qkvcli.core.names import BRANCHES

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TOKENS = 4
TOLERANCE = 1e-10


def invoke(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def scaled_error(ours: np.ndarray, theirs: np.ndarray) -> float:
    assert ours.shape == theirs.shape, (ours.shape, theirs.shape)
    return float(np.max(np.abs(ours - theirs))) / max(1.0, float(np.max(np.abs(theirs))))


def tensor(evidence: dict[str, Any], name: str) -> np.ndarray:
    found = evidence["tensors"][name]
    values: np.ndarray = np.asarray(found["values"], dtype=np.float64).reshape(found["shape"])
    return values


@pytest.fixture
def float64_softmax(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make eager attention's deliberate float32 softmax a float64 one (float64 inputs only)."""
    original = torch.nn.functional.softmax

    def softmax(x: Any, dim: Any = None, _stacklevel: int = 3, dtype: Any = None) -> Any:
        if x.dtype == torch.float64:
            dtype = None
        return original(x, dim=dim, dtype=dtype)

    monkeypatch.setattr(torch.nn.functional, "softmax", softmax)


def build(tmp_path: Path, name: str, config: Any, model_class: Any = None,
          dtype: Any = None, **save: Any) -> tuple[Any, Path]:
    """A tiny model from ``config``, saved (optionally in ``dtype``), then widened to float64."""
    torch.manual_seed(19)
    cls = model_class or transformers.AutoModel
    # a mixture of experts' grouped products run in float64 only in their eager form
    experts = {"experts_implementation": "eager"} if getattr(
        config, "num_local_experts", None) or getattr(config, "num_experts", None) else {}
    model = cls.from_config(config, attn_implementation="eager", **experts)
    with torch.no_grad():  # random weights of a visible size (the init's are tiny)
        for p in model.parameters():
            p.uniform_(-0.5, 0.5)
    if dtype is not None:
        model = model.to(dtype)
    folder = tmp_path / name
    model.save_pretrained(folder, **save)
    model = model.double().eval()
    assert all(p.dtype == torch.float64 for p in model.parameters())
    return model, folder


def qkv_layer(folder: Path, prefix: str, *extra: str, checkpoint: str = "model.safetensors",
              attend: tuple[str, ...] = ()) -> dict[str, Any]:
    """``inspect`` -> ``init`` -> ``attend -f json`` on the saved model, as a user would."""
    path = folder / checkpoint
    listing = invoke("inspect", str(path))
    assert listing.exit_code == 0, listing.output
    assert prefix in listing.output.splitlines()[-1]  # inspect names the layer's prefix
    layer = folder / "layer.json"
    made = invoke("init", "--from-safetensors", str(path), "--prefix", prefix, "--tokens",
                  str(TOKENS), "-o", str(layer), *extra)
    assert made.exit_code == 0, made.output
    marked = {line.split()[0] for line in listing.output.splitlines() if "  * " in line}
    referenced = {ref["tensor"] for weight in json.loads(layer.read_text())["weights"].values()
                  for ref in (weight if isinstance(weight, list) else  # a row per head
                              [weight] + ([weight["bias"]] if "bias" in weight else []))}
    assert referenced <= marked  # inspect marks every tensor the fixture maps
    run = invoke("attend", str(layer), "-f", "json", *attend)
    assert run.exit_code == 0, run.output
    evidence: dict[str, Any] = json.loads(run.stdout)
    assert evidence["passed"]
    return evidence


def capture(model: Any, module: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments the model itself passes its attention ``module`` (mask, RoPE tables);
    a speech model (Whisper) is given audio features and ``TOKENS`` decoder tokens."""
    seen: dict[str, Any] = {}

    def hook(_: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        seen["args"], seen["kwargs"] = args, dict(kwargs)

    handle = module.register_forward_pre_hook(hook, with_kwargs=True)
    tokens = torch.arange(TOKENS)[None] % 7
    inputs: dict[str, Any] = {"input_ids": tokens}
    if getattr(model.config, "model_type", None) == "whisper":
        frames = 2 * model.config.max_source_positions
        inputs = {"input_features": torch.ones(1, model.config.num_mel_bins, frames,
                                               dtype=torch.float64),
                  "decoder_input_ids": tokens}
    with torch.no_grad():
        model(**inputs, use_cache=False)
    handle.remove()
    return seen["args"], seen["kwargs"]


def float64_rope(kwargs: dict[str, Any], theta: float, dims: int) -> None:
    """Replace the captured float32-precision RoPE tables by the same tables in float64.

    Families lay the tables out in their own ways: LLaMA's ``(cos, sin)`` each
    ``cat(angles, angles)``, Cohere's ``repeat_interleave(angles, 2)``, GPT-J's
    ``(sin, cos)`` of the angles alone. The layout is the one whose float64 tables equal
    the model's own to float32 rounding (1e-6), and there must be exactly one."""
    first32, second32 = kwargs["position_embeddings"]
    inverse = 1.0 / (theta ** (torch.arange(0, dims, 2, dtype=torch.float64) / dims))
    angles = torch.arange(TOKENS, dtype=torch.float64)[:, None] * inverse[None, :]
    layouts = {"cat": torch.cat((angles, angles), dim=-1),
               "interleave": torch.repeat_interleave(angles, 2, dim=-1), "plain": angles}
    found = []
    for layout, emb in layouts.items():
        for order in ("cos-sin", "sin-cos"):
            one, two = (emb.cos(), emb.sin()) if order == "cos-sin" else (emb.sin(), emb.cos())
            if one.numel() != first32.numel() or two.numel() != second32.numel():
                continue
            one, two = one.reshape(first32.shape), two.reshape(second32.shape)
            if (float((one - first32).abs().max()) < 1e-6
                    and float((two - second32).abs().max()) < 1e-6):
                found.append((layout, order, one, two))
    assert len(found) == 1, [f[:2] for f in found]
    kwargs["position_embeddings"] = found[0][2:]


@pytest.fixture
def float64_attention(monkeypatch: pytest.MonkeyPatch) -> None:
    """GPT-Neo casts Q and K to float32 on purpose (``query.to(torch.float32)``), Cohere's
    RoPE too (``q.float()``); during the comparison a float64 tensor stays float64, so
    the module computes in float64."""
    original = torch.Tensor.to
    original_float = torch.Tensor.float

    def as_float(self: Any, *args: Any, **kwargs: Any) -> Any:
        return self if self.dtype == torch.float64 else original_float(self, *args, **kwargs)

    def to(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self.dtype == torch.float64 and args and args[0] is torch.float32:
            return self
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", to)
    monkeypatch.setattr(torch.Tensor, "float", as_float)


def model_run(model: Any, prefix: str, evidence: dict[str, Any], out: str | None = None,
              theta: float | None = None, zero_residual: bool = False,
              **extra: Any) -> tuple[Any, Any, Any, Any]:
    """The model's attention module on qkv's input X with qkv's upstream U: ``(Y, A, X, module)``
    after ``(Y * U).sum().backward()``. ``out`` names an output projection outside the module."""
    module = model.get_submodule(prefix.rstrip("."))
    args, kwargs = capture(model, module)
    if theta is not None:
        float64_rope(kwargs, theta, evidence["config"]["rope"]["dims"])
    kwargs.update(extra)
    x = torch.tensor(tensor(evidence, "input"), requires_grad=True)
    kwargs.pop("hidden_states", None)
    model.zero_grad()
    rest = args[1:]
    if zero_residual:  # BLOOM's module adds the block's residual (its second argument)
        rest = (torch.zeros_like(x), *rest[1:])
    result = module(x, *rest, **kwargs)
    y, attention = result[0], result[1]
    assert attention is not None and attention.dtype == torch.float64
    if out is not None:
        y = model.get_submodule(out)(y)
    (y * torch.tensor(tensor(evidence, "upstream_output"))).sum().backward()
    return y, attention, x, module


def causal_mask_of(tokens: int) -> Any:
    """An additive causal mask ``[1, 1, T, T]``: 0 where a key is seen, float64's lowest
    number where it is not (as transformers materialises one)."""
    later = torch.triu(torch.ones(tokens, tokens, dtype=torch.bool), 1)
    return torch.zeros(1, 1, tokens, tokens, dtype=torch.float64).masked_fill(
        later, torch.finfo(torch.float64).min)


def compare(evidence: dict[str, Any], y: Any, attention: Any, x: Any,
            gradients: dict[str, Any]) -> None:
    """Output, per-head attention weights, dX and every parameter gradient, to 1e-10."""
    assert scaled_error(tensor(evidence, "output"), y.detach().numpy()) <= TOLERANCE
    assert scaled_error(tensor(evidence, "weights"), attention.detach().numpy()) <= TOLERANCE
    assert scaled_error(tensor(evidence, "input_gradient"), x.grad.numpy()) <= TOLERANCE
    packed = [n for n in ("c_attn_weight_gradient", "query_key_value_weight_gradient",
                          "in_proj_weight_gradient", "qkv_proj_weight_gradient",
                          "Wqkv_weight_gradient")
              if n in gradients]
    for name, grad in gradients.items():
        if "values" not in evidence["tensors"][name]:
            # A packed layer's split view is stated once, as a digest: its numbers are the
            # packed gradient's, which is compared value by value below.
            assert packed and "values" in evidence["tensors"][packed[0]], name
            continue
        assert scaled_error(tensor(evidence, name), grad.numpy()) <= TOLERANCE, name
    checked = {n for n in evidence["tensors"] if n.endswith(("_weight_gradient", "_bias_gradient"))}
    assert checked == set(gradients)  # every parameter gradient qkv reports was compared


def own_gradients(model: Any, *paths: str) -> dict[str, Any]:
    """The gradient of each parameter of the modules at ``paths``, under the name qkv must
    publish it by, built from the framework's own names: the module's attribute name and
    the parameter's (``layers.0.self_attn.q_proj`` -> ``q_proj_weight_gradient``, BERT's
    ``attention.output.dense`` -> ``dense_bias_gradient``)."""
    found = {}
    for path in paths:
        module = model.get_submodule(path)
        for parameter, value in module.named_parameters(recurse=False):
            found[f"{path.rsplit('.', 1)[-1]}_{parameter}_gradient"] = value.grad
    return found


def assert_sources_are_the_models(model: Any, evidence: dict[str, Any]) -> None:
    """Each published key names a parameter of the model: the JSON's ``parameter_sources``
    is its tensor name relative to the layer, and the key its last module and parameter."""
    names = {name for name, _ in model.named_parameters()}
    sources = evidence["config"]["parameter_sources"]
    assert sources, "a checkpoint layer publishes its parameters' sources"
    for key, tensor in sources.items():
        assert key == "_".join(tensor.split(".")[-2:]), (key, tensor)
        assert sum(name.endswith("." + tensor) for name in names) >= 1, tensor
        assert f"{key}_gradient" in evidence["tensors"], key


def gpt2_config(**extra: Any) -> Any:
    return transformers.GPT2Config(n_embd=16, n_head=4, n_layer=2, vocab_size=11,
                                   n_positions=16, bos_token_id=0, eos_token_id=0, **extra)


def gpt2_gradients(model: Any, prefix: str) -> dict[str, Any]:
    found = own_gradients(model, prefix + "c_attn", prefix + "c_proj")
    weight, bias = found["c_attn_weight_gradient"], found["c_attn_bias_gradient"]
    width = weight.shape[1] // 3
    for i, branch in enumerate(("query", "key", "value")):  # Conv1D columns, query|key|value
        found[f"{branch}_weight_gradient"] = weight[:, i * width:(i + 1) * width]
        found[f"{branch}_bias_gradient"] = bias[i * width:(i + 1) * width]
    return found


GPT2_CASES = [
    ("lm-head-bf16", {}, "LMHead", "transformer.h.0.attn."),
    ("no-scale", {"scale_attn_weights": False}, None, "h.1.attn."),
    ("inverse-layer-idx", {"scale_attn_by_inverse_layer_idx": True}, None, "h.1.attn."),
]


@pytest.mark.parametrize(("flags", "head", "prefix"), [c[1:] for c in GPT2_CASES],
                         ids=[c[0] for c in GPT2_CASES])
def test_gpt2_matches_the_model(tmp_path: Path, flags: dict[str, Any], head: str | None,
                                prefix: str) -> None:
    cls = transformers.AutoModelForCausalLM if head else None
    model, folder = build(tmp_path, "gpt2", gpt2_config(**flags), cls,
                          torch.bfloat16 if head else None)
    evidence = qkv_layer(folder, prefix)
    assert evidence["config"]["causal"] is True and evidence["config"]["heads"] == 4
    if flags:
        assert evidence["config"]["scale_given"] is True
    y, a, x, _ = model_run(model, prefix, evidence)
    compare(evidence, y, a, x, gpt2_gradients(model, prefix))
    assert_sources_are_the_models(model, evidence)


BERT_CASES = [("bert", "BertConfig", {}), ("bert-decoder", "BertConfig", {"is_decoder": True}),
              ("roberta", "RobertaConfig", {"pad_token_id": 1}),
              ("xlm-roberta", "XLMRobertaConfig", {"pad_token_id": 1}),
              ("electra", "ElectraConfig", {"embedding_size": 16})]


@pytest.mark.parametrize(("config_name", "extra"), [c[1:] for c in BERT_CASES],
                         ids=[c[0] for c in BERT_CASES])
def test_bert_matches_the_model_with_its_output_dense(tmp_path: Path, config_name: str,
                                                      extra: dict[str, Any]) -> None:
    config = getattr(transformers, config_name)(
        hidden_size=16, num_attention_heads=2, num_hidden_layers=1, intermediate_size=8,
        vocab_size=11, max_position_embeddings=16, **extra)
    model, folder = build(tmp_path, "bert", config)
    prefix = "encoder.layer.0.attention.self."
    evidence = qkv_layer(folder, prefix)
    assert evidence["config"]["causal"] is bool(extra.get("is_decoder"))
    out = "encoder.layer.0.attention.output.dense"
    y, a, x, _ = model_run(model, prefix, evidence, out=out)
    # BERT's own names: self.query.weight -> query_weight, output.dense.bias -> dense_bias
    compare(evidence, y, a, x, own_gradients(model, *(prefix + short for short in (
        "query", "key", "value")), out))
    assert "dense_weight_gradient" in evidence["tensors"]
    assert_sources_are_the_models(model, evidence)


LLAMA_LIKE = [
    ("llama-gqa", "LlamaConfig", {"num_key_value_heads": 2}),
    ("llama-mha", "LlamaConfig", {"num_key_value_heads": 4, "rope_theta": 500.0}),
    ("mistral-mqa", "MistralConfig", {"num_key_value_heads": 1}),
    ("qwen2-gqa-biases", "Qwen2Config", {"num_key_value_heads": 2}),
]


@pytest.mark.usefixtures("float64_softmax")
@pytest.mark.parametrize(("config_name", "extra"), [c[1:] for c in LLAMA_LIKE],
                         ids=[c[0] for c in LLAMA_LIKE])
def test_llama_family_matches_the_model(tmp_path: Path, config_name: str,
                                        extra: dict[str, Any]) -> None:
    config = getattr(transformers, config_name)(
        hidden_size=16, num_attention_heads=4, num_hidden_layers=1, intermediate_size=8,
        vocab_size=11, **extra)
    model, folder = build(tmp_path, "llama", config)
    prefix = "layers.0.self_attn."
    evidence = qkv_layer(folder, prefix)
    theta = float(config.rope_parameters["rope_theta"])
    assert evidence["config"]["rope"] == {"theta": theta, "dims": 4, "layout": "half"}
    kv = extra["num_key_value_heads"]
    assert evidence["config"].get("kv_heads") == (None if kv == 4 else kv)
    y, a, x, _ = model_run(model, prefix, evidence, theta=theta)
    # LLaMA's own names: q_proj_weight_gradient is model...q_proj.weight.grad, and so on
    compare(evidence, y, a, x, own_gradients(model, *(prefix + short for short in (
        "q_proj", "k_proj", "v_proj", "o_proj"))))
    assert {"q_proj_weight_gradient", "o_proj_weight_gradient"} <= set(evidence["tensors"])
    assert "query_weight_gradient" not in evidence["tensors"]
    assert_sources_are_the_models(model, evidence)


def _small(**extra: Any) -> dict[str, Any]:
    return {"hidden_size": 16, "num_attention_heads": 4, "num_hidden_layers": 1,
            "intermediate_size": 8, "vocab_size": 11, **extra}


QKVO = ("q_proj", "k_proj", "v_proj", "o_proj")
_BART = {"d_model": 16, "encoder_attention_heads": 2, "decoder_attention_heads": 4,
         "encoder_layers": 1, "decoder_layers": 1, "encoder_ffn_dim": 8, "decoder_ffn_dim": 8,
         "vocab_size": 11, "max_position_embeddings": 16, "pad_token_id": 1,
         "decoder_start_token_id": 2}
_WHISPER = {**_BART, "num_mel_bins": 4, "max_source_positions": 4, "max_target_positions": 16,
            "decoder_start_token_id": 2}
QKV_OUT = ("q_proj", "k_proj", "v_proj", "out_proj")
# id, config class, its arguments, the layer's prefix, its modules (relative to the
# prefix), what the fixture init writes must say (None: the key absent)
_GEMMA3 = _small(head_dim=8, num_key_value_heads=2, num_hidden_layers=2, sliding_window=2,
                 layer_types=["sliding_attention", "full_attention"], query_pre_attn_scalar=20,
                 rms_norm_eps=1e-3)
# OLMo 3: three layers, the third full (no layer_types: Olmo3Config's every 4th would
# make all three slide), each kind with its own theta
_OLMO3 = _small(num_key_value_heads=2, num_hidden_layers=3, sliding_window=2, rms_norm_eps=1e-3,
                layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 300.0},
                                 "full_attention": {"rope_type": "default", "rope_theta": 70000.0}})
FAMILY_CASES = [
    ("mistral-window", "MistralConfig", _small(num_key_value_heads=2, sliding_window=2),
     "layers.0.self_attn.", QKVO, {"window": 2, "kv_heads": 2, "architecture": "mistral"}),
    ("mixtral-window", "MixtralConfig", _small(num_key_value_heads=2, sliding_window=3,
                                               num_local_experts=2, num_experts_per_tok=1),
     "layers.0.self_attn.", QKVO, {"window": 3}),
    ("starcoder2-biases-window", "Starcoder2Config",
     _small(num_key_value_heads=2, sliding_window=2, use_bias=True),
     "layers.0.self_attn.", QKVO, {"window": 2}),
    ("qwen2-sliding-layer", "Qwen2Config",
     _small(num_key_value_heads=2, use_sliding_window=True, sliding_window=2,
            max_window_layers=0), "layers.0.self_attn.", QKVO, {"window": 2}),
    ("granite-multiplier", "GraniteConfig", _small(attention_multiplier=0.3),
     "layers.0.self_attn.", QKVO, {"scale": 0.3, "window": None}),
    ("gemma-head-dim", "GemmaConfig", _small(head_dim=8, num_key_value_heads=1),
     "layers.0.self_attn.", QKVO, {"kv_heads": 1}),
    ("smollm3-rope-layer", "SmolLM3Config",
     _small(num_key_value_heads=2, num_hidden_layers=4, pad_token_id=0),
     "layers.0.self_attn.", QKVO, {"kv_heads": 2}),
    ("smollm3-no-rope-layer", "SmolLM3Config",
     _small(num_key_value_heads=2, num_hidden_layers=4, pad_token_id=0), "layers.3.self_attn.",
     QKVO,
     {"rope": None}),
    ("olmo", "OlmoConfig", _small(), "layers.0.self_attn.", QKVO, {"clip_qkv": None}),
    ("olmo-clip-qkv", "OlmoConfig", _small(clip_qkv=0.8), "layers.0.self_attn.", QKVO,
     {"clip_qkv": 0.8}),
    ("qwen3-qk-norm-gqa", "Qwen3Config", _small(num_key_value_heads=2, head_dim=4),
     "layers.0.self_attn.", (*QKVO, "q_norm", "k_norm"),
     {"qk_norm": {"span": "head", "eps": 1e-6, "offset": 0.0}, "kv_heads": 2}),
    ("qwen3-qk-norm-biases-sliding", "Qwen3Config",
     _small(head_dim=8, num_key_value_heads=4, attention_bias=True, use_sliding_window=True,
            sliding_window=2,
            max_window_layers=0, rms_norm_eps=1e-3), "layers.0.self_attn.",
     (*QKVO, "q_norm", "k_norm"),
     {"qk_norm": {"span": "head", "eps": 1e-3, "offset": 0.0}, "window": 2}),
    ("qwen3-moe-qk-norm-gqa", "Qwen3MoeConfig",
     _small(num_key_value_heads=2, head_dim=4, num_experts=2, num_experts_per_tok=1,
            moe_intermediate_size=8), "layers.0.self_attn.", (*QKVO, "q_norm", "k_norm"),
     {"qk_norm": {"span": "head", "eps": 1e-6, "offset": 0.0}, "kv_heads": 2, "window": None,
      "architecture": "qwen3_moe"}),
    ("qwen3-moe-qk-norm-biases-sliding", "Qwen3MoeConfig",
     _small(head_dim=8, num_key_value_heads=4, attention_bias=True, use_sliding_window=True,
            sliding_window=2, num_hidden_layers=2, rms_norm_eps=1e-3, num_experts=2,
            num_experts_per_tok=1, moe_intermediate_size=8), "layers.1.self_attn.",
     (*QKVO, "q_norm", "k_norm"),
     {"qk_norm": {"span": "head", "eps": 1e-3, "offset": 0.0}, "window": 2}),
    ("olmo2-qk-norm-over-the-layer", "Olmo2Config", _small(num_key_value_heads=2),
     "layers.0.self_attn.", (*QKVO, "q_norm", "k_norm"),
     {"qk_norm": {"span": "layer", "eps": 1e-5, "offset": 0.0}, "kv_heads": 2}),
    ("olmo2-qk-norm-mha", "Olmo2Config", _small(rms_norm_eps=0.01), "layers.0.self_attn.",
     (*QKVO, "q_norm", "k_norm"), {"qk_norm": {"span": "layer", "eps": 0.01, "offset": 0.0}}),
    ("gemma3-qk-norm-sliding", "Gemma3TextConfig", _GEMMA3, "layers.0.self_attn.",
     (*QKVO, "q_norm", "k_norm"),
     {"qk_norm": {"span": "head", "eps": 1e-3, "offset": 1.0}, "window": 2,
      "scale": 20 ** -0.5, "rope": {"theta": 10000.0, "dims": 8, "layout": "half"},
      "softcap": None}),
    ("gemma3-qk-norm-full-layer", "Gemma3TextConfig", _GEMMA3, "layers.1.self_attn.",
     (*QKVO, "q_norm", "k_norm"),
     {"qk_norm": {"span": "head", "eps": 1e-3, "offset": 1.0}, "window": None,
      "rope": {"theta": 1000000.0, "dims": 8, "layout": "half"}}),
    ("olmo3-qk-norm-sliding-layer-gqa", "Olmo3Config", _OLMO3, "layers.1.self_attn.",
     (*QKVO, "q_norm", "k_norm"),
     {"qk_norm": {"span": "layer", "eps": 1e-3, "offset": 0.0}, "window": 2, "kv_heads": 2,
      "rope": {"theta": 300.0, "dims": 4, "layout": "half"}, "architecture": "olmo3"}),
    ("olmo3-qk-norm-full-layer-biases-head-dim", "Olmo3Config",
     {**_OLMO3, "attention_bias": True, "head_dim": 8}, "layers.2.self_attn.",
     (*QKVO, "q_norm", "k_norm"),
     {"qk_norm": {"span": "layer", "eps": 1e-3, "offset": 0.0}, "window": None, "kv_heads": 2,
      "rope": {"theta": 70000.0, "dims": 8, "layout": "half"}}),
    ("gemma2-softcap-sliding", "Gemma2Config",
     _small(head_dim=8, num_key_value_heads=2, num_hidden_layers=2, sliding_window=2,
            attn_logit_softcapping=1.5, query_pre_attn_scalar=20), "layers.0.self_attn.", QKVO,
     {"softcap": 1.5, "window": 2, "scale": 20 ** -0.5}),
    ("gemma2-full-layer", "Gemma2Config",
     _small(head_dim=8, num_key_value_heads=2, num_hidden_layers=2, sliding_window=2),
     "layers.1.self_attn.", QKVO, {"softcap": 50.0, "window": None, "scale": 256 ** -0.5}),
    ("cohere-interleaved", "CohereConfig", _small(num_key_value_heads=2),
     "layers.0.self_attn.", QKVO, {"rope": {"theta": 500000.0, "dims": 4,
                                             "layout": "interleaved"}}),
    ("stablelm-partial-biases", "StableLmConfig",
     _small(hidden_size=32, num_key_value_heads=2, partial_rotary_factor=0.5,
            use_qkv_bias=True), "layers.0.self_attn.", QKVO,
     {"rope": {"theta": 10000.0, "dims": 4, "layout": "half"}}),
    ("phi-partial-dense", "PhiConfig", _small(hidden_size=32, partial_rotary_factor=0.5),
     "layers.0.self_attn.", ("q_proj", "k_proj", "v_proj", "dense"),
     {"rope": {"theta": 10000.0, "dims": 4, "layout": "half"}}),
    ("gptj-interleaved-partial", "GPTJConfig",
     {"n_embd": 16, "n_head": 2, "n_layer": 1, "rotary_dim": 4, "vocab_size": 11,
      "n_positions": 16}, "h.0.attn.", QKV_OUT,
     {"rope": {"theta": 10000.0, "dims": 4, "layout": "interleaved"}}),
    ("gpt-neo-local-unscaled", "GPTNeoConfig",
     {"hidden_size": 16, "num_heads": 2, "num_layers": 2, "vocab_size": 11,
      "attention_types": [[["global", "local"], 1]], "window_size": 2,
      "max_position_embeddings": 16, "intermediate_size": 8}, "h.1.attn.attention.", QKV_OUT,
     {"scale": 1.0, "window": 2, "rope": None}),
    ("gpt-neo-global", "GPTNeoConfig",
     {"hidden_size": 16, "num_heads": 2, "num_layers": 2, "vocab_size": 11,
      "attention_types": [[["global", "local"], 1]], "window_size": 2,
      "max_position_embeddings": 16, "intermediate_size": 8}, "h.0.attn.attention.", QKV_OUT,
     {"scale": 1.0, "window": None}),
    ("clip-text-causal", "CLIPTextConfig",
     {"hidden_size": 16, "num_attention_heads": 2, "num_hidden_layers": 1,
      "intermediate_size": 8, "vocab_size": 11, "max_position_embeddings": 16},
     "encoder.layers.0.self_attn.", QKV_OUT, {"causal": True, "rope": None}),
    ("bart-encoder", "BartConfig", _BART, "encoder.layers.0.self_attn.", QKV_OUT,
     {"causal": False}),
    ("bart-decoder", "BartConfig", _BART, "decoder.layers.0.self_attn.", QKV_OUT,
     {"causal": True, "heads": 4}),
    ("whisper-encoder", "WhisperConfig", _WHISPER, "encoder.layers.0.self_attn.", QKV_OUT,
     {"causal": False, "heads": 2}),
    ("whisper-decoder", "WhisperConfig", _WHISPER, "decoder.layers.0.self_attn.", QKV_OUT,
     {"causal": True, "heads": 4}),
    ("phi3-packed-gqa-partial", "Phi3Config",
     _small(hidden_size=32, num_key_value_heads=2, partial_rotary_factor=0.5, pad_token_id=0),
     "layers.0.self_attn.", ("qkv_proj", "o_proj"),
     {"kv_heads": 2, "rope": {"theta": 10000.0, "dims": 4, "layout": "half"}}),
    ("gpt-bigcode-multi-query", "GPTBigCodeConfig",
     {"n_embd": 16, "n_head": 4, "n_layer": 1, "vocab_size": 11, "n_positions": 16},
     "h.0.attn.", ("c_attn", "c_proj"), {"kv_heads": 1}),
    ("gpt-bigcode-multi-head", "GPTBigCodeConfig",
     {"n_embd": 16, "n_head": 4, "n_layer": 1, "vocab_size": 11, "n_positions": 16,
      "multi_query": False}, "h.0.attn.", ("c_attn", "c_proj"), {"kv_heads": None}),
    ("bloom-alibi", "BloomConfig", {"hidden_size": 16, "n_head": 4, "n_layer": 1,
                                    "vocab_size": 11},
     "h.0.self_attention.", ("query_key_value", "dense"),
     {"alibi": [0.25, 0.0625, 0.015625, 0.00390625], "rope": None}),
    ("bloom-alibi-6-heads", "BloomConfig", {"hidden_size": 24, "n_head": 6, "n_layer": 1,
                                            "vocab_size": 11},
     "h.0.self_attention.", ("query_key_value", "dense"), {"rope": None}),
    ("falcon-multi-query", "FalconConfig",
     {"hidden_size": 16, "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 11},
     "h.0.self_attention.", ("query_key_value", "dense"), {"kv_heads": 1}),
    ("falcon-new-architecture", "FalconConfig",
     {"hidden_size": 16, "num_attention_heads": 4, "num_kv_heads": 2, "num_hidden_layers": 1,
      "vocab_size": 11, "new_decoder_architecture": True, "bias": True},
     "h.0.self_attention.", ("query_key_value", "dense"), {"kv_heads": 2}),
    ("falcon-multi-head", "FalconConfig",
     {"hidden_size": 16, "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 11,
      "multi_query": False}, "h.0.self_attention.", ("query_key_value", "dense"),
     {"kv_heads": None}),
    ("phi-qk-layernorm-biases", "PhiConfig",
     _small(hidden_size=32, partial_rotary_factor=0.5, qk_layernorm=True, layer_norm_eps=1e-3),
     "layers.0.self_attn.", ("q_proj", "k_proj", "v_proj", "dense", "q_layernorm", "k_layernorm"),
     {"qk_norm": {"kind": "layer", "span": "head", "eps": 1e-3, "offset": 0.0}}),
    ("persimmon-qk-layernorm-biases", "PersimmonConfig",
     _small(hidden_size=32, partial_rotary_factor=0.5),
     "layers.0.self_attn.", ("query_key_value", "dense", "q_layernorm", "k_layernorm"),
     {"qk_norm": {"kind": "layer", "span": "head", "eps": 1e-5, "offset": 0.0}}),
    ("stablelm-qk-layernorm-per-head-gqa", "StableLmConfig",
     _small(hidden_size=32, num_key_value_heads=2, partial_rotary_factor=0.5, qk_layernorm=True,
            layer_norm_eps=1e-3, use_qkv_bias=True), "layers.0.self_attn.", QKVO,
     {"qk_norm": {"kind": "layer", "span": "head", "eps": 1e-3, "offset": 0.0},
      "kv_heads": 2}),
    ("cohere-qk-norm-rows-gqa", "CohereConfig",
     _small(num_key_value_heads=2, use_qk_norm=True, layer_norm_eps=1e-3),
     "layers.0.self_attn.", (*QKVO, "q_norm", "k_norm"),
     {"qk_norm": {"kind": "layer", "span": "head", "eps": 1e-3, "offset": 0.0},
      "kv_heads": 2}),
    ("falcon-alibi-multi-query", "FalconConfig",
     {"hidden_size": 16, "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 11,
      "alibi": True}, "h.0.self_attention.", ("query_key_value", "dense"),
     {"kv_heads": 1, "rope": None, "alibi": [0.25, 0.0625, 0.015625, 0.00390625],
      "alibi_scaled": True, "alibi_rounding": "bfloat16"}),
    ("falcon-alibi-multi-head-6-heads", "FalconConfig",
     {"hidden_size": 24, "num_attention_heads": 6, "num_hidden_layers": 1, "vocab_size": 11,
      "alibi": True, "multi_query": False, "bias": True}, "h.0.self_attention.",
     ("query_key_value", "dense"), {"kv_heads": None, "rope": None, "alibi_scaled": True}),
    ("falcon-alibi-new-architecture", "FalconConfig",
     {"hidden_size": 16, "num_attention_heads": 4, "num_kv_heads": 2, "num_hidden_layers": 1,
      "vocab_size": 11, "new_decoder_architecture": True, "alibi": True},
     "h.0.self_attention.", ("query_key_value", "dense"),
     {"kv_heads": 2, "rope": None, "alibi_scaled": True}),
    ("persimmon-partial", "PersimmonConfig",
     _small(hidden_size=32, qk_layernorm=False, partial_rotary_factor=0.5),
     "layers.0.self_attn.", ("query_key_value", "dense"),
     {"rope": {"theta": 10000.0, "dims": 4, "layout": "half"}}),
    ("codegen-blocks-interleaved-partial", "CodeGenConfig",
     {"n_embd": 32, "n_head": 4, "n_layer": 1, "rotary_dim": 4, "vocab_size": 11,
      "n_positions": 16}, "h.0.attn.", ("qkv_proj", "out_proj"),
     {"rope": {"theta": 10000.0, "dims": 4, "layout": "interleaved"}}),
    ("mpt-alibi-clip", "MptConfig",
     {"d_model": 16, "n_heads": 4, "n_layers": 1, "vocab_size": 11, "max_seq_len": 16,
      "attn_config": {"clip_qkv": 0.9}}, "blocks.0.attn.", ("Wqkv", "out_proj"),
     {"alibi": [0.25, 0.0625, 0.015625, 0.00390625], "clip_qkv": 0.9}),
    ("mpt-alibi-6-heads", "MptConfig",
     {"d_model": 24, "n_heads": 6, "n_layers": 1, "vocab_size": 11, "max_seq_len": 16},
     "blocks.0.attn.", ("Wqkv", "out_proj"), {"rope": None}),
    ("distilbert", "DistilBertConfig",
     {"dim": 16, "n_heads": 2, "n_layers": 1, "hidden_dim": 8, "vocab_size": 11,
      "max_position_embeddings": 16}, "transformer.layer.0.attention.",
     ("q_lin", "k_lin", "v_lin", "out_lin"), {"causal": False}),
]


@pytest.mark.usefixtures("float64_softmax", "float64_attention")
@pytest.mark.parametrize(("config_name", "arguments", "prefix", "modules", "said"),
                         [c[1:] for c in FAMILY_CASES], ids=[c[0] for c in FAMILY_CASES])
def test_each_family_matches_its_own_attention_module(
    tmp_path: Path, config_name: str, arguments: dict[str, Any], prefix: str,
    modules: tuple[str, ...], said: dict[str, Any],
) -> None:
    config = getattr(transformers, config_name)(**arguments)
    model, folder = build(tmp_path, "family", config)
    evidence = qkv_layer(folder, prefix)
    document = json.loads((folder / "layer.json").read_text())
    for key, value in said.items():
        assert document.get(key) == value, (key, document.get(key))
    if document.get("window") is not None:  # the input reaches past the window
        assert TOKENS > document["window"]
        assert evidence["config"]["window"] == document["window"]
    rope = document.get("rope")
    extra: dict[str, Any] = {"output_attentions": True} if config_name in (
        "GPTNeoConfig", "BloomConfig", "FalconConfig") else {}
    if config_name == "BloomConfig":
        extra["zero_residual"] = True
    if config_name == "FalconConfig" and document.get("alibi") is not None:
        # FalconModel also folds alibi / sqrt(head_dim) into the mask it passes, which the
        # eager module adds to its own (scores + alibi) * inv_norm_factor: the bias twice.
        # The module gets the plain causal mask here, its own ALiBi once; the model's
        # default (SDPA) path is compared whole in test_falcon_alibi_matches_the_sdpa_model
        extra["attention_mask"] = causal_mask_of(TOKENS)
    y, a, x, _ = model_run(model, prefix, evidence, theta=rope and rope["theta"], **extra)
    if document.get("window") is not None:  # the model's own weights are 0 out of the window
        far = np.tril(np.ones((TOKENS, TOKENS), dtype=bool), -document["window"])
        assert float(a.detach().numpy()[..., far].max()) == 0.0
    gradients = own_gradients(model, *(prefix + m for m in modules))
    for letter in "qk":  # StableLM's LayerNorm per head, norms.{h}: qkv's rows, stacked
        per_head = getattr(model.get_submodule(prefix.rstrip(".")), f"{letter}_layernorm", None)
        if per_head is not None and hasattr(per_head, "norms"):
            gradients[f"{letter}_norm_weight_gradient"] = torch.stack(
                [norm.weight.grad for norm in per_head.norms])
    packed = next((n for n in ("qkv_proj", "c_attn", "query_key_value", "Wqkv")
                   if n in modules), None)
    if packed is not None:  # the split views are digests of the packed gradient's numbers
        gradients.update({f"{branch}_{part}_gradient": None for branch in BRANCHES
                          for part in ("weight", "bias")
                          if f"{packed}_{part}_gradient" in gradients})
    compare(evidence, y, a, x, gradients)
    assert_sources_are_the_models(model, evidence)


@pytest.mark.usefixtures("float64_softmax")
def test_opt_matches_the_model_with_its_out_proj(tmp_path: Path) -> None:
    config = transformers.OPTConfig(hidden_size=16, num_attention_heads=2, num_hidden_layers=1,
                                    ffn_dim=8, vocab_size=11, word_embed_proj_dim=16)
    model, folder = build(tmp_path, "opt", config)
    prefix = "decoder.layers.0.self_attn."
    evidence = qkv_layer(folder, prefix)
    assert evidence["config"]["out_projection"] == "out_proj"
    y, a, x, _ = model_run(model, prefix, evidence)
    compare(evidence, y, a, x, own_gradients(model, *(prefix + short for short in (
        "q_proj", "k_proj", "v_proj", "out_proj"))))
    assert_sources_are_the_models(model, evidence)


@pytest.mark.usefixtures("float64_softmax")
def test_gpt_neox_matches_the_model_with_partial_rotary(tmp_path: Path) -> None:
    config = transformers.GPTNeoXConfig(hidden_size=16, num_attention_heads=2,
                                        num_hidden_layers=1, intermediate_size=8,
                                        vocab_size=11, rotary_pct=0.5)
    model, folder = build(tmp_path, "neox", config)
    prefix = "layers.0.attention."
    evidence = qkv_layer(folder, prefix)
    assert evidence["config"]["rope"] == {"theta": 10000.0, "dims": 4, "layout": "half"}
    y, a, x, module = model_run(model, prefix, evidence, theta=10000.0)
    heads, d_head = 2, 8
    # the packed tensor in its own interleaved layout, as the fixture gave it, and the
    # output projection by its own name, dense
    gradients = own_gradients(model, prefix + "query_key_value", prefix + "dense")
    # query_key_value rows are [H, 3, d_head]: gather each branch's rows over the heads
    weight = module.query_key_value.weight.grad.reshape(heads, 3, d_head, 16)
    bias = module.query_key_value.bias.grad.reshape(heads, 3, d_head)
    for i, branch in enumerate(("query", "key", "value")):
        gradients[f"{branch}_weight_gradient"] = weight[:, i].reshape(heads * d_head, 16)
        gradients[f"{branch}_bias_gradient"] = bias[:, i].reshape(-1)
    compare(evidence, y, a, x, gradients)
    assert_sources_are_the_models(model, evidence)


def test_a_sharded_gpt2_reads_each_tensor_from_its_shard(tmp_path: Path) -> None:
    model, folder = build(tmp_path, "sharded", gpt2_config(), max_shard_size="3KB")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    shards = index["weight_map"]
    prefix = "h.0.attn."
    assert shards[prefix + "c_attn.weight"] != shards[prefix + "c_proj.weight"]
    evidence = qkv_layer(folder, prefix, checkpoint="model.safetensors.index.json")
    document = json.loads((folder / "layer.json").read_text())
    assert document["weights"]["c_proj_weight"]["safetensors"] == shards[prefix + "c_proj.weight"]
    y, a, x, _ = model_run(model, prefix, evidence)
    compare(evidence, y, a, x, gpt2_gradients(model, prefix))
    assert_sources_are_the_models(model, evidence)


def test_a_hub_cache_snapshot_runs_with_trust_paths_only(tmp_path: Path) -> None:
    model, folder = build(tmp_path, "built", gpt2_config())
    # the hub's layout: snapshots/<rev>/model.safetensors -> ../../blobs/<sha>
    blobs, snapshot = tmp_path / "hub" / "blobs", tmp_path / "hub" / "snapshots" / "abc"
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for name, sha in (("model.safetensors", "5a1"), ("config.json", "c0f")):
        (folder / name).rename(blobs / sha)
        (snapshot / name).symlink_to(Path("../../blobs") / sha)
    work = tmp_path / "work"
    work.mkdir()
    layer = work / "layer.json"
    made = invoke("init", "--from-safetensors", str(snapshot / "model.safetensors"),
                  "--prefix", "h.0.attn.", "--tokens", str(TOKENS), "-o", str(layer))
    assert made.exit_code == 0, made.output
    assert "run the fixture with qkv attend --trust-paths" in made.stderr
    refused = invoke("attend", str(layer))
    assert refused.exit_code == 2
    assert "'..' is refused" in refused.stderr and "Traceback" not in refused.output
    run = invoke("attend", str(layer), "-f", "json", "--trust-paths")
    assert run.exit_code == 0, run.output
    evidence = json.loads(run.stdout)
    y, a, x, _ = model_run(model, "h.0.attn.", evidence)
    compare(evidence, y, a, x, gpt2_gradients(model, "h.0.attn."))
    # inside the snapshot the fixture's own link leads out too: refused, then trusted
    inside = snapshot / "layer.json"
    assert invoke("init", "--from-safetensors", str(snapshot / "model.safetensors"),
                  "--prefix", "h.0.attn.", "-o", str(inside)).exit_code == 0
    out = invoke("attend", str(inside))
    assert out.exit_code == 2 and "resolves outside the fixture's directory" in out.stderr
    assert invoke("attend", str(inside), "--trust-paths").exit_code == 0


# --- traps and refusals ------------------------------------------------------------------

def _init(folder: Path, *args: str) -> Any:
    return invoke("init", "--from-safetensors", str(folder / "model.safetensors"),
                  "-o", str(folder / "layer.json"), *args)


def test_without_a_config_init_asks_for_heads_and_causality(tmp_path: Path) -> None:
    _, folder = build(tmp_path, "gpt2", gpt2_config())
    (folder / "config.json").unlink()
    # c_attn does not fix the scale (scale_attn_weights, scale_attn_by_inverse_layer_idx):
    # --scale must say it, as --heads and the causality
    for given, missing in (((), "--heads and --causal or --no-causal and --scale"),
                           (("--heads", "4", "--scale", "inverse-sqrt"),
                            "--causal or --no-causal"),
                           (("--causal", "--scale", "inverse-sqrt"), "--heads"),
                           (("--heads", "4", "--causal"), "--scale")):
        result = _init(folder, "--prefix", "h.0.attn.", *given)
        assert result.exit_code == 2
        assert result.stderr == (
            f"Error: {folder / 'model.safetensors'}: prefix \"h.0.attn.\": no config.json beside "
            f"the checkpoint: pass {missing} (or --config FILE, or put the model's config.json "
            "beside it); qkv does not guess the layer's function (GPT-2's c_attn: "
            "scale_attn_weights and scale_attn_by_inverse_layer_idx change the scale)\n")
    assert _init(folder, "--prefix", "h.0.attn.", "--heads", "4", "--causal",
                 "--scale", "inverse-sqrt").exit_code == 0
    document = json.loads((folder / "layer.json").read_text())
    assert document["causal"] is True and "scale" not in document  # 1/sqrt(d_k)


def test_the_command_line_may_not_contradict_the_config(tmp_path: Path) -> None:
    _, folder = build(tmp_path, "gpt2", gpt2_config())
    heads = _init(folder, "--prefix", "h.0.attn.", "--heads", "2")
    assert heads.exit_code == 2
    assert ("--heads 2 contradicts " in heads.stderr and "which says 4 heads; drop --heads"
            in heads.stderr)
    causal = _init(folder, "--prefix", "h.0.attn.", "--no-causal")
    assert causal.exit_code == 2
    assert "which says the layer is causal; drop --no-causal" in causal.stderr
    assert _init(folder, "--prefix", "h.0.attn.", "--heads", "4", "--causal").exit_code == 0


def test_a_wrong_or_missing_prefix_lists_the_prefixes(tmp_path: Path) -> None:
    _, folder = build(tmp_path, "gpt2", gpt2_config(), transformers.AutoModelForCausalLM)
    shown = folder / "model.safetensors"
    wrong = _init(folder, "--prefix", "h.0.attn.")
    assert wrong.exit_code == 2
    assert wrong.stderr == (
        f"Error: {shown}: prefix \"h.0.attn.\": no attention layer under it; the layer prefixes "
        "are transformer.h.0.attn., transformer.h.1.attn.; did you mean transformer.h.0.attn.?\n")
    missing = _init(folder)
    assert missing.stderr == (
        f"Error: {shown}: --prefix is needed; the layer prefixes are transformer.h.0.attn., "
        "transformer.h.1.attn.\n")


def _edit_config(folder: Path, **changes: Any) -> None:
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


LLAMA_REFUSALS = [
    ("rope-scaling-unknown", {"rope_parameters": {"rope_type": "proportional",
                                                  "rope_theta": 10000.0}},
     "config rope_parameters.rope_type is \"proportional\": qkv computes the RoPE scalings "
     "linear, dynamic, yarn, longrope, llama3 and the default"),
    ("softcapping", {"attn_logit_softcapping": 50.0},
     "config attn_logit_softcapping asks for logit soft-capping of the scores, which qkv does "
     "not compute"),
    ("alibi", {"alibi": True}, "config alibi asks for ALiBi position biases"),
    ("qk-norm", {"use_qk_norm": True}, "config use_qk_norm asks for QK-norm"),
    ("sliding-window-in-llama", {"sliding_window": 2},
     "config sliding_window 2: llama's attention has no sliding window in transformers"),
    ("unknown-model", {"model_type": "mamba", "architectures": ["MambaModel"]},
     "config model_type \"mamba\" (architectures [\"MambaModel\"]): qkv reads only gpt2, bert"),
    ("theta-spellings", {"rope_theta": 500.0},
     "config rope_parameters.rope_theta 10000.0 and rope_theta 500.0 disagree"),
    ("rotary-spellings", {"rotary_pct": 0.5, "partial_rotary_factor": 1.0},
     "config partial_rotary_factor 1.0 and rotary_pct 0.5 disagree"),
    ("base-spellings", {"rope_parameters": None, "rope_theta": 10000.0, "rotary_emb_base": 500},
     "config rope_theta 10000.0 and rotary_emb_base 500 disagree"),
    ("scaling-beside-parameters", {"rope_scaling": {"rope_type": "yarn", "factor": 2.0}},
     "config rope_scaling and rope_parameters disagree"),
    ("theta-401-digits", {"rope_parameters": None, "rope_theta": 10 ** 400},
     "not a JSON config: $.rope_theta: number is too large for binary64"),
    ("another-models-config", {"model_type": "gpt2", "architectures": None},
     "config model_type \"gpt2\", but the tensors under it are not that architecture's"),
]


@pytest.mark.parametrize(("changes", "message"), [c[1:] for c in LLAMA_REFUSALS],
                         ids=[c[0] for c in LLAMA_REFUSALS])
def test_what_the_config_asks_for_and_qkv_does_not_compute_is_refused(
    tmp_path: Path, changes: dict[str, Any], message: str
) -> None:
    config = transformers.LlamaConfig(hidden_size=16, num_attention_heads=4,
                                      num_key_value_heads=2, num_hidden_layers=1,
                                      intermediate_size=8, vocab_size=11)
    _, folder = build(tmp_path, "llama", config)
    _edit_config(folder, **changes)
    result = _init(folder, "--prefix", "layers.0.self_attn.", "--tokens", str(TOKENS))
    assert result.exit_code == 2
    assert message in result.stderr and result.stderr.count("\n") == 1


def test_t5_is_refused_naming_its_relative_position_bias(tmp_path: Path) -> None:
    config = transformers.T5Config(d_model=16, num_heads=2, num_layers=1, d_kv=8, d_ff=8,
                                   vocab_size=11)
    _, folder = build(tmp_path, "t5", config)
    result = _init(folder, "--prefix", "encoder.block.0.layer.0.SelfAttention.")
    assert result.exit_code == 2
    assert "relative position bias" in result.stderr and result.stderr.count("\n") == 1


def test_llama_without_its_config_is_refused_not_computed_without_rope(tmp_path: Path) -> None:
    config = transformers.LlamaConfig(hidden_size=16, num_attention_heads=4, num_hidden_layers=1,
                                      intermediate_size=8, vocab_size=11)
    _, folder = build(tmp_path, "llama", config)
    (folder / "config.json").unlink()
    result = _init(folder, "--prefix", "layers.0.self_attn.", "--heads", "4", "--causal")
    assert result.exit_code == 2
    assert "rotate Q and K by a RoPE that only config.json describes" in result.stderr


# --- the rule: every tensor accounted for, every key understood ----------------------------

NO_CONFIG_CASES = [
    ("gptj", "GPTJConfig", {"n_embd": 16, "n_head": 2, "n_layer": 1, "rotary_dim": 4,
                            "vocab_size": 11, "n_positions": 16}, "h.0.attn.",
     "pass --no-rope and --scale"),
    ("gpt-neo", "GPTNeoConfig", {"hidden_size": 16, "num_heads": 2, "num_layers": 1,
                                 "attention_types": [[["global"], 1]], "vocab_size": 11,
                                 "max_position_embeddings": 16, "intermediate_size": 8},
     "h.0.attn.attention.", "global or local by config.json's attention_layers, and no "
     "option says a local layer's window"),
    ("phi", "PhiConfig", _small(), "layers.0.self_attn.",
     "o_proj or dense (LLaMA, Mistral, Qwen2, Phi and others) rotate Q and K by a RoPE"),
    ("bloom", "BloomConfig", {"hidden_size": 16, "n_head": 2, "n_layer": 1, "vocab_size": 11},
     "h.0.self_attention.", "query_key_value layers (GPT-NeoX, BLOOM, Falcon, Persimmon)"),
    ("mpt", "MptConfig", {"d_model": 16, "n_heads": 2, "n_layers": 1, "vocab_size": 11,
                          "max_seq_len": 16}, "blocks.0.attn.", "Wqkv layers (MPT) add ALiBi"),
    ("codegen", "CodeGenConfig", {"n_embd": 16, "n_head": 4, "n_layer": 1, "rotary_dim": 2,
                                  "vocab_size": 11, "n_positions": 16},
     "h.0.attn.", "qkv_proj layers (Phi-3, CodeGen) pack query, key and value in ways only "
     "config.json tells apart"),
]


@pytest.mark.parametrize(("config_name", "arguments", "prefix", "words"),
                         [c[1:] for c in NO_CONFIG_CASES], ids=[c[0] for c in NO_CONFIG_CASES])
def test_without_a_config_names_that_do_not_fix_the_function_are_refused(
    tmp_path: Path, config_name: str, arguments: dict[str, Any], prefix: str, words: str
) -> None:
    _, folder = build(tmp_path, "bare", getattr(transformers, config_name)(**arguments))
    (folder / "config.json").unlink()
    result = _init(folder, "--prefix", prefix, "--heads", "2", "--causal")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert words in result.stderr


@pytest.mark.usefixtures("float64_softmax")
def test_without_a_config_the_options_say_rope_and_scale(tmp_path: Path) -> None:
    config = transformers.OPTConfig(hidden_size=16, num_attention_heads=2, num_hidden_layers=1,
                                    ffn_dim=8, vocab_size=11, word_embed_proj_dim=16)
    model, folder = build(tmp_path, "opt", config)
    (folder / "config.json").unlink()
    prefix = "decoder.layers.0.self_attn."
    evidence = qkv_layer(folder, prefix, "--heads", "2", "--causal", "--no-rope",
                         "--scale", "inverse-sqrt")
    y, a, x, _ = model_run(model, prefix, evidence)
    compare(evidence, y, a, x, own_gradients(model, *(prefix + m for m in QKV_OUT)))
    bad = _init(folder, "--prefix", prefix, "--heads", "2", "--causal", "--no-rope",
                "--scale", "-1")
    assert bad.exit_code == 2 and "--scale" in bad.stderr


def test_qwen3_weights_beside_a_qwen2_config_are_refused_naming_q_norm(tmp_path: Path) -> None:
    config = transformers.Qwen3Config(**_small(num_key_value_heads=2, head_dim=4))
    _, folder = build(tmp_path, "qwen3", config)
    own = _init(folder, "--prefix", "layers.0.self_attn.")
    assert own.exit_code == 0, own.stderr  # its own config: the norm is read
    _edit_config(folder, model_type="qwen2", architectures=["Qwen2Model"])
    result = _init(folder, "--prefix", "layers.0.self_attn.")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "tensor \"k_norm.weight\" under the prefix is not one qkv reads: a norm on K" in (
        result.stderr) or "tensor \"q_norm.weight\" under the prefix" in result.stderr


NORM_CONFIGS = [
    ("eps-zero", {"layer_norm_eps": 0}, "config layer_norm_eps must be a finite positive "
     "number, got 0"),
    ("flag-a-string", {"qk_layernorm": "true"}, "config qk_layernorm must be true or false, "
     "got \"true\""),
    ("flag-off-beside-the-tensors", {"qk_layernorm": False},
     "tensor \"k_layernorm.bias\" under the prefix is not one qkv reads: a layernorm on K"),
]


@pytest.mark.parametrize(("changes", "words"), [c[1:] for c in NORM_CONFIGS],
                         ids=[c[0] for c in NORM_CONFIGS])
def test_a_phi_norm_config_qkv_cannot_read_is_refused_by_its_key(
    tmp_path: Path, changes: dict[str, Any], words: str
) -> None:
    config = transformers.PhiConfig(**_small(hidden_size=32, qk_layernorm=True))
    _, folder = build(tmp_path, "phi", config)
    _edit_config(folder, **changes)
    result = _init(folder, "--prefix", "layers.0.self_attn.")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert words in result.stderr, result.stderr


FALCON_ALIBI = [
    ("multi-query", {}),
    ("new-architecture", {"new_decoder_architecture": True, "num_kv_heads": 2}),
]


@pytest.mark.parametrize("arguments", [c[1] for c in FALCON_ALIBI], ids=[c[0] for c in FALCON_ALIBI])
def test_falcon_alibi_matches_the_sdpa_model(tmp_path: Path, arguments: dict[str, Any]) -> None:
    """transformers' default Falcon path (SDPA): the model passes its attention module a
    mask holding ``alibi / sqrt(head_dim)``, which SDPA adds to the scaled scores once.
    Output, dX and every parameter gradient match qkv's (SDPA gives no weights); the
    eager path, which adds the bias a second time, does not."""
    config = transformers.FalconConfig(hidden_size=16, num_attention_heads=4,
                                       num_hidden_layers=1, vocab_size=11, alibi=True,
                                       **arguments)
    _, folder = build(tmp_path, "falcon", config)
    evidence = qkv_layer(folder, "h.0.self_attention.")
    results = {}
    for implementation in ("sdpa", "eager"):
        model = transformers.AutoModel.from_pretrained(
            folder, attn_implementation=implementation).double().eval()
        module = model.get_submodule("h.0.self_attention")
        args, kwargs = capture(model, module)
        x = torch.tensor(tensor(evidence, "input"), requires_grad=True)
        kwargs.pop("hidden_states", None)
        y = module(x, *args[1:], **kwargs)[0]
        (y * torch.tensor(tensor(evidence, "upstream_output"))).sum().backward()
        results[implementation] = (model, y, x)
    model, y, x = results["sdpa"]
    assert scaled_error(tensor(evidence, "output"), y.detach().numpy()) <= TOLERANCE
    assert scaled_error(tensor(evidence, "input_gradient"), x.grad.numpy()) <= TOLERANCE
    gradients = own_gradients(model, "h.0.self_attention.query_key_value",
                              "h.0.self_attention.dense")
    for name, grad in gradients.items():
        assert scaled_error(tensor(evidence, name), grad.numpy()) <= TOLERANCE, name
    eager_y = results["eager"][1]
    assert scaled_error(tensor(evidence, "output"), eager_y.detach().numpy()) > 1e-6


def test_falcon_alibi_bias_is_transformers_own_to_the_bit() -> None:
    """The bias of ``alibi_rounding: bfloat16`` is transformers' ``build_alibi_tensor``
    (slopes, positions and products rounded to bfloat16) bit for bit, also where the
    rounding shows: slopes that bfloat16 cannot hold (16 and 32 heads) and positions past
    256, which bfloat16 cannot all hold."""
    from transformers.models.falcon.modeling_falcon import build_alibi_tensor

    from qkvcli.attention.maths import alibi_bias
    from qkvcli.authoring.config import _bloom_slopes

    tokens = 700
    for heads in (4, 6, 16, 32, 71):
        theirs = build_alibi_tensor(torch.ones(1, tokens, dtype=torch.long), heads,
                                    torch.float64).numpy()
        ours = alibi_bias(np.array(_bloom_slopes(heads)), 0, tokens, "bfloat16")
        assert np.array_equal(ours, theirs), heads
        exact = alibi_bias(np.array(_bloom_slopes(heads)), 0, tokens)
        assert not np.array_equal(exact, theirs)  # the rounding is not idle


REFUSED_FAMILIES = [
    ("gemma3-softcap-its-module-does-not-run", "Gemma3TextConfig",
     {**_GEMMA3, "attn_logit_softcapping": 1.5}, "layers.0.self_attn.",
     "config attn_logit_softcapping 1.5: transformers' Gemma 3 attention does not apply it",
     "a RoPE that only config.json describes"),
]


@pytest.mark.parametrize(("config_name", "arguments", "prefix", "named", "bare"),
                         [c[1:] for c in REFUSED_FAMILIES], ids=[c[0] for c in REFUSED_FAMILIES])
def test_families_qkv_does_not_compute_are_refused_by_name(
    tmp_path: Path, config_name: str, arguments: dict[str, Any], prefix: str, named: str,
    bare: str,
) -> None:
    _, folder = build(tmp_path, "other", getattr(transformers, config_name)(**arguments))
    with_config = _init(folder, "--prefix", prefix)
    assert with_config.exit_code == 2 and with_config.stderr.count("\n") == 1
    assert named in with_config.stderr, with_config.stderr
    (folder / "config.json").unlink()
    without = _init(folder, "--prefix", prefix, "--heads", "2", "--causal")
    assert without.exit_code == 2 and without.stderr.count("\n") == 1
    assert bare in without.stderr, without.stderr


def test_mpt_attention_settings_transformers_does_not_run_are_refused(tmp_path: Path) -> None:
    config = transformers.MptConfig(d_model=16, n_heads=2, n_layers=1, vocab_size=11,
                                    max_seq_len=16)
    _, folder = build(tmp_path, "mpt", config)
    saved = json.loads((folder / "config.json").read_text())
    for key, value in (("qk_ln", True), ("alibi_bias_max", 4), ("prefix_lm", True),
                       ("alibi", False)):
        changed = {**saved, "attn_config": {**saved["attn_config"], key: value}}
        (folder / "config.json").write_text(json.dumps(changed))
        result = _init(folder, "--prefix", "blocks.0.attn.")
        assert result.exit_code == 2 and result.stderr.count("\n") == 1
        assert f"config attn_config.{key} {json.dumps(value)}: transformers' MPT computes" in (
            result.stderr)


def test_a_wrong_norm_reverse_fails_a_qwen3_layers_gradient_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gradient check covers the q/k norm: a reverse whose weight gradient forgets the
    normalisation (``sum(dY * x)`` for ``sum(dY * x / rms)``) fails on the norm weights."""
    from qkvcli.attention import engine
    from qkvcli.attention.maths import rms_norm_backward as right

    config = transformers.Qwen3Config(**_small(num_key_value_heads=2, head_dim=4))
    _, folder = build(tmp_path, "qwen3", config)
    assert qkv_layer(folder, "layers.0.self_attn.")["passed"]

    def unnormalised_weight(values: Any, grad: Any, weight: Any, eps: float,
                            offset: float = 0.0) -> Any:
        grad_values, _ = right(values, grad, weight, eps, offset)
        return grad_values, (grad * values).reshape(-1, values.shape[-1]).sum(axis=0)

    monkeypatch.setattr(engine, "rms_norm_backward", unnormalised_weight)
    run = invoke("attend", str(folder / "layer.json"), "-f", "json")
    assert run.exit_code != 0
    evidence = json.loads(run.stdout)
    failed = {t["tensor"] for t in evidence["gradcheck"]["tensors"] if not t["passed"]}
    assert not evidence["passed"] and failed == {"q_norm_weight", "k_norm_weight"}


def test_a_wrong_layernorm_reverse_fails_a_phi_layers_gradient_check_on_its_biases(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gradient check covers a q/k LayerNorm's biases: a reverse that gives them no
    gradient fails on exactly ``q_layernorm.bias`` and ``k_layernorm.bias``."""
    from qkvcli.attention import engine
    from qkvcli.attention.maths import layer_norm_backward as right

    config = transformers.PhiConfig(**_small(hidden_size=32, qk_layernorm=True))
    _, folder = build(tmp_path, "phi", config)
    assert qkv_layer(folder, "layers.0.self_attn.")["passed"]

    def no_bias_gradient(values: Any, grad: Any, weight: Any, eps: float,
                         offset: float = 0.0) -> Any:
        grad_values, grad_weight, grad_bias = right(values, grad, weight, eps, offset)
        return grad_values, grad_weight, np.zeros_like(grad_bias)

    monkeypatch.setattr(engine, "layer_norm_backward", no_bias_gradient)
    run = invoke("attend", str(folder / "layer.json"), "-f", "json")
    assert run.exit_code != 0
    evidence = json.loads(run.stdout)
    failed = {t["tensor"] for t in evidence["gradcheck"]["tensors"] if not t["passed"]}
    assert not evidence["passed"] and failed == {"q_layernorm_bias", "k_layernorm_bias"}


GEMMA3_CONFIGS = [
    ("theta-spellings-disagree", "layers.1.self_attn.", {"rope_theta": 500000.0},
     "config rope_parameters.full_attention.rope_theta 1000000.0 and rope_theta 500000.0 "
     "disagree"),
    ("sliding-rope-scaling-unknown", "layers.0.self_attn.",
     {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                          "sliding_attention": {"rope_type": "proportional",
                                                "rope_theta": 1e4}}},
     "config rope_parameters.sliding_attention.rope_type is \"proportional\""),
    ("flat-rope-scaling-beside-layer-types", "layers.1.self_attn.",
     {"rope_parameters": {"rope_type": "linear", "rope_theta": 1e6, "factor": 2.0}},
     "config rope_parameters.rope_type is \"linear\": gemma3_text's config keys its RoPE by "
     "layer type and ignores a flat one"),
]


@pytest.mark.parametrize(("prefix", "changes", "words"), [c[1:] for c in GEMMA3_CONFIGS],
                         ids=[c[0] for c in GEMMA3_CONFIGS])
def test_a_gemma3_rope_qkv_cannot_read_is_refused_by_its_key(
    tmp_path: Path, prefix: str, changes: dict[str, Any], words: str
) -> None:
    _, folder = build(tmp_path, "gemma3", transformers.Gemma3TextConfig(**_GEMMA3))
    _edit_config(folder, **changes)
    result = _init(folder, "--prefix", prefix)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert words in result.stderr, result.stderr


def test_gemma3_layers_without_layer_types_slide_by_the_pattern(tmp_path: Path) -> None:
    """Gemma3TextConfig: every sliding_window_pattern-th layer is full, the others slide,
    each with its kind's theta."""
    _, folder = build(tmp_path, "gemma3", transformers.Gemma3TextConfig(**_GEMMA3))
    saved = json.loads((folder / "config.json").read_text())
    del saved["layer_types"]
    (folder / "config.json").write_text(json.dumps({**saved, "sliding_window_pattern": 2}))
    for prefix, window, theta in (("layers.0.self_attn.", 2, 10000.0),
                                  ("layers.1.self_attn.", None, 1000000.0)):
        made = _init(folder, "--prefix", prefix, "--force")
        assert made.exit_code == 0, made.stderr
        document = json.loads((folder / "layer.json").read_text())
        assert document.get("window") == window and document["rope"]["theta"] == theta
        assert document["qk_norm"] == {"span": "head", "eps": 1e-3, "offset": 1.0}


OLMO3_CONFIGS = [
    ("full-rope-scaling-without-factor", "layers.2.self_attn.",
     {"rope_parameters": {**_OLMO3["rope_parameters"],
                          "full_attention": {"rope_type": "yarn", "rope_theta": 70000.0}}},
     "config rope_parameters.full_attention has rope_type \"yarn\" but no factor"),
    ("rope-parameters-not-per-layer-type", "layers.0.self_attn.",
     {"rope_parameters": {"rope_type": "default", "rope_theta": 300.0}},
     "config rope_parameters.rope_type: OLMo 3's rope_parameters is keyed by layer type"),
    ("flat-theta-on-a-sliding-layer", "layers.0.self_attn.",
     {"rope_parameters": None, "rope_theta": 300.0},
     "config rope_theta 300.0 and no rope_parameters.sliding_attention.rope_theta"),
    ("unknown-layer-type", "layers.0.self_attn.",
     {"layer_types": ["sliding_attention", "chunked_attention", "full_attention"]},
     "config layer_types must be a list of \"full_attention\" and \"sliding_attention\""),
    ("layer-types-too-short", "layers.2.self_attn.",
     {"layer_types": ["sliding_attention", "full_attention"]},
     "config layer_types has no entry for this layer (the prefix's layer number 2)"),
    ("sliding-layer-without-a-window", "layers.0.self_attn.", {"sliding_window": None},
     "config sliding_window null, but this layer is a \"sliding_attention\" one"),
]


@pytest.mark.parametrize(("prefix", "changes", "words"), [c[1:] for c in OLMO3_CONFIGS],
                         ids=[c[0] for c in OLMO3_CONFIGS])
def test_an_olmo3_config_qkv_cannot_read_is_refused_by_its_key(
    tmp_path: Path, prefix: str, changes: dict[str, Any], words: str
) -> None:
    _, folder = build(tmp_path, "olmo3", transformers.Olmo3Config(**_OLMO3))
    _edit_config(folder, **changes)
    result = _init(folder, "--prefix", prefix)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert words in result.stderr, result.stderr


def test_olmo3_layers_without_layer_types_slide_but_every_fourth(tmp_path: Path) -> None:
    """Olmo3Config: with no layer_types, every 4th layer is full and the others slide,
    each with its kind's theta; a flat rope_theta sets the full layers' (transformers 5),
    and equal to the sliding layers' default it is read there too."""
    config = transformers.Olmo3Config(**{**_OLMO3, "num_hidden_layers": 4, "layer_types": None})
    assert config.layer_types == ["sliding_attention"] * 3 + ["full_attention"]
    _, folder = build(tmp_path, "olmo3", config)
    saved = json.loads((folder / "config.json").read_text())
    saved.pop("layer_types", None)
    (folder / "config.json").write_text(json.dumps(saved))
    for prefix, window, theta in (("layers.2.self_attn.", 2, 300.0),
                                  ("layers.3.self_attn.", None, 70000.0)):
        made = _init(folder, "--prefix", prefix, "--force")
        assert made.exit_code == 0, made.stderr
        document = json.loads((folder / "layer.json").read_text())
        assert document.get("window") == window and document["rope"]["theta"] == theta
        assert document["qk_norm"] == {"span": "layer", "eps": 1e-3, "offset": 0.0}
    saved.pop("rope_parameters")
    (folder / "config.json").write_text(json.dumps({**saved, "rope_theta": 500000.0}))
    read = transformers.Olmo3Config.from_pretrained(folder).rope_parameters
    assert read["sliding_attention"]["rope_theta"] == read["full_attention"]["rope_theta"]
    for prefix in ("layers.0.self_attn.", "layers.3.self_attn."):
        made = _init(folder, "--prefix", prefix, "--force")
        assert made.exit_code == 0, made.stderr
        assert json.loads((folder / "layer.json").read_text())["rope"]["theta"] == 500000.0
