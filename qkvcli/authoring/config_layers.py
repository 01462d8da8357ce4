"""A config's layers: which type a layer index is (``layer_types``, GPT-Neo's
``attention_layers``, a family's pattern) and the sliding window it attends through,
one-sided or, for a bidirectional encoder's local layers, two-sided; each read as
transformers reads it, or refused naming the key."""

from __future__ import annotations

from typing import Any

from qkvcli.authoring.config_values import flag_value, int_value
from qkvcli.authoring.model_families import (
    BLOCK_TYPES,
    DEFAULTS,
    FAMILIES,
    HYBRID_LAYERS,
    LAYER_PATTERNS,
    ROPE_BY_KEY,
    ROPE_ON_SLIDING,
    TWO_SIDED_WINDOWS,
    WINDOW_FLAGS,
)
from qkvcli.authoring.tensor_names import CheckpointError, shown_value


def layer_type_of(config: dict[str, Any], model: str, index: int | None, prefix: str) -> str:
    """A Gemma 3 or OLMo 3 layer's type: ``layer_types``, else every N-th layer
    (:data:`LAYER_PATTERNS`) is full and the others slide, as the family's config
    derives it."""
    layer_type = listed_type(config, "layer_types", index, ("full_attention", "sliding_attention",
                                                              *HYBRID_LAYERS.get(model, ())),
                              prefix)
    if layer_type is not None:
        return layer_type
    title = FAMILIES[model].title
    if index is None:
        raise CheckpointError(prefix, f"config gives no layer_types: {title}'s sliding layers "
                              "need the layer's number in the prefix")
    if model not in LAYER_PATTERNS:  # saved configs list them; older ones qkv does not guess
        raise CheckpointError(prefix, f"config gives no layer_types: qkv does not derive which "
                              f"of {title}'s layers slide; refused (give layer_types)")
    key, fixed, offset = LAYER_PATTERNS[model]
    pattern = fixed if key is None else int_value({**DEFAULTS[model], **config}, prefix, key)
    return ("sliding_attention" if pattern is None or (index + offset) % pattern
            else "full_attention")


def listed_type(config: dict[str, Any], key: str, index: int | None, allowed: tuple[str, ...],
                prefix: str) -> str | None:
    """Entry ``index`` of the list ``config[key]`` (each one of ``allowed``); ``None`` when
    the config has no such list."""
    types = config.get(key)
    if types is None:
        return None
    if not isinstance(types, list) or any(layer_type not in allowed for layer_type in types):
        # an entry qkv cannot read might be a window of its own: never guess it is full
        wanted = " and ".join(f'"{layer_type}"' for layer_type in allowed)
        raise CheckpointError(prefix, f"config {key} must be a list of {wanted}, got "
                              f"{shown_value(types)}")
    if index is None or index >= len(types):
        raise CheckpointError(prefix, f"config {key} has no entry for this layer (the "
                              f"prefix's layer number {shown_value(index)})")
    return str(types[index])


def neo_attention_layers(config: dict[str, Any], prefix: str) -> list[Any]:
    """GPT-Neo's ``attention_layers`` derived from ``attention_types`` as GPTNeoConfig
    does: each ``[[types...], repeats]`` entry adds its types ``repeats`` times."""
    types = config.get("attention_types")
    problem = CheckpointError(prefix, "config gives no attention_layers, and its "
                              "attention_types must be a list of [[\"global\" or \"local\", "
                              f"...], repeats], got {shown_value(types)}")
    if types is None:
        raise CheckpointError(prefix, "config gives neither attention_layers nor "
                              "attention_types: GPT-Neo's layers are global or local, and only "
                              "those lists say which")
    if not isinstance(types, list):
        raise problem
    layers: list[Any] = []
    for entry in types:
        if (not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[0], list)
                or type(entry[1]) is not int or entry[1] < 0):
            raise problem
        if len(layers) + len(entry[0]) * entry[1] > 1_000_000:
            raise problem
        layers += entry[0] * entry[1]
    return layers


