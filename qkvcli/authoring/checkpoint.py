"""What ``qkv inspect`` recognises in a checkpoint, and the fixture ``qkv init --from-safetensors`` writes.

Recognised layers, each by its own tensor names under a layer prefix (``--prefix``):

* GPT-2 (Conv1D, ``[in, out]``): ``c_attn`` (query|key|value packed on the last axis),
  ``c_proj`` (the output projection);
* LLaMA, Mistral, Qwen2 (``nn.Linear``, ``[out, in]``): ``q_proj``, ``k_proj``, ``v_proj``,
  ``o_proj``; OPT: the same with ``out_proj``;
* BERT, RoBERTa: ``query``, ``key``, ``value`` under ``attention.self.``, the output
  projection at ``attention.output.dense`` (outside that prefix);
* GPT-NeoX, Pythia: ``query_key_value`` (interleaved per head) and ``dense``.

Which tensor is which is read off the names alone by :mod:`qkvcli.authoring.tensor_names`.
The function is read from the model's ``config.json`` by
:mod:`qkvcli.authoring.config`; without a config, ``--heads`` and
``--causal``/``--no-causal`` must say it (:func:`command_line_function`): qkv never
guesses.

The fixture references the checkpoint's tensors (nothing is copied), each in the file
(or shard) that holds it, and adds a seeded input ``[1, tokens, d_model]`` drawn
uniform in ``[-1, 1)`` by a ``generate`` spec; a layer whose values read an input of
their own (MobileBERT's) gets a seeded ``value_input`` ``[1, tokens, d_v_in]`` too. No
I/O here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from qkvcli.authoring.tensor_names import (
    BUFFERS,
    EXTRA_TENSORS,
    PACKED,
    TRIOS,
    CheckpointError,
    Entry,
    cross_attention,
    layer_prefixes,
    natural_key,
    prefix_problem,
    shown_value,
)
from qkvcli.core.names import BRANCHES
from qkvcli.core.record import Record
from qkvcli.core.splitmix import MASK64
from qkvcli.reading.attend import pieces_document

# Mixes the input's seed so it is not the weights' seed (a fixture-wide convention), and
# the value input's so it is not the input's.
INPUT_SEED_TAG = 0x51CE_0001
VALUE_INPUT_SEED_TAG = 0x51CE_0002



class RopeSpec(Record):
    theta: float | None  # None: the frequencies are the checkpoint's own table (stored)
    dims: int
    layout: str = "half"
    scaling: dict[str, Any] | None = None  # the fixture's rope.scaling (reading.attend)
    stored: str | None = None  # the table's tensor name beside the encoder (ESM's inv_freq)


class NormFunction(Record):
    """A learned norm of Q and K, as the fixture's ``qk_norm`` will say it, and where its
    tensors sit under the prefix."""

    span: str  # "head" (each head alone) or "layer" (a token's whole width)
    eps: float
    offset: float = 0.0  # added to the weight (Gemma 3's 1 + weight)
    kind: str = "rms"  # "rms" (RMSNorm) or "layer" (LayerNorm)
    modules: tuple[str, str] = ("q_norm", "k_norm")  # the query's and the key's module
    rows: str = "shared"  # "shared": [d_head] or [width]; "tensor": one [heads, d_head]
    # tensor (Cohere); "modules": a module per head, norms.{h} (StableLM)
    bias: bool = False  # LayerNorm with a bias (Phi, Persimmon)
    after: str = "projection"  # "rope": the rotated Q and K normalised (Hunyuan V1)


class ModelFunction(Record):
    """What decides the layer's function beyond its weights, as the fixture will say it."""

    heads: int
    causal: bool
    kv_heads: int | None = None
    head_dim: int | None = None
    rope: RopeSpec | None = None
    scale: float | None = None  # None: 1/sqrt(d_k)
    architecture: str | None = None
    window: int | None = None  # a causal mask's sliding window
    layout: str | None = None  # the tensors' naming the config says (a packing names alone hide)
    softcap: float | None = None  # the scores' soft-cap (Gemma 2)
    alibi: tuple[float, ...] | None = None  # one ALiBi slope per head (BLOOM)
    clip_qkv: float | None = None  # OLMo's clamp of the projections
    qk_norm: NormFunction | None = None  # a learned norm of Q and K
    alibi_scaled: bool = False  # the ALiBi bias added before the scale (Falcon)
    alibi_rounding: str | None = None  # "bfloat16": the bias as Falcon builds it
    out: str | None = None  # the family's output projection module ("": outside the prefix)
    biased: tuple[str, ...] | None = None  # the modules its config gives a bias (None: unknown)
    bias_said: str = ""  # what says which modules carry a bias (for a refusal)
    # the output projection's bias as a parameter of its own under the prefix (GPT-NeoX
    # Japanese's dense_bias), whether this layer holds it, and what says so (for a refusal)
    out_bias: str | None = None
    out_bias_held: bool = False
    out_bias_said: str = ""
    # the width of the values' own input (MobileBERT's layer input beside its bottleneck);
    # None: the values read the queries' and keys' input
    value_input: int | None = None


