"""The function of a checkpoint's attention layer, as the model's ``config.json`` says it.

:func:`model_function` reads heads, K/V heads, head width, causality, RoPE and the score
scale of the architectures qkv computes (:data:`SUPPORTED`), and refuses, naming the
config key, whatever the config asks for that qkv does not compute
(:data:`REFUSED_KEYS`, RoPE scaling, T5's relative position bias, sliding windows
shorter than the input), and whatever it cannot read as transformers would (a
string where a number or a boolean belongs, ``architectures`` of another model).
No I/O here.
"""

from __future__ import annotations

from typing import Any

from qkvcli.authoring.checkpoint import (
    CheckpointError,
    ModelFunction,
    RopeSpec,
    layer_index,
    shown_value,
)

CAUSAL_MODELS = ("gpt2", "llama", "mistral", "qwen2", "gpt_neox", "opt")
ENCODER_MODELS = ("bert", "roberta")  # causal only as a decoder (is_decoder)
SUPPORTED = (*CAUSAL_MODELS, *ENCODER_MODELS)
ROPE_MODELS = ("llama", "mistral", "qwen2", "gpt_neox")
REFUSED_KEYS = (
    ("alibi", "ALiBi position biases"), ("use_alibi", "ALiBi position biases"),
    ("attn_logit_softcapping", "logit soft-capping of the scores"),
    ("qk_norm", "QK-norm"), ("use_qk_norm", "QK-norm"), ("qk_layernorm", "QK-norm"),
    ("relative_attention_num_buckets", "a relative position bias"),
    ("add_cross_attention", "cross-attention layers"),
)
"""Config keys that, when set (not null, false or 0), ask for what qkv does not compute."""


def _set(config: dict[str, Any], key: str) -> bool:
    value = config.get(key)
    return value is not None and value is not False and value != 0


def _int(config: dict[str, Any], prefix: str, *keys: str) -> int | None:
    """The value of ``keys`` (spellings of one setting; null is unset), a positive integer,
    or ``None`` when none is set. Spellings that disagree are refused: which one
    transformers keeps depends on its version. Raises :class:`CheckpointError` naming
    the key."""
    found: dict[str, int] = {}
    for key in keys:
        value = config.get(key)
        if value is None:
            continue
        if type(value) is not int or value <= 0:
            raise CheckpointError(prefix, f"config {key} must be a positive integer, got "
                                  f"{shown_value(value)}")
        found[key] = value
    if len(set(found.values())) > 1:
        said = " and ".join(f"{key} {value}" for key, value in found.items())
        raise CheckpointError(prefix, f"config {said} disagree")
    return next(iter(found.values()), None)


def _flag(config: dict[str, Any], key: str, default: bool, prefix: str) -> bool:
    """The config's ``key`` as a boolean (null: ``default``); the string "false" is not
    false to transformers' Python either, so anything but true/false/null is refused."""
    value = config.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise CheckpointError(prefix, f"config {key} must be true or false, got {shown_value(value)}")
    return value


# The class-name start of each architecture's transformers classes (config "architectures").
CLASS_PREFIXES = {"gpt2": "GPT2", "bert": "Bert", "roberta": "Roberta", "llama": "Llama",
                  "mistral": "Mistral", "qwen2": "Qwen2", "opt": "OPT", "gpt_neox": "GPTNeoX"}


def _check_architectures(config: dict[str, Any], model: str, prefix: str) -> None:
    """Refuse ``architectures`` naming another model's classes: the config contradicts
    itself, and qkv cannot tell which function the checkpoint holds."""
    classes = config.get("architectures")
    if classes is None:
        return
    if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes):
        raise CheckpointError(prefix, f"config architectures must be a list of class names, "
                              f"got {shown_value(classes)}")
    start = CLASS_PREFIXES[model]
    other = next((c for c in classes if not c.startswith(start)
                  or c[len(start):len(start) + 1].islower()), None)
    if other is not None:
        raise CheckpointError(prefix, f"config architectures names {shown_value(other)}, not a "
                              f"{model} class, though model_type is {shown_value(model)}: is "
                              "config.json this model's?")


