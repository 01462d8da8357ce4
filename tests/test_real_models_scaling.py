"""RoPE scaling against the model's own attention (issue 43): linear, dynamic, YaRN,
LongRoPE and LLaMA 3, in transformers 5's ``rope_parameters`` and 4's ``rope_scaling``.

The model's rotary module computes its frequencies and tables in float32. Here the same
module class is built again from the model's config with torch's float32 read as
float64 (``torch.float``, ``torch.float32``, ``Tensor.float`` and the default dtype), so
transformers' own ``modeling_rope_utils`` code computes the frequencies, the attention
factor and (``dynamic``, ``longrope``) their dependence on the sequence's length in
float64; those tables must equal the model's own float32 ones to float32 rounding
(1e-6), and are given to the attention module, which is then compared with qkv as in
``tests/test_real_models.py`` (1e-10: output, weights, dX, every parameter gradient).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests.test_real_models import (  # noqa: E402  (after the skips)
    QKVO,
    TOKENS,
    _edit_config,
    _init,
    build,
    capture,
    compare,
    float64_attention,
    float64_softmax,
    model_run,
    own_gradients,
    qkv_layer,
)
from tests.test_real_models_traps import _loaded  # noqa: E402

__all__ = ["float64_attention", "float64_softmax"]  # fixtures used by name below


@contextmanager
def float64_torch() -> Iterator[None]:
    """torch's float32 read as float64 while the RoPE module is built and run."""
    saved = (torch.float, torch.float32, torch.Tensor.float, torch.get_default_dtype())
    torch.float = torch.float32 = torch.float64
    torch.Tensor.float = torch.Tensor.double
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.float, torch.float32, torch.Tensor.float = saved[:3]
        torch.set_default_dtype(saved[3])


def rotary_of(model: Any) -> Any:
    return next(m for name, m in model.named_modules() if name.endswith("rotary_emb"))


def float64_tables(model: Any, prefix: str, layer_type: str | None = None) -> tuple[Any, Any]:
    """The model's RoPE tables for ``TOKENS`` positions computed by its own rotary module
    class in float64, checked against the float32 tables the model passes its layer."""
    _, kwargs = capture(model, model.get_submodule(prefix.rstrip(".")))
    own = kwargs["position_embeddings"]
    rotary = rotary_of(model)
    with float64_torch():
        fresh = type(rotary)(model.config)
        positions = torch.arange(TOKENS)[None]
        x = torch.zeros(1, dtype=torch.float64)
        tables = fresh(x, positions) if layer_type is None else fresh(x, positions, layer_type)
    for ours, theirs in zip(tables, own, strict=True):
        assert ours.dtype == torch.float64
        assert float((ours - theirs.double()).abs().max()) < 1e-6
    return tables[0], tables[1]


def _llama(**rope: Any) -> dict[str, Any]:
    return {"hidden_size": 32, "num_attention_heads": 2, "num_key_value_heads": 1,
            "num_hidden_layers": 1, "intermediate_size": 8, "vocab_size": 11,
            "max_position_embeddings": 64, "rope_parameters": {"rope_theta": 10000.0, **rope}}


# id, config class, its arguments, the fixture's rope.scaling (its keys that must be said)
SCALED = [
    ("linear", "LlamaConfig", _llama(rope_type="linear", factor=3.0), {"factor": 3.0}),
    ("dynamic-grown", "LlamaConfig",
     {**_llama(rope_type="dynamic", factor=2.5), "max_position_embeddings": 2},
     {"factor": 2.5, "max_position_embeddings": 2}),
    ("dynamic-within", "LlamaConfig", _llama(rope_type="dynamic", factor=3.3),
     {"max_position_embeddings": 64}),
    ("yarn", "LlamaConfig", _llama(rope_type="yarn", factor=4.0,
                                   original_max_position_embeddings=16),
     {"factor": 4.0, "beta_fast": 32.0, "truncate": True}),
    ("yarn-mscale-betas-untruncated", "LlamaConfig",
     _llama(rope_type="yarn", factor=8.0, original_max_position_embeddings=32, mscale=0.7,
            mscale_all_dim=0.3, beta_fast=8, beta_slow=2, truncate=False),
     {"truncate": False, "beta_fast": 8.0}),
    ("yarn-attention-factor", "LlamaConfig",
     _llama(rope_type="yarn", factor=2.0, attention_factor=1.7,
            original_max_position_embeddings=8), {"attention_factor": 1.7}),
    ("longrope-short", "LlamaConfig",
     _llama(rope_type="longrope", original_max_position_embeddings=16,
            short_factor=[1.0, 1.5, 2.0, 1.1, 1.3, 3.0, 1.0, 2.2],
            long_factor=[2.0, 3.5, 1.0, 4.0, 1.2, 1.0, 5.0, 1.7]),
     {"original_max_position_embeddings": 16}),
    ("longrope-long-factor", "LlamaConfig",
     _llama(rope_type="longrope", original_max_position_embeddings=3, factor=6.0,
            short_factor=[1.0, 1.5, 2.0, 1.1, 1.3, 3.0, 1.0, 2.2],
            long_factor=[2.0, 3.5, 1.0, 4.0, 1.2, 1.0, 5.0, 1.7]), {}),
    ("llama3", "LlamaConfig",
     _llama(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
            original_max_position_embeddings=48), {"low_freq_factor": 1.0}),
    ("phi3-longrope-partial", "Phi3Config",
     {**_llama(rope_type="longrope", short_factor=[1.0, 1.5, 2.0, 1.2],
               long_factor=[2.0, 3.5, 1.0, 4.0], partial_rotary_factor=0.5),
      "original_max_position_embeddings": 2, "pad_token_id": 0},
     {"original_max_position_embeddings": 2}),
    ("gpt-neox-partial-yarn", "GPTNeoXConfig",
     {"hidden_size": 32, "num_attention_heads": 2, "num_hidden_layers": 1,
      "intermediate_size": 8, "vocab_size": 11, "max_position_embeddings": 64,
      "rope_parameters": {"rope_type": "yarn", "factor": 3.0, "rope_theta": 500.0,
                          "partial_rotary_factor": 0.5, "original_max_position_embeddings": 8}},
     {"factor": 3.0}),
    ("qwen2-llama3-biases", "Qwen2Config",
     _llama(rope_type="llama3", factor=4.0, low_freq_factor=2.0, high_freq_factor=8.0,
            original_max_position_embeddings=128), {"factor": 4.0}),
]


