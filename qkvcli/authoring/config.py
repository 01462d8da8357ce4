"""The function of a checkpoint's attention layer, as the model's ``config.json`` says it.

The rule: qkv computes a layer only when every config key that changes its function is
understood, against the table of model families in :mod:`qkvcli.authoring.model_families`.
:func:`config_family` reads the config first, before any tensor shape:
``model_type`` (one of :data:`FAMILIES`, or refused by name: :data:`REFUSED_MODELS`),
``architectures``, the keys that ask for what qkv does not compute
(:data:`REFUSED_KEYS`, with each family's defaults), and spellings of one setting that
disagree. :func:`model_function` then reads heads, K/V heads, head width, causality,
RoPE, the score scale and the sliding window, each from the family's own keys, and
checks them against the projections' widths. No I/O here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from qkvcli.authoring.checkpoint import OUTSIDE_OUT, ModelFunction, NormFunction, RopeSpec
from qkvcli.authoring.config_layers import (
    check_block_type,
    layer_type_of,
    listed_type,
    uses_rope,
    window_of,
)
from qkvcli.authoring.config_rope import (
    FACTOR_PATHS,
    THETA_PATHS,
    check_rope_type,
    rope_of,
    type_rope,
)
from qkvcli.authoring.config_values import flag_value, int_value, is_set, one_of, positive
from qkvcli.authoring.model_families import (
    ALIASES,
    BOTTLENECKED,
    CLIP_QKV,
    DEFAULTS,
    EQUAL_KEYS,
    FAMILIES,
    FAMILY_REFUSED_KEYS,
    FULL_WIDTH_QK_LAYER_NORMS,
    HYBRID_LAYERS,
    LAYER_NORMS,
    MPT_ATTENTION,
    NEOX_ROPE,
    NULL_MULTIPLIER_IS_INVERSE_SQRT,
    OUT_BIAS_PARAMETERS,
    QK_NORM_AFTER_ROPE,
    QK_NORM_FLAGS,
    QK_NORM_MODULES,
    QK_NORMS,
    REFUSED_KEYS,
    REFUSED_MODELS,
    ROPE_BY_KEY,
    ROPE_REFUSED_PARAMETERS,
    RUNS_ONLY_WITH,
    SOFTCAP,
    STORED_ROPE,
    SUPPORTED,
    TRIO_MODULES,
    TYPE_THETAS,
    ModelFamily,
)
from qkvcli.authoring.tensor_names import CheckpointError, layer_index, shown_value

HEADS_KEYS = ("num_attention_heads", "n_head", "num_heads", "n_heads")
HIDDEN_KEYS = ("hidden_size", "n_embd", "d_model", "dim")


HEAD_CLASS = re.compile(r"For[A-Z][A-Za-z]*|(?:Text|LMHead|DoubleHeads|PreTrained|Encoder|"
                        r"Decoder|WithLMHead)?Model(?:WithProjection|WithLMHead)?|Encoder|Decoder")
"""What follows a family's name in the name of one of its own classes (``LlamaModel``,
``GPT2LMHeadModel``, ``BertForMaskedLM``): anything else (``Gemma2ForCausalLM`` under
gemma, ``Qwen2MoeForCausalLM`` under qwen2) is another family's class."""


def _check_architectures(config: dict[str, Any], model: str, start: str, prefix: str) -> None:
    """Refuse ``architectures`` naming another model's classes: the config contradicts
    itself, and qkv cannot tell which function the checkpoint holds."""
    classes = config.get("architectures")
    if classes is None:
        return
    if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes):
        raise CheckpointError(prefix, f"config architectures must be a list of class names, "
                              f"got {shown_value(classes)}")
    other = next((c for c in classes if not c.startswith(start)
                  or not HEAD_CLASS.fullmatch(c[len(start):])), None)
    if other is not None:
        raise CheckpointError(prefix, f"config architectures names {shown_value(other)}, not a "
                              f"{model} class, though model_type is {shown_value(model)}: is "
                              "config.json this model's?")


