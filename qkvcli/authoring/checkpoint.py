"""What ``qkv inspect`` recognises in a checkpoint, and the fixture ``qkv init --from-safetensors`` writes.

Recognised layers, each by its own tensor names under a layer prefix (``--prefix``):

* GPT-2 (Conv1D, ``[in, out]``): ``c_attn`` (query|key|value packed on the last axis),
  ``c_proj`` (the output projection);
* LLaMA, Mistral, Qwen2 (``nn.Linear``, ``[out, in]``): ``q_proj``, ``k_proj``, ``v_proj``,
  ``o_proj``; OPT: the same with ``out_proj``;
* BERT, RoBERTa: ``query``, ``key``, ``value`` under ``attention.self.``, the output
  projection at ``attention.output.dense`` (outside that prefix);
* GPT-NeoX, Pythia: ``query_key_value`` (interleaved per head) and ``dense``.

The function is read from the model's ``config.json`` by
:mod:`qkvcli.authoring.config`; without a config, ``--heads`` and
``--causal``/``--no-causal`` must say it (:func:`command_line_function`): qkv never
guesses.

The fixture references the checkpoint's tensors (nothing is copied), each in the file
(or shard) that holds it, and adds a seeded input ``[1, tokens, d_model]`` drawn
uniform in ``[-1, 1)`` by a ``generate`` spec. No I/O here.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable
from typing import Any

from qkvcli.core.errors import QkvError
from qkvcli.core.names import BRANCHES
from qkvcli.core.record import Record
from qkvcli.core.splitmix import MASK64
from qkvcli.core.text import printable

USER_TEXT_LIMIT = 120  # characters of user text (a prefix, a config value) in a message

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



class CheckpointError(QkvError):
    """The checkpoint or its config cannot give the layer under ``prefix``; says why."""

    def __init__(self, prefix: str, problem: str) -> None:
        self.prefix = prefix
        self.problem = problem
        super().__init__(f"prefix {shown_value(prefix)}: {problem}" if prefix else problem)


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


def shown_value(value: Any) -> str:
    """A config value or a user's text in a message: its JSON spelling (a string quoted),
    control characters escaped, cut at 120 characters; never a Python repr."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = str(value)
    return printable(text, USER_TEXT_LIMIT)


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
    shown = ", ".join(printable(name, USER_TEXT_LIMIT) for name in names[:6]) + (
        f" ... ({len(names)} layers)" if len(names) > 6 else "")
    close = difflib.get_close_matches(prefix, names, n=1, cutoff=0.5)
    guess = f"; did you mean {printable(close[0], USER_TEXT_LIMIT)}?" if close and prefix else ""
    start = "no attention layer under it" if prefix else "--prefix is needed"
    return CheckpointError(prefix, f"{start}; the layer prefixes are {shown}{guess}")


def layer_index(prefix: str) -> int | None:
    """The layer's number in the model: the last integer component of ``prefix``."""
    numbers = re.findall(r"(?:^|\.)(\d+)(?=\.)", prefix)
    return int(numbers[-1]) if numbers else None


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
    # Cross-attention reads its keys and values from the encoder, not from the layer's
    # input: GPT-2's has c_attn (key|value only) beside q_attn, BERT's lives under
    # crossattention. Read as self-attention, it would be another function.
    if (kind == "gpt2" and prefix + "q_attn.weight" in shapes) or (
            kind == "bert" and prefix.endswith("crossattention.self.")):
        raise CheckpointError(prefix, "a cross-attention layer (keys and values from the "
                              "encoder); qkv computes self-attention only")
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
    # The output projection reads every head's values: H * d_v, also when K/V heads are shared.
    concat = widths[2] // (function.kv_heads or function.heads) * function.heads
    _check_tensors(entries, _expected_shapes(kind, prefix, d_model, widths, concat, out, shapes),
                   prefix)
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


def _expected_shapes(
    kind: str, prefix: str, d_model: int, widths: tuple[int, int, int], concat: int,
    out: tuple[str, str] | None, shapes: dict[str, tuple[int, ...]],
) -> dict[str, tuple[int | None, ...]]:
    """The shape each tensor of the layer must have (``None``: any positive length), so
    that attend reads what init writes; ``concat`` is the output projection's input width."""
    query = widths[0]
    expected: dict[str, tuple[int | None, ...]] = {}
    if kind in ("gpt2", "neox"):
        packed = "c_attn." if kind == "gpt2" else "query_key_value."
        expected[prefix + packed + "weight"] = ((d_model, 3 * query) if kind == "gpt2"
                                                else (3 * query, d_model))
        expected[prefix + packed + "bias"] = (3 * query,)
    else:
        trio = ("q_proj", "k_proj", "v_proj") if kind == "linear" else ("query", "key", "value")
        for short, width in zip(trio, widths, strict=True):
            expected[f"{prefix}{short}.weight"] = (width, d_model)
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
    """Why the layer under ``prefix`` cannot be read without its config, or ``None``."""
    kind, _, _ = layer_widths(entries, prefix)
    if kind == "linear" and any(name == prefix + "o_proj.weight" for name, _, _ in entries):
        kind = "q_proj/k_proj/v_proj/o_proj layers (LLaMA, Mistral, Qwen2)"
    elif kind == "neox":
        kind = "GPT-NeoX layers"
    else:
        return None
    return f"{kind} rotate Q and K by a RoPE that only config.json describes"
