"""What ``qkv inspect`` recognises in a checkpoint, and the fixture ``qkv init --from-safetensors`` writes.

Recognised layers, each by its own tensor names under a layer prefix (``--prefix``):

* GPT-2 (Conv1D, ``[in, out]``): ``c_attn`` (query|key|value packed on the last axis),
  ``c_proj`` (the output projection);
* LLaMA, Mistral, Qwen2 (``nn.Linear``, ``[out, in]``): ``q_proj``, ``k_proj``, ``v_proj``,
  ``o_proj``; OPT: the same with ``out_proj``;
* BERT, RoBERTa: ``query``, ``key``, ``value`` under ``attention.self.``, the output
  projection at ``attention.output.dense`` (outside that prefix);
* GPT-NeoX, Pythia: ``query_key_value`` (interleaved per head) and ``dense``.

The function is read from the model's ``config.json`` (:func:`model_function`): heads,
K/V heads, causality, RoPE, the score scale. Whatever the config asks for that qkv does
not compute is refused, naming the key (:data:`REFUSED_KEYS`, RoPE scaling, T5's
relative position bias, sliding windows shorter than the input). Without a config,
``--heads`` and ``--causal``/``--no-causal`` must say it; qkv never guesses.

The fixture references the checkpoint's tensors (nothing is copied), each in the file
(or shard) that holds it, and adds a seeded input ``[1, tokens, d_model]`` drawn
uniform in ``[-1, 1)`` by a ``generate`` spec. No I/O here.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from typing import Any

from qkvcli.core.errors import QkvError
from qkvcli.core.names import BRANCHES
from qkvcli.core.record import Record
from qkvcli.core.splitmix import MASK64

Entry = tuple[str, str, tuple[int, ...]]  # name, dtype, shape

# (suffix of a tensor name, what it is), first match wins
_LINEAR = "(torch layout [out,in])"
ROLES = (
    ("attn.c_attn.weight", "GPT-2 c_attn weight: query|key|value packed, Conv1D [d_model,3*W]"),
    ("attn.c_attn.bias", "GPT-2 c_attn bias: query|key|value packed [3*W]"),
    ("attn.c_proj.weight", "GPT-2 c_proj weight: output projection, Conv1D [H*d_v,E_out]"),
    ("attn.c_proj.bias", "GPT-2 c_proj bias: output projection [E_out]"),
    ("attention.query_key_value.weight",
     "GPT-NeoX query_key_value weight: query,key,value interleaved per head [3*W,d_model]"),
    ("attention.query_key_value.bias", "GPT-NeoX query_key_value bias [3*W]"),
    ("attention.dense.weight", f"GPT-NeoX output projection weight {_LINEAR}"),
    ("attention.dense.bias", "GPT-NeoX output projection bias [E_out]"),
    ("attention.output.dense.weight", f"BERT output projection weight {_LINEAR}"),
    ("attention.output.dense.bias", "BERT output projection bias [E_out]"),
    *((f"{short}.{part}", f"{branch} projection {part} {_LINEAR}")
      for short, branch in (("q_proj", "query"), ("k_proj", "key"), ("v_proj", "value"),
                            ("o_proj", "output"), ("out_proj", "output"), ("query", "query"),
                            ("key", "key"), ("value", "value"))
      for part in ("weight", "bias")),
)
# The tensor that marks a layer, and the kind of layer it marks.
ANCHORS = (("c_attn.weight", "gpt2"), ("q_proj.weight", "linear"),
           ("query_key_value.weight", "neox"), ("query.weight", "bert"),
           ("SelfAttention.q.weight", "t5"))
# Mixes the input's seed so it is not the weights' seed (a fixture-wide convention).
INPUT_SEED_TAG = 0x51CE_0001

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


class CheckpointError(QkvError):
    """The checkpoint or its config cannot give the layer under ``prefix``; says why."""

    def __init__(self, prefix: str, problem: str) -> None:
        self.prefix = prefix
        self.problem = problem
        super().__init__(f"prefix {prefix!r}: {problem}" if prefix else problem)


class RopeSpec(Record):
    theta: float
    dims: int
    layout: str = "half"


class ModelFunction(Record):
    """What decides the layer's function beyond its weights, as the fixture will say it."""

    heads: int
    causal: bool
    kv_heads: int | None = None
    head_dim: int | None = None
    rope: RopeSpec | None = None
    scale: float | None = None  # None: 1/sqrt(d_k)
    architecture: str | None = None


def role_of(name: str) -> str | None:
    """What a tensor is, if it is an attention projection qkv recognises, else ``None``."""
    for suffix, role in ROLES:
        if name == suffix or name.endswith("." + suffix):
            return role
    return None