def window_of(config: dict[str, Any], model: str, rule: str | None, index: int | None,
            prefix: str) -> int | None:
    """The layer's sliding window, as its family's model builds the mask (``None``: none)."""
    if rule is None:
        return None
    settings = {**DEFAULTS.get(model, {}), **config}
    full = ("full_attention", "sliding_attention")
    if rule == "gpt_neo":
        layer_type = listed_type(config, "attention_layers", index, ("global", "local"), prefix)
        if layer_type is None:
            layers = neo_attention_layers(config, prefix)
            layer_type = listed_type({"attention_layers": layers}, "attention_layers", index,
                               ("global", "local"), prefix)
        key, sliding = "window_size", layer_type == "local"
    elif rule == "gemma2":  # layer_types, else every other layer from the first slides
        layer_type = listed_type(config, "layer_types", index, full, prefix)
        if layer_type is None:
            if index is None:
                raise CheckpointError(prefix, "config gives no layer_types: Gemma 2's sliding "
                                      "layers need the layer's number in the prefix")
            layer_type = "sliding_attention" if (index + 1) % 2 else "full_attention"
        key, sliding = "sliding_window", layer_type == "sliding_attention"
    elif rule == "types":  # Gemma 3, OLMo 3: layer_types, else the family's pattern
        flag = WINDOW_FLAGS.get(model)
        if flag is not None and not flag_value(config, flag, False, prefix):
            # Qwen2MoeConfig: no window without the flag (its sliding_window becomes 0)
            if (listed_type(config, "layer_types", index,
                             ("full_attention", "sliding_attention"), prefix)
                    == "sliding_attention"):
                raise CheckpointError(prefix, f"config layer_types calls this layer "
                                      f"\"sliding_attention\" but {flag} is false (no "
                                      "window): transformers cannot slide it; refused")
            return None
        key, sliding = "sliding_window", layer_type_of(config, model, index, prefix) == (
            "sliding_attention")
        if sliding and settings.get(key) is None:
            # the model's cache and mask need a window for a sliding layer
            raise CheckpointError(prefix, "config sliding_window null, but this layer is a "
                                  "\"sliding_attention\" one (layer_types or the family's "
                                  "pattern): transformers cannot run it; refused")
    elif rule == "blocks":  # RecurrentGemma: every attention block slides (check_block_type)
        key, sliding = "sliding_window", True
    elif rule == "two_sided":  # ModernBERT, UltraBERT: |i - j| <= reach on sliding layers
        return two_sided_window(config, model, index, prefix)
    elif rule == "all":  # Mistral, Mixtral, Starcoder2: every layer, when set
        key, sliding = "sliding_window", True
    elif rule == "qwen3_moe":  # Qwen3MoeConfig: sliding_window only with use_sliding_window,
        # and then every layer's mask slides (no layer_types, no max_window_layers)
        if not flag_value(config, "use_sliding_window", False, prefix):
            return None
        key, sliding = "sliding_window", True
    elif rule == "qwen2":
        if not flag_value(config, "use_sliding_window", False, prefix):
            # Qwen2Config sets sliding_window to None: a layer layer_types calls sliding
            # has no window to slide, and transformers' attention fails on it
            if (listed_type(config, "layer_types", index, full, prefix)
                    == "sliding_attention"):
                raise CheckpointError(prefix, "config layer_types calls this layer "
                                      "\"sliding_attention\" but use_sliding_window is false "
                                      "(no window): transformers cannot run it; refused")
            return None
        layer_type = listed_type(config, "layer_types", index, full, prefix)
        if layer_type is None:  # Qwen2Config: the layers from max_window_layers on slide
            start = settings.get("max_window_layers")
            if start is not None and (type(start) is not int or start < 0):
                raise CheckpointError(prefix, "config max_window_layers must be an integer of "
                                      f"at least 0, got {shown_value(start)}")
            if index is None:
                raise CheckpointError(prefix, "config max_window_layers needs the layer's "
                                      "number in the prefix (layers.N.self_attn.)")
            # (a null sliding_window makes every layer full there)
            layer_type = "sliding_attention" if (
                start is not None and index >= start
                and settings.get("sliding_window") is not None) else "full"
        key, sliding = "sliding_window", layer_type == "sliding_attention"
    else:  # SmolLM3: the model builds a sliding layer's mask from sliding_window, whatever
        # use_sliding_window says (that flag only derives layer_types when they are absent)
        layer_type = listed_type(config, "layer_types", index, full, prefix)
        if layer_type is None:  # SmolLM3Config: the layers without RoPE slide, when asked
            layer_type = "sliding_attention" if (
                flag_value(config, "use_sliding_window", False, prefix)
                and settings.get("sliding_window") is not None
                and not uses_rope(config, model, index, prefix)) else "full_attention"
        key, sliding = "sliding_window", layer_type == "sliding_attention"
    window = settings.get(key)
    if not sliding:
        return None
    if window is None and rule in ("all", "qwen3_moe"):  # a null window: no window at all
        return None
    if window is None:  # transformers' sliding mask needs a window: it raises, never slides
        # the whole sequence, so a PASS for full attention would not be the model's
        why = {"gpt_neo": "attention_layers or the family's pattern",
               "blocks": "every attention block of block_types slides"}.get(
            rule, "layer_types or the family's pattern")
        raise CheckpointError(prefix, f"config {key} null, but this layer is a sliding one "
                              f"({why}): transformers cannot run it; refused")
    if type(window) is not int or window <= 0:
        raise CheckpointError(prefix, f"config {key} must be a positive integer or null, got "
                              f"{shown_value(window)}")
    return window