def canonical(config: dict[str, Any], prefix: str) -> dict[str, Any]:
    """``config`` with its family's other spellings of a key (its config class's
    ``attribute_map``, :data:`ALIASES`) under the name qkv reads; the two spellings
    saying different things are refused, naming both."""
    model = config.get("model_type")
    aliases = ALIASES.get(model, {}) if isinstance(model, str) else {}
    if not any(key in config for key in aliases):
        return config
    out = {key: value for key, value in config.items() if key not in aliases}
    for alias, key in aliases.items():
        if alias not in config:
            continue
        if key in out and out[key] != config[alias]:
            raise CheckpointError(prefix, f"config {alias} {shown_value(config[alias])} and "
                                  f"{key} {shown_value(out[key])} disagree ({model}'s config "
                                  f"reads {alias} as {key})")
        out[key] = config[alias]
    return out


@contextmanager
def _spelled_as_given(config: dict[str, Any]) -> Iterator[None]:
    """A refusal raised while reading :func:`canonical`'s config names each key as
    config.json spells it: a family's other spelling (:data:`ALIASES`, given without the
    key it stands for) by that spelling, not by a key the config does not hold."""
    try:
        yield
    except CheckpointError as error:
        model = config.get("model_type")
        aliases = ALIASES.get(model, {}) if isinstance(model, str) else {}
        problem = error.problem
        for alias, key in aliases.items():
            if alias in config and key not in config:
                problem = re.sub(rf"(?<![A-Za-z0-9_]){re.escape(key)}(?![A-Za-z0-9_])", alias,
                                 problem)
        if problem == error.problem:
            raise
        raise CheckpointError(error.prefix, problem) from None


def config_family(config: dict[str, Any], prefix: str) -> str:
    """The config's ``model_type``, read before any tensor: known and computed, with
    nothing asked for that qkv does not compute. Raises :class:`CheckpointError` naming
    the family or the key (as config.json spells it)."""
    read = canonical(config, prefix)
    with _spelled_as_given(config):
        return _config_family(read, prefix)


def _config_family(config: dict[str, Any], prefix: str) -> str:
    """:func:`config_family` of a :func:`canonical` config."""
    model = config.get("model_type")
    seen = config.get("architectures")
    said = f" (architectures {shown_value(seen)})" if seen is not None else ""
    if isinstance(model, str) and model in REFUSED_MODELS:
        raise CheckpointError(prefix, f"config model_type {shown_value(model)}{said}: "
                              f"{REFUSED_MODELS[model]}; refused")
    if not isinstance(model, str) or model not in FAMILIES:
        raise CheckpointError(prefix, f"config model_type {shown_value(model)}{said}: qkv "
                              f"reads only {', '.join(SUPPORTED)}; it does not know that "
                              "architecture's attention")
    family = FAMILIES[model]
    _check_architectures(config, model, family.classes, prefix)
    settings = {**DEFAULTS.get(model, {}), **config}
    if family.causal == "prefix":
        settings.pop("add_cross_attention", None)  # their decoders' own encoder_attn
    if model in SOFTCAP:
        settings.pop("attn_logit_softcapping", None)  # computed: the fixture's softcap
    if model == "gemma3_text" and is_set(settings, "attn_logit_softcapping"):
        # Gemma3Attention keeps the value but passes no softcap to its attention: the
        # model's scores are not capped, and a capped fixture would not be its function
        raise CheckpointError(prefix, "config attn_logit_softcapping "
                              f"{shown_value(settings['attn_logit_softcapping'])}: transformers' "
                              "Gemma 3 attention does not apply it (no softcap reaches its "
                              "scores); refused")
    if model in CLIP_QKV:
        settings.pop("clip_qkv", None)  # computed: the fixture's clip_qkv
    if model in QK_NORM_FLAGS:  # computed when on: the fixture's qk_norm
        settings.pop(QK_NORM_FLAGS[model], None)
    if model == "falcon":
        settings.pop("alibi", None)  # computed: the fixture's alibi, scaled and rounded
    if model in LAYER_NORMS:  # computed: the fixture's qk_norm
        settings.pop(LAYER_NORMS[model][0], None)
    if model in EQUAL_KEYS:
        first, second = EQUAL_KEYS[model]
        values = [flag_value(settings, key, False, prefix) for key in (first, second)]
        if values[0] != values[1]:
            shown = [f"{key} {shown_value(value)}" + (" (its default)" if config.get(key) is None
                                                      else "")
                     for key, value in zip((first, second), values, strict=True)]
            raise CheckpointError(prefix, f"config {shown[0]} and {shown[1]}: {family.title}'s config "
                                  "refuses them unequal (transformers cannot build the model); "
                                  "refused")
    for key, wanted in RUNS_ONLY_WITH.get(model, {}).items():
        if flag_value(config, key, wanted, prefix) != wanted:
            raise CheckpointError(prefix, f"config {key} {shown_value(config[key])}: "
                                  f"transformers' {family.title} runs only with {key} "
                                  f"{shown_value(wanted)} (it raises otherwise); refused")
    if model in ROPE_REFUSED_PARAMETERS:
        name, what = ROPE_REFUSED_PARAMETERS[model]
        for key in ("rope_parameters", "rope_scaling"):
            params = config.get(key)
            if isinstance(params, dict) and params.get(name) is not None:
                raise CheckpointError(prefix, f"config {key}.{name} "
                                      f"{shown_value(params[name])}: {what}, which qkv does "
                                      "not compute; refused")
    for key, what in FAMILY_REFUSED_KEYS.get(model, ()):
        if config.get(key) is not None:
            raise CheckpointError(prefix, f"config {key} {shown_value(config[key])}: "
                                  f"{family.title}'s {key} is {what}; refused")
    check_block_type(config, model, layer_index(prefix), prefix)
    for key, what in REFUSED_KEYS:
        if is_set(settings, key):
            raise CheckpointError(prefix, f"config {key} asks for {what}, which qkv does not "
                                  "compute")
    position = config.get("position_embedding_type", "absolute")
    if model in ROPE_BY_KEY and ROPE_BY_KEY[model][0] == "position_embedding_type":
        position = None  # read as the family's switch of RoPE (_uses_rope)
    if position not in (None, "absolute"):
        raise CheckpointError(prefix, f"config position_embedding_type {shown_value(position)}: qkv "
                              "computes no relative position scores")
    for paths in (THETA_PATHS, FACTOR_PATHS):
        one_of(config, prefix, *paths)
    check_rope_type(config, model, prefix)
    return model


