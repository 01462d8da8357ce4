"""One setting of a model's ``config.json`` read as transformers reads it: whether it is
set, a positive integer, a flag, a finite positive number, and the spellings of one
setting that must agree. Every refusal names the key (:class:`CheckpointError`)."""

from __future__ import annotations

import math
from typing import Any

from qkvcli.authoring.tensor_names import CheckpointError, shown_value


def is_set(config: dict[str, Any], key: str) -> bool:
    value = config.get(key)
    return value is not None and value is not False and value != 0


def int_value(config: dict[str, Any], prefix: str, *keys: str) -> int | None:
    """The value of ``keys`` (spellings of one setting; null is unset), a positive integer,
    or ``None`` when none is set. Spellings that disagree are refused: which one
    transformers keeps depends on its version. Raises :class:`CheckpointError` naming
    the key."""
    found: dict[str, int] = {}
    for key in keys:
        value = config.get(key)
        if value is None:
            continue
        if type(value) is not int or value <= 0:
            raise CheckpointError(prefix, f"config {key} must be a positive integer, got "
                                  f"{shown_value(value)}")
        found[key] = value
    if len(set(found.values())) > 1:
        said = " and ".join(f"{key} {value}" for key, value in found.items())
        raise CheckpointError(prefix, f"config {said} disagree")
    return next(iter(found.values()), None)


def flag_value(config: dict[str, Any], key: str, default: bool, prefix: str) -> bool:
    """The config's ``key`` as a boolean (null: ``default``); the string "false" is not
    false to transformers' Python either, so anything but true/false/null is refused."""
    value = config.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise CheckpointError(prefix, f"config {key} must be true or false, got {shown_value(value)}")
    return value


def positive(value: Any, key: str, prefix: str) -> float:
    """``value`` as a finite positive float (a JSON integer of any length too), else refused."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CheckpointError(prefix, f"config {key} must be a finite positive number, got "
                              f"{shown_value(value)}")
    try:
        number = float(value)
    except OverflowError:  # an integer past float64's range
        number = math.inf
    if not (0.0 < number < math.inf):
        shown = shown_value(value) if len(str(value)) <= 40 else (
            f"a number of {len(str(value))} digits")
        raise CheckpointError(prefix, f"config {key} must be a finite positive number, got "
                              f"{shown}")
    return number


def one_of(config: dict[str, Any], prefix: str, *paths: str) -> tuple[str, Any] | None:
    """The one value given under any of ``paths`` (``a.b``: key ``b`` of object ``a``;
    null is unset), and the path it was read from. Two paths giving different values
    are refused, naming both: transformers keeps one of them, which one depends on its
    version."""
    found: list[tuple[str, Any]] = []
    for path in paths:
        holder: Any = config
        for part in path.split("."):
            holder = holder.get(part) if isinstance(holder, dict) else None
        if holder is not None:
            found.append((path, holder))
    for path, value in found[1:]:
        first = found[0][1]
        if value != first or isinstance(value, bool) != isinstance(first, bool):
            raise CheckpointError(prefix, f"config {found[0][0]} {shown_value(first)} and "
                                  f"{path} {shown_value(value)} disagree (two spellings of one "
                                  "setting: which one counts depends on the transformers version)")
    return found[0] if found else None