def two_sided_window(config: dict[str, Any], model: str, index: int | None,
                      prefix: str) -> int | None:
    """A bidirectional family's window on its sliding layers (:data:`TWO_SIDED_WINDOWS`):
    transformers' mask lets query ``i`` see key ``j`` when ``|i - j| <= reach``, the
    fixture's ``window`` is ``reach + 1`` (``|i - j| < window``); ``None`` on a full layer."""
    if layer_type_of(config, model, index, prefix) != "sliding_attention":
        return None
    key, divisor = TWO_SIDED_WINDOWS[model]
    value = {**DEFAULTS.get(model, {}), **config}.get(key)
    if type(value) is not int or value <= 0:
        raise CheckpointError(prefix, f"config {key} must be a positive integer on a sliding "
                              f"layer, got {shown_value(value)}")
    reach = value // divisor
    said = config.get("sliding_window")
    if key != "sliding_window" and said is not None and said != reach:
        # ModernBertConfig's sliding_window sets local_attention to twice it
        raise CheckpointError(prefix, f"config sliding_window {shown_value(said)} and {key} "
                              f"{shown_value(value)} disagree ({key} // {divisor} is the "
                              "reach; two spellings of one setting)")
    return reach + 1


def uses_rope(config: dict[str, Any], model: str, index: int | None, prefix: str) -> bool:
    """SmolLM3 leaves RoPE out of some layers (``no_rope_layers``, 0: none); Cohere 2 and
    EXAONE 4 turn only their sliding layers (:data:`ROPE_ON_SLIDING`)."""
    if model in ROPE_BY_KEY:  # GraniteMoeHybrid: position_embedding_type "rope", or none
        key, wanted, others = ROPE_BY_KEY[model]
        value = config.get(key)
        if value not in (None, wanted, *others):
            unrotated = " or ".join(shown_value(other) for other in others)
            raise CheckpointError(prefix, f"config {key} {shown_value(value)}: {model} reads "
                                  f"{shown_value(wanted)} (RoPE) or {unrotated} (none); "
                                  "refused")
        return bool(value == wanted)
    if model in ROPE_ON_SLIDING:
        if ROPE_ON_SLIDING[model] and {**DEFAULTS.get(model, {}), **config}.get(
                "sliding_window") is None:
            return True  # no window at all: every layer turns
        return layer_type_of(config, model, index, prefix) == "sliding_attention"
    if model != "smollm3":
        return True
    flags = config.get("no_rope_layers")
    if flags is None:
        interval = config.get("no_rope_layer_interval", 4)
        if type(interval) is not int or interval <= 0:
            raise CheckpointError(prefix, "config no_rope_layer_interval must be a positive "
                                  f"integer, got {shown_value(interval)}")
        if index is None:
            raise CheckpointError(prefix, "config no_rope_layer_interval needs the layer's "
                                  "number in the prefix (layers.N.self_attn.)")
        return (index + 1) % interval != 0
    if not isinstance(flags, list) or any(f not in (0, 1) or isinstance(f, bool) for f in flags):
        raise CheckpointError(prefix, f"config no_rope_layers must be a list of 0 and 1, got "
                              f"{shown_value(flags)}")
    if index is None or index >= len(flags):
        raise CheckpointError(prefix, "config no_rope_layers has no entry for this layer "
                              f"(the prefix's layer number {shown_value(index)})")
    return bool(flags[index] == 1)


def check_block_type(config: dict[str, Any], model: str, index: int | None,
                     prefix: str) -> None:
    """Refuse a layer of a hybrid whose kinds cycle through a config list
    (:data:`BLOCK_TYPES`, RecurrentGemma's ``block_types``) unless it is softmax attention:
    layer ``i`` is entry ``i % len(list)``, as the family's config repeats it. Raises
    :class:`CheckpointError` naming the key."""
    if model not in BLOCK_TYPES:
        return
    key, attention, others, repeats = BLOCK_TYPES[model]
    settings = {**DEFAULTS.get(model, {}), **config}
    blocks = settings.get(key)
    kinds = (attention, *others)
    if (not isinstance(blocks, list) or not blocks
            or any(not isinstance(kind, str) or kind not in kinds for kind in blocks)):
        # the family's model reads any other entry as attention: never guess it meant that
        wanted = " and ".join(f'"{kind}"' for kind in kinds)
        raise CheckpointError(prefix, f"config {key} must be a non-empty list of {wanted}, "
                              f"got {shown_value(blocks)}")
    title = FAMILIES[model].title
    said = "" if key in config else " (the family's default: config.json leaves it out)"
    if index is None:
        raise CheckpointError(prefix, f"config {key}{said}: {title}'s layers cycle through "
                              "it, and qkv needs the layer's number in the prefix")
    count = int_value(settings, prefix, "num_hidden_layers")
    if count is not None and index >= count:
        raise CheckpointError(prefix, f"the prefix names layer {index}, but config "
                              f"num_hidden_layers is {count}"
                              f"{'' if 'num_hidden_layers' in config else ' (its default)'}: "
                              "the model built from config.json has no such layer")
    if index >= repeats * len(blocks):
        raise CheckpointError(prefix, f"the prefix names layer {index}, but {title}'s config "
                              f"repeats {key} {repeats} times ({repeats * len(blocks)} "
                              "layers): transformers cannot build that layer; refused")
    kind = blocks[index % len(blocks)]
    if kind != attention:
        raise CheckpointError(prefix, f"config {key}{said} makes layer {index} a "
                              f"{shown_value(kind)} block (entry {index % len(blocks)} of the "
                              f"list, cycled over the layers): not a softmax attention layer; "
                              f"qkv computes {title}'s {shown_value(attention)} blocks only")
