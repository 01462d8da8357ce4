"""The family table as people read it (``qkv attend --families``): each ``model_type``
qkv computes from a checkpoint with the pieces of its attention, and each one it refuses
by name with the piece it lacks. Written from :mod:`qkvcli.authoring.model_families`
alone, so the listing cannot drift from what ``qkv init`` reads. No I/O.
"""

from __future__ import annotations

from qkvcli.authoring.model_families import (
    BLOCK_TYPES,
    BOTTLENECKED,
    CLIP_QKV,
    DEFAULT_ROPE_ONLY,
    FAMILIES,
    FULL_WIDTH_QK_LAYER_NORMS,
    LAYER_NORMS,
    OUT_BIAS_PARAMETERS,
    PARTIAL_ROTARY,
    QK_NORM_AFTER_ROPE,
    QK_NORM_FLAGS,
    QK_NORMS,
    REFUSED_MODELS,
    ROPE_BY_KEY,
    ROPE_THETA,
    SCALED_BY_DEFAULT,
    SOFTCAP,
    STORED_ROPE,
    TYPE_THETAS,
    ModelFamily,
)
from qkvcli.reading.rope import SCALING_KEYS

TENSORS = {"gpt2": "c_attn, c_proj (Conv1D)", "bert": "query, key, value; output.dense",
           "distil": "q_lin, k_lin, v_lin, out_lin", "neox": "query_key_value (per head), dense",
           "falcon": "query_key_value (per K/V head), dense", "mpt": "Wqkv (row blocks), {out}",
           "blocks": "qkv_proj (row blocks), {out}", "bigcode": "c_attn, c_proj",
           "codegen": "qkv_proj (4 blocks), out_proj", "linear": "q_proj, k_proj, v_proj, {out}"}
MASKS = {"yes": "causal", "no": "bidirectional", "decoder": "causal when is_decoder",
         "causal": "causal when causal",
         "prefix": "encoder bidirectional, decoder causal"}
WINDOWS = {"all": "sliding window", "qwen3_moe": "sliding window with use_sliding_window",
           "qwen2": "sliding layers by max_window_layers or layer_types",
           "smollm3": "sliding layers by layer_types", "gemma2": "sliding layers by layer_types",
           "types": "sliding layers by layer_types", "gpt_neo": "local layers by attention_layers",
           "two_sided": "a two-sided window on the sliding layers by layer_types",
           "blocks": "sliding window on every attention block"}
SCALES = {"gpt2": "scale_attn_weights, scale_attn_by_inverse_layer_idx",
          "bigcode": "scale_attn_weights", "gemma2": "scale query_pre_attn_scalar^-0.5",
          "granite": "scale attention_multiplier", "one": "unscaled scores",
          "key_multiplier": "scale key_multiplier / sqrt(d_head)"}
ALIBI = {"bloom": "ALiBi", "falcon": "RoPE or ALiBi (alibi)", "mpt": "ALiBi, clip_qkv"}