def model_function(config: dict[str, Any], prefix: str, tokens: int, widths: tuple[int, int],
                   naming: str | None = None, d_model: int | None = None) -> ModelFunction:
    """The function of the layer under ``prefix`` that ``config`` (config.json) describes.

    ``widths`` are the query and key projections' widths, ``naming`` the layer's tensor
    names (:func:`layer_widths`), which must be the architecture's, ``d_model`` its
    input width, which must be the config's hidden size when it gives one. ``tokens`` is
    not read: a sliding window is written into the fixture, whatever the input's length.
    Raises :class:`CheckpointError` naming the config key (as config.json spells it) of
    anything qkv does not compute.
    """
    del tokens
    read = canonical(config, prefix)
    with _spelled_as_given(config):
        return _model_function(read, prefix, widths, naming, d_model)


def _model_function(config: dict[str, Any], prefix: str, widths: tuple[int, int],
                    naming: str | None, d_model: int | None) -> ModelFunction:
    """:func:`model_function` of a :func:`canonical` config."""
    model = _config_family(config, prefix)
    family = FAMILIES[model]
    if naming is not None and family.naming != naming:
        raise CheckpointError(prefix, f"config model_type {shown_value(model)}, but the tensors under "
                              "it are not that architecture's: is config.json this model's?")
    if naming is not None and family.path is not None and not re.search(
            r"(?:^|\.)" + family.path + "$", prefix):
        shown = family.path.replace("\\.", ".").replace("[^.]+", "N").replace(
            "(?:encoder|decoder)", "encoder|decoder")
        raise CheckpointError(prefix, f"config model_type {shown_value(model)}: {family.title}'s "
                              f"attention layers sit under {shown}, not under this prefix: is "
                              "config.json this model's?")
    hidden = int_value(config, prefix, *HIDDEN_KEYS)
    value_input = None
    if model in BOTTLENECKED:  # its query and key read the bottleneck's width, not hidden's
        hidden, value_input = _bottleneck(config, model, d_model, prefix)
    if d_model is not None and hidden is not None and hidden != d_model:
        key = next(k for k in HIDDEN_KEYS if config.get(k) is not None)
        raise CheckpointError(prefix, f"config {key} {hidden}, but the layer reads "
                              f"inputs {d_model} wide: is config.json this model's?")
    heads = int_value(config, prefix, *_heads_keys(model, prefix))
    if heads is None:
        raise CheckpointError(prefix, "config gives no "
                              f"{' (or '.join(_heads_keys(model, prefix)[:2])}"
                              f"{')' if len(_heads_keys(model, prefix)) > 1 else ''}")
    if family.naming in ("blocks", "bigcode", "falcon"):  # one packed tensor: split by the config
        widths = _packed_widths(config, model, heads, widths[0], hidden or d_model, prefix)
    kv_heads = (int_value(config, prefix, "num_key_value_heads") if family.naming in ("linear", "blocks")
                else None)
    if model in ("gpt_bigcode", "falcon"):
        kv_heads = widths[1] * heads // widths[0]
    head_dim = (int_value({**DEFAULTS.get(model, {}), **config}, prefix, "head_dim")
                if model not in (*NEOX_ROPE, "gptj", "codegen") else None)
    defaulted = "head_dim" not in config and "head_dim" in DEFAULTS.get(model, {})
    if head_dim is None and widths[0] % heads:
        raise CheckpointError(prefix, f"config says {shown_value(heads)} heads, which do not divide "
                              f"the query projection's width {widths[0]}")
    head_dim = head_dim or widths[0] // heads
    if heads * head_dim != widths[0] or (kv_heads or heads) * head_dim != widths[1]:
        said = (f" (config.json gives no head_dim: {model}'s default is {head_dim})"
                if defaulted else "")
        raise CheckpointError(prefix, f"config says {shown_value(heads)} heads and "
                              f"{shown_value(kv_heads or heads)} K/V heads of "
                              f"{shown_value(head_dim)}{said}, but the projections are query "
                              f"{widths[0]}, key {widths[1]} wide")
    if model in FULL_WIDTH_QK_LAYER_NORMS:
        _check_full_width(config, family.title, heads, kv_heads, head_dim,
                          hidden if hidden is not None else d_model, prefix)
    index = layer_index(prefix)
    _check_layer_count(config, model, index, prefix)
    for key in ("layer_types",):  # an entry qkv cannot read might be a window of its own
        if config.get(key) is not None:
            other = HYBRID_LAYERS.get(model, ())  # a hybrid's layers of another kind
            listed_type(config, key, 0, ("full_attention", "sliding_attention", *other),
                         prefix)
            here = listed_type(config, key, index, ("full_attention", "sliding_attention",
                                                     *other), prefix) if other else None
            if here in other:
                raise CheckpointError(prefix, f"config layer_types calls this layer "
                                      f"{shown_value(here)}: not a softmax attention layer")
    if family.window is None and config.get("sliding_window") is not None:
        raise CheckpointError(prefix, f"config sliding_window {shown_value(config['sliding_window'])}:"
                              f" {model}'s attention has no sliding window in transformers; "
                              "is config.json this model's?")
    window = window_of(config, model, family.window, index, prefix)
    scale = _scale({**DEFAULTS.get(model, {}), **config}, family.scale, head_dim, index, prefix,
                   NULL_MULTIPLIER_IS_INVERSE_SQRT.get(model, False))
    rope = None
    falcon_alibi = model == "falcon" and flag_value(config, "alibi", False, prefix)
    if model in TYPE_THETAS:  # each type of layer its own theta
        rope = type_rope(config, model, layer_type_of(config, model, index, prefix), head_dim,
                          family.rope or "half", prefix)
    elif falcon_alibi:  # FalconAttention turns Q and K only without ALiBi
        pass
    elif family.rope is not None and uses_rope(config, model, index, prefix):
        if model in STORED_ROPE:  # the checkpoint's own table, whatever rope_theta says
            rope = RopeSpec(None, head_dim, family.rope, stored=STORED_ROPE[model])
        else:
            rope = rope_of(config, model, family.rope, head_dim, prefix,
                           int_value(config, prefix, "head_dim") if model in NEOX_ROPE
                           else None)
    alibi = None
    if model == "bloom" or falcon_alibi:  # BLOOM's slopes (Falcon's are the same):
        alibi = tuple(_bloom_slopes(heads))  # a function of the heads alone
    clip_qkv = None
    if model in CLIP_QKV and config.get("clip_qkv") is not None:
        clip_qkv = positive(config["clip_qkv"], "clip_qkv", prefix)
    if model == "mpt":
        alibi, scale, clip_qkv = _mpt(config, heads, head_dim, prefix)
    softcap = None
    if model in SOFTCAP:
        value = {**DEFAULTS[model], **config}.get("attn_logit_softcapping")
        softcap = None if value is None else positive(value, "attn_logit_softcapping", prefix)
    biased, bias_said = _biases(config, model, family, prefix)
    out_bias = OUT_BIAS_PARAMETERS.get(model)
    held, out_said = (False, "") if out_bias is None else _out_bias_layer(config, model, index,
                                                                         prefix)
    return ModelFunction(
        heads, _causal(config, family, prefix), None if kv_heads in (None, heads) else kv_heads,
        head_dim, rope, scale, model, window, family.naming, softcap, alibi, clip_qkv,
        _qk_norm(config, model, prefix),
        # FalconAttention: (scores + alibi) * inv_norm_factor, its build_alibi_tensor
        # rounding slopes, positions and products to bfloat16
        alibi_scaled=falcon_alibi, alibi_rounding="bfloat16" if falcon_alibi else None,
        out=family.out, biased=biased, bias_said=bias_said, out_bias=out_bias,
        out_bias_held=held, out_bias_said=out_said, value_input=value_input)


