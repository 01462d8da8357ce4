"""Stream the values of large tensors into an indented JSON document, chunk by chunk.

``json.dumps(..., indent=2)`` formats with the pure-Python encoder, one call per float,
and needs the whole list of Python floats and the whole text at once. Here the document
is dumped with a :func:`marker` string in place of each large ``values`` list, then
:func:`stream_document` writes each list where its marker stands, in the very layout
``indent=2`` gives (one value per line, ``repr`` spelling, non-finite values as the
strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``), encoding a chunk at a time with the
C encoder.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from qkvcli.render.numbers import json_float

if TYPE_CHECKING:
    import numpy.typing as npt  # annotations only: importing it costs start-up (numpy._typing)

CHUNK = 1 << 16
MARKER = re.compile(r'"\\u0000qkv-values-(\d+)\\u0000"')


def marker(index: int) -> str:
    """The placeholder string for the ``index``-th streamed list."""
    return f"\x00qkv-values-{index}\x00"


def stream_document(text: str, arrays: Sequence[npt.ArrayLike]) -> Iterator[str]:
    """``text`` with each marker replaced by its array's values, as ``indent=2`` lays them out."""
    position = 0
    for match in MARKER.finditer(text):
        start = match.start()
        line_start = text.rfind("\n", 0, start) + 1
        indent = len(text[line_start:start]) - len(text[line_start:start].lstrip(" "))
        yield text[position:start]
        yield from iter_values(arrays[int(match.group(1))], indent)
        position = match.end()
    yield text[position:]


def iter_values(values: npt.ArrayLike, indent: int) -> Iterator[str]:
    """A JSON list of ``values`` (flat) whose closing bracket sits at ``indent`` spaces."""
    flat = np.asarray(values, dtype=np.float64).reshape(-1)
    if flat.size == 0:
        yield "[]"
        return
    separator = ",\n" + " " * (indent + 2)
    yield "[" + separator[1:]
    for start in range(0, flat.size, CHUNK):
        chunk = flat[start:start + CHUNK]
        items: list[float | str] = chunk.tolist()
        if not np.isfinite(chunk).all():
            items = [json_float(v) for v in items]  # type: ignore[arg-type]
        text = json.dumps(items, separators=(separator, ": "), allow_nan=False)
        yield (separator if start else "") + text[1:-1]
    yield "\n" + " " * indent + "]"