def _modules(config_name: str) -> tuple[str, ...]:
    return {"Phi3Config": ("qkv_proj", "o_proj"),
            "GPTNeoXConfig": ("query_key_value", "dense")}.get(config_name, QKVO)


def _compare_with_model(model: Any, folder: Path, config_name: str) -> dict[str, Any]:
    prefix = "layers.0.attention." if config_name == "GPTNeoXConfig" else "layers.0.self_attn."
    evidence = qkv_layer(folder, prefix)
    cos, sin = float64_tables(model, prefix)
    y, a, x, _ = model_run(model, prefix, evidence, position_embeddings=(cos, sin))
    gradients = own_gradients(model, *(prefix + m for m in _modules(config_name)))
    packed = _modules(config_name)[0]
    if packed in ("qkv_proj", "query_key_value"):  # split views: digests of the packed one
        gradients.update({f"{b}_{p}_gradient": None for b in ("query", "key", "value")
                          for p in ("weight", "bias") if f"{packed}_{p}_gradient" in gradients})
    compare(evidence, y, a, x, gradients)
    document: dict[str, Any] = json.loads((folder / "layer.json").read_text())
    return document


@pytest.mark.usefixtures("float64_softmax", "float64_attention")
@pytest.mark.parametrize(("config_name", "arguments", "said"), [c[1:] for c in SCALED],
                         ids=[c[0] for c in SCALED])
def test_each_rope_scaling_matches_the_model(tmp_path: Path, config_name: str,
                                            arguments: dict[str, Any],
                                            said: dict[str, Any]) -> None:
    model, folder = build(tmp_path, "scaled", getattr(transformers, config_name)(**arguments))
    document = _compare_with_model(model, folder, config_name)
    scaling = document["rope"]["scaling"]
    assert scaling["type"] == model.config.rope_parameters["rope_type"]
    for key, value in said.items():
        assert scaling[key] == value, (key, scaling)


@pytest.mark.usefixtures("float64_softmax", "float64_attention")
def test_transformers_4_rope_scaling_spelling(tmp_path: Path) -> None:
    """A config.json of transformers 4: ``rope_scaling`` with ``type``, a flat ``rope_theta``."""
    _, folder = build(tmp_path, "v4", transformers.LlamaConfig(**_llama()))
    config = json.loads((folder / "config.json").read_text())
    config.pop("rope_parameters")
    config |= {"rope_theta": 700.0, "rope_scaling": {"type": "yarn", "factor": 4.0,
                                                     "original_max_position_embeddings": 16}}
    (folder / "config.json").write_text(json.dumps(config))
    model = _loaded(folder)
    assert model.config.rope_parameters["rope_type"] == "yarn"
    document = _compare_with_model(model, folder, "LlamaConfig")
    assert document["rope"]["theta"] == 700.0 and document["rope"]["scaling"]["type"] == "yarn"


SCALING_REFUSALS = [
    ("unknown-type", {"rope_parameters": {"rope_type": "proportional", "rope_theta": 1e4}},
     "rope_parameters.rope_type is \"proportional\""),
    ("no-factor", {"rope_parameters": {"rope_type": "linear", "rope_theta": 1e4}},
     "no factor"),
    ("llama3-no-high", {"rope_parameters": {"rope_type": "llama3", "factor": 8.0,
                                            "low_freq_factor": 1.0, "rope_theta": 1e4}},
     "no high_freq_factor"),
    ("two-spellings", {"rope_scaling": {"type": "linear", "factor": 2.0},
                       "rope_parameters": {"rope_type": "linear", "factor": 3.0,
                                           "rope_theta": 1e4}},
     "rope_scaling and rope_parameters disagree"),
    ("longrope-short-list", {"rope_parameters": {
        "rope_type": "longrope", "rope_theta": 1e4, "original_max_position_embeddings": 8,
        "short_factor": [1.0], "long_factor": [1.0] * 8}},
     "rope_parameters.short_factor must be a list of 8 numbers"),
    ("dynamic-no-length", {"max_position_embeddings": None,
                           "rope_parameters": {"rope_type": "dynamic", "factor": 2.0,
                                               "rope_theta": 1e4}},
     "reads max_position_embeddings"),
]