def _bottleneck(config: dict[str, Any], model: str, d_model: int | None,
                prefix: str) -> tuple[int, int | None]:
    """A family of :data:`BOTTLENECKED`: the width its query and key read
    (``true_hidden_size``, as MobileBertConfig derives it), and the width of the values'
    own input (``hidden_size``: the layer's input) or ``None`` when V reads Q's and K's.
    A stored ``true_hidden_size`` that disagrees, a setting its model cannot run, and a
    query reading another width are refused, naming the keys."""
    settings = {**DEFAULTS.get(model, {}), **config}
    title = FAMILIES[model].title
    hidden = int_value(settings, prefix, "hidden_size")
    intra = int_value(settings, prefix, "intra_bottleneck_size")
    assert hidden is not None and intra is not None  # the family's defaults give both
    use = flag_value(settings, "use_bottleneck", True, prefix)
    attention = flag_value(settings, "use_bottleneck_attention", False, prefix)
    shared = flag_value(settings, "key_query_shared_bottleneck", True, prefix)
    true, source = (intra, "intra_bottleneck_size") if use else (hidden, "hidden_size")
    said = f"use_bottleneck {'true' if use else 'false'}"
    stored = config.get("true_hidden_size")
    if stored is not None and stored != true:
        raise CheckpointError(prefix, f"config true_hidden_size {shown_value(stored)} and "
                              f"{source} {true} disagree ({title}'s config derives "
                              f"true_hidden_size from {source} with {said}); refused")
    if use and not attention and not shared and intra != hidden:
        raise CheckpointError(prefix, "config key_query_shared_bottleneck false with "
                              "use_bottleneck true and use_bottleneck_attention false: "
                              f"{title}'s query, key and value then read the layer's input "
                              f"(hidden_size {hidden}), but its query and key are built for "
                              f"intra_bottleneck_size {intra} (transformers cannot run it); "
                              "refused")
    if d_model is not None and d_model != true:
        raise CheckpointError(prefix, f"config {source} {true} ({said}) is the width "
                              f"{title}'s query and key read, but the layer's query reads "
                              f"inputs {d_model} wide: is config.json this model's?")
    return true, (hidden if use and shared and not attention else None)


