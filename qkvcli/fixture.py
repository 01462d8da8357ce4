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

from collections.abc import Callable
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
from qkvcli.jsonvalues import (
    MAX_FILE_BYTES,
    FixtureError,
    _number,
    _unknown_keys,
    is_json_int,
    json_type_name,
    parse_json_text,
    read_fixture_text,
    refuse_unknown_keys,
)
from qkvcli.record import Record
from qkvcli.tensors import (
    DEFAULT_MAX_ELEMENTS,
    TENSOR_KEYS,
    check_size,
    parse_tensor,
)

if TYPE_CHECKING:
    from pathlib import Path  # only annotations here: importing pathlib costs ~7 ms

    from qkvcli.expect import Expectations

T = TypeVar("T")

__all__ = [
    "BUNDLED_NAME",
    "DEFAULT_MAX_ELEMENTS",
    "DEFAULT_SEED",
    "DEFAULT_STEP",
    "DEFAULT_TOLERANCE",
    "GRADCHECK_KEYS",
    "MAX_FILE_BYTES",
    "MAX_PROBLEMS",
    "MAX_SEED",
    "PACKED_KEYS",
    "SCHEMA_NAME",
    "TENSOR_KEYS",
    "TOP_KEYS",
    "WEIGHT_KEYS",
    "Fixture",
    "FixtureError",
    "Problems",
    "TooManyProblems",
    "bundled_fixture_text",
    "check_size",
    "expect_shape",
    "fixture_problems",
    "is_json_int",
    "json_type_name",
    "load_fixture",
    "parse_fixture",
    "parse_json_text",
    "parse_tensor",
    "read_fixture_text",
    "refuse_unknown_keys",
    "uses_extensions",
]

DEFAULT_SEED = 26
DEFAULT_STEP = 1e-6
DEFAULT_TOLERANCE = 2e-6
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
GRADCHECK_KEYS = ("step", "tolerance", "samples")


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