def command_line_function(heads: int | None, causal: bool | None, prefix: str,
                          rope: bool | None = None, scale: float | None = None,
                          needs: tuple[str, ...] = ()) -> ModelFunction:
    """The function given by ``--heads``, ``--causal``/``--no-causal`` and, for a layer
    whose tensor names leave them open, ``--no-rope`` (``rope`` False) and ``--scale``
    (``0.0``: ``1/sqrt(d_k)``), without a config."""
    wanted: list[tuple[str, object]] = [("--heads", heads), ("--causal or --no-causal", causal)]
    if "--no-rope" in needs:
        wanted.append(("--no-rope", rope))
    if "--scale" in needs:
        wanted.append(("--scale", scale))
    if any(v is None for _, v in wanted):
        missing = " and ".join(m for m, v in wanted if v is None)
        raise CheckpointError(prefix, f"no config.json beside the checkpoint: pass {missing} "
                              "(or --config FILE, or put the model's config.json beside it); "
                              "qkv does not guess the layer's function"
                              + (" (these tensor names are OPT's, GPT-J's, BART's, CLIP's...: "
                                 "RoPE and the scale differ)" if "--no-rope" in needs else "")
                              + (" (GPT-2's c_attn: scale_attn_weights and "
                                 "scale_attn_by_inverse_layer_idx change the scale)"
                                 if needs == ("--scale",) else ""))
    assert heads is not None and causal is not None
    return ModelFunction(heads, causal, scale=scale or None)


def _matrix(shapes: dict[str, tuple[int, ...]], prefix: str, name: str) -> tuple[int, int]:
    """The shape of the rank-2 tensor ``prefix + name``. Raises :class:`CheckpointError`."""
    shape = shapes[prefix + name]
    if len(shape) != 2 or 0 in shape:
        raise CheckpointError(prefix, f"{name} has shape [{','.join(map(str, shape))}], "
                              "not a non-empty matrix")
    return shape[0], shape[1]