def _out_bias_layer(config: dict[str, Any], model: str, index: int | None,
                    prefix: str) -> tuple[bool, str]:
    """Whether the layer under ``prefix`` holds its family's output bias parameter
    (:data:`OUT_BIAS_PARAMETERS`: the last layer alone), and what says so."""
    name = OUT_BIAS_PARAMETERS[model]
    if index is None:
        raise CheckpointError(prefix, f"config model_type {shown_value(model)} gives its last "
                              f"layer alone a {name}: qkv needs the layer's number in the "
                              "prefix (layers.N.attention.)")
    count = int_value({**DEFAULTS.get(model, {}), **config}, prefix, "num_hidden_layers")
    assert count is not None
    said = "" if config.get("num_hidden_layers") is not None else (
        " (the family's default: config.json leaves it out)")
    return index == count - 1, (f"config num_hidden_layers is {count}{said} and "
                                f"{FAMILIES[model].title} gives its last layer alone a {name}")


LAYERS_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")


def _check_layer_count(config: dict[str, Any], model: str, index: int | None,
                       prefix: str) -> None:
    """Refuse a layer number past the config's count of layers: the model built from that
    config has no such layer (transformers leaves its tensors unread)."""
    if index is None:
        return
    keys: tuple[str, ...] = LAYERS_KEYS
    if FAMILIES[model].causal == "prefix":
        keys = ("decoder_layers",) if "decoder" in prefix.split(".") else ("encoder_layers",)
    key = next((k for k in keys if config.get(k) is not None), None)
    if key is None:
        return
    count = int_value(config, prefix, key)
    if count is not None and index >= count:
        raise CheckpointError(prefix, f"the prefix names layer {index}, but config {key} is "
                              f"{count}: the model built from config.json has no such layer")


