"""Fixture files: JSON a person can write by hand, parsed into validated float64 arrays.

A fixture looks like this (every key but ``input`` and ``weights`` is optional)::

    {
      "chapter": "26-qkv-projections",
      "seed": 26,
      "input": [[[1, 2, -1], [0, 1, 2]]],
      "weights": {
        "query": {"name": "decoder.block.0.attention.query.weight",
                  "values": [[1, 0], [0, 1], [1, -1]]},
        "key":   [[0, 1], [1, 0], [-1, 1]],
        "value": {"shape": [3, 2], "values": [1, 1, 1, -1, 0, 2]}
      },
      "upstream": {"query": ..., "key": ..., "value": ...},
      "gradcheck": {"step": 1e-6, "tolerance": 2e-6, "samples": null}
    }

A tensor is a nested list, or an object with ``values`` (nested, or flat row-major
together with ``shape``). Problems raise :class:`FixtureError`, which carries the
JSON location (``$.weights.key``) of what is wrong.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from qkvcli.engine import Array, QkvProjections, check_finite, validate_name
from qkvcli.errors import (
    BRANCHES,
    BranchInputWidthMismatch,
    BranchOutputWidthMismatch,
    DuplicateName,
    ProjectionError,
    QkvError,
)
from qkvcli.record import Record

if TYPE_CHECKING:
    from pathlib import Path  # only annotations here: importing pathlib costs ~7 ms

DEFAULT_SEED = 26
DEFAULT_STEP = 1e-6
DEFAULT_TOLERANCE = 2e-6
DEFAULT_MAX_ELEMENTS = 1 << 27
MAX_FILE_BYTES = 256 * 1024 * 1024
MAX_SEED = (1 << 64) - 1
BUNDLED_NAME = "ch26-qkv-projections.json"

TOP_KEYS = ("chapter", "seed", "input", "weights", "upstream", "gradcheck")
WEIGHT_KEYS = ("name", "shape", "values")
TENSOR_KEYS = ("shape", "values")
GRADCHECK_KEYS = ("step", "tolerance", "samples")


class FixtureError(ValueError):
    """A fixture that cannot be used: ``location`` is a JSON path such as ``$.weights.key``."""

    def __init__(self, location: str, message: str) -> None:
        self.location = location
        self.message = message
        super().__init__(f"{location}: {message}" if location else message)


class Fixture(Record):
    """A validated fixture: every array float64, finite, and of consistent shape.

    ``layer`` is the :class:`~qkvcli.engine.QkvProjections` built from ``weights`` and
    ``names`` at construction (not a field: left out of equality and ``repr``).
    """

    input: Array
    weights: tuple[Array, Array, Array]
    names: tuple[str, str, str]
    upstream: tuple[Array, Array, Array]
    step: float = DEFAULT_STEP
    tolerance: float = DEFAULT_TOLERANCE
    samples: int | None = None
    seed: int = DEFAULT_SEED
    chapter: str = "custom"
    mode: str = "auto"  # gradient-check mode (qkvcli.gradcheck.MODES); set from the CLI
    directions: int = 3  # random directions per tensor in fast mode

    def __post_init__(self) -> None:
        self.__dict__["_layer"] = QkvProjections.from_arrays(
            self.weights[0], self.weights[1], self.weights[2], names=self.names
        )

    @property
    def layer(self) -> QkvProjections:
        layer: QkvProjections = self.__dict__["_layer"]
        return layer

    @property
    def batch(self) -> int:
        return int(self.input.shape[0])

    @property
    def tokens(self) -> int:
        return int(self.input.shape[1])

    @property
    def d_model(self) -> int:
        return int(self.input.shape[2])

    @property
    def d_head(self) -> int:
        return int(self.weights[0].shape[1])


# --- reading ------------------------------------------------------------------------------


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows; write a finite number")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def parse_json_text(text: str) -> Any:
    """Parse JSON strictly: no NaN/Infinity, no duplicate keys. Raises :class:`FixtureError`."""
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        return json.loads(
            text, parse_constant=_reject_constant, object_pairs_hook=_no_duplicates
        )
    except json.JSONDecodeError as error:
        raise FixtureError(
            "", f"invalid JSON at line {error.lineno} column {error.colno}: {error.msg}"
        ) from None
    except RecursionError:
        raise FixtureError("", "invalid JSON: nested too deeply") from None
    except ValueError as error:
        raise FixtureError("", f"invalid JSON: {error}") from None


def read_fixture_text(path: Path) -> str:
    """Read a fixture file as UTF-8 text. Raises :class:`FixtureError` (or ``OSError``)."""
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise FixtureError("", f"file is {size} bytes; fixtures are limited to {MAX_FILE_BYTES}")
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise FixtureError("", f"not UTF-8 text (byte {error.start} is 0x{data[error.start]:02x})")


def bundled_fixture_text() -> str:
    """The chapter fixture shipped inside the package."""
    import os

    # A plain read when the package is on disk: importlib.resources pulls in zipfile
    # and friends, several milliseconds of a report that takes few more.
    path = os.path.join(os.path.dirname(__file__), "data", BUNDLED_NAME)
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    from importlib.resources import files

    return files("qkvcli.data").joinpath(BUNDLED_NAME).read_text(encoding="utf-8")


def load_fixture(path: Path | None = None, max_elements: int = DEFAULT_MAX_ELEMENTS) -> Fixture:
    """Load and validate a fixture file; ``None`` loads the bundled chapter fixture.

    Raises :class:`FixtureError` for bad content and ``OSError`` for unreadable paths.
    """
    if path is None:
        return parse_fixture(parse_json_text(bundled_fixture_text()), max_elements=max_elements)
    text = read_fixture_text(path)
    return parse_fixture(
        parse_json_text(text), default_chapter=path.stem, max_elements=max_elements,
        base_dir=path.parent,
    )


# --- parsing ------------------------------------------------------------------------------


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _check_keys(obj: dict[str, Any], allowed: Iterable[str], location: str) -> None:
    allowed = tuple(allowed)
    for key in obj:
        if key not in allowed:
            import difflib  # only on the error path: it costs ~2 ms of every start-up

            close = difflib.get_close_matches(key, allowed, n=1)
            hint = f' (did you mean "{close[0]}"?)' if close else ""
            known = ", ".join(allowed)
            raise FixtureError(location, f'unknown key "{key}"{hint}; expected one of {known}')


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number(value: Any, location: str) -> float:
    if not _is_number(value):
        raise FixtureError(location, f"expected a number, got {_type_name(value)}")
    try:
        number = float(value)
    except OverflowError:
        raise FixtureError(location, "number is too large for binary64") from None
    if not math.isfinite(number):
        raise FixtureError(location, "number is too large for binary64")
    return number


def _nested_shape(value: Any, location: str, max_elements: int) -> tuple[int, ...]:
    """The shape of a rectangular nested list of numbers (ragged lists are rejected)."""
    shape: list[int] = []
    probe = value
    while isinstance(probe, list):
        shape.append(len(probe))
        if not probe:
            break
        probe = probe[0]
    _check_size(shape, location, max_elements)

    def walk(item: Any, depth: int, where: str) -> None:
        if depth == len(shape):
            if isinstance(item, list):
                raise FixtureError(where, "ragged nesting: expected a number, got an array")
            if not _is_number(item):
                raise FixtureError(where, f"expected a number, got {_type_name(item)}")
            return
        if not isinstance(item, list):
            raise FixtureError(
                where, f"ragged nesting: expected an array of length {shape[depth]}, "
                f"got {_type_name(item)}"
            )
        if len(item) != shape[depth]:
            raise FixtureError(
                where, f"ragged nesting: expected length {shape[depth]}, got {len(item)}"
            )
        for i, child in enumerate(item):
            walk(child, depth + 1, f"{where}[{i}]")

    walk(value, 0, location)
    return tuple(shape)


def _check_size(shape: list[int] | tuple[int, ...], location: str, max_elements: int) -> None:
    count = math.prod(shape)
    if count > max_elements:
        raise FixtureError(
            location,
            f"shape [{','.join(map(str, shape))}] has {count} elements, more than the limit "
            f"{max_elements} (raise it with --max-elements)",
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
            location, f"expected a nested array or an object with values, got {_type_name(value)}"
        )
    _check_keys(value, TENSOR_KEYS + extra_keys, location)
    if "values" not in value:
        raise FixtureError(location, 'missing key "values"')
    values = value["values"]
    if "shape" not in value:
        if not isinstance(values, list):
            raise FixtureError(f"{location}.values", f"expected an array, got {_type_name(values)}")
        shape = _nested_shape(values, f"{location}.values", max_elements)
        return _to_array(values, shape, f"{location}.values")
    raw_shape = value["shape"]
    if not isinstance(raw_shape, list):
        raise FixtureError(f"{location}.shape", f"expected an array, got {_type_name(raw_shape)}")
    shape_list = []
    for i, dim in enumerate(raw_shape):
        if not (isinstance(dim, int) and not isinstance(dim, bool)) or dim < 0:
            shown = json.dumps(dim) if _is_number(dim) else _type_name(dim)
            raise FixtureError(
                f"{location}.shape[{i}]", f"expected a non-negative integer, got {shown}"
            )
        shape_list.append(dim)
    _check_size(shape_list, f"{location}.shape", max_elements)
    if not isinstance(values, list):
        raise FixtureError(f"{location}.values", f"expected an array, got {_type_name(values)}")
    count = math.prod(shape_list)
    if len(values) != count:
        raise FixtureError(
            f"{location}.values",
            f"shape [{','.join(map(str, shape_list))}] needs {count} values, got {len(values)}",
        )
    for i, item in enumerate(values):
        if not _is_number(item):
            raise FixtureError(
                f"{location}.values[{i}]", f"expected a number, got {_type_name(item)}"
            )
    return _to_array(values, tuple(shape_list), f"{location}.values")


def _weight(
    value: Any, branch: str, max_elements: int, base_dir: Path | None = None
) -> tuple[Array, str | None]:
    location = f"$.weights.{branch}"
    name: str | None = None
    if isinstance(value, dict) and "name" in value:
        raw = value["name"]
        if not isinstance(raw, str):
            raise FixtureError(f"{location}.name", f"expected a string, got {_type_name(raw)}")
        name = raw
    array = parse_tensor(value, location, max_elements, extra_keys=("name",), base_dir=base_dir)
    return array, name


def parse_fixture(
    data: Any, default_chapter: str = "custom", max_elements: int = DEFAULT_MAX_ELEMENTS,
    base_dir: Path | None = None,
) -> Fixture:
    """Validate parsed JSON and build a :class:`Fixture`. Raises :class:`FixtureError`.

    ``base_dir`` is where ``npy`` tensor paths are resolved (the fixture file's
    directory; ``None``: the current directory).

    Order: document keys; weights (each weight's name, then finite values; then per
    branch rank and widths; then model widths, head widths, duplicate names); then the
    input (rank, width, finite values); then upstream gradients; then settings.
    """
    from qkvcli.engine import DEFAULT_NAMES

    if not isinstance(data, dict):
        raise FixtureError("$", f"expected an object, got {_type_name(data)}")
    _check_keys(data, TOP_KEYS, "$")
    for key in ("input", "weights"):
        if key not in data:
            raise FixtureError("$", f'missing key "{key}"')

    raw_weights = data["weights"]
    if not isinstance(raw_weights, dict):
        raise FixtureError("$.weights", f"expected an object, got {_type_name(raw_weights)}")
    _check_keys(raw_weights, BRANCHES, "$.weights")
    arrays: list[Array] = []
    names: list[str] = []
    for index, branch in enumerate(BRANCHES):
        if branch not in raw_weights:
            raise FixtureError("$.weights", f'missing key "{branch}"')
        array, name = _weight(raw_weights[branch], branch, max_elements, base_dir)
        name = DEFAULT_NAMES[index] if name is None else name
        _engine(validate_name, name, location=f"$.weights.{branch}.name")
        _engine(check_finite, array, "parameter", location=f"$.weights.{branch}")
        arrays.append(array)
        names.append(name)
    try:
        layer = QkvProjections.from_arrays(*arrays, names=names)
    except ProjectionError as error:
        raise FixtureError(f"$.weights.{error.projection}", str(error)) from None
    except DuplicateName as error:
        raise FixtureError(f"$.weights.{BRANCHES[error.repeated]}.name", str(error)) from None
    except (BranchInputWidthMismatch, BranchOutputWidthMismatch) as error:
        raise FixtureError("$.weights", str(error)) from None

    x = parse_tensor(data["input"], "$.input", max_elements, base_dir=base_dir)
    _engine(layer.check_input, x, location="$.input")
    batch, tokens, _ = x.shape

    expected = (batch, tokens, layer.d_head)
    upstream: list[Array] = []
    raw_upstream = data.get("upstream")
    if raw_upstream is None:
        upstream = [np.ones(expected) for _ in BRANCHES]
    else:
        if not isinstance(raw_upstream, dict):
            raise FixtureError("$.upstream", f"expected an object, got {_type_name(raw_upstream)}")
        _check_keys(raw_upstream, BRANCHES, "$.upstream")
        for branch in BRANCHES:
            location = f"$.upstream.{branch}"
            if branch not in raw_upstream:
                upstream.append(np.ones(expected))
                continue
            grad = parse_tensor(raw_upstream[branch], location, max_elements, base_dir=base_dir)
            if grad.shape != expected:
                raise FixtureError(
                    location,
                    f"expected shape [{','.join(map(str, expected))}] (batch, tokens, d_head), "
                    f"got [{','.join(map(str, grad.shape))}]",
                )
            upstream.append(grad)

    step, tolerance, samples = DEFAULT_STEP, DEFAULT_TOLERANCE, None
    raw_check = data.get("gradcheck")
    if raw_check is not None:
        if not isinstance(raw_check, dict):
            raise FixtureError("$.gradcheck", f"expected an object, got {_type_name(raw_check)}")
        _check_keys(raw_check, GRADCHECK_KEYS, "$.gradcheck")
        if "step" in raw_check:
            step = _number(raw_check["step"], "$.gradcheck.step")
            if step <= 0:
                raise FixtureError("$.gradcheck.step", "step must be greater than zero")
        if "tolerance" in raw_check:
            tolerance = _number(raw_check["tolerance"], "$.gradcheck.tolerance")
            if tolerance < 0:
                raise FixtureError("$.gradcheck.tolerance", "tolerance must not be negative")
        raw_samples = raw_check.get("samples")
        if raw_samples is not None:
            if not (isinstance(raw_samples, int) and not isinstance(raw_samples, bool)):
                raise FixtureError(
                    "$.gradcheck.samples", f"expected an integer or null, got {_type_name(raw_samples)}"
                )
            if raw_samples < 1:
                raise FixtureError("$.gradcheck.samples", "samples must be at least 1")
            samples = raw_samples

    seed = DEFAULT_SEED
    if "seed" in data:
        raw_seed = data["seed"]
        if not (isinstance(raw_seed, int) and not isinstance(raw_seed, bool)):
            raise FixtureError("$.seed", f"expected an integer, got {_type_name(raw_seed)}")
        if not 0 <= raw_seed <= MAX_SEED:
            raise FixtureError("$.seed", f"seed must be between 0 and {MAX_SEED}")
        seed = raw_seed

    chapter = default_chapter
    if "chapter" in data:
        raw_chapter = data["chapter"]
        if not isinstance(raw_chapter, str) or not raw_chapter or "\n" in raw_chapter:
            raise FixtureError("$.chapter", "expected a non-empty single-line string")
        chapter = raw_chapter

    return Fixture(
        input=x,
        weights=(arrays[0], arrays[1], arrays[2]),
        names=(names[0], names[1], names[2]),
        upstream=(upstream[0], upstream[1], upstream[2]),
        step=step,
        tolerance=tolerance,
        samples=samples,
        seed=seed,
        chapter=chapter,
    )


def _engine(check: Any, *args: Any, location: str) -> Any:
    try:
        return check(*args)
    except QkvError as error:
        raise FixtureError(location, str(error)) from None
