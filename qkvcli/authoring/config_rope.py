"""A model's RoPE as its ``config.json`` says it: theta, the share of each head that
turns, the layout, and a scaling (``rope_parameters`` or ``rope_scaling``, per layer
type where the family has types), each read from the spellings the family's
transformers config reads, refused naming the key otherwise."""

from __future__ import annotations

import math
from typing import Any

from qkvcli.authoring.checkpoint import RopeSpec
from qkvcli.authoring.config_values import one_of, positive
from qkvcli.authoring.model_families import (
    DEFAULT_ROPE_ONLY,
    DEFAULTS,
    FAMILIES,
    FORCED_FLAT_FACTOR,
    NEOX_ROPE,
    PARTIAL_ROTARY,
    ROPE_THETA,
    ROTARY_DIM,
    SCALED_BY_DEFAULT,
    SCALING_ON_EVERY_TYPE,
    TYPE_THETAS,
)
from qkvcli.authoring.tensor_names import CheckpointError, shown_value
from qkvcli.core.errors import QkvError
from qkvcli.reading.rope import SCALING_KEYS, read_scaling

THETA_PATHS = ("rope_parameters.rope_theta", "rope_theta", "rotary_emb_base",
               "rope_scaling.rope_theta")


FACTOR_PATHS = ("rope_parameters.partial_rotary_factor", "partial_rotary_factor", "rotary_pct")


NEOX_SPELLINGS = ("rotary_emb_base", "rotary_pct")
"""GPT-NeoX's own spellings of theta and the rotary share: the configs of
:data:`NEOX_ROPE` read them (and not the flat rope_theta / partial_rotary_factor); every
other family's config ignores them."""


def spellings(model: str, paths: tuple[str, ...]) -> tuple[str, ...]:
    """The spellings of a RoPE setting that ``model``'s transformers config reads."""
    if model in NEOX_ROPE:
        return tuple(p for p in paths if p not in ("rope_theta", "partial_rotary_factor"))
    if model in FORCED_FLAT_FACTOR:  # BambaConfig overwrites a flat factor with its own
        return tuple(p for p in paths if p not in (*NEOX_SPELLINGS, "partial_rotary_factor"))
    return tuple(p for p in paths if p not in NEOX_SPELLINGS)


def check_rope_type(config: dict[str, Any], model: str, prefix: str) -> None:
    """Refuse a RoPE scaling, in either spelling (``rope_parameters``, ``rope_scaling``),
    where qkv does not read it: a family without transformers' RoPE tables (GPT-J's and
    CodeGen's own, none at all) or one whose RoPE is per layer type
    (:data:`TYPE_THETAS`, read by :func:`_type_rope`). The others' are read by
    :func:`_scaling`."""
    scaled = FAMILIES[model].rope is not None and model not in (
        "gptj", "codegen", *DEFAULT_ROPE_ONLY)
    for key in ("rope_parameters", "rope_scaling"):
        params = config.get(key)
        if params is None:
            continue
        if not isinstance(params, dict):
            raise CheckpointError(prefix, f"config {key} must be an object or null")
        flat = model in TYPE_THETAS and key == "rope_parameters" and not any(
            k in params for k in TYPE_THETAS[model])
        if (scaled and not flat) or (model in TYPE_THETAS and key == "rope_scaling"):
            continue
        rope_type = params.get("rope_type", params.get("type", "default"))
        if rope_type != "default":
            why = (f"{model}'s config keys its RoPE by layer type and ignores a flat one"
                   if flat else f"{model}'s rotary module computes the default RoPE only "
                   "(transformers raises for another type)" if model in DEFAULT_ROPE_ONLY
                   else f"{model}'s attention has no RoPE tables that read it")
            raise CheckpointError(prefix, f"config {key}.rope_type is {shown_value(rope_type)}: "
                                  f"{why}; refused")


def _scaling_params(config: dict[str, Any], prefix: str) -> tuple[str, dict[str, Any]] | None:
    """The config's one RoPE parameters object and its key: ``rope_scaling`` (transformers
    4's spelling, which transformers 5 takes over ``rope_parameters``) or
    ``rope_parameters``; both, saying different things, are refused."""
    found = [(key, config[key]) for key in ("rope_scaling", "rope_parameters")
             if isinstance(config.get(key), dict) and config[key]]
    if len(found) == 2:
        # transformers takes rope_scaling whole (its theta the flat rope_theta or the
        # family's default): rope_parameters saying anything else is another reading
        plain = [dict(params) for _, params in found]
        kinds = [p.pop("rope_type", p.pop("type", "default")) for p in plain]
        if kinds[0] != kinds[1] or plain[0] != plain[1]:
            raise CheckpointError(prefix, "config rope_scaling and rope_parameters disagree "
                                  "(two spellings of one setting: which one counts depends on "
                                  "the transformers version)")
    return found[0] if found else None