def _biases(config: dict[str, Any], model: str, family: ModelFamily,
            prefix: str) -> tuple[tuple[str, ...], str]:
    """The projection modules of the family's layer that carry a bias (each module's
    ``nn.Linear(..., bias=...)`` in transformers), and what says so, for a refusal."""
    naming = family.naming
    if naming in ("gpt2", "bigcode"):
        modules: tuple[str, ...] = ("c_attn", "c_proj")
    elif naming in ("neox", "falcon"):
        modules = ("query_key_value", "dense")
    elif naming == "mpt":
        modules = ("Wqkv", family.out)
    elif naming in ("codegen", "blocks"):
        modules = ("qkv_proj", family.out)
    else:
        modules = (*TRIO_MODULES[naming], family.out or OUTSIDE_OUT.get(naming, ""))
    modules = tuple(m for m in modules if m)
    rule = family.biases
    name = shown_value(model)
    if rule == "all":
        return modules, f"config model_type {name} gives every projection a bias"
    if rule == "none":
        return (), f"config model_type {name} builds its projections without biases"
    if rule == "qkv":
        return modules[:3], f"config model_type {name} gives q_proj, k_proj and v_proj biases"
    if rule == "out":
        return modules[-1:], f"config model_type {name} gives only {family.out} a bias"
    if rule == "not_key":
        return tuple(m for m in modules if m != "k_proj"), (
            f"config model_type {name} gives every projection but k_proj a bias")
    settings = {**DEFAULTS.get(model, {}), **config}

    def by_key(key: str) -> tuple[bool, str]:
        on = flag_value(settings, key, False, prefix)
        return on, f"config {key} is {'true' if on else 'false'}" + (
            "" if config.get(key) is not None else " (the family's default: config.json "
            "leaves it out)")

    if "|" in rule:  # the query, key and value's rule | the output projection's
        biased: tuple[str, ...] = ()
        said_parts = []
        for part, group in zip(rule.split("|"), (modules[:3], modules[3:]), strict=True):
            shown = ", ".join(group)
            if part in ("all", ""):
                on = part == "all"
                said_parts.append(f"config model_type {name} builds {shown} "
                                  f"{'with' if on else 'without'} a bias")
            else:
                on, text = by_key(part)
                said_parts.append(f"{text} ({shown})")
            biased += group if on else ()
        return biased, "; ".join(said_parts)
    on, said = by_key(rule)
    if rule == "use_qkv_bias":
        return (modules[:3] if on else ()), said
    return (modules if on else ()), said


def _check_full_width(config: dict[str, Any], title: str, heads: int, kv_heads: int | None,
                      head_dim: int, hidden: int | None, prefix: str) -> None:
    """A family of :data:`FULL_WIDTH_QK_LAYER_NORMS` runs only with Q and K ``hidden_size``
    wide (its norms are built so): grouped-query heads, or heads that do not fill the
    hidden size, are refused naming the key."""
    if kv_heads not in (None, heads):
        raise CheckpointError(prefix, f"config num_key_value_heads {shown_value(kv_heads)}: "
                              f"{title}'s config refuses grouped-query heads (they must equal "
                              f"num_attention_heads {shown_value(heads)}, and its key norm is "
                              "hidden_size wide); refused")
    if hidden is not None and heads * head_dim != hidden:
        said = (f"config head_dim {shown_value(config['head_dim'])}"
                if config.get("head_dim") is not None else
                f"the query projection {heads * head_dim} wide (config.json gives no "
                "head_dim: the config's is hidden_size / num_attention_heads)")
        raise CheckpointError(prefix, f"{said}: {title}'s q_norm and k_norm are LayerNorms "
                              f"hidden_size ({hidden}) wide, which its {heads} heads of "
                              f"{head_dim} do not fill (transformers cannot run it); refused")


