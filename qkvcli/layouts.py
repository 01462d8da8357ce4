"""Weight layouts: turn the ``weights`` of a fixture into one canonical per-branch form.

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

Problems raise :class:`~qkvcli.fixture.FixtureError` with the JSON location.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from qkvcli.engine import Array
from qkvcli.errors import BRANCHES, ProjectionError, WeightRank
from qkvcli.fixture import (  # noqa: F401 - uses_extensions is re-exported
    DEFAULT_MAX_ELEMENTS,
    PACKED_KEYS,
    FixtureError,
    json_type_name,
    parse_tensor,
    refuse_unknown_keys,
    uses_extensions,
)

WEIGHT_OBJECT_KEYS = ("name", "shape", "values", "bias", "layout")
LAYOUTS = ("qkv", "torch")
VALUE_WIDTHS = ("shared", "independent")

LAYOUT_DESCRIPTIONS = {
    "separate": "three [d_model,d_out] weights (qkv layout, Y = X W)",
    "separate-torch": "three [d_out,d_model] weights (torch layout, transposed on reading)",
    "separate-mixed": "three weights, some in torch layout [d_out,d_model] (transposed on reading)",
    "packed": "one in_proj_weight [3*d_out,d_model] (torch) split query,key,value, transposed",
}


@dataclass(frozen=True)
class BranchWeights:
    """One branch after canonicalization: ``weight`` is ``[d_model, d_out]``."""

    weight: Array
    bias: Array | None
    name: str | None
    location: str
    bias_location: str


@dataclass(frozen=True)
class CanonicalWeights:
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


def _bias(value: Any, width: int, label: str, location: str, max_elements: int) -> Array:
    bias = parse_tensor(value, location, max_elements)
    if bias.shape != (width,):
        raise FixtureError(
            location,
            f"{label} must have shape [{width}] (the branch's output width), "
            f"got {_shape(bias.shape)}",
        )
    return bias


def _separate_branch(value: Any, branch: str, max_elements: int) -> tuple[BranchWeights, str]:
    location = f"$.weights.{branch}"
    name: str | None = None
    layout = "qkv"
    raw_bias: Any = None
    tensor = value
    if isinstance(value, dict):
        refuse_unknown_keys(value, WEIGHT_OBJECT_KEYS, location)
        if "name" in value:
            if not isinstance(value["name"], str):
                raise FixtureError(
                    f"{location}.name", f"expected a string, got {json_type_name(value['name'])}"
                )
            name = value["name"]
        if "layout" in value:
            layout = value["layout"]
            if layout not in LAYOUTS:
                shown = f'"{layout}"' if isinstance(layout, str) else json_type_name(layout)
                raise FixtureError(f"{location}.layout", f'expected "qkv" or "torch", got {shown}')
        raw_bias = value.get("bias")
        tensor = {k: v for k, v in value.items() if k in ("shape", "values")}
    weight = parse_tensor(tensor, location, max_elements)
    if weight.ndim != 2:
        # The chapter's message: the branch names itself, then the linear layer's cause.
        raise FixtureError(location, str(ProjectionError(branch, WeightRank(weight.ndim))))
    if layout == "torch":
        weight = np.ascontiguousarray(weight.T)  # [out, in] -> [in, out]
    bias = None
    if raw_bias is not None:
        bias = _bias(raw_bias, weight.shape[1], f"{branch} bias", f"{location}.bias", max_elements)
    return BranchWeights(weight, bias, name, location, f"{location}.bias"), layout


def _packed(raw: dict[str, Any], max_elements: int) -> CanonicalWeights:
    location = "$.weights.in_proj_weight"
    if "in_proj_weight" not in raw:
        raise FixtureError("$.weights", 'missing key "in_proj_weight" (in_proj_bias needs it)')
    packed = parse_tensor(raw["in_proj_weight"], location, max_elements)
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
        packed_bias = _bias(raw["in_proj_bias"], rows, "in_proj_bias", bias_location, max_elements)
        biases = [packed_bias[i * d_out:(i + 1) * d_out].copy() for i in range(3)]
    branches = tuple(
        BranchWeights(
            # chunk i of the rows is branch i's torch weight [d_out, d_model]; ours is its transpose
            weight=np.ascontiguousarray(packed[i * d_out:(i + 1) * d_out].T),
            bias=biases[i],
            name=None,
            location=location,
            bias_location=bias_location,
        )
        for i in range(3)
    )
    return CanonicalWeights((branches[0], branches[1], branches[2]), "packed")


def canonicalize(raw: Any, max_elements: int = DEFAULT_MAX_ELEMENTS) -> CanonicalWeights:
    """Read any accepted ``weights`` spelling into :class:`CanonicalWeights`.

    Takes the parsed JSON value of ``weights``. Validates structure, layouts, ranks and
    bias shapes; widths across branches are checked later by whoever builds the layer.
    Raises :class:`~qkvcli.fixture.FixtureError`.
    """
    if not isinstance(raw, dict):
        raise FixtureError("$.weights", f"expected an object, got {json_type_name(raw)}")
    refuse_unknown_keys(raw, BRANCHES + PACKED_KEYS, "$.weights")
    packed_keys = [key for key in PACKED_KEYS if key in raw]
    separate_keys = [key for key in BRANCHES if key in raw]
    if packed_keys and separate_keys:
        raise FixtureError(
            "$.weights",
            f'use either query/key/value or in_proj_weight (packed), not both; '
            f'found "{separate_keys[0]}" and "{packed_keys[0]}"',
        )
    if packed_keys:
        return _packed(raw, max_elements)
    branches = []
    layouts = []
    for branch in BRANCHES:
        if branch not in raw:
            raise FixtureError("$.weights", f'missing key "{branch}"')
        weights, layout = _separate_branch(raw[branch], branch, max_elements)
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
    data: dict[str, Any], max_elements: int = DEFAULT_MAX_ELEMENTS
) -> tuple[dict[str, Any], str]:
    """The chapter reader's hook: extended ``weights`` as the plain form, and the layout label.

    The chapter's evidence is about bias-free projections of one shared width, so a
    fixture with a bias, or an independent value width that differs, is refused with a
    pointer to ``qkv attend``. Everything else (names, finite values, widths) is left to
    the chapter's own validation, which runs on the returned plain weights.
    """
    mode = value_width_mode(data)
    canonical = canonicalize(data.get("weights"), max_elements)
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