def _rope(config: dict[str, Any], model: str, head_dim: int, prefix: str) -> RopeSpec:
    """The default RoPE of LLaMA-like and NeoX configs (transformers 4 and 5 spellings)."""
    params = config.get("rope_parameters")
    theta_key = "rope_parameters.rope_theta"
    if params is not None and not isinstance(params, dict):
        raise CheckpointError(prefix, "config rope_parameters must be an object")
    if params is None:  # transformers 4: rope_theta (rotary_emb_base) and rope_scaling
        scaling = config.get("rope_scaling")
        if scaling is not None and not isinstance(scaling, dict):
            raise CheckpointError(prefix, "config rope_scaling must be an object or null")
        params = dict(scaling or {})
        theta_key = next((k for k in ("rope_theta", "rotary_emb_base") if k in config),
                         "rope_theta")
        params["rope_theta"] = config.get(theta_key, 10000.0)  # transformers' default
        for source in ("rotary_pct", "partial_rotary_factor"):
            if source in config:
                params.setdefault("partial_rotary_factor", config[source])
        key = "rope_scaling"
    else:
        key = "rope_parameters"
    kind = params.get("rope_type", params.get("type", "default"))
    if kind != "default":
        raise CheckpointError(prefix, f"config {key}.rope_type is {shown_value(kind)}: qkv computes only "
                              "the default RoPE (no scaling)")
    theta = params.get("rope_theta")
    if isinstance(theta, bool) or not isinstance(theta, int | float) or not (
            0 < theta < float("inf")):
        raise CheckpointError(prefix, f"config {theta_key} must be a finite positive number, "
                              f"got {shown_value(theta)}")
    factor = params.get("partial_rotary_factor", 1.0)
    if isinstance(factor, bool) or not isinstance(factor, int | float) or not 0 < factor <= 1:
        raise CheckpointError(prefix, f"config partial_rotary_factor must be in (0, 1], got "
                              f"{shown_value(factor)}")
    dims = int(head_dim * factor)  # as transformers computes it
    if model != "gpt_neox" and dims != head_dim:
        raise CheckpointError(prefix, f"config partial_rotary_factor {factor}: {model} rotates "
                              "whole heads in qkv's reading; refused")
    if dims < 2 or dims % 2:
        raise CheckpointError(prefix, f"config partial_rotary_factor {factor} gives {dims} "
                              "rotary dimensions; qkv needs an even number of at least 2")
    return RopeSpec(float(theta), dims, "half")


KIND_OF_MODEL = {"gpt2": "gpt2", "bert": "bert", "roberta": "bert", "llama": "linear",
                 "mistral": "linear", "qwen2": "linear", "opt": "linear", "gpt_neox": "neox"}
"""The tensor names each architecture's layers have (:data:`ANCHORS`)."""