def _natural(text: str) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def layer_prefixes(names: list[str]) -> list[tuple[str, str]]:
    """``(prefix, kind)`` of every attention layer among ``names``, in natural order."""
    found: dict[str, str] = {}
    for name in names:
        for anchor, kind in ANCHORS:
            if name == anchor or name.endswith("." + anchor):
                tail = anchor.split(".", 1)[1] if kind == "t5" else anchor
                prefix = name[:len(name) - len(tail)]
                if kind == "bert" and not prefix.endswith("self."):
                    continue
                found.setdefault(prefix, kind)
                break
    return sorted(found.items(), key=lambda item: _natural(item[0]))


def prefix_problem(prefix: str, layers: list[tuple[str, str]]) -> CheckpointError:
    """The error for a prefix that names no layer: the prefixes that exist, and a guess."""
    if not layers:
        return CheckpointError(prefix, "the checkpoint has no attention layer qkv recognises "
                               "(qkv inspect lists its tensors)")
    names = [p for p, _ in layers]
    shown = ", ".join(names[:6]) + (f" ... ({len(names)} layers)" if len(names) > 6 else "")
    close = difflib.get_close_matches(prefix, names, n=1, cutoff=0.5)
    guess = f"; did you mean {close[0]}?" if close and prefix else ""
    start = "no attention layer under it" if prefix else "--prefix is needed"
    return CheckpointError(prefix, f"{start}; the layer prefixes are {shown}{guess}")


def layer_index(prefix: str) -> int | None:
    """The layer's number in the model: the last integer component of ``prefix``."""
    numbers = re.findall(r"(?:^|\.)(\d+)(?=\.)", prefix)
    return int(numbers[-1]) if numbers else None


def _set(config: dict[str, Any], key: str) -> bool:
    value = config.get(key)
    return value is not None and value is not False and value != 0


