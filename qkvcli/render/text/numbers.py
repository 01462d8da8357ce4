"""Number, vector and shape spellings shared by the plain renderers.

A report's tensors are written through :class:`Deferred`: lines are built with a
placeholder per tensor, then :meth:`Deferred.stream` yields the text piece by piece,
each tensor formatted in bounded chunks (or summarised, per ``--tensors``), so the
whole text never has to exist at once.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import numpy as np

from qkvcli.render.tensors import shows_values, summarise
from qkvcli.render.text.vectors import iter_fixed

if TYPE_CHECKING:
    import numpy.typing as npt  # annotations only: it costs ~1.5 ms of start-up

PLACEHOLDER = "\x00qkv(\\d+)\x00"  # compiled only for a line with a stray NUL (never, today)


def split_placeholders(line: str) -> list[str]:
    """``re.split(PLACEHOLDER, line)``: text, tensor index, text, ..., text.

    Lines are escaped text (no NUL) around placeholders, so splitting at NUL gives the
    same pieces without compiling a pattern on every start-up; any other NUL takes the
    pattern's way.
    """
    parts = line.split("\x00")
    if len(parts) % 2 and all(
        part.startswith("qkv") and part[3:].isascii() and part[3:].isdigit()
        for part in parts[1::2]
    ):
        for position in range(1, len(parts), 2):
            parts[position] = parts[position][3:]
        return parts
    return re.split(PLACEHOLDER, line)


def fmt_float(value: float, precision: int = 6) -> str:
    """``{:.6}`` as the reference prints it: fixed point, negative zero keeps its sign."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.{precision}f}"


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
        return "[" + ",".join(fmt_float(v, precision) for v in numbers) + "]"

    yield (
        f"{{shape:{fmt_shape(s.shape)} count:{s.count} head:{listed(s.head)} "
        f"tail:{listed(s.tail)} min:{fmt_float(s.minimum, precision)} "
        f"max:{fmt_float(s.maximum, precision)} mean:{fmt_float(s.mean, precision)} "
        f"l2:{fmt_float(s.l2_norm, precision)} sha256:{s.sha256}}}"
    )


def fmt_vector(values: npt.ArrayLike, precision: int = 6) -> str:
    """``[1.000000,2.000000]``: every value of a tensor, flat, row-major."""
    return "".join(iter_vector(values, "full", precision))


class Deferred:
    """Placeholders for tensors in report lines, expanded as the text is streamed."""

    def __init__(self, policy: str = "summary") -> None:
        self.policy = policy
        self.arrays: list[npt.ArrayLike] = []

    def __call__(self, values: npt.ArrayLike) -> str:
        """A placeholder standing for ``values``' spelling."""
        self.arrays.append(values)
        return f"\x00qkv{len(self.arrays) - 1}\x00"

    def stream(self, lines: Iterable[str]) -> Iterator[str]:
        """Each line (placeholders expanded) and its newline, in pieces."""
        for line in lines:
            parts = split_placeholders(line)
            for position, part in enumerate(parts):
                if position % 2:
                    yield from iter_vector(self.arrays[int(part)], self.policy)
                elif part:
                    yield part
            yield "\n"


def fmt_shape(shape: Iterable[int]) -> str:
    """``[1,2,3]``."""
    return "[" + ",".join(str(int(d)) for d in shape) + "]"


def fmt_bool(flag: bool) -> str:
    return "true" if flag else "false"