def _scaling(params: dict[str, Any], where: str, config: dict[str, Any], model: str,
             dims: int, prefix: str, nested: bool = False) -> dict[str, Any] | None:
    """The fixture's ``rope.scaling`` from a config's RoPE parameters (``where``: their
    key, for a refusal), every default resolved as transformers resolves it
    (``modeling_rope_utils``), or ``None`` for the default RoPE. ``nested``: the
    parameters of one layer type. Raises :class:`CheckpointError` naming the key."""
    kind = params.get("rope_type", params.get("type", "default"))
    if model == "phi3" and kind in ("su", "yarn") and "rope_type" in params:
        kind = "longrope"  # Phi3Config's reading of its older names
    if kind == "default":
        return None
    if kind not in SCALING_KEYS:
        raise CheckpointError(prefix, f"config {where}.rope_type is {shown_value(kind)}: qkv "
                              f"computes the RoPE scalings {', '.join(SCALING_KEYS)} and the "
                              "default; refused")
    if model == "phi3" and kind != "longrope":
        raise CheckpointError(prefix, f"config {where}.rope_type is {shown_value(kind)}: "
                              "Phi3Config accepts only default and longrope (transformers "
                              "refuses the config); refused")

    def given(key: str) -> Any:
        if key not in params:
            raise CheckpointError(prefix, f"config {where} has rope_type {shown_value(kind)} but "
                                  f"no {key}: transformers cannot build its RoPE; refused")
        return params[key]

    def length(key: str, value: Any) -> int:
        if type(value) is not int or value <= 0:
            raise CheckpointError(prefix, f"config {key} must be a positive integer, got "
                                  f"{shown_value(value)}")
        return value

    def longest() -> int:
        if config.get("max_position_embeddings") is None:
            raise CheckpointError(prefix, f"config {where}.rope_type {shown_value(kind)} reads "
                                  "max_position_embeddings, which config.json leaves out; "
                                  "refused (give it)")
        return length("max_position_embeddings", config["max_position_embeddings"])

    out: dict[str, Any] = {"type": kind}
    if kind == "linear":
        out["factor"] = positive(given("factor"), f"{where}.factor", prefix)
        return out
    if kind == "dynamic":
        out["factor"] = positive(given("factor"), f"{where}.factor", prefix)
        out["max_position_embeddings"] = longest()
        if dims <= 2:  # its base's exponent dims / (dims - 2)
            raise CheckpointError(prefix, f"config {where}.rope_type \"dynamic\" with {dims} "
                                  "rotary dimensions: transformers divides by zero; refused")
        return out
    # yarn, longrope, llama3: the trained length. A flat config's top-level
    # original_max_position_embeddings wins (Phi3Config's always, default 4096)
    top = {**DEFAULTS.get(model, {}), **config}.get("original_max_position_embeddings")
    if top is not None and not nested:
        original = length("original_max_position_embeddings", top)
    elif params.get("original_max_position_embeddings") is not None:
        original = length(f"{where}.original_max_position_embeddings",
                          params["original_max_position_embeddings"])
    else:
        original = longest()
    out["original_max_position_embeddings"] = original
    if kind == "llama3":
        for key in ("factor", "low_freq_factor", "high_freq_factor"):
            out[key] = positive(given(key), f"{where}.{key}", prefix)
        if out["low_freq_factor"] == out["high_freq_factor"]:
            raise CheckpointError(prefix, f"config {where}.low_freq_factor and high_freq_factor "
                                  "are equal: transformers divides by zero; refused")
        return out
    factor_value = params.get("factor") if kind == "longrope" else given("factor")
    factor = (longest() / original if factor_value is None
              else positive(factor_value, f"{where}.factor", prefix))
    out["factor"] = factor
    attention = params.get("attention_factor")
    if attention is not None:  # else the type's default (the maths' attention_factor)
        out["attention_factor"] = positive(attention, f"{where}.attention_factor", prefix)
    if kind == "longrope":
        for key in ("short_factor", "long_factor"):
            values = given(key)
            if (not isinstance(values, list) or len(values) != dims // 2
                    or any(isinstance(v, bool) or not isinstance(v, int | float) for v in values)):
                raise CheckpointError(prefix, f"config {where}.{key} must be a list of "
                                      f"{dims // 2} numbers (one per rotated pair), got "
                                      f"{shown_value(values)}")
            out[key] = [positive(v, f"{where}.{key}", prefix) for v in values]
        return out
    mscale, mscale_all_dim = params.get("mscale"), params.get("mscale_all_dim")
    if mscale and mscale_all_dim:  # transformers weighs the default by them only when both are
        out["mscale"] = positive(mscale, f"{where}.mscale", prefix)
        out["mscale_all_dim"] = positive(mscale_all_dim, f"{where}.mscale_all_dim", prefix)
    for key, default in (("beta_fast", 32.0), ("beta_slow", 1.0)):
        value = params.get(key) or default  # transformers' "or": 0 and null are the default
        out[key] = positive(value, f"{where}.{key}", prefix)
    # transformers reads truncate from the whole rope_parameters object: a layer type's
    # own is never seen
    truncate = True if nested else params.get("truncate", True)
    if truncate is not None and not isinstance(truncate, bool):
        raise CheckpointError(prefix, f"config {where}.truncate must be true or false, got "
                              f"{shown_value(truncate)}")
    out["truncate"] = bool(truncate)
    return out


