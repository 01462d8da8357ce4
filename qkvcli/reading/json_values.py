"""Strict JSON for fixtures: parsing text, and value checks that name a JSON location.

Every check raises (or reports to :class:`~qkvcli.reading.problems.Problems`) a
:class:`~qkvcli.reading.problems.FixtureError` carrying the location of what is wrong.

Strict means: no ``NaN``/``Infinity``, no repeated key, no lone surrogate, and no
integer literal whose nearest float64 is not finite (a magnitude of about 1.8e308 or
more, so 309 digits at least): every number qkv reads becomes a float64 at last, and
such an integer has none. It is refused while the text is read, naming its
``$.path``, whatever key holds it, in the words a tensor's overflowing number gets.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import Any

from qkvcli.core.text import printable
from qkvcli.reading.problems import FixtureError, Problems

# A \uD800-\uDFFF escape in JSON text: only then can a parsed string hold a lone surrogate.
# Pattern strings, compiled by ``re``'s cache on first use: only a fixture holding a
# ``\\u`` escape needs them, and compiling both costs ~0.3 ms of every start-up.
_SURROGATE_ESCAPE = r"\\u[dD][89a-fA-F]"
_SURROGATE = "[\ud800-\udfff]"


class JsonTextError(FixtureError):
    """JSON text that breaks a rule, at ``line`` and ``column`` (1-based) of the file.

    ``location`` is the JSON path of the value being read (``$.input[0][1][2]``), or empty
    for a syntax error at the top level; ``problem`` says what is wrong.
    """

    def __init__(self, location: str, line: int, column: int, problem: str) -> None:
        self.line = line
        self.column = column
        self.problem = problem
        super().__init__(location, f"line {line} column {column}: {problem}")


class _Refused(ValueError):
    """Raised by the hooks below; located afterwards by :func:`~qkvcli.reading.json_locate.locate`."""


class _RefusedConstant(_Refused):
    """A ``NaN``/``Infinity`` constant (a repeated key raises the plain :class:`_Refused`)."""


def _reject_constant(name: str) -> float:
    raise _RefusedConstant(name)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _Refused(key)
        result[key] = value
    return result


def _located(text: str, stop: int | None = None) -> JsonTextError | None:
    """The located error for ``text``'s first refused constant or duplicate key (or at ``stop``)."""
    from qkvcli.reading.json_locate import line_column, locate  # only on the error path

    spot = locate(text, stop)
    if spot is None:
        return None
    line, column = line_column(text, spot.offset)
    if spot.what == "constant":
        problem = f"{spot.detail} is not a number JSON allows; write a finite number"
    elif spot.what == "duplicate":
        problem = f'duplicate key "{printable(spot.detail, 40)}"'
    else:
        return None
    return JsonTextError(spot.path, line, column, problem)


def _syntax_error(text: str, error: json.JSONDecodeError) -> JsonTextError:
    """A syntax error at its line and column, under the path of the object or array open there."""
    from qkvcli.reading.json_locate import locate

    spot = locate(text, error.pos)
    path = "" if spot is None or spot.path == "$" else spot.path
    reason = error.msg[:1].lower() + error.msg[1:]
    return JsonTextError(path, error.lineno, error.colno, f"invalid JSON: {reason}")


def parse_json_text(text: str, *, locate: bool = True) -> Any:
    """Parse JSON strictly: no NaN/Infinity, no duplicate keys. Raises :class:`FixtureError`.

    Syntax errors, refused constants and repeated keys raise :class:`JsonTextError`, which
    names the line, the column and the ``$.path`` of the value being read; with ``locate``
    false, a refused constant or repeated key is named without its place.
    """
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        data = json.loads(
            text, parse_constant=_reject_constant, object_pairs_hook=_no_duplicates
        )
    except json.JSONDecodeError as error:
        raise _syntax_error(text, error) from None
    except RecursionError:
        raise FixtureError("", "invalid JSON: nested too deeply") from None
    except _Refused as error:
        if not locate:  # named without its place: finding it would cost more than parsing
            name = printable(error.args[0], 40)
            raise FixtureError("", f"{name} is not a number JSON allows" if isinstance(
                error, _RefusedConstant) else f'duplicate key "{name}"') from None
        located = _located(text)
        if located is not None:
            raise located from None
        # The scanner could not follow the text: say what, without a place.
        raise FixtureError("", f"invalid JSON: {printable(repr(error.args[0]))} refused") from None
    except ValueError as error:
        if "integer string conversion" in str(error):
            # Python's own limit (sys.get_int_max_str_digits); its advice is for programmers.
            raise FixtureError("", "invalid JSON: an integer has too many digits") from None
        raise FixtureError("", f"invalid JSON: {printable(str(error))}") from None
    if "\\u" in text and re.search(_SURROGATE_ESCAPE, text):
        refuse_lone_surrogates(data, "$")
    if len(text) >= HUGE_DIGITS and _digit_run(text) and _holds_huge_integer(data):
        refuse_huge_integers(text, locate)
    return data


HUGE_DIGITS = 309
"""Digits of the shortest integer beyond float64 (10**308 still has a finite float64)."""
_DIGIT_MARKS = bytes(49 if 48 <= byte <= 57 else 48 for byte in range(256))  # b"1" a digit