def _int(config: dict[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = config.get(key)
        if type(value) is int and value > 0:
            return value
    return None


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
        raise CheckpointError(prefix, f"config {key}.rope_type is {kind!r}: qkv computes only "
                              "the default RoPE (no scaling)")
    theta = params.get("rope_theta")
    if isinstance(theta, bool) or not isinstance(theta, int | float) or not (
            0 < theta < float("inf")):
        raise CheckpointError(prefix, f"config {theta_key} must be a finite positive number, "
                              f"got {theta!r}")
    factor = params.get("partial_rotary_factor", 1.0)
    if not isinstance(factor, int | float) or not 0 < factor <= 1:
        raise CheckpointError(prefix, f"config partial_rotary_factor must be in (0, 1], got "
                              f"{factor!r}")
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
                   kind: str | None = None) -> ModelFunction:
    """The function of the layer under ``prefix`` that ``config`` (config.json) describes.

    ``widths`` are the query and key projections' widths, ``kind`` the layer's tensor
    names (:func:`layer_widths`), which must be the architecture's. Raises
    :class:`CheckpointError` naming the config key of anything qkv does not compute.
    """
    model = config.get("model_type")
    if model == "t5" or model not in SUPPORTED:
        why = (" (relative_attention_num_buckets: a relative position bias, and no "
               "1/sqrt(d_k) scale)" if model == "t5" else "")
        raise CheckpointError(prefix, f"config model_type {model!r}{why}: qkv reads only "
                              f"{', '.join(SUPPORTED)}")
    if kind is not None and KIND_OF_MODEL[str(model)] != kind:
        raise CheckpointError(prefix, f"config model_type {model!r}, but the tensors under "
                              "it are not that architecture's: is config.json this model's?")
    for key, what in REFUSED_KEYS:
        if _set(config, key):
            raise CheckpointError(prefix, f"config {key} asks for {what}, which qkv does not "
                                  "compute")
    position = config.get("position_embedding_type", "absolute")
    if position not in (None, "absolute", "rotary") or (position == "rotary"
                                                        and model in ENCODER_MODELS):
        raise CheckpointError(prefix, f"config position_embedding_type {position!r}: qkv "
                              "computes no relative position scores")
    heads = _int(config, "num_attention_heads", "n_head")
    if heads is None:
        raise CheckpointError(prefix, "config gives no num_attention_heads (or n_head)")
    kv_heads = _int(config, "num_key_value_heads") if model in ROPE_MODELS else None
    head_dim = _int(config, "head_dim") if model != "gpt_neox" else None
    if head_dim is None and model != "gpt_neox" and config.get("head_dim") is not None:
        raise CheckpointError(prefix, f"config head_dim must be a positive integer, got "
                              f"{config['head_dim']!r}")
    head_dim = head_dim or widths[0] // heads
    if heads * head_dim != widths[0] or (kv_heads or heads) * head_dim != widths[1]:
        raise CheckpointError(prefix, f"config says {heads} heads and {kv_heads or heads} K/V "
                              f"heads of {head_dim}, but the projections are query "
                              f"{widths[0]}, key {widths[1]} wide")
    index = layer_index(prefix)
    _check_window(config, model, index, tokens, prefix)
    scale = None
    if model == "gpt2":
        scale = _gpt2_scale(config, head_dim, index, prefix)
    causal = model in CAUSAL_MODELS or bool(config.get("is_decoder"))
    return ModelFunction(
        heads, causal, None if kv_heads in (None, heads) else kv_heads, head_dim,
        _rope(config, str(model), head_dim, prefix) if model in ROPE_MODELS else None,
        scale, str(model))


def _gpt2_scale(config: dict[str, Any], head_dim: int, index: int | None,
                prefix: str) -> float | None:
    # GPT2Attention: scaling = head_dim**-0.5 if scale_attn_weights else 1.0, then
    # divided by layer_idx + 1 if scale_attn_by_inverse_layer_idx
    weights = config.get("scale_attn_weights", True)
    by_layer = config.get("scale_attn_by_inverse_layer_idx", False)
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
    if window is None or (model == "qwen2" and not config.get("use_sliding_window")):
        return
    types = config.get("layer_types")
    if isinstance(types, list) and index is not None and index < len(types) and (
            types[index] != "sliding_attention"):
        return
    if type(window) is not int or tokens > window:
        raise CheckpointError(prefix, f"config sliding_window {window!r}: qkv computes no "
                              f"sliding window, and --tokens {tokens} reaches past it")


def command_line_function(heads: int | None, causal: bool | None, prefix: str) -> ModelFunction:
    """The function given by ``--heads`` and ``--causal``/``--no-causal`` without a config."""
    if heads is None or causal is None:
        missing = " and ".join(m for m, v in (("--heads", heads),
                                              ("--causal or --no-causal", causal)) if v is None)
        raise CheckpointError(prefix, f"no config.json beside the checkpoint: pass {missing} "
                              "(or --config FILE, or put the model's config.json beside it); "
                              "qkv does not guess the layer's function")
    return ModelFunction(heads, causal)


def _matrix(shapes: dict[str, tuple[int, ...]], prefix: str, name: str) -> tuple[int, int]:
    """The shape of the rank-2 tensor ``prefix + name``. Raises :class:`CheckpointError`."""
    shape = shapes[prefix + name]
    if len(shape) != 2 or 0 in shape:
        raise CheckpointError(prefix, f"{name} has shape [{','.join(map(str, shape))}], "
                              "not a non-empty matrix")
    return shape[0], shape[1]


def layer_widths(entries: list[Entry], prefix: str) -> tuple[str, int, tuple[int, int, int]]:
    """``(kind, d_model, (query, key, value widths))`` of the layer under ``prefix``.

    Raises :class:`CheckpointError` (no layer there, listing the prefixes that exist).
    """
    shapes = {name: shape for name, _, shape in entries}
    kinds = dict(layer_prefixes(list(shapes)))
    kind = kinds.get(prefix)
    if kind is None:
        raise prefix_problem(prefix, sorted(kinds.items(), key=lambda i: _natural(i[0])))
    if kind == "t5":
        raise CheckpointError(prefix, "T5's SelfAttention adds a relative position bias and "
                              "does not scale by 1/sqrt(d_k); qkv does not compute it")
    if kind in ("gpt2", "neox"):
        name = "c_attn.weight" if kind == "gpt2" else "query_key_value.weight"
        rows, cols = _matrix(shapes, prefix, name)
        d_model, packed = (rows, cols) if kind == "gpt2" else (cols, rows)
        if packed % 3:
            raise CheckpointError(prefix, f"{name}'s width {packed} is not 3 equal parts")
        return kind, d_model, (packed // 3, packed // 3, packed // 3)
    trio = ("q_proj", "k_proj", "v_proj") if kind == "linear" else ("query", "key", "value")
    for short in trio:
        if prefix + short + ".weight" not in shapes:
            raise CheckpointError(prefix, f"{short}.weight is missing")
    matrices = [_matrix(shapes, prefix, f"{short}.weight") for short in trio]  # [out, in]
    return kind, matrices[0][1], (matrices[0][0], matrices[1][0], matrices[2][0])


def _out_prefix(kind: str, prefix: str, shapes: dict[str, Any]) -> tuple[str, str] | None:
    """Where the layer's output projection lives and in which layout."""
    if kind == "gpt2":
        candidates = [(prefix + "c_proj.", "c_proj")]
    elif kind == "neox":
        candidates = [(prefix + "dense.", "out_proj")]
    elif kind == "bert":
        candidates = [(prefix.removesuffix("self.") + "output.dense.", "out_proj")]
    else:
        candidates = [(prefix + "o_proj.", "out_proj"), (prefix + "out_proj.", "out_proj")]
    return next((c for c in candidates if c[0] + "weight" in shapes), None)


def checkpoint_document(
    entries: list[Entry], locate: Callable[[str], str], prefix: str, function: ModelFunction,
    tokens: int, seed: int,
) -> tuple[dict[str, Any], tuple[int, int, int]]:
    """An attend fixture referencing the layer under ``prefix``, and its
    ``(d_model, query width, value width)``.

    ``locate(name)`` is the path, relative to the fixture's directory, of the file that
    holds tensor ``name`` (a shard of a sharded checkpoint). Raises
    :class:`CheckpointError`.
    """
    shapes = {name: shape for name, _, shape in entries}
    kind, d_model, widths = layer_widths(entries, prefix)

    def ref(name: str) -> dict[str, str] | None:
        return {"safetensors": locate(name), "tensor": name} if name in shapes else None

    weights: dict[str, Any] = {}
    if kind == "gpt2":
        weights["c_attn_weight"] = ref(prefix + "c_attn.weight")
        weights["c_attn_bias"] = ref(prefix + "c_attn.bias")
    elif kind == "neox":
        weights["query_key_value_weight"] = ref(prefix + "query_key_value.weight")
        weights["query_key_value_bias"] = ref(prefix + "query_key_value.bias")
    else:
        trio = ("q_proj", "k_proj", "v_proj") if kind == "linear" else ("query", "key", "value")
        for branch, short in zip(BRANCHES, trio, strict=True):
            entry: dict[str, Any] = {"layout": "torch", **(ref(f"{prefix}{short}.weight") or {})}
            if ref(f"{prefix}{short}.bias") is not None:
                entry["bias"] = ref(f"{prefix}{short}.bias")
            weights[branch] = entry
    out = _out_prefix(kind, prefix, shapes)
    if out is not None:
        weights[f"{out[1]}_weight"] = ref(out[0] + "weight")
        weights[f"{out[1]}_bias"] = ref(out[0] + "bias")
    weights = {key: value for key, value in weights.items() if value is not None}
    document: dict[str, Any] = {
        "chapter": f"{prefix.rstrip('.') or 'checkpoint'}-{function.heads}-heads",
        "seed": seed,
    }
    if function.architecture is not None:
        document["architecture"] = function.architecture
    document["heads"] = function.heads
    if function.kv_heads is not None:
        document["kv_heads"] = function.kv_heads
    document["causal"] = function.causal
    if function.rope is not None:
        document["rope"] = {"theta": function.rope.theta, "dims": function.rope.dims,
                            "layout": function.rope.layout}
    if function.scale is not None:
        document["scale"] = function.scale
    document |= {
        "input": {"generate": {"seed": (seed ^ INPUT_SEED_TAG) & MASK64,
                               "shape": [1, tokens, d_model]}},
        "weights": weights,
        # A real layer has millions of coordinates: check an even sample of each tensor.
        "gradcheck": {"samples": 16},
    }
    return document, (d_model, widths[0], widths[2])


def check_heads(function: ModelFunction, widths: tuple[int, int, int], prefix: str,
                max_heads: int) -> None:
    """Refuse heads (and K/V heads) that do not fit the projections' ``widths``
    (query, key, value). Raises :class:`CheckpointError`."""
    heads, kv = function.heads, function.kv_heads or function.heads
    query, key, value = widths
    if heads > max_heads or query % heads or (kv == heads and value % heads):
        raise CheckpointError(prefix, f"--heads {heads}: must be at most {max_heads} and divide "
                              f"the query/key width {query} and the value width {value}")
    if heads % kv or key % kv or value % kv or query // heads != key // kv:
        raise CheckpointError(prefix, f"{heads} heads and {kv} K/V heads do not fit the query "
                              f"{query}, key {key} and value {value} widths")
    if kv == heads and key != query:
        raise CheckpointError(prefix, f"the key projection is {key} wide and the query {query}: "
                              "grouped-query attention, whose K/V heads only config.json's "
                              "num_key_value_heads says (give --config)")


def config_needed(entries: list[Entry], prefix: str) -> str | None:
    """Why the layer under ``prefix`` cannot be read without its config, or ``None``."""
    kind, _, _ = layer_widths(entries, prefix)
    if kind == "linear" and any(name == prefix + "o_proj.weight" for name, _, _ in entries):
        kind = "q_proj/k_proj/v_proj/o_proj layers (LLaMA, Mistral, Qwen2)"
    elif kind == "neox":
        kind = "GPT-NeoX layers"
    else:
        return None
    return f"{kind} rotate Q and K by a RoPE that only config.json describes"