def rope_of(config: dict[str, Any], model: str, layout: str, head_dim: int,
          prefix: str, table_dim: int | None = None) -> RopeSpec:
    """The default RoPE of the family (transformers 4 and 5 spellings)."""
    theta_key = "rope_theta"
    if model in ("gptj", "codegen"):  # their sin/cos tables use 10000 whatever the config says
        theta, rotary = 10000.0, config.get("rotary_dim", DEFAULTS[model]["rotary_dim"])
        if rotary is None and model == "codegen":  # CodeGenAttention: the whole head
            dims = head_dim
        elif rotary is None:  # GPTJAttention slices [:rotary_dim]: None is no rotary width
            raise CheckpointError(prefix, "config rotary_dim null: transformers' GPT-J needs "
                                  "a rotary width (it does not run without one); refused")
        elif type(rotary) is not int or rotary <= 0 or rotary % 2:
            raise CheckpointError(prefix, f"config rotary_dim must be an even positive integer, "
                                  f"got {shown_value(rotary)}")
        elif rotary > head_dim:
            raise CheckpointError(prefix, f"config rotary_dim {rotary} is wider than a head "
                                  f"({head_dim}): transformers' {model} cannot run it; refused")
        else:
            dims = rotary
    else:
        found = one_of(config, prefix, *spellings(model, THETA_PATHS))
        key, value = found if found is not None else (
            "rope_theta", ROPE_THETA.get(model, 10000.0))
        theta, theta_key = positive(value, key, prefix), key
        factor_found = one_of(config, prefix, *spellings(model, FACTOR_PATHS))
        factor_key, factor = factor_found if factor_found is not None else (
            "partial_rotary_factor", DEFAULTS.get(model, {}).get("partial_rotary_factor", 1.0))
        said = (f"config {factor_key} {factor}" if factor_found is not None
                else f"{model}'s default {factor_key} {factor}")  # as the config spells it
        rotary = config.get("rotary_dim") if model in ROTARY_DIM else None
        if factor_found is None and rotary is not None:  # MiniMaxM2Config: the older spelling
            if type(rotary) is not int or rotary <= 0:
                raise CheckpointError(prefix, "config rotary_dim must be a positive integer, "
                                      f"got {shown_value(rotary)}")
            if rotary > head_dim:
                raise CheckpointError(prefix, f"config rotary_dim {rotary} is wider than a head "
                                      f"({head_dim}): transformers cannot run it; refused")
            factor_key, factor, said = "rotary_dim", rotary / head_dim, f"config rotary_dim {rotary}"
        if isinstance(factor, bool) or not isinstance(factor, int | float) or not 0 < factor <= 1:
            raise CheckpointError(prefix, f"config {factor_key} must be in (0, 1], got "
                                  f"{shown_value(factor)}")
        # as transformers computes it, from the width its RoPE table reads (GPT-NeoX's
        # table reads a config head_dim its attention does not: the table's width decides
        # how many coordinates turn)
        dims = int((table_dim or head_dim) * factor)
        if dims > head_dim:
            raise CheckpointError(prefix, f"config head_dim {table_dim} makes {model}'s RoPE "
                                  f"table {dims} wide, wider than a head ({head_dim}): "
                                  "transformers cannot run it; refused")
        if dims != head_dim and model not in PARTIAL_ROTARY:
            raise CheckpointError(prefix, f"config {factor_key} {factor}: {model} rotates "
                                  "whole heads in qkv's reading; refused")
        if dims < 2 or dims % 2:
            table = f" and head_dim {table_dim}" if table_dim else ""
            raise CheckpointError(prefix, f"{said}{table} gives {dims} rotary dimensions; qkv "
                                  "needs an even number of at least 2")
    scaling = None
    found_params = _scaling_params(config, prefix) if model not in ("gptj", "codegen") else None
    if found_params is None and model in SCALED_BY_DEFAULT:
        raise CheckpointError(prefix, f"config gives no rope_parameters: {model}'s config "
                              f"defaults to a {SCALED_BY_DEFAULT[model]} RoPE scaling whose "
                              "values qkv does not guess; refused (give rope_parameters)")
    if found_params is not None:
        scaling = _scaling(found_params[1], found_params[0], config, model, dims, prefix)
    # theta^(-2i/dims) must be a float64: a theta near 0 turns every angle into NaN
    try:
        largest = theta ** (-(dims - 2) / dims)
    except OverflowError:
        largest = math.inf
    if largest == math.inf:
        raise CheckpointError(prefix, f"config {theta_key} {theta!r} makes the rotation "
                              f"frequencies theta^(-2i/{dims}) overflow float64")
    if scaling is not None:
        _check_scaling(scaling, dims, prefix)
    return RopeSpec(theta, dims, layout, scaling)


