"""The fixed number, vector and shape spellings of every text output.

A report's lines are built as text pieces with the tensors themselves between them
(:data:`Line`); :func:`stream_lines` yields the text piece by piece, each tensor
formatted in bounded chunks (or summarised, per ``--tensors``), so the whole text
never has to exist at once.

Whole tensors are formatted in fixed point by a vectorised path, in bounded chunks:
:func:`iter_fixed` gives exactly the bytes of ``",".join(f"{v:.6f}" for v in flat)``
(``NaN``, ``inf``, ``-inf`` for non-finite values; a value that rounds to zero is
``0.000000``, never ``-0.000000``, whatever its sign) without
one Python call per value: each chunk of values is scaled to an integer count of units
in the last decimal, its digits laid out in a byte matrix by NumPy arithmetic, and the
unwanted leading zeros masked away. Values whose correct rounding the scaled product
cannot decide (within two units in the last place of a half), and values too large for
exact integers, are formatted by Python itself, so the result is always the reference's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, TypeAlias

import numpy as np

from qkvcli.core.arrays import Array
from qkvcli.render.tensors import shows_values, summarise

if TYPE_CHECKING:
    import numpy.typing as npt  # annotations only: it costs ~1.5 ms of start-up


def fmt_float(value: float, precision: int = 6) -> str:
    """A value in fixed point at ``precision`` decimals, as the reference prints it, never
    a false zero: zero is ``0.000000`` whatever its sign (``-0.000000`` reads as a negative
    number), non-finite values are ``NaN``, ``inf``, ``-inf``, and a non-zero value that
    fixed point would round to zero (a ``--tolerance 1e-8``) is written with ``precision``
    significant digits instead (``1e-08``), so no number reads as zero when it is not."""
    text = python_fixed(value, precision)
    if value != 0.0 and math.isfinite(value) and not text.strip("-0."):
        return f"{value:.{max(precision, 1)}g}"
    return text


def fmt_error(value: float) -> str:
    """A scaled error or another measured error: three significant digits in scientific
    notation (``3.170e-10``), non-finite values as :func:`fmt_float` writes them."""
    return f"{value:.3e}" if math.isfinite(value) else fmt_float(value)


def fmt_general(value: float, digits: int = 3) -> str:
    """A number in a sentence: ``digits`` significant digits, the shorter of fixed and
    scientific notation (``0.509``, ``2e-06``, ``inf``)."""
    return f"{value:.{digits}g}"


def fmt_scientific(value: float, digits: int = 6) -> str:
    """A value of a table one of whose values fixed point would not show: scientific
    notation with ``digits`` significant digits (``6.14556e-18`` and ``1.00000e+00`` at
    6), non-finite values as :func:`fmt_float` writes them."""
    if not math.isfinite(value):
        return fmt_float(value)
    return f"{float(value):.{max(digits - 1, 0)}e}"


def fmt_signed(value: float, precision: int = 2) -> str:
    """A distance from an expected value (a ``z`` score): fixed point, its sign always
    written (``+0.35``, ``-1.20``)."""
    return f"{value:+.{precision}f}"


def fmt_exact(value: float) -> str:
    """A number as it was given or found (a step, a tolerance, a value that differs): the
    shortest spelling that reads back as the same float (``2e-06``, ``0.1``); NumPy's
    float64 spelled as Python's float."""
    return repr(float(value)) if isinstance(value, float) else repr(value)


def json_float(value: float) -> float | str:
    """A float as a JSON document holds it: the number (Python's shortest round trip), or
    for a non-finite value, which JSON cannot hold, ``"NaN"``, ``"Infinity"`` or
    ``"-Infinity"``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return float(value)


def iter_vector(values: npt.ArrayLike, policy: str = "full", precision: int = 6) -> Iterator[str]:
    """A tensor as ``[v,v,...]`` in pieces, or (per ``policy``) its ``{...}`` summary."""
    array = np.asarray(values, dtype=np.float64)
    if shows_values(array.size, policy):
        yield "["
        yield from iter_fixed(array, precision)
        yield "]"
        return
    s = summarise(array)
    if policy == "none":
        yield f"{{shape:{fmt_shape(s.shape)} count:{s.count} sha256:{s.sha256}}}"
        return

    def listed(numbers: tuple[float, ...]) -> str:
        # a vector's spelling (fixed point throughout, as full tensors are written)
        return "[" + ",".join(python_fixed(v, precision) for v in numbers) + "]"

    yield (
        f"{{shape:{fmt_shape(s.shape)} count:{s.count} head:{listed(s.head)} "
        f"tail:{listed(s.tail)} min:{fmt_float(s.minimum, precision)} "
        f"max:{fmt_float(s.maximum, precision)} mean:{fmt_float(s.mean, precision)} "
        f"l2:{fmt_float(s.l2_norm, precision)} sha256:{s.sha256}}}"
    )


def fmt_vector(values: npt.ArrayLike, precision: int = 6) -> str:
    """``[1.000000,2.000000]``: every value of a tensor, flat, row-major."""
    return "".join(iter_vector(values, "full", precision))


Line: TypeAlias = "str | tuple[str | Array, ...]"
"""A report line: plain text, or text pieces with tensors between them."""


def stream_lines(lines: Iterable[Line], policy: str = "summary",
                 precision: int = 6) -> Iterator[str]:
    """Each line and its newline, in pieces: a tensor is spelled as it is written (in
    bounded chunks, or summarised per ``policy``), so the whole text never has to exist
    at once."""
    for line in lines:
        if isinstance(line, str):
            yield line
        else:
            for piece in line:
                if isinstance(piece, str):
                    yield piece
                else:
                    yield from iter_vector(piece, policy, precision)
        yield "\n"


def fmt_shape(shape: Iterable[int]) -> str:
    """``[1,2,3]``."""
    return "[" + ",".join(str(int(d)) for d in shape) + "]"


def fmt_bool(flag: bool) -> str:
    return "true" if flag else "false"


CHUNK = 1 << 13
"""Values per chunk: about 80 KB of text and 3 MB of working arrays (larger chunks were
no faster, measured)."""

INT_DIGITS = 9
"""Integer digits the fast path lays out; larger magnitudes use Python's formatting."""

