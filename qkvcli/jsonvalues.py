"""Strict JSON for fixtures: reading, and value checks that name a JSON location.

:class:`FixtureError` carries the location (``$.weights.key``) of what is wrong; every
reader of fixture-like JSON (fixtures, layouts, tensor sources, ``qkv attend``) raises it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path  # only annotations here: importing pathlib costs ~7 ms

MAX_FILE_BYTES = 256 * 1024 * 1024


class FixtureError(ValueError):
    """A fixture that cannot be used: ``location`` is a JSON path such as ``$.weights.key``."""

    def __init__(self, location: str, message: str) -> None:
        self.location = location
        self.message = message
        super().__init__(f"{location}: {message}" if location else message)


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