def _check_scaling(scaling: dict[str, Any], dims: int, prefix: str) -> None:
    """The scaling's frequencies are defined and finite, as the fixture's reading checks."""
    try:
        read_scaling(scaling, dims)
    except QkvError as error:
        raise CheckpointError(prefix, f"config RoPE scaling {scaling['type']}: {error}") from None


def type_rope(config: dict[str, Any], model: str, layer_type: str, dims: int, layout: str,
               prefix: str) -> RopeSpec:
    """The RoPE of a layer of ``layer_type``: its theta, ``rope_parameters.<layer_type>.rope_theta``
    or the type's flat spelling (:data:`TYPE_THETAS`), and its scaling
    (``rope_parameters.<layer_type>``; a ``rope_scaling`` updates the full layers' entry,
    as Gemma3TextConfig and Olmo3Config do); spellings that disagree are refused.

    OLMo 3 (Olmo3Config, transformers 5): ``rope_parameters`` must be keyed by layer type; a
    flat ``rope_theta`` sets the full layers' theta only (the sliding ones keep
    500000), so a sliding layer with a flat ``rope_theta`` of another value and no
    ``rope_parameters.sliding_attention.rope_theta`` is refused (transformers 4 read it
    for every layer)."""
    thetas = TYPE_THETAS[model]
    flat_key, default = thetas[layer_type]
    params = config.get("rope_parameters")
    if model == "olmo3" and isinstance(params, dict):
        other = next((k for k in params if k not in thetas), None)
        if other is not None:
            raise CheckpointError(prefix, f"config rope_parameters.{other}: OLMo 3's "
                                  "rope_parameters is keyed by layer type "
                                  "(full_attention, sliding_attention); refused")
    entry: dict[str, Any] = {}
    where = f"rope_parameters.{layer_type}"
    if isinstance(params, dict) and any(k in params for k in thetas):
        raw = params.get(layer_type) or {}
        if not isinstance(raw, dict):
            raise CheckpointError(prefix, f"config {where} must be an object or null")
        entry = dict(raw)
    update = config.get("rope_scaling")
    if (layer_type == "full_attention" or model in SCALING_ON_EVERY_TYPE) and isinstance(
            update, dict) and update:
        entry = {"rope_type": "default", **entry, **update}  # the config's .update(rope_scaling)
        where = "rope_scaling"
    for key, value in entry.items():
        if key == "partial_rotary_factor" and value != 1:
            raise CheckpointError(prefix, f"config {where}.{key} {shown_value(value)}: "
                                  f"{model} rotates whole heads in qkv's reading; refused")
    scaling = _scaling(entry, where, config, model, dims, prefix, nested=True)
    if scaling is not None:
        _check_scaling(scaling, dims, prefix)
    nested = entry.get("rope_theta")
    flat = config.get(flat_key) if flat_key is not None else None
    if nested is not None and flat is not None and (
            nested != flat or isinstance(nested, bool) != isinstance(flat, bool)):
        raise CheckpointError(prefix, f"config rope_parameters.{layer_type}.rope_theta "
                              f"{shown_value(nested)} and {flat_key} {shown_value(flat)} "
                              "disagree (two spellings of one setting)")
    if nested is not None:
        theta = positive(nested, f"{where}.rope_theta", prefix)
    elif flat is not None:
        theta = positive(flat, str(flat_key), prefix)
    else:
        loose = config.get("rope_theta")
        if flat_key is None and loose is not None and loose != default:
            title = FAMILIES[model].title
            raise CheckpointError(prefix, f"config rope_theta {shown_value(loose)} and no "
                                  f"rope_parameters.{layer_type}.rope_theta: transformers 5's "
                                  f"{title} gives its {layer_type} layers {default} "
                                  "(rope_theta sets the full layers' only, if any), "
                                  "transformers 4's gave every layer rope_theta; refused (give "
                                  "rope_parameters per layer type)")
        theta = default
    return RopeSpec(theta, dims, layout, scaling)