def _qk_norm(config: dict[str, Any], model: str, prefix: str) -> NormFunction | None:
    """The family's q/k norm: its kind, span, eps, offset and tensors (``None``: none)."""
    if model in FULL_WIDTH_QK_LAYER_NORMS:
        return FULL_WIDTH_QK_LAYER_NORMS[model]
    settings = {**DEFAULTS.get(model, {}), **config}
    if model in LAYER_NORMS:
        key, norm = LAYER_NORMS[model]
        if not flag_value(settings, key, False, prefix):
            return None
        eps = positive(settings.get("layer_norm_eps", 1e-5), "layer_norm_eps", prefix)
        return norm._replace(eps=eps)
    if model not in QK_NORMS:
        return None
    if model in QK_NORM_FLAGS and not flag_value(settings, QK_NORM_FLAGS[model], False, prefix):
        return None
    span, offset = QK_NORMS[model]
    eps = positive(settings.get("rms_norm_eps"), "rms_norm_eps", prefix)
    return NormFunction(span, eps, offset,
                        modules=QK_NORM_MODULES.get(model, ("q_norm", "k_norm")),
                        after="rope" if model in QK_NORM_AFTER_ROPE else "projection")


def _mpt(config: dict[str, Any], heads: int, head_dim: int,
         prefix: str) -> tuple[tuple[float, ...], float | None, float | None]:
    """MPT's ALiBi slopes, score factor (``softmax_scale``) and ``clip_qkv``, from its
    nested ``attn_config``."""
    attn = config.get("attn_config") or {}
    if not isinstance(attn, dict):
        raise CheckpointError(prefix, "config attn_config must be an object")
    for key, value in MPT_ATTENTION.items():
        given = attn.get(key, value)
        if given != value or type(given) is not type(value):
            raise CheckpointError(prefix, f"config attn_config.{key} {shown_value(given)}: "
                                  f"transformers' MPT computes {shown_value(value)}; refused")
    scale = None if attn.get("softmax_scale") is None else positive(
        attn["softmax_scale"], "attn_config.softmax_scale", prefix)
    clip_qkv = None if attn.get("clip_qkv") is None else positive(
        attn["clip_qkv"], "attn_config.clip_qkv", prefix)
    # build_mpt_alibi_tensor: 1 / 2^(i * 8 / n) for the next power of two n, odd then even
    # when the heads are fewer
    power = 1 << (heads - 1).bit_length()
    slopes = [1.0 / 2.0 ** (i * (8 / power)) for i in range(1, power + 1)]
    if power != heads:
        slopes = (slopes[1::2] + slopes[::2])[:heads]
    del head_dim
    return tuple(slopes), scale, clip_qkv


def _bloom_slopes(heads: int) -> list[float]:
    """BLOOM's ALiBi slopes (``_get_alibi_slopes``): ``2^(-8i/n)``, ``i = 1..n``, for ``n``
    the largest power of two up to ``heads``, then odd powers of the next one's base."""
    closest = 1 << (heads.bit_length() - 1)
    base = 2.0 ** (-(2.0 ** -(math.log2(closest) - 3)))
    slopes = [base ** power for power in range(1, closest + 1)]
    if closest != heads:
        extra = 2.0 ** (-(2.0 ** -(math.log2(2 * closest) - 3)))
        slopes += [extra ** power for power in range(1, 1 + 2 * min(closest, heads - closest), 2)]
    return slopes


def _packed_widths(config: dict[str, Any], model: str, heads: int, rows: int,
                   hidden: int | None, prefix: str) -> tuple[int, int]:
    """The query and key widths of a packed projection of ``rows`` rows: Phi-3's heads and
    ``num_key_value_heads``, GPT-BigCode's and Falcon's one K/V head (``multi_query``) or
    one per head (Falcon's ``new_decoder_architecture``: ``num_kv_heads``),
    each ``head_dim`` (``hidden / heads`` unless the config says) wide."""
    settings = {**DEFAULTS.get(model, {}), **config}
    if model == "gpt_bigcode":
        kv = 1 if flag_value(settings, "multi_query", True, prefix) else heads
    elif model == "falcon":  # FalconAttention._split_heads
        if flag_value(settings, "new_decoder_architecture", False, prefix):
            kv = int_value(config, prefix, "num_kv_heads") or heads
        else:
            kv = 1 if flag_value(settings, "multi_query", True, prefix) else heads
            given = config.get("num_kv_heads")
            if kv == heads and given is not None and given != heads:
                raise CheckpointError(prefix, f"config num_kv_heads {shown_value(given)} with "
                                      "multi_query false and no new_decoder_architecture: "
                                      "transformers' Falcon packs a key and a value per head "
                                      "there and cannot run it; refused")
    else:
        kv = int_value(config, prefix, "num_key_value_heads") or heads
    head_dim = int_value(config, prefix, "head_dim")
    if head_dim is None:
        if hidden is None or hidden % heads:
            key = next((k for k in HIDDEN_KEYS if config.get(k) is not None), "hidden_size")
            raise CheckpointError(prefix, f"config says {heads} heads, which do not divide "
                                  f"{key} {shown_value(hidden)} (and it gives no head_dim)")
        head_dim = hidden // heads
    if rows != (heads + 2 * kv) * head_dim:
        raise CheckpointError(prefix, f"config says {heads} heads and {kv} K/V heads of "
                              f"{head_dim}, but the packed projection has {rows} rows, not "
                              f"{(heads + 2 * kv) * head_dim}: is config.json this model's?")
    return heads * head_dim, kv * head_dim


