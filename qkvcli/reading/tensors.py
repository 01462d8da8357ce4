"""Tensors in fixture JSON: nested lists, ``{"shape", "values"}`` objects, and sources.

Shapes are checked against ``max_elements`` before anything is allocated
(:mod:`qkvcli.reading.limits`); ``.npy`` and ``generate`` forms are delegated to
:mod:`qkvcli.reading.sources`.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from qkvcli.core.arrays import Array
from qkvcli.reading.json_values import is_number, json_type_name, refuse_unknown_keys
from qkvcli.reading.limits import DEFAULT_MAX_ELEMENTS, check_size
from qkvcli.reading.problems import FixtureError

if TYPE_CHECKING:
    from qkvcli.reading.files import StrPath

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
            if not is_number(item):
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


def _first_too_large(values: list[Any], location: str) -> str:
    """The JSON path of the first number in ``values`` that binary64 cannot hold."""
    stack: list[tuple[Any, str]] = [(values, location)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, list):
            stack.extend((child, f"{where}[{i}]") for i, child in reversed(list(enumerate(item))))
            continue
        try:
            if not math.isfinite(float(item)):
                return where
        except OverflowError:
            return where
    return location


def _to_array(values: Any, shape: tuple[int, ...], location: str) -> Array:
    try:
        array = np.array(values, dtype=np.float64).reshape(shape)
    except OverflowError:
        raise FixtureError(_first_too_large(values, location),
                           "number is too large for binary64") from None
    array += 0.0  # -0.0 becomes 0.0: the same tensor, so the same report
    if not np.isfinite(array).all():
        # Only finite numbers parse, so a non-finite entry is one that overflowed; name it
        # by its JSON path, as it stands in the file.
        raise FixtureError(_first_too_large(values, location), "number is too large for binary64")
    return array


def parse_tensor(
    value: Any, location: str, max_elements: int = DEFAULT_MAX_ELEMENTS,
    extra_keys: tuple[str, ...] = (), base_dir: StrPath | None = None,
) -> Array:
    """A tensor from a nested list or a ``{"shape", "values"}`` object.

    Large tensors may instead be ``{"npy": path}`` (relative to ``base_dir``) or
    ``{"generate": {...}}`` or ``{"safetensors": path, "tensor": name}``; see
    :mod:`qkvcli.reading.sources`.
    """
    if isinstance(value, dict) and ("npy" in value or "generate" in value
                                    or "safetensors" in value):
        from qkvcli.reading.sources import load_source

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
            shown = json.dumps(dim) if is_number(dim) else json_type_name(dim)
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
        if not is_number(item):
            raise FixtureError(
                f"{location}.values[{i}]", f"expected a number, got {json_type_name(item)}"
            )
    return _to_array(values, tuple(shape_list), f"{location}.values")