def model_function(config: dict[str, Any], prefix: str, tokens: int, widths: tuple[int, int],
                   kind: str | None = None, d_model: int | None = None) -> ModelFunction:
    """The function of the layer under ``prefix`` that ``config`` (config.json) describes.

    ``widths`` are the query and key projections' widths, ``kind`` the layer's tensor
    names (:func:`layer_widths`), which must be the architecture's, ``d_model`` its
    input width, which must be the config's hidden size when it gives one. Raises
    :class:`CheckpointError` naming the config key of anything qkv does not compute.
    """
    model = config.get("model_type")
    if model == "t5" or model not in SUPPORTED:
        why = (" (relative_attention_num_buckets: a relative position bias, and no "
               "1/sqrt(d_k) scale)" if model == "t5" else "")
        raise CheckpointError(prefix, f"config model_type {shown_value(model)}{why}: qkv reads only "
                              f"{', '.join(SUPPORTED)}")
    if kind is not None and KIND_OF_MODEL[str(model)] != kind:
        raise CheckpointError(prefix, f"config model_type {shown_value(model)}, but the tensors under "
                              "it are not that architecture's: is config.json this model's?")
    for key, what in REFUSED_KEYS:
        if _set(config, key):
            raise CheckpointError(prefix, f"config {key} asks for {what}, which qkv does not "
                                  "compute")
    position = config.get("position_embedding_type", "absolute")
    if position not in (None, "absolute", "rotary") or (position == "rotary"
                                                        and model in ENCODER_MODELS):
        raise CheckpointError(prefix, f"config position_embedding_type {shown_value(position)}: qkv "
                              "computes no relative position scores")
    _check_architectures(config, str(model), prefix)
    hidden = _int(config, prefix, "hidden_size", "n_embd")
    if d_model is not None and hidden is not None and hidden != d_model:
        raise CheckpointError(prefix, f"config hidden size {hidden}, but the layer reads "
                              f"inputs {d_model} wide: is config.json this model's?")
    heads = _int(config, prefix, "num_attention_heads", "n_head")
    if heads is None:
        raise CheckpointError(prefix, "config gives no num_attention_heads (or n_head)")
    kv_heads = _int(config, prefix, "num_key_value_heads") if model in ROPE_MODELS else None
    head_dim = _int(config, prefix, "head_dim") if model != "gpt_neox" else None
    if head_dim is None and widths[0] % heads:
        raise CheckpointError(prefix, f"config says {shown_value(heads)} heads, which do not divide "
                              f"the query projection's width {widths[0]}")
    head_dim = head_dim or widths[0] // heads
    if heads * head_dim != widths[0] or (kv_heads or heads) * head_dim != widths[1]:
        raise CheckpointError(prefix, f"config says {shown_value(heads)} heads and "
                              f"{shown_value(kv_heads or heads)} K/V heads of {shown_value(head_dim)}, but "
                              f"the projections are query {widths[0]}, key {widths[1]} wide")
    index = layer_index(prefix)
    _check_window(config, model, index, tokens, prefix)
    scale = None
    if model == "gpt2":
        scale = _gpt2_scale(config, head_dim, index, prefix)
    causal = model in CAUSAL_MODELS or _flag(config, "is_decoder", False, prefix)
    return ModelFunction(
        heads, causal, None if kv_heads in (None, heads) else kv_heads, head_dim,
        _rope(config, str(model), head_dim, prefix) if model in ROPE_MODELS else None,
        scale, str(model))


def _gpt2_scale(config: dict[str, Any], head_dim: int, index: int | None,
                prefix: str) -> float | None:
    # GPT2Attention: scaling = head_dim**-0.5 if scale_attn_weights else 1.0, then
    # divided by layer_idx + 1 if scale_attn_by_inverse_layer_idx
    weights = _flag(config, "scale_attn_weights", True, prefix)
    by_layer = _flag(config, "scale_attn_by_inverse_layer_idx", False, prefix)
    if weights and not by_layer:
        return None
    scale = head_dim ** -0.5 if weights else 1.0
    if by_layer:
        if index is None:
            raise CheckpointError(prefix, "config scale_attn_by_inverse_layer_idx needs the "
                                  "layer's number in the prefix (h.N.attn.)")
        scale /= float(index + 1)
    return scale


def _check_window(config: dict[str, Any], model: str, index: int | None, tokens: int,
                  prefix: str) -> None:
    """A sliding window is the full causal mask on inputs no longer than it; refuse others."""
    window = config.get("sliding_window")
    if window is None or (model == "qwen2"
                          and not _flag(config, "use_sliding_window", False, prefix)):
        return
    types = config.get("layer_types")
    if types is not None and (not isinstance(types, list) or any(
            kind not in ("full_attention", "sliding_attention") for kind in types)):
        # an entry qkv cannot read might be a window of its own: never guess it is full
        raise CheckpointError(prefix, "config layer_types must be a list of "
                              f"\"full_attention\" and \"sliding_attention\", got {shown_value(types)}")
    if isinstance(types, list) and index is not None and index < len(types) and (
            types[index] != "sliding_attention"):
        return
    if type(window) is not int or tokens > window:
        raise CheckpointError(prefix, f"config sliding_window {shown_value(window)}: qkv computes no "
                              f"sliding window, and --tokens {tokens} reaches past it")


