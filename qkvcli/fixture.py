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
      "gradcheck": {"step": 1e-6, "tolerance": 2e-6, "samples": null},
      "expect": {"loss": 3.5, "query": ..., "tolerance": 0}
    }

A tensor is a nested list, or an object with ``values`` (nested, or flat row-major
together with ``shape``). Problems raise :class:`FixtureError`, which carries the
JSON location (``$.weights.key``) of what is wrong. :func:`fixture_problems` collects
every independent problem instead of stopping at the first (``qkv validate``); the
published JSON Schema is ``qkvcli/data/fixture.schema.json``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from qkvcli.engine import Array, QkvProjections, check_finite, validate_name
from qkvcli.errors import (
    BRANCHES,
    BranchInputWidthMismatch,
    BranchOutputWidthMismatch,
    DuplicateName,
    InputRank,
    ProjectionError,
    QkvError,
)
from qkvcli.record import Record

if TYPE_CHECKING:
    from pathlib import Path  # only annotations here: importing pathlib costs ~7 ms

    from qkvcli.expect import Expectations

T = TypeVar("T")

DEFAULT_SEED = 26
DEFAULT_STEP = 1e-6
DEFAULT_TOLERANCE = 2e-6
DEFAULT_MAX_ELEMENTS = 1 << 27
MAX_FILE_BYTES = 256 * 1024 * 1024
MAX_SEED = (1 << 64) - 1
BUNDLED_NAME = "ch26-qkv-projections.json"
SCHEMA_NAME = "fixture.schema.json"
# The packed PyTorch form of the three weights (read by qkvcli.layouts).
PACKED_KEYS = ("in_proj_weight", "in_proj_bias")
MAX_PROBLEMS = 100

TOP_KEYS = (
    "chapter", "seed", "input", "weights", "upstream", "gradcheck", "expect", "value_width",
)
WEIGHT_KEYS = ("name", "shape", "values")
TENSOR_KEYS = ("shape", "values")
GRADCHECK_KEYS = ("step", "tolerance", "samples")


class FixtureError(ValueError):
    """A fixture that cannot be used: ``location`` is a JSON path such as ``$.weights.key``."""

    def __init__(self, location: str, message: str) -> None:
        self.location = location
        self.message = message
        super().__init__(f"{location}: {message}" if location else message)


class TooManyProblems(Exception):
    """Raised inside collection once :attr:`Problems.limit` problems are recorded."""


