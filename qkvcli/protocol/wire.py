"""The ``--command`` protocol's messages: JSON lines, tensors as ``{"shape", "values"}``.

Floats are written with Python's shortest round-trip spelling (``repr``) and read
with ``float``, so every binary64 value crosses the pipe exactly, both ways. NaN and
infinities are refused in both directions. See ``docs/protocol.md``.

A reply is bounded by its request: :func:`reply_values` is how many numbers a reply
to it may hold, :func:`reply_budget` the longest line that can take, and a reply
tensor's shape may not claim more (nor more than :data:`MAX_RANK` dimensions), so no
reply makes qkv allocate more than the request could need.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from qkvcli.core.arrays import Array
from qkvcli.core.names import BRANCHES, GRADIENTS
from qkvcli.core.text import ERROR_TEXT_LIMIT, printable

VERSION = 1
HEAD_FORWARD_NAMES = ("scores", "weights", "output")
HEAD_BACKWARD_NAMES = GRADIENTS
ROPE_NAMES = ("rotated",)
ROPE_REVERSE_NAMES = ("turned_back",)
MHA_FIELDS = ("input", "w_query", "w_key", "w_value", "w_output", "heads", "causal", "rope",
              "base", "offset")
MHA_FORWARD_NAMES = ("weights", "merged", "output")
MHA_BACKWARD_NAMES = (*GRADIENTS, "grad_w_output")
CACHE_STEPS_NAMES = ("output", "keys", "values", "lengths")
"""A learner's KV cache run: each step's output at its tokens' rows ``[B,T,E]`` (zeros for
a refused step), the cached rotated keys and values after the last step
``[B,H,length,d_h]``, and the cache's length after each step ``[steps]``."""
OPERATIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "forward": (("input", "w_query", "w_key", "w_value"), BRANCHES),
    "backward": (("input", "w_query", "w_key", "w_value", "grad_query", "grad_key",
                  "grad_value"), GRADIENTS),
    "head_forward": (("input", "w_query", "w_key", "w_value", "causal"), HEAD_FORWARD_NAMES),
    "head_backward": (("input", "w_query", "w_key", "w_value", "causal", "grad_output"),
                      HEAD_BACKWARD_NAMES),
    "rope": (("input", "base", "offset"), ROPE_NAMES),
    "rope_reverse": (("input", "base", "offset"), ROPE_REVERSE_NAMES),
    "mha_forward": (MHA_FIELDS, MHA_FORWARD_NAMES),
    "mha_backward": ((*MHA_FIELDS, "grad_output"), MHA_BACKWARD_NAMES),
    "cache_steps": (("input", "w_query", "w_key", "w_value", "w_output", "heads", "base",
                     "capacity", "step"), CACHE_STEPS_NAMES),
}
"""Each operation's request fields (the protocol's names, in the Python functions' order)
and the tensors its reply gives. The fields of :data:`SCALARS` are JSON booleans or
numbers, every other field a tensor."""
OPERAND_FIELDS = ("query", "key", "value", "causal")
OPERAND_FORWARD_NAMES = ("scores", "scaled_scores", "masked_scores", "weights", "output")
OPERAND_BACKWARD_NAMES = ("grad_query", "grad_key", "grad_value", "grad_weights",
                          "grad_scaled_scores", "grad_scores")
LAYER_RECORDS = ("projected", "query", "key", "value", "rotated_query", "rotated_key",
                 "normed_query", "normed_key", "scores", "scaled_scores", "attention", "concat",
                 "output")
LAYER_GRADIENT_RECORDS = (
    "grad_input", "grad_w_query", "grad_w_key", "grad_w_value", "grad_b_query", "grad_b_key",
    "grad_b_value", "grad_concat", "grad_out_weight", "grad_out_bias", "grad_attention",
    "grad_scaled_scores", "grad_scores", "grad_norm_query", "grad_norm_key",
    "grad_norm_query_bias", "grad_norm_key_bias")