SMALL = 48
"""Up to this many values, Python's own formatting is quicker than the array set-up
(measured: 4 values 2 µs against 33 µs; they meet near 64)."""


def _nonfinite(value: float) -> str | None:
    """``NaN``, ``inf`` or ``-inf`` as the reference writes them; ``None`` for a finite value."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    return None


def python_fixed(value: float, precision: int) -> str:
    """One value of a vector as ``{:.<precision>f}``, with the reference's non-finite
    spellings, and no sign on a value that rounds to zero (``-1e-17`` is ``0.000000``)."""
    text = _nonfinite(value) or f"{value:.{precision}f}"
    return text[1:] if text[0] == "-" and not text.strip("-0.") else text


def course_fixed(value: float, precision: int) -> str:
    """One value as chapter 37's reference prints it: ``{:.<precision>}`` after only
    ``-0.0`` is made ``0.0`` (a negative value that rounds to zero keeps its sign, as
    Rust writes it), non-finite values ``NaN``, ``inf``, ``-inf``."""
    return _nonfinite(value) or f"{value + 0.0:.{precision}f}"


def course_vector(values: npt.ArrayLike, precision: int) -> str:
    """``[v,v,...]``, every value of a tensor, flat, row-major, by :func:`course_fixed`."""
    flat = np.asarray(values, dtype=np.float64).reshape(-1)
    return "[" + ",".join(course_fixed(float(v), precision) for v in flat) + "]"


def iter_fixed(values: Array, precision: int = 6, chunk: int = CHUNK) -> Iterator[str]:
    """The comma-separated ``precision``-decimal spelling of ``values`` (flat, row-major).

    Yields pieces whose concatenation is the whole text (no brackets); each piece holds
    at most ``chunk`` values, so memory is bounded by the chunk, not the tensor.
    """
    flat = np.asarray(values, dtype=np.float64).reshape(-1)
    for start in range(0, flat.size, chunk):
        piece = flat[start:start + chunk]
        text = format_chunk(piece, precision)
        yield text if start == 0 else "," + text


def format_chunk(values: Array, precision: int) -> str:
    """``",".join`` of the fixed-point spellings of a flat float64 array."""
    if values.size == 0:
        return ""
    if precision > 9 or values.size <= SMALL:
        return ",".join(python_fixed(v, precision) for v in values.tolist())
    scale = 10.0 ** precision
    magnitude = np.abs(values)
    finite = np.isfinite(values)
    if np.any(magnitude[finite] >= 10.0 ** INT_DIGITS):
        return ",".join(python_fixed(v, precision) for v in values.tolist())
    with np.errstate(invalid="ignore"):
        scaled = np.where(finite, magnitude, 0.0) * scale
    units = np.rint(scaled)
    # fl(|v| * 10^p) may sit on the other side of a half than the exact product; such
    # near-ties (and non-finite values) take Python's correctly rounded formatting.
    slack = 2.0 * np.spacing(np.maximum(scaled, 1.0))
    doubtful = ~finite | (np.abs(np.abs(scaled - np.floor(scaled)) - 0.5) <= slack)
    digits_count = INT_DIGITS + precision
    powers = 10 ** np.arange(digits_count - 1, -1, -1, dtype=np.int64)
    whole = units.astype(np.int64)
    digits = (whole[:, None] // powers[None, :]) % 10  # [n, digits], most significant first
    width = 1 + digits_count + 2  # sign, digits, point, comma
    matrix = np.empty((values.size, width), dtype=np.uint8)
    matrix[:, 0] = ord("-")
    matrix[:, 1:1 + INT_DIGITS] = digits[:, :INT_DIGITS] + ord("0")
    matrix[:, 1 + INT_DIGITS] = ord(".")
    matrix[:, 2 + INT_DIGITS:-1] = digits[:, INT_DIGITS:] + ord("0")
    matrix[:, -1] = ord(",")
    keep = np.ones((values.size, width), dtype=bool)
    keep[:, 0] = np.signbit(values) & (whole != 0)  # no sign on a value that rounds to 0
    # Leading integer zeros go, but the units digit always stays.
    leading = np.cumsum(digits[:, :INT_DIGITS - 1] != 0, axis=1) == 0
    keep[:, 1:INT_DIGITS] = ~leading
    if precision == 0:
        keep[:, 1 + INT_DIGITS] = False
    for row in np.flatnonzero(doubtful).tolist():
        spelled = python_fixed(float(values[row]), precision).encode("ascii")
        if len(spelled) > width - 1:
            return ",".join(python_fixed(v, precision) for v in values.tolist())
        matrix[row, :len(spelled)] = np.frombuffer(spelled, dtype=np.uint8)
        keep[row, :] = False
        keep[row, :len(spelled)] = True
        matrix[row, -1] = ord(",")
        keep[row, -1] = True
    keep[-1, -1] = False  # no comma after the last value
    return matrix[keep].tobytes().decode("ascii")