def _digit_run(text: str) -> bool:
    """Whether ``text`` holds :data:`HUGE_DIGITS` digits in a row anywhere (one pass of
    C code: each byte marked digit or not, then one search; about a tenth of parsing)."""
    marks = text.encode("utf-8", "surrogatepass").translate(_DIGIT_MARKS)
    return marks.find(b"1" * HUGE_DIGITS) >= 0


def _holds_huge_integer(data: Any) -> bool:
    """Whether the parsed ``data`` holds an integer whose nearest float64 is not finite."""
    pending = [data]
    while pending:
        value = pending.pop()
        if type(value) is int:
            if value.bit_length() > 1023:
                try:
                    float(value)
                except OverflowError:
                    return True
        elif isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return False


TOO_LARGE = "number is too large for binary64"
"""The one wording of a number beyond float64, wherever it stands (tensors say it too)."""


def refuse_huge_integers(text: str, locate: bool = True) -> None:
    """Raise :class:`FixtureError` at the ``$.path`` of the first integer literal of the
    JSON ``text`` whose nearest float64 is not finite (``locate`` false: without its
    place, for a file too large to scan; called only when the text holds one). A run of
    digits inside a string, or the digits of a float, are no such integer."""
    from qkvcli.reading.json_locate import locate as locate_in

    spot = locate_in(text, integers=True) if locate else None
    raise FixtureError(spot.path if spot is not None else "", TOO_LARGE)


LOCATE_LIMIT = 1 << 20
"""Bytes of a config or index above which a broken rule is named without its line: the
scanner that finds the line takes ~0.6 s a megabyte, and an index may be 64 MB."""


def parse_json_bytes(data: bytes) -> Any:
    """:func:`parse_json_text` of UTF-8 ``data`` (a config, an index: files read whole).
    Raises :class:`FixtureError`, naming the first byte that is not UTF-8."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise FixtureError("", f"not UTF-8 text (byte {error.start} is "
                           f"0x{data[error.start]:02x})") from None
    return parse_json_text(text, locate=len(data) <= LOCATE_LIMIT)


def refuse_lone_surrogates(value: Any, location: str) -> None:
    """Raise :class:`FixtureError` at the first string (or key) holding a lone surrogate.

    ``"\\ud800"`` is valid JSON yet no Unicode text: it cannot be printed or encoded, so
    it is refused where it stands (``$.chapter``) instead of failing later.
    """
    stack: list[tuple[Any, str]] = [(value, location)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if re.search(_SURROGATE, item):
                raise FixtureError(
                    where, f"string {printable(item)} holds a lone surrogate; write valid Unicode"
                )
        elif isinstance(item, dict):
            for key, child in reversed(list(item.items())):
                if re.search(_SURROGATE, key):
                    raise FixtureError(
                        where, f"key {printable(key)} holds a lone surrogate; write valid Unicode"
                    )
                stack.append((child, f"{where}.{key}"))
        elif isinstance(item, list):
            stack.extend((child, f"{where}[{i}]") for i, child in reversed(list(enumerate(item))))


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


def unknown_keys(obj: dict[str, Any], allowed: Iterable[str], location: str) -> list[FixtureError]:
    """One problem per key of ``obj`` not in ``allowed``, each with a did-you-mean hint."""
    allowed = tuple(allowed)
    found = []
    for key in obj:
        if key not in allowed:
            import difflib  # only on the error path: it costs ~2 ms of every start-up

            close = difflib.get_close_matches(key, allowed, n=1)
            hint = f' (did you mean "{close[0]}"?)' if close else ""
            known = ", ".join(allowed)
            shown = printable(key, 40)
            found.append(
                FixtureError(location, f'unknown key "{shown}"{hint}; expected one of {known}')
            )
    return found


def is_json_int(value: Any) -> bool:
    """Whether ``value`` is a JSON integer (``true`` and ``false`` are not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def refuse_unknown_keys(obj: dict[str, Any], allowed: Iterable[str], location: str) -> None:
    """Raise the first :class:`FixtureError` of :func:`unknown_keys`, if any."""
    for error in unknown_keys(obj, allowed, location):
        raise error


def keyed_object(value: Any, location: str, keys: Iterable[str],
                 required: Iterable[str] = ()) -> dict[str, Any]:
    """``value`` as an object of ``keys`` only, holding every key of ``required``. Raises
    the first :class:`FixtureError` (not an object, an unknown key, a missing one)."""
    if not isinstance(value, dict):
        raise FixtureError(location, f"expected an object, got {json_type_name(value)}")
    refuse_unknown_keys(value, keys, location)
    for key in required:
        if key not in value:
            raise FixtureError(location, f'missing key "{key}"')
    return value


def is_number(value: Any) -> bool:
    """Whether ``value`` is a JSON number (``true`` and ``false`` are not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def finite_number(value: Any, location: str) -> float:
    """``value`` as a finite float. Raises :class:`FixtureError` naming ``location``."""
    if not is_number(value):
        raise FixtureError(location, f"expected a number, got {json_type_name(value)}")
    try:
        result = float(value)
    except OverflowError:
        raise FixtureError(location, "number is too large for binary64") from None
    if not math.isfinite(result):
        raise FixtureError(location, "number is too large for binary64")
    return result


def expect_object(value: Any, location: str, problems: Problems) -> dict[str, Any] | None:
    """``value`` if it is an object, else ``None`` after reporting the problem."""
    if not isinstance(value, dict):
        problems.add(FixtureError(location, f"expected an object, got {json_type_name(value)}"))
        return None
    return value
