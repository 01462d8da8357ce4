"""Weight layouts: how torch, packed ``in_proj`` and GPT-2 ``c_attn`` tensors map to W_Q, W_K, W_V.

Weight layouts: turn the ``weights`` of a fixture into one canonical per-branch form.

Three spellings are accepted, all giving ``[d_model, d_out]`` arrays (our layout,
``Y = X W``) in query, key, value order:

* **separate** (the chapter's form): ``{"query": T, "key": T, "value": T}``, each
  ``[d_model, d_out]``.
* **separate, torch layout**: a weight object with ``"layout": "torch"`` stores
  ``[d_out, d_model]`` the way ``torch.nn.Linear.weight`` does (PyTorch computes
  ``y = x A^T + b``), so it is transposed on reading. ``"layout": "qkv"`` is the default.
* **packed**: ``{"in_proj_weight": T [3*d_out, d_model], "in_proj_bias": T [3*d_out]}``
  as ``torch.nn.MultiheadAttention`` stores it: rows are split into query, key, value
  (in that order) and each chunk, being ``[out, in]``, is transposed.

A weight object may also carry ``"bias"``: a 1-D tensor of the branch's output width.
Top-level ``"value_width": "independent"`` lets the value weight have its own width
``d_v`` (default ``"shared"``: the chapter's rule, all three widths equal).

Problems raise :class:`~qkvcli.reading.problems.FixtureError` with the JSON location.

The layer's extra weight spellings: GPT-2's Conv1D ``c_attn`` and the output projection.

* **c_attn** (GPT-2, Conv1D ``Y = X W + b``): ``c_attn_weight [d_model, 3*W]`` and
  ``c_attn_bias [3*W]`` (``null`` allowed), split into query, key, value along the last
  axis. Conv1D already stores ``[in, out]``, our layout, so nothing is transposed.
* **query_key_value** (GPT-NeoX/Pythia, torch ``[3*W, d_model]``): rows interleaved per
  head (``[H, 3, d_head]``: head h's query, key, value rows together), so reading it
  needs ``heads``; each branch is gathered over the heads and transposed.
* **out_proj** (torch): ``out_proj_weight [E_out, H*d_v]`` (``nn.Linear`` layout,
  transposed on reading), ``out_proj_bias [E_out]`` or ``null``.
* **c_proj** (GPT-2 Conv1D): ``c_proj_weight [H*d_v, E_out]``, ``c_proj_bias [E_out]``.

Shapes against the heads are checked by whoever builds the layer. Problems raise
:class:`~qkvcli.reading.problems.FixtureError` with the JSON location.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from qkvcli.core.arrays import Array
from qkvcli.core.errors import ProjectionError, WeightRank
from qkvcli.core.names import BRANCHES
from qkvcli.core.record import Record
from qkvcli.reading.fixture import PACKED_KEYS
from qkvcli.reading.json_values import json_type_name, refuse_unknown_keys
from qkvcli.reading.limits import DEFAULT_MAX_ELEMENTS
from qkvcli.reading.problems import FixtureError
from qkvcli.reading.tensors import parse_tensor
from qkvcli.reading.weights import weight_name

if TYPE_CHECKING:
    from qkvcli.reading.files import StrPath

WEIGHT_OBJECT_KEYS = ("name", "shape", "values", "bias", "layout")
LAYOUTS = ("qkv", "torch")
VALUE_WIDTHS = ("shared", "independent")

LAYOUT_DESCRIPTIONS = {
    "separate": "three [d_model,d_out] weights (qkv layout, Y = X W)",
    "separate-torch": "three [d_out,d_model] weights (torch layout, transposed on reading)",
    "separate-mixed": "three weights, some in torch layout [d_out,d_model] (transposed on reading)",
    "packed": "one in_proj_weight [3*d_out,d_model] (torch) split query,key,value, transposed",
    "c_attn": "one c_attn_weight [d_model,3*d_out] (GPT-2 Conv1D) split query,key,value",
    "query_key_value": "one query_key_value_weight [3*d_out,d_model] (GPT-NeoX, torch) "
                       "interleaved per head [H,3,d_head], transposed",
    "codegen_qkv_proj": "one codegen_qkv_proj_weight [3*d_out,d_model] (CodeGen, torch) in 4 "
                        "model-parallel blocks of query, value, key rows, transposed",
    "qkv_proj": "one qkv_proj_weight [(H+2G)*d_head,d_model] (Phi-3, torch) split into query "
                "H*d_head, key and value G*d_head rows, transposed",
}
# A separate weight object may name its tensor through a source instead of values.
SOURCE_KEYS = ("npy", "generate", "safetensors", "tensor")


class BranchWeights(Record):
    """One branch after canonicalization: ``weight`` is ``[d_model, d_out]``."""

    weight: Array
    bias: Array | None
    name: str | None
    location: str
    bias_location: str
    given: str = "qkv"  # the layout it was given in: "qkv" ([in, out]) or "torch" ([out, in])


class CanonicalWeights(Record):
    """The three branches in query, key, value order, and the layout they were read from."""

    branches: tuple[BranchWeights, BranchWeights, BranchWeights]
    layout: str

    @property
    def has_bias(self) -> bool:
        return any(b.bias is not None for b in self.branches)

    def description(self) -> str:
        """A one-line description of the layout, for reports."""
        return LAYOUT_DESCRIPTIONS[self.layout]


def _shape(shape: Iterable[int]) -> str:
    return "[" + ",".join(str(int(d)) for d in shape) + "]"


def value_width_mode(data: dict[str, Any]) -> str:
    """``"shared"`` (default) or ``"independent"`` from the top-level ``value_width`` key."""
    raw = data.get("value_width", "shared")
    if raw not in VALUE_WIDTHS:
        shown = f'"{raw}"' if isinstance(raw, str) else json_type_name(raw)
        raise FixtureError("$.value_width", f'expected "shared" or "independent", got {shown}')
    return str(raw)


def _bias(
    value: Any, width: int, label: str, location: str, max_elements: int, base_dir: StrPath | None
) -> Array:
    bias = parse_tensor(value, location, max_elements, base_dir=base_dir)
    if bias.shape != (width,):
        raise FixtureError(
            location,
            f"{label} must have shape [{width}] (the branch's output width), "
            f"got {_shape(bias.shape)}",
        )
    return bias


def _separate_branch(
    value: Any, branch: str, max_elements: int, base_dir: StrPath | None
) -> tuple[BranchWeights, str]:
    location = f"$.weights.{branch}"
    name: str | None = None
    layout = "qkv"
    raw_bias: Any = None
    tensor = value
    if isinstance(value, dict):
        sourced = any(key in value for key in SOURCE_KEYS[:3])
        refuse_unknown_keys(value, WEIGHT_OBJECT_KEYS + (SOURCE_KEYS if sourced else ()), location)
        name = weight_name(value, location)
        if "layout" in value:
            layout = value["layout"]
            if layout not in LAYOUTS:
                shown = f'"{layout}"' if isinstance(layout, str) else json_type_name(layout)
                raise FixtureError(f"{location}.layout", f'expected "qkv" or "torch", got {shown}')
        raw_bias = value.get("bias")
        tensor = {k: v for k, v in value.items() if k in ("shape", "values", *SOURCE_KEYS)}
    weight = parse_tensor(tensor, location, max_elements, base_dir=base_dir)
    if weight.ndim != 2:
        # The chapter's message: the branch names itself, then the linear layer's cause.
        raise FixtureError(location, str(ProjectionError(branch, WeightRank(weight.ndim))))
    if layout == "torch":
        weight = np.ascontiguousarray(weight.T)  # [out, in] -> [in, out]
    bias = None
    if raw_bias is not None:
        bias = _bias(raw_bias, weight.shape[1], f"{branch} bias", f"{location}.bias", max_elements,
                     base_dir)
    return BranchWeights(weight, bias, name, location, f"{location}.bias", layout), layout


def _packed(raw: dict[str, Any], max_elements: int, base_dir: StrPath | None) -> CanonicalWeights:
    location = "$.weights.in_proj_weight"
    if "in_proj_weight" not in raw:
        raise FixtureError("$.weights", 'missing key "in_proj_weight" (in_proj_bias needs it)')
    packed = parse_tensor(raw["in_proj_weight"], location, max_elements, base_dir=base_dir)
    if packed.ndim != 2:
        raise FixtureError(
            location, f"in_proj_weight must have rank two [3*d_out,d_model], got rank {packed.ndim}"
        )
    rows, d_model = packed.shape
    if rows == 0 or rows % 3 != 0:
        raise FixtureError(
            location,
            "in_proj_weight rows must stack query, key and value (a positive multiple of 3), "
            f"got {rows} rows",
        )
    if d_model == 0:
        raise FixtureError(location, "in_proj_weight must have at least one column (d_model)")
    d_out = rows // 3
    biases: list[Array | None] = [None, None, None]
    bias_location = "$.weights.in_proj_bias"
    if raw.get("in_proj_bias") is not None:
        packed_bias = _bias(raw["in_proj_bias"], rows, "in_proj_bias", bias_location,
                            max_elements, base_dir)
        biases = [packed_bias[i * d_out:(i + 1) * d_out].copy() for i in range(3)]
    branches = tuple(
        BranchWeights(
            # chunk i of the rows is branch i's torch weight [d_out, d_model]; ours is its transpose
            weight=np.ascontiguousarray(packed[i * d_out:(i + 1) * d_out].T),
            bias=biases[i],
            name=None,
            location=location,
            bias_location=bias_location,
            given="torch",
        )
        for i in range(3)
    )
    return CanonicalWeights((branches[0], branches[1], branches[2]), "packed")


def _c_attn(raw: dict[str, Any], max_elements: int, base_dir: StrPath | None) -> CanonicalWeights:
    weights, biases = read_c_attn(raw, max_elements, base_dir)
    location = "$.weights.c_attn_weight"
    b = [BranchWeights(w, bias, None, location, "$.weights.c_attn_bias")
         for w, bias in zip(weights, biases, strict=True)]
    return CanonicalWeights((b[0], b[1], b[2]), "c_attn")


def _neox(raw: dict[str, Any], max_elements: int, base_dir: StrPath | None,
          heads: int | None, kv_heads: int | None = None) -> CanonicalWeights:
    """GPT-NeoX's ``query_key_value``: torch ``[3W, d_model]`` whose rows are, per head,
    that head's query, key and value rows (``[H, 3, d_head]``), not three blocks. With
    ``kv_heads`` G < H (Falcon), per K/V head: its ``H/G`` query heads' rows, then its key's
    and its value's (``[G, H/G + 2, d_head]``; G = H is GPT-NeoX's)."""
    location = "$.weights.query_key_value_weight"
    if "query_key_value_weight" not in raw:
        raise FixtureError("$.weights", 'missing key "query_key_value_weight" '
                           "(query_key_value_bias needs it)")
    if heads is None:
        raise FixtureError(location, "GPT-NeoX's query_key_value interleaves query, key and "
                           'value per head: the fixture needs "heads"')
    kv = heads if kv_heads is None else kv_heads
    per = heads // kv + 2  # rows of d_head per K/V head: its query heads, its key, its value
    packed = parse_tensor(raw["query_key_value_weight"], location, max_elements,
                          base_dir=base_dir)
    if (packed.ndim != 2 or 0 in packed.shape or packed.shape[0] % (kv * per)):
        shape = "3*H*d_head" if kv == heads else "(H+2G)*d_head"
        raise FixtureError(location, f"query_key_value_weight must be [{shape},d_model] with "
                           f"H = {heads}" + (f", G = {kv}" if kv != heads else "")
                           + f", got {_dims(packed.shape)}")
    rows, d_model = packed.shape
    d_head = rows // (kv * per)
    # rows [G*per*d] -> [G,per,d,d_model]: a group's query heads, then its key, its value
    blocks = packed.reshape(kv, per, d_head, d_model)
    parts = (blocks[:, :per - 2], blocks[:, per - 2:per - 1], blocks[:, per - 1:])
    weights = [np.ascontiguousarray(part.reshape(-1, d_model).T) for part in parts]
    biases: list[Array | None] = [None, None, None]
    bias_location = "$.weights.query_key_value_bias"
    if raw.get("query_key_value_bias") is not None:
        bias = _bias(raw["query_key_value_bias"], rows, "query_key_value_bias", bias_location,
                     max_elements, base_dir).reshape(kv, per, d_head)
        biases = [np.ascontiguousarray(part.reshape(-1)) for part in (
            bias[:, :per - 2], bias[:, per - 2], bias[:, per - 1])]
    b = [BranchWeights(w, bias, None, location, bias_location, given="torch")
         for w, bias in zip(weights, biases, strict=True)]
    return CanonicalWeights((b[0], b[1], b[2]), "query_key_value")


def _qkv_proj(raw: dict[str, Any], max_elements: int, base_dir: StrPath | None,
              heads: int | None, kv_heads: int | None) -> CanonicalWeights:
    """Phi-3's ``qkv_proj``: torch ``[(H+2G)*d_head, d_model]`` whose rows are the query's
    ``H*d_head``, then the key's and the value's ``G*d_head`` each (blocks, not
    interleaved), so reading it needs ``heads`` (and ``kv_heads``, G, when fewer)."""
    location = "$.weights.qkv_proj_weight"
    if "qkv_proj_weight" not in raw:
        raise FixtureError("$.weights", 'missing key "qkv_proj_weight" (qkv_proj_bias needs it)')
    if heads is None:
        raise FixtureError(location, "qkv_proj stacks H query heads and G key and value heads: "
                           'the fixture needs "heads" (and "kv_heads" when G < H)')
    kv = heads if kv_heads is None else kv_heads
    packed = parse_tensor(raw["qkv_proj_weight"], location, max_elements, base_dir=base_dir)
    if packed.ndim != 2 or 0 in packed.shape or packed.shape[0] % (heads + 2 * kv):
        raise FixtureError(location, f"qkv_proj_weight must be [(H+2G)*d_head,d_model] with "
                           f"H = {heads}, G = {kv}, got {_dims(packed.shape)}")
    d_head = packed.shape[0] // (heads + 2 * kv)
    cuts = (0, heads * d_head, (heads + kv) * d_head, packed.shape[0])
    weights = [np.ascontiguousarray(packed[cuts[i]:cuts[i + 1]].T) for i in range(3)]
    biases: list[Array | None] = [None, None, None]
    bias_location = "$.weights.qkv_proj_bias"
    if raw.get("qkv_proj_bias") is not None:
        bias = _bias(raw["qkv_proj_bias"], packed.shape[0], "qkv_proj_bias", bias_location,
                     max_elements, base_dir)
        biases = [bias[cuts[i]:cuts[i + 1]].copy() for i in range(3)]
    b = [BranchWeights(w, bias, None, location, bias_location, given="torch")
         for w, bias in zip(weights, biases, strict=True)]
    return CanonicalWeights((b[0], b[1], b[2]), "qkv_proj")


def _codegen(raw: dict[str, Any], max_elements: int,
             base_dir: StrPath | None) -> CanonicalWeights:
    """CodeGen's ``qkv_proj``: torch ``[3W, d_model]`` whose rows are 4 model-parallel
    blocks, each the query's, the value's and the key's next ``W/4`` rows, in that order
    (``[4, 3, W/4]``)."""
    location = "$.weights.codegen_qkv_proj_weight"
    if "codegen_qkv_proj_weight" not in raw:
        raise FixtureError("$.weights", 'missing key "codegen_qkv_proj_weight" '
                           "(codegen_qkv_proj_bias needs it)")
    packed = parse_tensor(raw["codegen_qkv_proj_weight"], location, max_elements,
                          base_dir=base_dir)
    parts = 3 * CODEGEN_BLOCKS
    if packed.ndim != 2 or 0 in packed.shape or packed.shape[0] % parts:
        raise FixtureError(location, f"codegen_qkv_proj_weight must be [3*W,d_model] with W a "
                           f"multiple of {CODEGEN_BLOCKS}, got {_dims(packed.shape)}")
    rows, d_model = packed.shape
    blocks = packed.reshape(CODEGEN_BLOCKS, 3, rows // parts, d_model)  # query, value, key
    order = (0, 2, 1)  # query, key, value from the blocks' query, value, key
    weights = [np.ascontiguousarray(blocks[:, i].reshape(-1, d_model).T) for i in order]
    biases: list[Array | None] = [None, None, None]
    bias_location = "$.weights.codegen_qkv_proj_bias"
    if raw.get("codegen_qkv_proj_bias") is not None:
        bias = _bias(raw["codegen_qkv_proj_bias"], rows, "codegen_qkv_proj_bias", bias_location,
                     max_elements, base_dir).reshape(CODEGEN_BLOCKS, 3, -1)
        biases = [np.ascontiguousarray(bias[:, i].reshape(-1)) for i in order]
    b = [BranchWeights(w, bias, None, location, bias_location, given="torch")
         for w, bias in zip(weights, biases, strict=True)]
    return CanonicalWeights((b[0], b[1], b[2]), "codegen_qkv_proj")


def canonicalize(
    raw: Any, max_elements: int = DEFAULT_MAX_ELEMENTS, base_dir: StrPath | None = None,
    extra_keys: tuple[str, ...] = (), heads: int | None = None, kv_heads: int | None = None,
) -> CanonicalWeights:
    """Read any accepted ``weights`` spelling into :class:`CanonicalWeights`.

    ``base_dir`` is the fixture's directory, where ``npy`` paths resolve (``None``: the
    current directory); ``extra_keys`` are keys of ``weights`` the caller reads itself
    (the layer's output projection). Takes the parsed JSON value of ``weights``.
    Validates structure, layouts, ranks and bias shapes; widths across branches are
    checked later by whoever builds the layer.
    Raises :class:`~qkvcli.reading.problems.FixtureError`.
    """
    if not isinstance(raw, dict):
        raise FixtureError("$.weights", f"expected an object, got {json_type_name(raw)}")
    refuse_unknown_keys(raw, BRANCHES + PACKED_KEYS + C_ATTN_KEYS + NEOX_KEYS + QKV_PROJ_KEYS
                        + CODEGEN_KEYS + extra_keys, "$.weights")
    codegen_keys = [key for key in CODEGEN_KEYS if key in raw]
    if codegen_keys:
        others = [key for key in BRANCHES + PACKED_KEYS + C_ATTN_KEYS + NEOX_KEYS
                  + QKV_PROJ_KEYS if key in raw]
        if others:
            raise FixtureError("$.weights", f'use one packed form or query/key/value; found '
                               f'"{others[0]}" and "{codegen_keys[0]}"')
        return _codegen(raw, max_elements, base_dir)
    blocks_keys = [key for key in QKV_PROJ_KEYS if key in raw]
    if blocks_keys:
        others = [key for key in BRANCHES + PACKED_KEYS + C_ATTN_KEYS + NEOX_KEYS if key in raw]
        if others:
            raise FixtureError("$.weights", f'use one of query/key/value, in_proj_weight, '
                               f'c_attn_weight, query_key_value_weight or qkv_proj_weight; '
                               f'found "{others[0]}" and "{blocks_keys[0]}"')
        return _qkv_proj(raw, max_elements, base_dir, heads, kv_heads)
    packed_keys = [key for key in PACKED_KEYS if key in raw]
    separate_keys = [key for key in BRANCHES if key in raw]
    conv_keys = [key for key in C_ATTN_KEYS if key in raw]
    neox_keys = [key for key in NEOX_KEYS if key in raw]
    if neox_keys:
        others = separate_keys + packed_keys + conv_keys
        if others:
            raise FixtureError("$.weights", f'use one of query/key/value, in_proj_weight, '
                               f'c_attn_weight or query_key_value_weight; found "{others[0]}" '
                               f'and "{neox_keys[0]}"')
        return _neox(raw, max_elements, base_dir, heads, kv_heads)
    if packed_keys and separate_keys:
        raise FixtureError(
            "$.weights",
            f'use either query/key/value or in_proj_weight (packed), not both; '
            f'found "{separate_keys[0]}" and "{packed_keys[0]}"',
        )
    if conv_keys and (packed_keys or separate_keys):
        raise FixtureError("$.weights", f'use one of query/key/value, in_proj_weight or '
                           f'c_attn_weight; found "{(separate_keys + packed_keys)[0]}" and '
                           f'"{conv_keys[0]}"')
    if packed_keys:
        return _packed(raw, max_elements, base_dir)
    if conv_keys:
        return _c_attn(raw, max_elements, base_dir)
    branches = []
    layouts = []
    for branch in BRANCHES:
        if branch not in raw:
            raise FixtureError("$.weights", f'missing key "{branch}"')
        weights, layout = _separate_branch(raw[branch], branch, max_elements, base_dir)
        branches.append(weights)
        layouts.append(layout)
    if all(layout == "qkv" for layout in layouts):
        label = "separate"
    elif all(layout == "torch" for layout in layouts):
        label = "separate-torch"
    else:
        label = "separate-mixed"
    return CanonicalWeights((branches[0], branches[1], branches[2]), label)


def chapter_weights(
    data: dict[str, Any], max_elements: int = DEFAULT_MAX_ELEMENTS, base_dir: StrPath | None = None
) -> tuple[dict[str, Any], str]:
    """The chapter reader's hook: extended ``weights`` as the plain form, and the layout label.

    The chapter's evidence is about bias-free projections of one shared width, so a
    fixture with a bias, or an independent value width that differs, is refused with a
    pointer to ``qkv attend``. Everything else (names, finite values, widths) is left to
    the chapter's own validation, which runs on the returned plain weights.
    """
    mode = value_width_mode(data)
    canonical = canonicalize(data.get("weights"), max_elements, base_dir)
    for read in canonical.branches:
        if read.bias is not None:
            raise FixtureError(
                read.bias_location,
                "projection biases are outside the chapter's bias-free evidence; "
                "run `qkv attend` on this fixture",
            )
    widths = [b.weight.shape[1] for b in canonical.branches]
    if mode == "independent" and widths[2] != widths[0] and widths[0] == widths[1]:
        raise FixtureError(
            "$.value_width",
            f"value width {widths[2]} differs from the query/key width {widths[0]}; the "
            "chapter's evidence needs equal widths, run `qkv attend` on this fixture",
        )
    plain: dict[str, Any] = {}
    for branch, weights in zip(BRANCHES, canonical.branches, strict=True):
        entry: dict[str, Any] = {
            "shape": list(weights.weight.shape),
            "values": weights.weight.reshape(-1).tolist(),
        }
        if weights.name is not None:
            entry["name"] = weights.name
        plain[branch] = entry
    return plain, canonical.layout


if TYPE_CHECKING:
    from qkvcli.reading.files import StrPath

C_ATTN_KEYS = ("c_attn_weight", "c_attn_bias")
NEOX_KEYS = ("query_key_value_weight", "query_key_value_bias")
QKV_PROJ_KEYS = ("qkv_proj_weight", "qkv_proj_bias")
CODEGEN_KEYS = ("codegen_qkv_proj_weight", "codegen_qkv_proj_bias")
CODEGEN_BLOCKS = 4  # CodeGenAttention.mp_num
OUT_PROJ_KEYS = ("out_proj_weight", "out_proj_bias")
C_PROJ_KEYS = ("c_proj_weight", "c_proj_bias")
OUT_KEYS = OUT_PROJ_KEYS + C_PROJ_KEYS
# a q/k norm's weights, then a LayerNorm's optional biases (with "qk_norm")
NORM_KEYS = ("q_norm_weight", "k_norm_weight", "q_norm_bias", "k_norm_bias")


def _dims(shape: tuple[int, ...]) -> str:
    return "[" + ",".join(map(str, shape)) + "]"


def read_c_attn(
    raw: dict[str, Any], max_elements: int, base_dir: StrPath | None
) -> tuple[list[Array], list[Array | None]]:
    """Query, key and value weights ``[d_model, W]`` and biases from a Conv1D ``c_attn``."""
    location = "$.weights.c_attn_weight"
    if "c_attn_weight" not in raw:
        raise FixtureError("$.weights", 'missing key "c_attn_weight" (c_attn_bias needs it)')
    packed = parse_tensor(raw["c_attn_weight"], location, max_elements, base_dir=base_dir)
    if packed.ndim != 2 or packed.shape[0] == 0 or packed.shape[1] == 0 or packed.shape[1] % 3:
        raise FixtureError(location, "c_attn_weight must be [d_model,3*W] (Conv1D: query, key "
                           f"and value side by side on the last axis), got {_dims(packed.shape)}")
    width = packed.shape[1] // 3
    # [d_model, 3W] -> three [d_model, W]: Conv1D is already our [in, out] layout
    weights = [np.ascontiguousarray(packed[:, i * width:(i + 1) * width]) for i in range(3)]
    biases: list[Array | None] = [None, None, None]
    if raw.get("c_attn_bias") is not None:
        bias_location = "$.weights.c_attn_bias"
        bias = parse_tensor(raw["c_attn_bias"], bias_location, max_elements, base_dir=base_dir)
        if bias.shape != (3 * width,):
            raise FixtureError(bias_location, f"c_attn_bias must have shape [{3 * width}] "
                               f"(3*W), got {_dims(bias.shape)}")
        biases = [bias[i * width:(i + 1) * width].copy() for i in range(3)]
    return weights, biases


class OutProjection(Record):
    """The output projection in our layout ``[H*d_v, E_out]``, and how it was given."""

    weight: Array
    bias: Array | None
    layout: str  # "out_proj" (torch, transposed on reading) or "c_proj" (Conv1D)
    location: str


def read_out_projection(
    raw: dict[str, Any], max_elements: int, base_dir: StrPath | None
) -> OutProjection | None:
    """The ``out_proj_*`` or ``c_proj_*`` weights of ``raw`` (``weights``), or ``None``."""
    given = [key for key in OUT_PROJ_KEYS + C_PROJ_KEYS if key in raw]
    if not given:
        return None
    prefix = "out_proj" if given[0].startswith("out_proj") else "c_proj"
    other = "c_proj" if prefix == "out_proj" else "out_proj"
    if any(key.startswith(other) for key in given):
        raise FixtureError("$.weights", "use either out_proj_weight (torch) or c_proj_weight "
                           "(Conv1D), not both")
    location = f"$.weights.{prefix}_weight"
    if f"{prefix}_weight" not in raw:
        raise FixtureError("$.weights", f'missing key "{prefix}_weight" ({prefix}_bias needs it)')
    weight = parse_tensor(raw[f"{prefix}_weight"], location, max_elements, base_dir=base_dir)
    if weight.ndim != 2:
        raise FixtureError(location, f"{prefix}_weight must have rank two, got rank {weight.ndim}")
    if prefix == "out_proj":
        weight = np.ascontiguousarray(weight.T)  # torch [E_out, H*d_v] -> ours [H*d_v, E_out]
    bias = None
    if raw.get(f"{prefix}_bias") is not None:
        bias_location = f"$.weights.{prefix}_bias"
        bias = parse_tensor(raw[f"{prefix}_bias"], bias_location, max_elements, base_dir=base_dir)
        if bias.shape != (weight.shape[1],):
            raise FixtureError(bias_location, f"{prefix}_bias must have shape "
                               f"[{weight.shape[1]}] (E_out), got {_dims(bias.shape)}")
    return OutProjection(weight, bias, prefix, location)