CACHE_RUN_NAMES = ("output", "weights", "keys", "values", "lengths")
"""A KV cache's run: each step's output ``[B,T,E]``, each step's weights ``[B,H,T,T]``
(zero past the step), the cached keys and values after the last ``[B,H,T,d_h]``, and the
cache's length after each step ``[T]``."""
ENGINE_OPERATIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "layer_forward": (("input",), ("output",)),
    "layer_weighed": (("input",), ("weights", "output")),
    "layer_backward": (("input", "grad_output"), ("input_gradient", "reached")),
    "layer_heads": (("input", "w_query", "w_key", "w_value"), ("weights", "merged")),
    "layer_pass": (("input",), LAYER_RECORDS),
    "layer_pass_backward": (("input", "grad_output"), LAYER_GRADIENT_RECORDS),
    "operands_forward": (OPERAND_FIELDS, OPERAND_FORWARD_NAMES),
    "operands_backward": ((*OPERAND_FIELDS, "grad_output"), OPERAND_BACKWARD_NAMES),
    "cache_run": (("input",), CACHE_RUN_NAMES),
    "cache_prefix": (("input",), ("output", "rotated_key", "value")),
}
"""The operations only qkv's engine offers, in the same form: a real layer's forward,
whose weights, biases and norms are the layer's own (attend's claims on it: its output
alone, or with its attention weights; its backward's input gradient and every gradient
only the scores reach, flattened into one; its heads' weights and merged outputs with
other projection weights; every array of its forward and of its reverse, an empty one
for what the layer has not), one
head on given Q, K, V (chapters 27 and 28), and a layer's KV cache (chapter 37: the
cache reset and fed each token of the input in turn, ``cache_run``; the layer's causal
pass over a whole prefix, ``cache_prefix``, its rotated keys and values by head). Never
asked of a program or a module over the protocol."""
SCALARS: dict[str, type] = {"causal": bool, "rope": bool, "heads": int, "base": float,
                            "offset": int, "capacity": int, "step": int}
"""The request fields that are not tensors, and their types."""
PAIRS = {"backward": "forward", "head_backward": "head_forward", "rope_reverse": "rope",
         "mha_backward": "mha_forward"}
"""Each operation judged together with another, offered only beside it."""
FIRST_OPERATIONS = ("forward", "head_forward", "rope", "mha_forward", "cache_steps")
"""The operations an implementation offers at least one of."""


BYTES_PER_VALUE = 32
"""Room for one number in a reply: the longest shortest-round-trip spelling of a binary64
(``-2.2250738585072014e-308``, 24 characters), a separator and spaces."""
REPLY_OVERHEAD = 1 << 16
"""Room in every reply for its id, keys, shapes and an error message: 64 KiB."""
MAX_RANK = 32
"""The most dimensions a reply tensor may have (NumPy's own limit is 64; qkv sends 2 and 3)."""


class Malformed(ValueError):
    """A reply that does not follow the protocol; the message says what is wrong."""


def encode_tensor(array: Array, binary: bool = False) -> dict[str, Any]:
    """``{"shape": [...], "values": [row-major floats]}``; ``binary``: ``{"shape": [...],
    "float64": base64 of the little-endian bytes}`` (qkv's own Python runner only: the
    same exact values, without the cost of spelling each in decimal)."""
    values = np.asarray(array, dtype=np.float64)
    shape = [int(dim) for dim in values.shape]
    if binary:
        raw = np.ascontiguousarray(values, dtype="<f8").tobytes()
        import base64  # a tensor's encoding only: the engine's own runs never encode

        return {"shape": shape, "float64": base64.b64encode(raw).decode("ascii")}
    return {"shape": shape, "values": values.reshape(-1).tolist()}


def _binary_tensor(key: str, tensor: dict[str, Any], max_values: int,
                   finite: bool = True) -> Array:
    shape, data = tensor["shape"], tensor["float64"]
    if not isinstance(shape, list) or not all(
        isinstance(dim, int) and not isinstance(dim, bool) and dim >= 0 for dim in shape
    ):
        raise Malformed(f'"{key}.shape" must be a list of non-negative integers')
    _check_shape(key, shape, max_values)
    try:
        import base64

        raw = base64.b64decode(data, validate=True) if isinstance(data, str) else b""
    except ValueError:
        raise Malformed(f'"{key}.float64" is not base64') from None
    if not isinstance(data, str) or len(raw) != 8 * math.prod(shape):
        raise Malformed(f'"{key}.float64" does not hold {math.prod(shape)} float64 values')
    array = np.frombuffer(raw, dtype="<f8").astype(np.float64).reshape(shape)
    if finite and not np.isfinite(array).all():
        raise Malformed(f'"{key}" holds a number that is not finite')
    return array