def _heads_keys(model: str, prefix: str) -> tuple[str, ...]:
    """Where the config says the layer's heads: an encoder-decoder model says them per side,
    a family's own spelling (:data:`ALIASES`, XGLM's ``attention_heads``) comes first."""
    if FAMILIES[model].causal == "prefix":
        side = "decoder" if "decoder" in prefix.split(".") else "encoder"
        return (f"{side}_attention_heads",)
    own = tuple(alias for alias, key in ALIASES.get(model, {}).items()
                if key == HEADS_KEYS[0])
    return (*own, *HEADS_KEYS)


def _causal(config: dict[str, Any], family: ModelFamily, prefix: str) -> bool:
    """Whether the family's layer under ``prefix`` masks later keys."""
    if family.causal == "yes":
        return True
    if family.causal == "no":
        return False
    if family.causal == "decoder":
        return flag_value(config, "is_decoder", False, prefix)
    if family.causal == "causal":  # XLMModel's get_masks(..., config.causal)
        return flag_value(config, "causal", False, prefix)
    parts = prefix.split(".")
    if "encoder_attn" in parts or "crossattention" in parts:
        raise CheckpointError(prefix, "a cross-attention layer (keys and values from the "
                              "encoder); qkv computes self-attention only")
    # encoder-decoder models: the decoder's self-attention is causal, the encoder's is not
    if "decoder" in parts:
        return True
    if "encoder" in parts:
        return False
    raise CheckpointError(prefix, "qkv cannot tell from the prefix whether this layer is the "
                          "encoder's (not causal) or the decoder's (causal): give the prefix "
                          "from the checkpoint's own names (qkv inspect lists them)")


def _scale(config: dict[str, Any], rule: str | None, head_dim: int, index: int | None,
           prefix: str, null_is_default: bool = False) -> float | None:
    """The family's score factor (``None``: ``1/sqrt(d_k)``)."""
    if rule == "one":  # GPT-Neo does not scale its scores
        return 1.0
    if rule == "bigcode":  # GPTBigCodeAttention: head_dim**-0.5 if scale_attn_weights else 1
        return None if flag_value(config, "scale_attn_weights", True, prefix) else 1.0
    if rule == "gemma2":  # Gemma2Attention: query_pre_attn_scalar**-0.5, not head_dim's
        value = config.get("query_pre_attn_scalar")
        return float(positive(value, "query_pre_attn_scalar", prefix) ** -0.5)
    if rule == "key_multiplier":  # Falcon-H1 multiplies K by it: the scores, by linearity
        value = config.get("key_multiplier")
        multiplier = positive(1.0 if value is None else value, "key_multiplier", prefix)
        return float(multiplier * head_dim ** -0.5)
    if rule == "granite":
        value = config.get("attention_multiplier")
        if value is None and null_is_default:  # HyperCLOVAXConfig: null is head_dim**-0.5
            return None
        return positive(value, "attention_multiplier", prefix)
    if rule != "gpt2":
        return None
    # GPT2Attention: scaling = head_dim**-0.5 if scale_attn_weights else 1.0, then
    # divided by layer_idx + 1 if scale_attn_by_inverse_layer_idx
    weights = flag_value(config, "scale_attn_weights", True, prefix)
    by_layer = flag_value(config, "scale_attn_by_inverse_layer_idx", False, prefix)
    if weights and not by_layer:
        return None
    scale = head_dim ** -0.5 if weights else 1.0
    if by_layer:
        if index is None:
            raise CheckpointError(prefix, "config scale_attn_by_inverse_layer_idx needs the "
                                  "layer's number in the prefix (h.N.attn.)")
        scale /= float(index + 1)
    return scale


