"""The chapter's ``weights`` section: three named ``[d_model, d_head]`` weights.

Validation order: each weight on its own (its name, then finite values), then the
three together (per-branch rank and widths, shared widths, unique names), each failure
reported at the JSON location of what is wrong.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from qkvcli.core.arrays import Array, check_finite
from qkvcli.core.errors import (
    BranchInputWidthMismatch,
    BranchOutputWidthMismatch,
    DuplicateName,
    InvalidNameCharacter,
    ProjectionError,
    QkvError,
)
from qkvcli.core.names import BRANCHES, DEFAULT_NAMES, validate_name
from qkvcli.core.text import printable
from qkvcli.core.weights import check_weights
from qkvcli.reading.json_values import expect_object, json_type_name, unknown_keys
from qkvcli.reading.problems import FixtureError, Problems
from qkvcli.reading.tensors import parse_tensor

if TYPE_CHECKING:
    from qkvcli.reading.files import StrPath


def engine_check(check: Any, *args: Any, location: str) -> Any:
    """``check(*args)``, its :class:`~qkvcli.core.errors.QkvError` re-raised at ``location``."""
    try:
        return check(*args)
    except QkvError as error:
        raise FixtureError(location, str(error)) from None


def check_name(name: str, location: str) -> None:
    """Raise :class:`FixtureError` at ``location`` unless ``name`` is a valid parameter name.

    The engine's :class:`~qkvcli.core.errors.InvalidNameCharacter` keeps the reference's
    wording (``got 0x44``); here, where the file is at hand, the character is named too:
    ``got 'D' (0x44)``, or ``got 'é' (U+00E9)`` for a character outside ASCII.
    """
    try:
        validate_name(name)
    except InvalidNameCharacter as error:
        message = str(error)
        raw = f"0x{error.byte:02x}"
        character = name.encode("utf-8")[error.index:].decode("utf-8", errors="replace")[:1]
        shown = printable(repr(character))
        named = f"{shown} ({raw})" if error.byte < 0x80 else f"{shown} (U+{ord(character):04X})"
        if message.endswith(raw):
            message = message[: -len(raw)] + named
        raise FixtureError(location, message) from None
    except QkvError as error:
        raise FixtureError(location, str(error)) from None


def default_names(tensors: list[str | None]) -> tuple[str, str, str]:
    """The names of three branches a fixture does not name: the checkpoint tensors they are
    read from (``model.layers.0.self_attn.q_proj.weight``) when all three are, valid
    parameter names and distinct; else the chapter's :data:`DEFAULT_NAMES`."""
    named = [t for t in tensors if t is not None]
    if len(named) != 3 or len(set(named)) != 3:
        return DEFAULT_NAMES
    try:
        for name in named:
            validate_name(name)
    except QkvError:
        return DEFAULT_NAMES
    return (named[0], named[1], named[2])


def weight_name(value: Any, location: str) -> str | None:
    """The ``name`` a weight object at ``location`` gives, if any. Raises
    :class:`FixtureError` for one that is not a string."""
    if not isinstance(value, dict) or "name" not in value:
        return None
    name = value["name"]
    if not isinstance(name, str):
        raise FixtureError(f"{location}.name", f"expected a string, got {json_type_name(name)}")
    return name


def _weight(
    value: Any, branch: str, max_elements: int, base_dir: StrPath | None = None
) -> tuple[Array, str | None]:
    location = f"$.weights.{branch}"
    name = weight_name(value, location)
    array = parse_tensor(value, location, max_elements, extra_keys=("name",), base_dir=base_dir)
    return array, name


def _branch(
    raw_weights: dict[str, Any], index: int, max_elements: int, base_dir: StrPath | None = None
) -> tuple[Array, str]:
    """One weight with its name, checked on its own (name, then finite values)."""
    branch = BRANCHES[index]
    if branch not in raw_weights:
        raise FixtureError("$.weights", f'missing key "{branch}"')
    array, name = _weight(raw_weights[branch], branch, max_elements, base_dir)
    name = DEFAULT_NAMES[index] if name is None else name
    check_name(name, f"$.weights.{branch}.name")
    engine_check(check_finite, array, "parameter", location=f"$.weights.{branch}")
    return array, name


Weights = tuple[tuple[Array, Array, Array], tuple[str, str, str]]
"""The three weights and their names, in query, key, value order, checked together."""


def _together(arrays: list[Array], names: list[str]) -> Weights:
    """The three weights together, by the engine's own checks (:func:`~qkvcli.core.weights.
    check_weights`: per-branch rank and widths, shared widths, unique names)."""
    try:
        check_weights(arrays, names)
    except ProjectionError as error:
        raise FixtureError(f"$.weights.{error.projection}", str(error)) from None
    except DuplicateName as error:
        raise FixtureError(f"$.weights.{BRANCHES[error.repeated]}.name", str(error)) from None
    except (BranchInputWidthMismatch, BranchOutputWidthMismatch) as error:
        raise FixtureError("$.weights", str(error)) from None
    for array in arrays:  # read fresh, held by nothing else: read-only as the fixture's data
        array.flags.writeable = False
    return (arrays[0], arrays[1], arrays[2]), (names[0], names[1], names[2])


def parse_weights(
    raw_weights: Any, max_elements: int, problems: Problems, base_dir: StrPath | None = None
) -> Weights | None:
    """The weights and names the plain ``weights`` object describes, as the engine would
    accept them; ``None`` after reporting a problem."""
    weights = expect_object(raw_weights, "$.weights", problems)
    if weights is None:
        return None
    for error in unknown_keys(weights, BRANCHES, "$.weights"):
        problems.add(error)
    parsed = [problems.attempt(_branch, weights, index, max_elements, base_dir)
              for index in range(3)]
    if any(item is None for item in parsed):
        return None  # widths and names can only be compared once all three parsed
    arrays = [item[0] for item in parsed if item is not None]
    names = [item[1] for item in parsed if item is not None]
    return problems.attempt(_together, arrays, names)