class Problems:
    """Where validation reports what is wrong in a fixture.

    Fail-fast (the default, used by :func:`parse_fixture`) raises the first problem,
    so it is always the one the single-error path reports. Collecting (used by
    :func:`fixture_problems`) records it and lets validation go on with the next
    independent part; checks that depend on a failed part are skipped by the caller.
    """

    def __init__(self, collect: bool = False, limit: int = MAX_PROBLEMS) -> None:
        self.collect = collect
        self.limit = limit
        self.errors: list[FixtureError] = []

    def add(self, error: FixtureError) -> None:
        """Record ``error``; raises it when fail-fast, :class:`TooManyProblems` at the limit."""
        if not self.collect:
            raise error
        self.errors.append(error)
        if len(self.errors) >= self.limit:
            raise TooManyProblems()

    def attempt(self, func: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
        """``func(*args, **kwargs)``, or ``None`` after recording the :class:`FixtureError`."""
        try:
            return func(*args, **kwargs)
        except FixtureError as error:
            self.add(error)
            return None


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
    expect: Expectations | None = None
    layout: str = "separate"
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
        if "integer string conversion" in str(error):
            # Python's own limit (sys.get_int_max_str_digits); its advice is for programmers.
            raise FixtureError("", "invalid JSON: an integer has too many digits") from None
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
        raise FixtureError(
            "", f"not UTF-8 text (byte {error.start} is 0x{data[error.start]:02x})"
        ) from None


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


def json_type_name(value: Any) -> str:
    """The JSON name of a parsed value's type, for messages (``boolean``, ``array``, ...)."""
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


def _unknown_keys(obj: dict[str, Any], allowed: Iterable[str], location: str) -> list[FixtureError]:
    """One problem per key of ``obj`` not in ``allowed``, each with a did-you-mean hint."""
    allowed = tuple(allowed)
    found = []
    for key in obj:
        if key not in allowed:
            import difflib  # only on the error path: it costs ~2 ms of every start-up

            close = difflib.get_close_matches(key, allowed, n=1)
            hint = f' (did you mean "{close[0]}"?)' if close else ""
            known = ", ".join(allowed)
            found.append(
                FixtureError(location, f'unknown key "{key}"{hint}; expected one of {known}')
            )
    return found


def is_json_int(value: Any) -> bool:
    """Whether ``value`` is a JSON integer (``true`` and ``false`` are not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def refuse_unknown_keys(obj: dict[str, Any], allowed: Iterable[str], location: str) -> None:
    """Raise the first :class:`FixtureError` of :func:`_unknown_keys`, if any."""
    for error in _unknown_keys(obj, allowed, location):
        raise error


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number(value: Any, location: str) -> float:
    if not _is_number(value):
        raise FixtureError(location, f"expected a number, got {json_type_name(value)}")
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


def _weight(
    value: Any, branch: str, max_elements: int, base_dir: Path | None = None
) -> tuple[Array, str | None]:
    location = f"$.weights.{branch}"
    name: str | None = None
    if isinstance(value, dict) and "name" in value:
        raw = value["name"]
        if not isinstance(raw, str):
            raise FixtureError(f"{location}.name", f"expected a string, got {json_type_name(raw)}")
        name = raw
    array = parse_tensor(value, location, max_elements, extra_keys=("name",), base_dir=base_dir)
    return array, name


def _branch(
    raw_weights: dict[str, Any], index: int, max_elements: int, base_dir: Path | None = None
) -> tuple[Array, str]:
    """One weight with its name, checked on its own (name, then finite values)."""
    from qkvcli.engine import DEFAULT_NAMES

    branch = BRANCHES[index]
    if branch not in raw_weights:
        raise FixtureError("$.weights", f'missing key "{branch}"')
    array, name = _weight(raw_weights[branch], branch, max_elements, base_dir)
    name = DEFAULT_NAMES[index] if name is None else name
    _engine(validate_name, name, location=f"$.weights.{branch}.name")
    _engine(check_finite, array, "parameter", location=f"$.weights.{branch}")
    return array, name


def _layer(arrays: list[Array], names: list[str]) -> QkvProjections:
    """The three weights together: per-branch rank and widths, shared widths, unique names."""
    try:
        return QkvProjections.from_arrays(arrays[0], arrays[1], arrays[2], names=names)
    except ProjectionError as error:
        raise FixtureError(f"$.weights.{error.projection}", str(error)) from None
    except DuplicateName as error:
        raise FixtureError(f"$.weights.{BRANCHES[error.repeated]}.name", str(error)) from None
    except (BranchInputWidthMismatch, BranchOutputWidthMismatch) as error:
        raise FixtureError("$.weights", str(error)) from None


def _object(value: Any, location: str, problems: Problems) -> dict[str, Any] | None:
    """``value`` if it is an object, else ``None`` after reporting the problem."""
    if not isinstance(value, dict):
        problems.add(FixtureError(location, f"expected an object, got {json_type_name(value)}"))
        return None
    return value


def expect_shape(
    grad: Array, expected: tuple[int, ...], axes: str, location: str
) -> Array:
    """``grad`` if its shape is ``expected``; the message names the ``axes`` of the shape."""
    if grad.shape != expected:
        raise FixtureError(
            location,
            f"expected shape [{','.join(map(str, expected))}] ({axes}), "
            f"got [{','.join(map(str, grad.shape))}]",
        )
    return grad


def _parse_weights(
    raw_weights: Any, max_elements: int, problems: Problems, base_dir: Path | None = None
) -> QkvProjections | None:
    weights = _object(raw_weights, "$.weights", problems)
    if weights is None:
        return None
    for error in _unknown_keys(weights, BRANCHES, "$.weights"):
        problems.add(error)
    parsed = [problems.attempt(_branch, weights, index, max_elements, base_dir)
              for index in range(3)]
    if any(item is None for item in parsed):
        return None  # widths and names can only be compared once all three parsed
    arrays = [item[0] for item in parsed if item is not None]
    names = [item[1] for item in parsed if item is not None]
    return problems.attempt(_layer, arrays, names)


def _parse_input(
    raw: Any, layer: QkvProjections | None, max_elements: int, problems: Problems,
    base_dir: Path | None = None,
) -> Array | None:
    x = problems.attempt(parse_tensor, raw, "$.input", max_elements, base_dir=base_dir)
    if x is None:
        return None
    if layer is None:
        # Without a valid layer the model width is unknown; the rank can still be checked.
        if x.ndim != 3:
            problems.add(FixtureError("$.input", str(InputRank(x.ndim)) + _empty_hint(x)))
        return None
    try:
        layer.check_input(x)
    except QkvError as error:
        problems.add(FixtureError("$.input", f"{error}{_empty_hint(x)}"))
        return None
    return x


def _empty_hint(x: Array) -> str:
    """Why an empty nested list has too low a rank, and what to write instead."""
    if x.size == 0 and x.ndim < 3:
        return ('; an empty nested list cannot show its inner axes, so write an empty '
                'input as {"shape": [0, tokens, d_model], "values": []}')
    return ""


def _parse_upstream(
    raw_upstream: Any, expected: tuple[int, ...] | None, max_elements: int, problems: Problems,
    base_dir: Path | None = None,
) -> list[Array] | None:
    """The three upstream gradients (missing ones are all ones); ``None`` after a problem."""
    upstream: list[Array] = []
    ok = expected is not None
    if raw_upstream is None:
        return [np.ones(expected) for _ in BRANCHES] if expected is not None else None
    raw = _object(raw_upstream, "$.upstream", problems)
    if raw is None:
        return None
    for error in _unknown_keys(raw, BRANCHES, "$.upstream"):
        problems.add(error)
    for branch in BRANCHES:
        location = f"$.upstream.{branch}"
        if branch not in raw:
            if expected is not None:
                upstream.append(np.ones(expected))
            continue
        grad = problems.attempt(parse_tensor, raw[branch], location, max_elements,
                                base_dir=base_dir)
        if grad is not None and expected is not None:
            grad = problems.attempt(
                expect_shape, grad, expected, "batch, tokens, d_head", location
            )
        if grad is None:
            ok = False
            continue
        upstream.append(grad)
    return upstream if ok else None


def _step(raw: Any) -> float:
    step = _number(raw, "$.gradcheck.step")
    if step <= 0:
        raise FixtureError("$.gradcheck.step", "step must be greater than zero")
    return step


def _tolerance(raw: Any) -> float:
    tolerance = _number(raw, "$.gradcheck.tolerance")
    if tolerance < 0:
        raise FixtureError("$.gradcheck.tolerance", "tolerance must not be negative")
    return tolerance


def _samples(raw_samples: Any) -> int | None:
    if raw_samples is None:
        return None
    if not (isinstance(raw_samples, int) and not isinstance(raw_samples, bool)):
        raise FixtureError(
            "$.gradcheck.samples", f"expected an integer or null, got {json_type_name(raw_samples)}"
        )
    if raw_samples < 1:
        raise FixtureError("$.gradcheck.samples", "samples must be at least 1")
    return raw_samples


def _seed(raw_seed: Any) -> int:
    if not (isinstance(raw_seed, int) and not isinstance(raw_seed, bool)):
        raise FixtureError("$.seed", f"expected an integer, got {json_type_name(raw_seed)}")
    if not 0 <= raw_seed <= MAX_SEED:
        raise FixtureError("$.seed", f"seed must be between 0 and {MAX_SEED}")
    return raw_seed


def _chapter(raw_chapter: Any) -> str:
    if not isinstance(raw_chapter, str) or not raw_chapter or "\n" in raw_chapter:
        raise FixtureError("$.chapter", "expected a non-empty single-line string")
    return raw_chapter


def parse_fixture(
    data: Any, default_chapter: str = "custom", max_elements: int = DEFAULT_MAX_ELEMENTS,
    base_dir: Path | None = None,
) -> Fixture:
    """Validate parsed JSON and build a :class:`Fixture`. Raises :class:`FixtureError`.

    ``base_dir`` is where ``npy`` tensor paths are resolved (the fixture file's
    directory; ``None``: the current directory).

    Order: document keys; weights (each weight's name, then finite values; then per
    branch rank and widths; then model widths, head widths, duplicate names); then the
    input (rank, width, finite values); then upstream gradients; then settings
    (gradcheck, seed, chapter); then expectations.
    """
    fixture = _parse(data, default_chapter, max_elements, Problems(), base_dir)
    if fixture is None:  # pragma: no cover - fail-fast raises before anything is skipped
        raise FixtureError("$", "invalid fixture")
    return fixture


def fixture_problems(
    data: Any, default_chapter: str = "custom", max_elements: int = DEFAULT_MAX_ELEMENTS,
    limit: int = MAX_PROBLEMS, base_dir: Path | None = None,
) -> list[FixtureError]:
    """Every problem of parsed JSON, in :func:`parse_fixture`'s order; empty when valid.

    The first problem is the one :func:`parse_fixture` raises. Independent parts (each
    weight, the input, each upstream gradient, each setting, each expectation) are all
    checked; a check that needs an earlier part (widths, shapes) is skipped when that
    part failed. At most ``limit`` problems, the last saying that it stopped.
    """
    problems = Problems(collect=True, limit=limit)
    try:
        _parse(data, default_chapter, max_elements, problems, base_dir)
    except TooManyProblems:
        problems.errors.append(FixtureError("", f"stopped after {limit} problems"))
    return problems.errors


def uses_extensions(data: dict[str, Any]) -> bool:
    """Whether a fixture uses any key beyond the chapter's plain weights form.

    Fixtures without extensions keep the chapter's reader, its order and its messages.
    """
    if "value_width" in data:
        return True
    weights = data.get("weights")
    if not isinstance(weights, dict):
        return False
    if any(key in weights for key in PACKED_KEYS):
        return True
    return any(
        isinstance(weights.get(branch), dict)
        and ("bias" in weights[branch] or "layout" in weights[branch])
        for branch in BRANCHES
    )


def _parse(
    data: Any, default_chapter: str, max_elements: int, problems: Problems,
    base_dir: Path | None = None,
) -> Fixture | None:
    if not isinstance(data, dict):
        problems.add(FixtureError("$", f"expected an object, got {json_type_name(data)}"))
        return None
    for error in _unknown_keys(data, TOP_KEYS, "$"):
        problems.add(error)
    for key in ("input", "weights"):
        if key not in data:
            problems.add(FixtureError("$", f'missing key "{key}"'))

    layout = "separate"
    raw_weights = data.get("weights")
    if "weights" in data:
        if uses_extensions(data):
            from qkvcli.layouts import chapter_weights  # lazy: only extended fixtures need it

            # Torch/packed layouts become the plain form; bias and d_v are refused (qkv attend).
            converted = problems.attempt(chapter_weights, data, max_elements)
            raw_weights, layout = (None, layout) if converted is None else converted
    layer = (
        _parse_weights(raw_weights, max_elements, problems, base_dir)
        if raw_weights is not None else None
    )
    x = (_parse_input(data["input"], layer, max_elements, problems, base_dir)
         if "input" in data else None)
    expected: tuple[int, ...] | None = None
    if layer is not None and x is not None:
        batch, tokens, _ = x.shape
        expected = (batch, tokens, layer.d_head)
    upstream = _parse_upstream(data.get("upstream"), expected, max_elements, problems,
                               base_dir)

    step, tolerance, samples = DEFAULT_STEP, DEFAULT_TOLERANCE, None
    raw_check = data.get("gradcheck")
    if raw_check is not None:
        check = _object(raw_check, "$.gradcheck", problems)
        if check is not None:
            for error in _unknown_keys(check, GRADCHECK_KEYS, "$.gradcheck"):
                problems.add(error)
            if "step" in check:
                step = problems.attempt(_step, check["step"]) or step
            if "tolerance" in check:
                found = problems.attempt(_tolerance, check["tolerance"])
                tolerance = tolerance if found is None else found
            samples = problems.attempt(_samples, check.get("samples"))

    seed = DEFAULT_SEED
    if "seed" in data:
        found_seed = problems.attempt(_seed, data["seed"])
        seed = seed if found_seed is None else found_seed

    chapter = default_chapter
    if "chapter" in data:
        chapter = problems.attempt(_chapter, data["chapter"]) or chapter

    sizes = None
    if layer is not None and x is not None:
        sizes = (int(x.shape[0]), int(x.shape[1]), layer.d_model, layer.d_head)
    expect = None
    if "expect" in data:
        from qkvcli.expect import parse_expect  # only fixtures with expectations pay for it

        expect = parse_expect(data["expect"], sizes, max_elements, problems)

    if layer is None or x is None or upstream is None or problems.errors:
        return None  # only reached when collecting: fail-fast raised already
    return Fixture(
        input=x,
        weights=layer.weights,
        names=layer.names,
        upstream=(upstream[0], upstream[1], upstream[2]),
        step=step,
        tolerance=tolerance,
        samples=samples,
        seed=seed,
        chapter=chapter,
        expect=expect,
        layout=layout,
    )


def _engine(check: Any, *args: Any, location: str) -> Any:
    try:
        return check(*args)
    except QkvError as error:
        raise FixtureError(location, str(error)) from None
