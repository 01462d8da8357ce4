"""The ``--command`` protocol's messages: JSON lines, tensors as ``{"shape", "values"}``.

Floats are written with Python's shortest round-trip spelling (``repr``) and read
with ``float``, so every binary64 value crosses the pipe exactly, both ways. NaN and
infinities are refused in both directions. See ``docs/protocol.md``.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from qkvcli.core.arrays import Array

VERSION = 1


class Malformed(ValueError):
    """A reply that does not follow the protocol; the message says what is wrong."""


def encode_tensor(array: Array) -> dict[str, Any]:
    """``{"shape": [...], "values": [row-major floats]}``."""
    values = np.asarray(array, dtype=np.float64)
    return {"shape": [int(dim) for dim in values.shape], "values": values.reshape(-1).tolist()}


def encode(message: dict[str, Any]) -> bytes:
    """One protocol line (UTF-8, ending in a newline). Raises ``ValueError`` for NaN/infinity."""
    return (json.dumps(message, allow_nan=False, separators=(",", ":")) + "\n").encode("utf-8")


def _refuse_constant(name: str) -> Any:
    raise Malformed(f"{name} is not a finite number")


def decode(line: bytes) -> dict[str, Any]:
    """One reply line as a JSON object. Raises :class:`Malformed`."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as error:
        raise Malformed(f"not UTF-8 (byte {error.start})") from None
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as error:
        raise Malformed(f"not JSON ({error.msg} at column {error.colno}): {preview(text)}") from None
    except RecursionError:
        raise Malformed("JSON nested too deeply") from None
    except Malformed:
        raise
    except ValueError as error:  # an integer too long to convert, a lone surrogate...
        raise Malformed(f"not usable JSON ({error})") from None
    if not isinstance(value, dict):
        raise Malformed(f"not a JSON object: {preview(text)}")
    return value


def preview(text: str, limit: int = 80) -> str:
    """``text`` stripped and cut to ``limit`` characters, quoted."""
    text = text.strip()
    return repr(text if len(text) <= limit else text[:limit] + "...")


def decode_tensor(reply: dict[str, Any], key: str) -> Array:
    """The tensor ``reply[key]`` as a float64 array. Raises :class:`Malformed`."""
    if key not in reply:
        raise Malformed(f'missing "{key}"')
    tensor = reply[key]
    if not isinstance(tensor, dict) or set(tensor) != {"shape", "values"}:
        raise Malformed(f'"{key}" must be {{"shape": [...], "values": [...]}}')
    shape, values = tensor["shape"], tensor["values"]
    if not isinstance(shape, list) or not all(
        isinstance(dim, int) and not isinstance(dim, bool) and dim >= 0 for dim in shape
    ):
        raise Malformed(f'"{key}.shape" must be a list of non-negative integers')
    if not isinstance(values, list):
        raise Malformed(f'"{key}.values" must be a list of numbers')
    size = math.prod(shape)
    if len(values) != size:
        raise Malformed(f'"{key}" has {len(values)} values for shape {shape} ({size} expected)')
    for index, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise Malformed(f'"{key}.values[{index}]" is not a number')
    try:
        array = np.array(values, dtype=np.float64).reshape(shape)
    except OverflowError:
        raise Malformed(f'"{key}" holds a number too large for float64') from None
    if not np.isfinite(array).all():
        raise Malformed(f'"{key}" holds a number too large for float64')
    return array


def check_id(reply: dict[str, Any], expected: int) -> None:
    """Raise :class:`Malformed` unless ``reply["id"]`` is ``expected``."""
    got = reply.get("id")
    if got != expected or isinstance(got, bool):
        raise Malformed(f'"id" is {json.dumps(got)}, expected {expected}')


def error_message(reply: dict[str, Any]) -> str | None:
    """The rejection message of an ``{"id", "error"}`` reply, else ``None``. Raises :class:`Malformed`."""
    if "error" not in reply:
        return None
    message = reply["error"]
    if not isinstance(message, str):
        raise Malformed('"error" must be a string')
    return message