def decode_unfinished(reply: dict[str, Any], names: tuple[str, ...],
                      max_values: int) -> tuple[Array, ...] | None:
    """The tensors a bad-result reply of qkv's own runner carries under ``"results"``
    (float64 bytes, NaN and infinities kept), each shaped within ``max_values``; ``None``
    where it carries none or they cannot be read."""
    found = reply.get("results")
    if not isinstance(found, dict) or set(found) != set(names):
        return None
    tensors = []
    for name in names:
        tensor = found[name]
        if not isinstance(tensor, dict) or set(tensor) != {"shape", "float64"}:
            return None
        try:
            tensors.append(_binary_tensor(name, tensor, max_values, finite=False))
        except Malformed:
            return None
    return tuple(tensors)


def encode(message: dict[str, Any]) -> bytes:
    """One protocol line (UTF-8, ending in a newline). Raises ``ValueError`` for NaN/infinity."""
    return (json.dumps(message, allow_nan=False, separators=(",", ":")) + "\n").encode("utf-8")


def _refuse_constant(name: str) -> Any:
    raise Malformed(f"{name} is not a finite number")


def _integer(text: str) -> int | float:
    # A bare -0 is the float -0.0 (its sign matters to a bit-for-bit check); other
    # integers stay integers, so "version": 1.0 or a shape of 2.0 is still refused.
    return -0.0 if text == "-0" else int(text)