def layer_widths(entries: list[Entry], prefix: str, function: ModelFunction | None = None,
                 layout: str | None = None) -> tuple[str, int, tuple[int, int, int]]:
    """``(naming, d_model, (query, key, value widths))`` of the layer under ``prefix``.

    ``layout`` (or ``function.layout``): the tensors' naming the config says, where the
    names alone do not tell it (GPT-BigCode's torch ``c_attn`` beside GPT-2's Conv1D).
    A packing of unequal parts (Phi-3's ``qkv_proj``) is split by ``function``'s heads;
    without it the widths are ``(rows, 0, 0)``.
    Raises :class:`CheckpointError` (no layer there, listing the prefixes that exist).
    """
    shapes = {name: shape for name, _, shape in entries}
    namings = dict(layer_prefixes(list(shapes)))
    naming = namings.get(prefix)
    if naming is None:
        raise prefix_problem(prefix, sorted(namings.items(), key=lambda i: natural_key(i[0])),
                             list(shapes))
    said = layout if layout is not None else (function.layout if function else None)
    if said is not None and (said, naming) in (("bigcode", "gpt2"), ("falcon", "neox"),
                                             ("codegen", "blocks")):
        naming = said
    if naming in PACKED:
        rows, d_model = _matrix(shapes, prefix, PACKED[naming] + "weight")  # torch [out, in]
        if function is None:
            return naming, d_model, (rows, 0, 0)
        head_dim = function.head_dim or 0
        kv = function.kv_heads or function.heads
        return naming, d_model, (function.heads * head_dim, kv * head_dim, kv * head_dim)
    if naming == "t5":
        raise CheckpointError(prefix, "T5's SelfAttention adds a relative position bias and "
                              "does not scale by 1/sqrt(d_k); qkv does not compute it")
    # Cross-attention reads its keys and values from the encoder, not from the layer's
    # input: GPT-2's has c_attn (key|value only) beside q_attn, BERT's lives under
    # crossattention. Read as self-attention, it would be another function.
    if cross_attention(prefix, naming, set(shapes)):
        raise CheckpointError(prefix, "a cross-attention layer (keys and values from the "
                              "encoder); qkv computes self-attention only")
    if naming in ("gpt2", "neox", "mpt", "codegen"):
        name = {"gpt2": "c_attn.weight", "neox": "query_key_value.weight",
                "mpt": "Wqkv.weight", "codegen": "qkv_proj.weight"}[naming]
        rows, cols = _matrix(shapes, prefix, name)
        d_model, packed = (rows, cols) if naming == "gpt2" else (cols, rows)  # Conv1D, torch
        if packed % 3:
            layout = ("GPT-2's Conv1D [d_model,3*W]" if naming == "gpt2"
                      else "GPT-NeoX's [3*W,d_model]")
            raise CheckpointError(prefix, f"{name} [{rows},{cols}] is not {layout}: its "
                                  f"width {packed} is not 3 equal parts (another family's "
                                  "packing; config.json names it)")
        return naming, d_model, (packed // 3, packed // 3, packed // 3)
    trio = TRIOS[naming]
    for short in trio:
        if prefix + short + ".weight" not in shapes:
            raise CheckpointError(prefix, f"{short}.weight is missing")
    matrices = [_matrix(shapes, prefix, f"{short}.weight") for short in trio]  # [out, in]
    return naming, matrices[0][1], (matrices[0][0], matrices[1][0], matrices[2][0])


OUTSIDE_OUT = {"bert": "output.dense"}
"""The output projection of a family whose layer prefix leaves it out, named from the
prefix's parent (BERT's ``attention.self.`` and ``attention.output.dense``)."""


def _out_prefix(naming: str, prefix: str, shapes: dict[str, Any]) -> tuple[str, str] | None:
    """Where the layer's output projection lives and in which layout."""
    if naming == "gpt2":
        candidates = [(prefix + "c_proj.", "c_proj")]
    elif naming == "bigcode":  # a torch Linear, as the rest of GPT-BigCode
        candidates = [(prefix + "c_proj.", "out_proj")]
    elif naming == "neox":
        candidates = [(prefix + "dense.", "out_proj")]
    elif naming == "bert":
        candidates = [(prefix.removesuffix("self.") + "output.dense.", "out_proj")]
    elif naming == "distil":
        candidates = [(prefix + "out_lin.", "out_proj")]
    else:  # LLaMA's o_proj, OPT's out_proj, Phi's dense, ModernBERT's Wo
        candidates = [(prefix + name, "out_proj")
                      for name in ("o_proj.", "out_proj.", "dense.", "Wo.")]
    found = [c for c in candidates if c[0] + "weight" in shapes]
    if len(found) > 1:
        names = " and ".join(shown_value(c[0][len(prefix):] + "weight") for c in found)
        raise CheckpointError(prefix, f"two output projections under the prefix, {names}: "
                              "qkv cannot tell which one the layer applies")
    return found[0] if found else None


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
    naming, d_model, widths = layer_widths(entries, prefix, function)

    def ref(name: str) -> dict[str, str] | None:
        return {"safetensors": locate(name), "tensor": name} if name in shapes else None

    weights: dict[str, Any] = {}
    if naming == "gpt2":
        weights["c_attn_weight"] = ref(prefix + "c_attn.weight")
        weights["c_attn_bias"] = ref(prefix + "c_attn.bias")
    elif naming == "neox":
        weights["query_key_value_weight"] = ref(prefix + "query_key_value.weight")
        weights["query_key_value_bias"] = ref(prefix + "query_key_value.bias")
    elif naming == "codegen":  # 4 blocks of query, value, key rows
        weights["codegen_qkv_proj_weight"] = ref(prefix + "qkv_proj.weight")
        weights["codegen_qkv_proj_bias"] = ref(prefix + "qkv_proj.bias")
    elif naming == "mpt":  # three row blocks, as torch's in_proj
        weights["in_proj_weight"] = ref(prefix + "Wqkv.weight")
        weights["in_proj_bias"] = ref(prefix + "Wqkv.bias")
    elif naming in PACKED:
        # GPT-BigCode with a K/V head per query head interleaves its rows per head as
        # GPT-NeoX does; with one K/V head (and Phi-3 always) the rows are three blocks
        # (Falcon's rows are per K/V head, its query heads' then its key's and value's,
        # whatever the K/V heads: the fixture's query_key_value with kv_heads)
        key = "query_key_value" if naming == "falcon" or (naming == "bigcode" and (
            function.kv_heads in (None, function.heads))) else "qkv_proj"
        weights[f"{key}_weight"] = ref(prefix + PACKED[naming] + "weight")
        weights[f"{key}_bias"] = ref(prefix + PACKED[naming] + "bias")
    else:
        trio = TRIOS[naming]
        for branch, short in zip(BRANCHES, trio, strict=True):
            entry: dict[str, Any] = {"layout": "torch", **(ref(f"{prefix}{short}.weight") or {})}
            if ref(f"{prefix}{short}.bias") is not None:
                entry["bias"] = ref(f"{prefix}{short}.bias")
            weights[branch] = entry
    out = _out_prefix(naming, prefix, shapes)
    _check_out(function, out, prefix)
    if out is not None:
        weights[f"{out[1]}_weight"] = ref(out[0] + "weight")
        weights[f"{out[1]}_bias"] = ref(out[0] + "bias")
    if out is not None and function.out_bias is not None:
        _check_out_bias(function, prefix, shapes)
        if function.out_bias_held:  # added to the output as the projection's own bias is
            weights[f"{out[1]}_bias"] = ref(prefix + function.out_bias)
    norm_shapes: dict[str, tuple[int | None, ...]] = {}
    if function.qk_norm is not None:  # per head or the layer's width
        norm_refs, norm_shapes = _norm_weights(function, widths, prefix, ref)
        weights |= norm_refs
    weights = {key: value for key, value in weights.items() if value is not None}
    # The output projection reads every head's values: H * d_v, also when K/V heads are shared.
    concat = widths[2] // (function.kv_heads or function.heads) * function.heads
    expected = _expected_shapes(naming, prefix, d_model, widths, concat, out, shapes,
                                function.value_input)
    if out is not None and function.out_bias is not None:
        expected[prefix + function.out_bias] = expected[out[0] + "bias"]
    rope = function.rope
    table = None if rope is None or rope.stored is None else stored_table(
        prefix, rope.stored, shapes, function.architecture)
    own: set[str] = set()
    if rope is not None and rope.stored is not None and table is not None:
        expected[table] = (rope.dims // 2,)
        # an older checkpoint's copy under every layer: the model loads the first alone
        own = {table, prefix + rope.stored}
    _check_tensors(entries, expected | norm_shapes, prefix)
    _check_accounted(entries, prefix, naming, weights, own)
    _check_biases(function, weights, prefix, shapes)
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
    if rope is not None:
        base = {"theta": rope.theta} if table is None else {"frequencies": ref(table)}
        document["rope"] = {**base, "dims": rope.dims, "layout": rope.layout}
        if rope.scaling is not None:
            document["rope"]["scaling"] = rope.scaling
    if function.scale is not None:
        document["scale"] = function.scale
    document |= pieces_document(function)
    document["input"] = {"generate": {"seed": (seed ^ INPUT_SEED_TAG) & MASK64,
                                      "shape": [1, tokens, d_model]}}
    if function.value_input is not None:
        document["value_input"] = {"generate": {"seed": (seed ^ VALUE_INPUT_SEED_TAG) & MASK64,
                                                "shape": [1, tokens, function.value_input]}}
    document |= {
        "weights": weights,
        # A real layer has millions of coordinates: check an even sample of each tensor.
        "gradcheck": {"samples": 16},
    }
    return document, (d_model, widths[0], widths[2])


def _check_out(function: ModelFunction, out: tuple[str, str] | None, prefix: str) -> None:
    """With a config, the layer's output projection must be its family's: missing, or
    under another name (OPT's out_proj beside a LLaMA config), it is refused by name."""
    family = shown_value(function.architecture)
    if not function.out:
        if function.layout == "bert" and out is None:  # BertSelfOutput's dense, beside the prefix
            raise CheckpointError(prefix, f"config model_type {family}: the layer ends with its "
                                  "output projection, but there is no tensor "
                                  f"{shown_value(OUTSIDE_OUT['bert'] + '.weight')} beside the "
                                  "prefix; refused")
        return
    name = f"{function.out}.weight"
    if out is None:
        raise CheckpointError(prefix, f"config model_type {family}: the layer ends with its "
                              f"output projection, but there is no tensor {shown_value(name)} "
                              "under the prefix; refused")
    found = out[0][len(prefix):] + "weight"
    if found != name:
        raise CheckpointError(prefix, f"tensor {shown_value(found)} under the prefix, but config "
                              f"model_type {family} names its output projection "
                              f"{shown_value(name)}: is config.json this model's?")


def _check_out_bias(function: ModelFunction, prefix: str,
                    shapes: dict[str, tuple[int, ...]]) -> None:
    """A family whose output bias is a parameter of its own (:attr:`ModelFunction.out_bias`)
    holds it on the layers its config says and on no other: a stored one elsewhere is
    left unread by transformers, a missing one is a bias the checkpoint does not hold.
    Raises :class:`CheckpointError` naming the tensor and the config key."""
    name = function.out_bias
    assert name is not None
    has = prefix + name in shapes
    if has and not function.out_bias_held:
        raise CheckpointError(prefix, f"tensor {shown_value(name)} under the prefix, but "
                              f"{function.out_bias_said}: this layer has no {name} "
                              "(transformers leaves the tensor unread); refused")
    if function.out_bias_held and not has:
        raise CheckpointError(prefix, f"{function.out_bias_said}, but there is no tensor "
                              f"{shown_value(name)} under the prefix; refused")


def _check_biases(function: ModelFunction, weights: dict[str, Any], prefix: str,
                  shapes: dict[str, tuple[int, ...]]) -> None:
    """With a config, a projection's bias is read only when the family's config gives the
    module one; a stored bias it does not (transformers leaves it unread) or a missing
    one it does is refused, naming the tensor and the config key."""
    if function.biased is None:
        return
    # a module outside the prefix (BERT's output.dense) is named from the prefix's parent
    parent = prefix[:prefix.rstrip(".").rfind(".") + 1]
    modules = list(dict.fromkeys(value["tensor"][len(base):-len(".weight")]
                      for key, value in weights.items()
                      if isinstance(value, dict) and "norm" not in key
                      and value.get("tensor", "").endswith(".weight")
                      for base in (prefix if value["tensor"].startswith(prefix) else parent,)
                      if value["tensor"].startswith(base)))
    for module in modules:
        has = f"{prefix if prefix + module + '.weight' in shapes else parent}{module}.bias" in shapes
        wanted = module in function.biased
        if has and not wanted:
            raise CheckpointError(prefix, f"tensor {shown_value(module + '.bias')} under the "
                                  f"prefix, but {function.bias_said}: the model's {module} has "
                                  "no bias (transformers leaves the tensor unread); refused")
        if wanted and not has:
            raise CheckpointError(prefix, f"{function.bias_said}, but there is no tensor "
                                  f"{shown_value(module + '.bias')} under the prefix; refused")


def _norm_weights(function: ModelFunction, widths: tuple[int, int, int], prefix: str,
                  ref: Callable[[str], dict[str, str] | None],
                  ) -> tuple[dict[str, Any], dict[str, tuple[int | None, ...]]]:
    """The fixture's ``q_norm_weight`` and ``k_norm_weight`` (and a LayerNorm's biases) as
    references to the norm's tensors under ``prefix``, and the shape each tensor must
    have. A norm with a module per head (StableLM's ``norms.{h}``) gives a list of
    references, one per head, stacked when read. Raises :class:`CheckpointError` naming
    a missing tensor."""
    norm = function.qk_norm
    assert norm is not None and function.head_dim is not None
    weights: dict[str, Any] = {}
    shapes: dict[str, tuple[int | None, ...]] = {}
    d_head = function.head_dim
    parts = ("weight", "bias") if norm.bias else ("weight",)
    for letter, module, width in zip("qk", norm.modules, widths[:2], strict=True):
        rows = width // d_head
        for part in parts:
            if norm.rows == "modules":
                names = [f"{prefix}{module}.norms.{h}.{part}" for h in range(rows)]
                shape: tuple[int | None, ...] = (d_head,)
            else:
                names = [f"{prefix}{module}.{part}"]
                shape = {"tensor": (rows, d_head), "shared": (
                    d_head if norm.span == "head" else width,)}[norm.rows]
            found = [ref(name) for name in names]
            missing = next((n for n, r in zip(names, found, strict=True) if r is None), None)
            if missing is not None:
                raise CheckpointError(prefix, f"config model_type "
                                      f"{shown_value(function.architecture)} normalises Q and "
                                      f"K, but there is no tensor "
                                      f"{shown_value(missing[len(prefix):])} under the prefix")
            weights[f"{letter}_norm_{part}"] = found if norm.rows == "modules" else found[0]
            shapes |= {name: shape for name in names}
    return weights, shapes


def loading_order(name: str) -> list[tuple[Any, ...]]:
    """The place of tensor ``name`` in the order transformers 5 loads a checkpoint in
    (``core_model_loading.dot_natural_key``): dotted parts, a number before a word and
    numbers by value, a word's trailing digits by value. When several tensors load into
    one parameter, the first in this order is the one kept. ASCII digits only, compared
    by length then digits (no integer of thousands of digits is made)."""
    parts: list[tuple[Any, ...]] = []
    for part in name.split("."):
        if part.isascii() and part.isdigit():
            stripped = part.lstrip("0")
            parts.append((0, len(stripped), stripped))
            continue
        text = part.rstrip("0123456789")
        digits = part[len(text):].lstrip("0")
        parts.append((1, text, len(digits), digits) if len(part) > len(text) else (1, text))
    return parts


def stored_table(prefix: str, name: str, shapes: dict[str, tuple[int, ...]],
                 family: str | None) -> str:
    """The tensor a family that loads its RoPE frequencies from the checkpoint reads for
    the layer under ``prefix``, as transformers 5 loads ESM's: ``name`` beside the encoder
    (``esm.rotary_embeddings.inv_freq``) and every layer's copy
    (``encoder.layer.N.attention.self.rotary_embeddings.inv_freq``, which it renames to
    that one parameter; a checkpoint it saved holds one copy, named ``encoder.layer.*``)
    load into one table, the first in its loading order (:func:`loading_order`), which
    every layer uses. Raises :class:`CheckpointError` when the checkpoint holds none."""
    base = prefix[:max(prefix.rfind("encoder.layer."), 0)]  # the model's own prefix
    copies = [n for n in shapes if n == base + name or (
        n.startswith(base + "encoder.layer.") and n.endswith(".attention.self." + name))]
    if copies:
        return min(copies, key=loading_order)
    raise CheckpointError(prefix, f"config model_type {shown_value(family)} turns Q and K by "
                          f"the RoPE frequencies its model loads from the checkpoint "
                          f"({shown_value(base + name)}, or a layer's copy), and the "
                          "checkpoint has none: its model would compute another table; "
                          "refused")


def _check_accounted(entries: list[Entry], prefix: str, naming: str,
                     weights: dict[str, Any], own: set[str] | None = None) -> None:
    """Refuse a tensor under ``prefix`` that the fixture does not read: a layer is
    computed only when every one of its tensors is accounted for. A stored buffer that
    is no parameter (:data:`BUFFERS`) passes, and so do ``own``, what the fixture reads
    beside its weights (a stored RoPE table, and the layer's own copy of it).
    Raises :class:`CheckpointError` naming it."""
    read = {ref["tensor"] for value in weights.values()
            for ref in (value if isinstance(value, list) else (value, value.get("bias")))
            if isinstance(ref, dict) and "tensor" in ref} | (own or set())
    buffers = {prefix + name for name in BUFFERS.get(naming, ())}
    for name, _, _ in entries:
        if not name.startswith(prefix) or name in read or name in buffers:
            continue
        short = name[len(prefix):]
        what = next((what for start, what in EXTRA_TENSORS if short.startswith(start)), None)
        said = f": {what}, which qkv does not compute" if what else (
            ": qkv does not know what it does in the layer")
        raise CheckpointError(prefix, f"tensor {shown_value(short)} under the prefix is not "
                              f"one qkv reads{said}; refused (every tensor of a layer must be "
                              "accounted for)")


def _expected_shapes(
    naming: str, prefix: str, d_model: int, widths: tuple[int, int, int], concat: int,
    out: tuple[str, str] | None, shapes: dict[str, tuple[int, ...]],
    value_input: int | None = None,
) -> dict[str, tuple[int | None, ...]]:
    """The shape each tensor of the layer must have (``None``: any positive length), so
    that attend reads what init writes; ``concat`` is the output projection's input width,
    ``value_input`` the value weight's input width when it is not ``d_model``."""
    query = widths[0]
    expected: dict[str, tuple[int | None, ...]] = {}
    if naming in PACKED:
        rows = sum(widths)
        expected[prefix + PACKED[naming] + "weight"] = (rows, d_model)
        expected[prefix + PACKED[naming] + "bias"] = (rows,)
    elif naming in ("gpt2", "neox", "mpt", "codegen"):
        packed = {"gpt2": "c_attn.", "neox": "query_key_value.", "mpt": "Wqkv.",
                  "codegen": "qkv_proj."}[naming]
        expected[prefix + packed + "weight"] = ((d_model, 3 * query) if naming == "gpt2"
                                                else (3 * query, d_model))
        expected[prefix + packed + "bias"] = (3 * query,)
    else:
        trio = TRIOS[naming]
        inputs = (d_model, d_model, d_model if value_input is None else value_input)
        for short, width, reads in zip(trio, widths, inputs, strict=True):
            expected[f"{prefix}{short}.weight"] = (width, reads)
            expected[f"{prefix}{short}.bias"] = (width,)
    if out is not None:
        out_shape = shapes[out[0] + "weight"]
        # GPT-2's Conv1D is [in, out]; every other output projection is torch's [out, in].
        conv1d = out[1] == "c_proj"
        expected[out[0] + "weight"] = (concat, None) if conv1d else (None, concat)
        e_out = out_shape[1 if conv1d else 0] if len(out_shape) == 2 else None
        expected[out[0] + "bias"] = (e_out,)
    return expected


def _check_tensors(entries: list[Entry], expected: dict[str, tuple[int | None, ...]],
                   prefix: str) -> None:
    """Refuse a tensor of the layer with a dtype attend cannot read or a shape that does
    not fit the others. Raises :class:`CheckpointError` naming the tensor."""
    from qkvcli.reading.safetensors import dtype_problem

    for name, dtype, shape in entries:
        if name not in expected:
            continue
        short = name[len(prefix):] if name.startswith(prefix) else name
        problem = dtype_problem(dtype)
        if problem is not None:
            raise CheckpointError(prefix, f"tensor {shown_value(short)} {problem}")
        want = expected[name]
        if len(shape) != len(want) or 0 in shape or any(
                w is not None and w != got for w, got in zip(want, shape, strict=True)):
            wanted = ",".join("N" if w is None else str(w) for w in want)
            raise CheckpointError(prefix, f"tensor {shown_value(short)} has shape "
                                  f"[{','.join(map(str, shape))}], the layer needs [{wanted}]")


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
    """Why the layer under ``prefix`` cannot be read without its config (its tensor
    names fit several functions only the config tells apart), or ``None`` when the names
    and the command line's options fix it."""
    naming, _, _ = layer_widths(entries, prefix)
    names = {name for name, _, _ in entries}
    if naming == "linear" and (prefix + "o_proj.weight" in names or prefix + "dense.weight"
                             in names):
        return ("q_proj/k_proj/v_proj layers with o_proj or dense (LLaMA, Mistral, Qwen2, "
                "Phi and others) rotate Q and K by a RoPE that only config.json describes")
    if naming == "linear" and prefix.endswith("attn.attention."):
        return ("GPT-Neo's layers (attn.attention.) are global or local by config.json's "
                "attention_layers, and no option says a local layer's window")
    if naming == "neox":
        return ("query_key_value layers (GPT-NeoX, BLOOM, Falcon, Persimmon) compute "
                "functions that only config.json tells apart (RoPE, ALiBi, the packing)")
    if naming == "mpt":
        return "Wqkv layers (MPT) add ALiBi biases that only config.json describes"
    if naming == "blocks":
        return ("qkv_proj layers (Phi-3, CodeGen) pack query, key and value in ways only "
                "config.json tells apart (the K/V heads, CodeGen's blocks, the RoPE)")
    return None


def options_needed(entries: list[Entry], prefix: str) -> tuple[str, ...]:
    """The options that, without a config, must say what the layer's tensor names leave
    open: RoPE and the scale for q_proj/k_proj/v_proj/out_proj (OPT, GPT-J's RoPE, BART,
    Whisper, CLIP; GPT-Neo's are refused by :func:`config_needed`), the scale for GPT-2's c_attn
    (``scale_attn_weights``, ``scale_attn_by_inverse_layer_idx``)."""
    naming, _, _ = layer_widths(entries, prefix)
    return {"linear": ("--no-rope", "--scale"), "gpt2": ("--scale",)}.get(naming, ())
