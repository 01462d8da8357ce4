"""The multi-head parts of an attend fixture: ``heads``, the output projection, ``upstream.output``.

A fixture runs as a layer (:class:`~qkvcli.attention.multihead.MultiHeadLayer`) when it
gives ``"heads"`` (or ``--heads`` does), an output projection (``out_proj_*`` or
``c_proj_*``) or GPT-2's packed ``c_attn``; ``heads`` defaults to 1 then. Otherwise it
is today's one head and nothing here changes it.

Validation order, after the weights and before the input: ``heads`` (an integer of at
least 1 dividing both projection widths), then the output projection's shapes.
``upstream.output`` (U of ``L = <O, U>``, shaped like the final output) is read after
the input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from qkvcli.attention.head import AttentionHead
from qkvcli.attention.multihead import MultiHeadLayer
from qkvcli.core.arrays import Array
from qkvcli.core.errors import QkvError
from qkvcli.fixtures.json_values import is_json_int, json_type_name
from qkvcli.fixtures.layer_layouts import OUT_KEYS, read_out_projection
from qkvcli.fixtures.layouts import CanonicalWeights
from qkvcli.fixtures.problems import FixtureError
from qkvcli.fixtures.tensors import parse_tensor

if TYPE_CHECKING:
    from qkvcli.fixtures.files import StrPath

LAYER_TOP_KEYS = ("heads",)
UPSTREAM_OUTPUT = "output"
MAX_HEADS = 4096


@dataclass(frozen=True)
class LayerParts:
    """The layer and the layouts its parameters were given in (for the gradients' layouts)."""

    layer: MultiHeadLayer
    branch_layouts: tuple[str, str, str]  # "qkv" or "torch" per branch
    packed: str | None  # "in_proj", "c_attn" or None
    out_layout: str | None  # "out_proj", "c_proj" or None


def _heads(data: dict[str, Any], override: int | None) -> int | None:
    if override is not None:
        return override
    if "heads" not in data:
        return None
    raw = data["heads"]
    if not is_json_int(raw):
        raise FixtureError("$.heads", f"expected an integer, got {json_type_name(raw)}")
    if not 1 <= raw <= MAX_HEADS:
        raise FixtureError("$.heads", f"heads must be between 1 and {MAX_HEADS}")
    return int(raw)


def parse_layer(
    data: dict[str, Any], head: AttentionHead, canonical: CanonicalWeights,
    heads_override: int | None, max_elements: int, base_dir: StrPath | None,
) -> LayerParts | None:
    """The layer the fixture describes, or ``None`` for today's single head.

    Raises :class:`~qkvcli.fixtures.problems.FixtureError` at ``$.heads`` or at the
    output projection's location.
    """
    heads = _heads(data, heads_override)
    out = read_out_projection(data["weights"], max_elements, base_dir)
    if heads is None and out is None and canonical.layout != "c_attn":
        return None
    heads = 1 if heads is None else heads
    try:
        layer = MultiHeadLayer.build(head, heads, None if out is None else out.weight,
                                     None if out is None else out.bias)
    except QkvError as error:
        location = "$.heads" if out is None or "heads" in str(error) else out.location
        raise FixtureError(location, str(error)) from None
    packed = {"packed": "in_proj", "c_attn": "c_attn"}.get(canonical.layout)
    given = tuple(branch.given for branch in canonical.branches)
    return LayerParts(layer, (given[0], given[1], given[2]), packed,
                      None if out is None else out.layout)


def parse_upstream_output(
    raw: Any, shape: tuple[int, int, int], max_elements: int, base_dir: StrPath | None
) -> Array | None:
    """``upstream.output`` if given, checked against the final output's ``shape``."""
    if raw is None:
        return None
    location = f"$.upstream.{UPSTREAM_OUTPUT}"
    grad = parse_tensor(raw, location, max_elements, base_dir=base_dir)
    if grad.shape != shape:
        raise FixtureError(location, f"expected shape [{','.join(map(str, shape))}] (the final "
                           f"output's [batch,tokens,E_out]), got [{','.join(map(str, grad.shape))}]")
    return grad


__all__ = ["LAYER_TOP_KEYS", "OUT_KEYS", "UPSTREAM_OUTPUT", "LayerParts", "parse_layer",
           "parse_upstream_output"]