def pieces(model_type: str, family: ModelFamily) -> str:
    """The pieces of ``family``'s attention, in one line."""
    out = family.out or "output.dense"
    parts = [TENSORS[family.naming].format(out=out), MASKS[family.causal]]
    if model_type in ALIBI:
        parts.append(ALIBI[model_type])
    elif family.rope is not None:
        rope = f"RoPE ({family.rope}"
        rope += ", partial" if model_type in PARTIAL_ROTARY or model_type in (
            "gptj", "codegen") else ""
        rope += (", theta per layer type" if model_type in TYPE_THETAS else
                 f", theta {ROPE_THETA[model_type]:.0f}" if model_type in ROPE_THETA else "")
        rope += (f", {SCALED_BY_DEFAULT[model_type]} by default" if model_type in
                 SCALED_BY_DEFAULT else "")
        rope += (f", the checkpoint's own {STORED_ROPE[model_type]}" if model_type in
                 STORED_ROPE else "")
        rope += (f", with {ROPE_BY_KEY[model_type][0]} {ROPE_BY_KEY[model_type][1]}"
                 if model_type in ROPE_BY_KEY else "")
        parts.append(rope + ")")
    if model_type in BOTTLENECKED:
        parts.append("query and key read the bottleneck (true_hidden_size), value the "
                     "layer's input (value_input) with use_bottleneck and "
                     "key_query_shared_bottleneck without use_bottleneck_attention")
    if family.window is not None:
        parts.append(WINDOWS[family.window])
    if model_type in BLOCK_TYPES:
        key, attention = BLOCK_TYPES[model_type][:2]
        parts.append(f"the {attention} blocks of {key} only")
    if family.scale is not None:
        parts.append(SCALES[family.scale])
    if model_type in SOFTCAP:
        parts.append("soft-capped scores")
    if model_type in QK_NORMS:
        span = QK_NORMS[model_type][0]
        flag = f" with {QK_NORM_FLAGS[model_type]}" if model_type in QK_NORM_FLAGS else ""
        after = " after RoPE" if model_type in QK_NORM_AFTER_ROPE else ""
        parts.append(f"q/k RMSNorm over the {span}{after}{flag}")
    if model_type in LAYER_NORMS:
        parts.append(f"q/k LayerNorm with {LAYER_NORMS[model_type][0]}")
    if model_type in FULL_WIDTH_QK_LAYER_NORMS:
        parts.append("q/k LayerNorm over the layer (no bias, eps 1e-5)")
    if model_type in CLIP_QKV:
        parts.append("clip_qkv")
    biases = {"all": "every projection", "none": "none", "qkv": "query, key, value",
              "out": "output", "not_key": "all but the key"}.get(family.biases, family.biases)
    if model_type in OUT_BIAS_PARAMETERS:  # a parameter beside the output projection
        biases = f"the last layer's {OUT_BIAS_PARAMETERS[model_type]} (output)"
    parts.append(f"biases: {biases.replace('|', ' (qkv) | ')}".rstrip(" |"))
    return "; ".join(parts)


def families_text() -> str:
    """The whole listing, a line per family."""
    width = max(len(name) for name in (*FAMILIES, *REFUSED_MODELS)) + 2
    scalings = ", ".join(SCALING_KEYS)
    lines = [f"qkv computes {len(FAMILIES)} model families from a checkpoint "
             "(model_type: its title and the pieces of its attention):"]
    lines += [f"  {name:<{width}}{family.title}: {pieces(name, family)}"
              for name, family in sorted(FAMILIES.items())]
    unscaled = ", ".join(FAMILIES[m].title + "'s" for m in DEFAULT_ROPE_ONLY)
    lines += ["", f"RoPE scaling ({scalings}) is read wherever a family's RoPE tables read "
              f"it (not GPT-J's or CodeGen's own tables; {unscaled} computes the default "
              "alone).", "",
              f"qkv refuses {len(REFUSED_MODELS)} model families by name (model_type: what "
              "its attention adds that qkv does not compute):"]
    lines += [f"  {name:<{width}}{why}" for name, why in sorted(REFUSED_MODELS.items())]
    lines += ["", "Any other model_type is refused: qkv does not know its attention."]
    return "\n".join(lines) + "\n"


def families_facts() -> dict[str, list[dict[str, str]] | list[str]]:
    """The same listing as data: each computed model family with its title and pieces,
    each refused one with what it lacks (sorted by model_type), the RoPE scaling types
    read, and the families whose RoPE is the default alone."""
    return {
        "computed": [{"model_type": name, "title": family.title,
                      "pieces": pieces(name, family)}
                     for name, family in sorted(FAMILIES.items())],
        "refused": [{"model_type": name, "lacks": why}
                    for name, why in sorted(REFUSED_MODELS.items())],
        "rope_scaling": list(SCALING_KEYS),
        "default_rope_only": sorted(DEFAULT_ROPE_ONLY),
    }
