"""Tensors in fixture JSON: nested lists, ``{"shape", "values"}`` objects, and sources.

Shapes are checked against ``max_elements`` before anything is allocated; ``.npy`` and
``generate`` forms are delegated to :mod:`qkvcli.sources`.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from qkvcli.engine import Array
from qkvcli.jsonvalues import (
    FixtureError,
    _is_number,
    json_type_name,
    refuse_unknown_keys,
)

if TYPE_CHECKING:
    from pathlib import Path

DEFAULT_MAX_ELEMENTS = 1 << 27
TENSOR_KEYS = ("shape", "values")


def _nested_shape(value: Any, location: str, max_elements: int) -> tuple[int, ...]:
    """The shape of a rectangular nested list of numbers (ragged lists are rejected)."""
    shape: list[int] = []
    probe = value
    while isinstance(probe, list):
        shape.append(len(probe))
        if not probe:
            break
        probe = probe[0]
    check_size(shape, location, max_elements)

    def walk(item: Any, depth: int, where: str) -> None:
        if depth == len(shape):
            if isinstance(item, list):
                raise FixtureError(where, "ragged nesting: expected a number, got an array")
            if not _is_number(item):
                raise FixtureError(where, f"expected a number, got {json_type_name(item)}")
            return
        if not isinstance(item, list):
            raise FixtureError(
                where, f"ragged nesting: expected an array of length {shape[depth]}, "
                f"got {json_type_name(item)}"
            )
        if len(item) != shape[depth]:
            raise FixtureError(
                where, f"ragged nesting: expected length {shape[depth]}, got {len(item)}"
            )
        for i, child in enumerate(item):
            walk(child, depth + 1, f"{where}[{i}]")

    walk(value, 0, location)
    return tuple(shape)


def check_size(shape: list[int] | tuple[int, ...], location: str, max_elements: int) -> None:
    """Refuse a shape over ``max_elements``, counting the non-empty axes of an empty one too."""
    count = math.prod(shape)
    if count > max_elements:
        raise FixtureError(
            location,
            f"shape [{','.join(map(str, shape))}] has {count} elements, more than the limit "
            f"{max_elements} (raise it with --max-elements)",
        )
    # An empty axis makes the count 0, yet work over the other axes (and NumPy's own
    # limits) still scale with them: [10**11, 0, 3] would take hours, [0, 2**62, 3]
    # cannot even be shaped. So the non-empty axes must fit the limit too.
    spanned = math.prod(max(dim, 1) for dim in shape)
    if spanned > max_elements:
        raise FixtureError(
            location,
            f"shape [{','.join(map(str, shape))}] is empty, but its other axes span {spanned} "
            f"elements, more than the limit {max_elements} (raise it with --max-elements)",
        )


def _to_array(values: Any, shape: tuple[int, ...], location: str) -> Array:
    try:
        array = np.array(values, dtype=np.float64).reshape(shape)
    except OverflowError:
        raise FixtureError(location, "a number is too large for binary64") from None
    found = np.argwhere(~np.isfinite(array.reshape(-1)))
    if found.size:
        raise FixtureError(location, f"value at flat index {int(found[0][0])} is too large for binary64")
    return array


def parse_tensor(
    value: Any, location: str, max_elements: int = DEFAULT_MAX_ELEMENTS,
    extra_keys: tuple[str, ...] = (), base_dir: Path | None = None,
) -> Array:
    """A tensor from a nested list or a ``{"shape", "values"}`` object.

    Large tensors may instead be ``{"npy": path}`` (relative to ``base_dir``) or
    ``{"generate": {...}}``; see :mod:`qkvcli.sources`.
    """
    if isinstance(value, dict) and ("npy" in value or "generate" in value):
        from qkvcli.sources import load_source

        return load_source(value, location, base_dir, max_elements, extra_keys)
    if isinstance(value, list):
        shape = _nested_shape(value, location, max_elements)
        return _to_array(value, shape, location)
    if not isinstance(value, dict):
        raise FixtureError(
            location, f"expected a nested array or an object with values, got {json_type_name(value)}"
        )
    refuse_unknown_keys(value, TENSOR_KEYS + extra_keys, location)
    if "values" not in value:
        raise FixtureError(location, 'missing key "values"')
    values = value["values"]
    if "shape" not in value:
        if not isinstance(values, list):
            raise FixtureError(f"{location}.values", f"expected an array, got {json_type_name(values)}")
        shape = _nested_shape(values, f"{location}.values", max_elements)
        return _to_array(values, shape, f"{location}.values")
    raw_shape = value["shape"]
    if not isinstance(raw_shape, list):
        raise FixtureError(f"{location}.shape", f"expected an array, got {json_type_name(raw_shape)}")
    shape_list = []
    for i, dim in enumerate(raw_shape):
        if not (isinstance(dim, int) and not isinstance(dim, bool)) or dim < 0:
            shown = json.dumps(dim) if _is_number(dim) else json_type_name(dim)
            raise FixtureError(
                f"{location}.shape[{i}]", f"expected a non-negative integer, got {shown}"
            )
        shape_list.append(dim)
    check_size(shape_list, f"{location}.shape", max_elements)
    if not isinstance(values, list):
        raise FixtureError(f"{location}.values", f"expected an array, got {json_type_name(values)}")
    count = math.prod(shape_list)
    if len(values) != count:
        raise FixtureError(
            f"{location}.values",
            f"shape [{','.join(map(str, shape_list))}] needs {count} values, got {len(values)}",
        )
    for i, item in enumerate(values):
        if not _is_number(item):
            raise FixtureError(
                f"{location}.values[{i}]", f"expected a number, got {json_type_name(item)}"
            )
    return _to_array(values, tuple(shape_list), f"{location}.values")