def decode(line: bytes) -> dict[str, Any]:
    """One reply line as a JSON object (a bare ``-0`` read as ``-0.0``). Raises :class:`Malformed`."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as error:
        raise Malformed(f"not UTF-8 (byte {error.start})") from None
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_int=_integer)
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
    """``text`` stripped and cut to ``limit`` characters, as a JSON string (quoted, escaped)."""
    text = text.strip()
    return json.dumps(text if len(text) <= limit else text[:limit] + "...")


def extent(shape: tuple[int, ...] | list[int]) -> int:
    """The product of ``shape``'s non-empty axes: its size, but an empty axis counts as 1.

    NumPy holds an empty tensor of any other sizes, so a reply's shape is bounded by
    this, not by its (zero) size.
    """
    return math.prod(dim or 1 for dim in shape)


def reply_values(operation: str, tensors: dict[str, Array]) -> int:
    """How many numbers a reply to the request ``operation`` on ``tensors`` may hold, and
    the largest :func:`extent` any of its tensors' shapes may have.

    A forward reply holds three ``[batch, tokens, d_head]`` tensors, a backward reply
    tensors of the input's and the three weights' shapes; a request with shapes the
    protocol rejects may be answered with as many values as it sent. The larger count.
    """
    x = tensors["input"]
    sent = sum(extent(array.shape) for array in tensors.values())
    if operation in ("rope", "rope_reverse"):
        return max(extent(x.shape), sent)
    if operation == "cache_steps":  # output [B,T,E], keys and values [B,H,L<=T,d_h], lengths
        tokens = int(x.shape[1]) if x.ndim > 1 else 1
        return max(3 * extent(x.shape) + tokens, sent)
    if operation == "mha_forward":  # weights [B,H,T,T] (H at most d_model), merged, output
        tokens = int(x.shape[1]) if x.ndim > 1 else 1
        width = int(x.shape[-1]) if x.ndim else 1
        return max(extent(x.shape[:-1]) * (max(width, 1) * max(tokens, 1) + 2 * width
                                           + extent(tensors["w_output"].shape)), sent)
    weights = [tensors[name] for name in ("w_query", "w_key", "w_value", "w_output")
               if name in tensors]
    widest = max(max((int(w.shape[-1]) for w in weights if w.ndim), default=1), 1)
    if operation == "forward":
        answer = 3 * extent(x.shape[:-1]) * widest
    elif operation == "head_forward":
        # scores and weights [B,T,T], output [B,T,d_v]
        tokens = int(x.shape[1]) if x.ndim > 1 else 1
        answer = extent(x.shape[:-1]) * (2 * max(tokens, 1) + widest)
    else:
        answer = extent(x.shape) + sum(extent(w.shape) for w in weights)
    return max(answer, sent)


def reply_budget(values: int) -> int:
    """The longest reply line read for a reply of at most ``values`` numbers, in bytes:
    :data:`REPLY_OVERHEAD` plus :data:`BYTES_PER_VALUE` for each, at most the byte limit
    of any input (looked up at call time)."""
    from qkvcli.reading import limits

    return min(limits.MAX_FILE_BYTES, REPLY_OVERHEAD + BYTES_PER_VALUE * values)


def _check_shape(key: str, shape: list[int], max_values: int) -> None:
    """Refuse a shape no reply to the request needs: more than :data:`MAX_RANK`
    dimensions, or an :func:`extent` over ``max_values``. Raises :class:`Malformed`."""
    if len(shape) > MAX_RANK:
        raise Malformed(f'"{key}.shape" has {len(shape)} dimensions, more than {MAX_RANK}')
    claimed = 1
    for dim in shape:  # stops at the first axis past the bound: no product of huge numbers
        claimed *= dim or 1
        if claimed > max_values:
            shown = printable(json.dumps(shape), ERROR_TEXT_LIMIT)
            raise Malformed(f'"{key}.shape" {shown} is larger than any reply to this request '
                            f"(at most {max_values} values)")


def decode_tensor(reply: dict[str, Any], key: str, max_values: int,
                  binary: bool = False) -> Array:
    """The tensor ``reply[key]`` as a float64 array, its shape claiming at most
    ``max_values`` values (:func:`reply_values`); ``binary`` also takes the
    ``"float64"`` form of :func:`encode_tensor`. Raises :class:`Malformed`."""
    if key not in reply:
        raise Malformed(f'missing "{key}"')
    tensor = reply[key]
    if binary and isinstance(tensor, dict) and set(tensor) == {"shape", "float64"}:
        return _binary_tensor(key, tensor, max_values)
    if not isinstance(tensor, dict) or set(tensor) != {"shape", "values"}:
        raise Malformed(f'"{key}" must be {{"shape": [...], "values": [...]}}')
    shape, values = tensor["shape"], tensor["values"]
    if not isinstance(shape, list) or not all(
        isinstance(dim, int) and not isinstance(dim, bool) and dim >= 0 for dim in shape
    ):
        raise Malformed(f'"{key}.shape" must be a list of non-negative integers')
    _check_shape(key, shape, max_values)
    if not isinstance(values, list):
        raise Malformed(f'"{key}.values" must be a list of numbers')
    for index, value in enumerate(values):  # before counting: a nested list is no count
        if isinstance(value, list):
            raise Malformed(f'"{key}.values[{index}]" is a list: "values" is flat, row-major')
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise Malformed(f'"{key}.values[{index}]" is not a number')
    size = math.prod(shape)
    if len(values) != size:
        raise Malformed(f'"{key}" has {len(values)} values for shape {json.dumps(shape)} '
                        f"({size} expected)")
    try:
        array = np.array(values, dtype=np.float64).reshape(shape)
    except OverflowError:
        raise Malformed(f'"{key}" holds a number too large for float64') from None
    if not np.isfinite(array).all():
        raise Malformed(f'"{key}" holds a number too large for float64')
    return array


def is_integer(value: Any, expected: int) -> bool:
    """Whether ``value`` is the JSON integer ``expected`` (not ``true``, not ``1.0``)."""
    return type(value) is int and value == expected


def check_id(reply: dict[str, Any], expected: int) -> None:
    """Raise :class:`Malformed` unless ``reply["id"]`` is ``expected``."""
    got = reply.get("id")
    if not is_integer(got, expected):
        raise Malformed(f'"id" is {json.dumps(got)}, expected {expected}')


def error_message(reply: dict[str, Any]) -> str | None:
    """The rejection message of an ``{"id", "error"}`` reply, else ``None``. Raises :class:`Malformed`."""
    if "error" not in reply:
        return None
    message = reply["error"]
    if not isinstance(message, str):
        raise Malformed('"error" must be a string')
    return message