@pytest.fixture(scope="module")
def saved_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _, folder = build(tmp_path_factory.mktemp("llama"), "llama",
                      transformers.LlamaConfig(**_llama()))
    return folder


@pytest.mark.parametrize(("edit", "words"), [c[1:] for c in SCALING_REFUSALS],
                         ids=[c[0] for c in SCALING_REFUSALS])
def test_a_scaling_qkv_cannot_read_is_refused_by_its_key(
        saved_llama: Path, tmp_path: Path, edit: dict[str, Any], words: str) -> None:
    folder = tmp_path / "llama"
    folder.mkdir()
    for name in ("model.safetensors", "config.json"):
        (folder / name).write_bytes((saved_llama / name).read_bytes())
    _edit_config(folder, **edit)
    made = _init(folder, "--prefix", "layers.0.self_attn.", "--tokens", str(TOKENS))
    assert made.exit_code == 2 and made.stderr.count("\n") == 1, made.output
    assert words in made.stderr, made.stderr


def test_gptj_refuses_a_scaling_its_own_tables_ignore(tmp_path: Path) -> None:
    _, folder = build(tmp_path, "gptj", transformers.GPTJConfig(
        n_embd=16, n_head=2, n_layer=1, rotary_dim=4, vocab_size=11, n_positions=16))
    _edit_config(folder, rope_scaling={"type": "linear", "factor": 2.0})
    made = _init(folder, "--prefix", "h.0.attn.", "--tokens", str(TOKENS))
    assert made.exit_code == 2 and "rope_scaling.rope_type" in made.stderr, made.output


_GEMMA3 = {"hidden_size": 32, "num_attention_heads": 2, "num_key_value_heads": 1,
           "num_hidden_layers": 2, "intermediate_size": 8, "vocab_size": 11, "head_dim": 16,
           "sliding_window": 2, "layer_types": ["sliding_attention", "full_attention"],
           "query_pre_attn_scalar": 20, "rms_norm_eps": 1e-3, "max_position_embeddings": 64}
_OLMO3 = {"hidden_size": 32, "num_attention_heads": 2, "num_key_value_heads": 1,
          "num_hidden_layers": 2, "intermediate_size": 8, "vocab_size": 11, "sliding_window": 2,
          "layer_types": ["sliding_attention", "full_attention"], "rms_norm_eps": 1e-3,
          "max_position_embeddings": 64,
          "rope_parameters": {
              "sliding_attention": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 300.0},
              "full_attention": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 7e4,
                                 "original_max_position_embeddings": 16}}}
# id, config class, arguments, a rope_scaling written into config.json (transformers 4),
# the layer, its type, the fixture's scaling type
TYPED = [
    ("gemma3-full-linear-rope-scaling", "Gemma3TextConfig", _GEMMA3,
     {"rope_type": "linear", "factor": 8.0}, 1, "full_attention", "linear"),
    ("gemma3-sliding-default", "Gemma3TextConfig", _GEMMA3,
     {"rope_type": "linear", "factor": 8.0}, 0, "sliding_attention", None),
    ("olmo3-full-yarn", "Olmo3Config", _OLMO3, None, 1, "full_attention", "yarn"),
    ("olmo3-sliding-dynamic", "Olmo3Config", {**_OLMO3, "max_position_embeddings": 3}, None,
     0, "sliding_attention", "dynamic"),
]


@pytest.mark.usefixtures("float64_softmax", "float64_attention")
@pytest.mark.parametrize(("config_name", "arguments", "update", "layer", "layer_type", "kind"),
                         [c[1:] for c in TYPED], ids=[c[0] for c in TYPED])
def test_a_rope_scaling_per_layer_type_matches_the_model(
        tmp_path: Path, config_name: str, arguments: dict[str, Any],
        update: dict[str, Any] | None, layer: int, layer_type: str, kind: str | None) -> None:
    model, folder = build(tmp_path, "typed", getattr(transformers, config_name)(**arguments))
    if update is not None:  # transformers 4's spelling: it updates the full layers' entry
        config = json.loads((folder / "config.json").read_text())
        config["rope_parameters"] = None
        config["rope_scaling"] = update
        (folder / "config.json").write_text(json.dumps(config))
        model = _loaded(folder)
    prefix = f"layers.{layer}.self_attn."
    evidence = qkv_layer(folder, prefix)
    cos, sin = float64_tables(model, prefix, layer_type)
    y, a, x, _ = model_run(model, prefix, evidence, position_embeddings=(cos, sin))
    compare(evidence, y, a, x, own_gradients(model, *(prefix + m for m in (
        *QKVO, "q_norm", "k_norm"))))
    document = json.loads((folder / "layer.json").read_text())
    assert (document["rope"].get("scaling") or {}).get("type") == kind
