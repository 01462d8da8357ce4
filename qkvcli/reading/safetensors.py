"""Tensors from ``.safetensors`` checkpoints, one named tensor at a time.

``{"safetensors": "gpt2.safetensors", "tensor": "h.0.attn.c_attn.weight"}``

The path goes through :func:`~qkvcli.reading.files.confined` exactly as an ``npy``
path does (relative to the fixture's directory, never outside it), and must be a
regular file. The format is small: an 8-byte little-endian length, a JSON header
mapping each tensor's name to ``{"dtype", "shape", "data_offsets"}``, then the data.

The header is read with a bounded strategy, because it may be 100 MB of entries for
tensors qkv never reads (the ``safetensors`` library expands all of them: 1.1 GB and
4 s to read one 48-byte tensor from a 99 MB header). :func:`scan_header` walks it with
one pattern, entry by entry, keeping a 64-bit hash of each name (to refuse a name
given twice, which the format forbids and the library lets the last entry win) and
parsing only the entries asked for. The named tensor's entry is then checked (a known
dtype, a shape of non-negative integers, ``data_offsets`` inside the data and as long
as the shape needs), its shape against ``--max-elements`` before any of its data is
read, and only its bytes are read. F16, F32 and F64 become float64 exactly, and so does
BF16, which NumPy has no dtype for: a bfloat16 is the upper half of the float32 of the
same value, so its 16 bits shifted up are that float32 (no extra package). Any other
dtype is refused in one line naming the tensor and its dtype.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Collection
from typing import Any, BinaryIO

import numpy as np

from qkvcli.core.arrays import Array, all_finite
from qkvcli.core.text import printable
from qkvcli.reading import limits
from qkvcli.reading.files import InputFileError, StrPath, confined, open_regular
from qkvcli.reading.limits import check_size
from qkvcli.reading.problems import FixtureError

SAFETENSORS_KEYS = ("safetensors", "tensor")
# safetensors dtype names that become float64 exactly (every value widens without rounding).
FLOAT_DTYPES = {"F16": "<f2", "F32": "<f4", "F64": "<f8"}
WIDENED_DTYPES = ("BF16",)
DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F4": 4,
    "F6_E2M3": 6, "F6_E3M2": 6, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32,
    "U32": 32, "F32": 32, "C64": 64, "I64": 64, "U64": 64, "F64": 64,
}
"""Every dtype the format names, with its size in bits (``inspect`` lists them all)."""
HEADER_LENGTH_BYTES = 8  # a little-endian u64: the header's length, then the header
MAX_HEADER_BYTES = 100_000_000  # the format's own limit on the header
METADATA = "__metadata__"

# Patterns as strings, compiled by ``re``'s cache on first use (start-up never pays).
# One header entry: a JSON string, a colon, an object holding no object (strings may
# hold braces), then a comma or the header's closing brace. JSON whitespace only.
_SPACE = "[ \t\n\r]*"
_STRING = r'"[^"\\]*(?:\\.[^"\\]*)*"'
_ENTRY = (f"{_SPACE}({_STRING}){_SPACE}:{_SPACE}"
          f'(\\{{[^{{}}"]*(?:{_STRING}[^{{}}"]*)*\\}}){_SPACE}([,}}])')


class HeaderError(ValueError):
    """A header the format does not allow; the message says what and where."""


def _name(quoted: str) -> str:
    # Most names hold no escape; only those need the JSON decoder.
    return json.loads(quoted) if "\\" in quoted else quoted[1:-1]


def scan_header(text: str, keep: Collection[str] | None,
                data_bytes: int | None = None) -> dict[str, Any]:
    """The entries of the header ``text`` named in ``keep`` (``None``: every entry).

    Every name is checked against every other (by a 64-bit hash, confirmed exactly), the
    entries not kept are not parsed. Given ``data_bytes`` (the size of the data after
    the header), every entry's ``data_offsets`` are checked as the format requires
    (:func:`check_layout`). Raises :class:`HeaderError` (not a JSON object of flat
    objects, a name given twice, an entry that is not JSON, offsets that overlap, leave
    a hole or do not cover the data).
    """
    import array

    start = len(text) - len(text.lstrip(" \t\n\r"))
    if not text.startswith("{", start):
        raise HeaderError("the header is not a JSON object")
    position = start + 1
    kept: dict[str, Any] = {}
    hashes = array.array("q")
    names: list[str] = []
    bodies: list[str] = []
    spans = array.array("q")  # begin, end and the entry's place in the text, per tensor
    offsets = re.compile(_OFFSETS)
    empty = re.compile(_SPACE + "}").match(text, position)
    closed = empty is not None
    if empty is not None:
        position = empty.end()
    entry = re.compile(_ENTRY)
    while not closed:
        found = entry.match(text, position)
        if found is None:
            raise HeaderError(f"the header is not JSON the format allows at character {position}")
        name = _name(found.group(1))
        hashes.append(hash(name))
        if data_bytes is not None and name != METADATA:
            # Searched in place: no copy of the entry, a cost paid by every entry.
            span = offsets.search(text, found.start(2), found.end(2))
            if span is None:
                raise _bad_offsets(name, None, None, data_bytes)
            begin, end = int(span.group(1)), int(span.group(2))
            if end < begin or end > data_bytes:
                raise _bad_offsets(name, begin, end, data_bytes)
            spans.append(begin)
            spans.append(end)
            spans.append(position)
        if keep is None:
            bodies.append(found.group(2))
            names.append(name)
        elif name in keep or name == METADATA:
            kept[name] = _entry(name, found.group(2))
        position = found.end()
        closed = found.group(3) == "}"
    if text[position:].strip(" \t\n\r"):
        raise HeaderError(f"the header has text after its end at character {position}")
    _refuse_duplicates(text, start + 1, hashes)
    if data_bytes is not None:
        def name_at(place: int) -> str:
            found = entry.match(text, place)
            assert found is not None  # the place of an entry matched above
            return _name(found.group(1))

        check_layout(spans, data_bytes, name_at)
    if keep is None:  # every entry: one call of the decoder (each call has a cost)
        try:
            parsed = _DECODER.decode("[" + ",".join(bodies) + "]")
        except (HeaderError, ValueError, RecursionError):
            for name, body in zip(names, bodies, strict=True):
                _entry(name, body)  # raises, naming the tensor
            raise
        kept = dict(zip(names, parsed, strict=True))
    return kept


# An entry's offsets, read without parsing the entry (most are never parsed).
_OFFSETS = (f'"data_offsets"{_SPACE}:{_SPACE}\\[{_SPACE}([0-9]+){_SPACE},{_SPACE}([0-9]+)'
            f'{_SPACE}\\]')


def _bad_offsets(name: str, begin: int | None, end: int | None, data_bytes: int) -> HeaderError:
    """Why one entry's ``data_offsets`` cannot be laid out: not two non-negative
    integers (``begin`` is ``None``), ending before they begin, or past the data."""
    if begin is None or end is None:
        return HeaderError(f"tensor {printable(name)}: data_offsets must be two non-negative "
                           "integers")
    if end < begin:
        return HeaderError(f"tensor {printable(name)}: data_offsets [{begin}, {end}] end "
                           "before they begin")
    return HeaderError(f"tensor {printable(name)}: data_offsets [{begin}, {end}] point past "
                       f"the end of the data ({data_bytes} bytes)")


def check_layout(spans: Any, data_bytes: int, name_at: Any) -> None:
    """Refuse tensors whose data do not tile the ``data_bytes`` of data exactly.

    ``spans`` holds ``begin, end, place`` for each tensor (``name_at(place)`` gives its
    name). Taken in the order of their offsets, each tensor must begin where the one
    before it ends (the first at 0) and the last must end at the end of the data: no
    overlap, no hole, nothing after, as the format requires (and the ``safetensors``
    library checks). Raises :class:`HeaderError` naming the tensors.
    """
    table = np.frombuffer(spans, dtype=np.int64).reshape(-1, 3)
    order = np.lexsort((table[:, 1], table[:, 0]))  # by begin, then end
    table = table[order]
    ends = np.concatenate(([0], table[:, 1]))
    wrong = np.flatnonzero(table[:, 0] != ends[:-1])
    if wrong.size:
        index = int(wrong[0])
        begin, end, place = (int(value) for value in table[index])
        name = printable(name_at(place))
        if index == 0:
            raise HeaderError(f"bytes 0 to {begin} of the data, before tensor {name}, belong "
                              "to no tensor (the format forbids holes)")
        before_begin, before_end, before_place = (int(value) for value in table[index - 1])
        before = printable(name_at(before_place))
        if begin < before_end:
            raise HeaderError(f"tensor {name}: data_offsets [{begin}, {end}] overlap those of "
                              f"tensor {before}, [{before_begin}, {before_end}] (the format "
                              "forbids it)")
        raise HeaderError(f"bytes {before_end} to {begin} of the data, between tensors {before} "
                          f"and {name}, belong to no tensor (the format forbids holes)")
    last = int(ends[-1])
    if last != data_bytes:
        after = f"after tensor {printable(name_at(int(table[-1, 2])))}" if len(table) else \
            "with no tensor in the header"
        raise HeaderError(f"bytes {last} to {data_bytes} of the data, {after}, belong to no "
                          "tensor (the format forbids holes)")


def _pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(items)
    if len(found) != len(items):
        raise HeaderError("a key is given twice in its entry")
    return found


# One decoder for every entry: building one per call costs more than decoding the entry.
_DECODER = json.JSONDecoder(object_pairs_hook=_pairs, parse_constant=lambda word: float("nan"))


def _entry(name: str, body: str) -> Any:
    try:
        return _DECODER.decode(body)
    except HeaderError as error:
        raise HeaderError(f"tensor {printable(name)}: {error}") from None
    except (ValueError, RecursionError):
        raise HeaderError(f"tensor {printable(name)}: its entry is not JSON") from None


def _refuse_duplicates(text: str, position: int, hashes: Any) -> None:
    """Raise :class:`HeaderError` naming the first name given twice, if any."""
    ordered = np.sort(np.frombuffer(hashes, dtype=np.int64))
    repeated = set(ordered[1:][ordered[1:] == ordered[:-1]].tolist())
    if not repeated:
        return
    seen: set[str] = set()  # a second pass, only over names whose hashes repeat
    entry = re.compile(_ENTRY)
    while (found := entry.match(text, position)) is not None:
        name = _name(found.group(1))
        if hash(name) in repeated:
            if name in seen:
                raise HeaderError(f"tensor {printable(name)} is named twice in the header "
                                  "(the format forbids it)")
            seen.add(name)
        position = found.end()
        if found.group(3) == "}":
            return


def read_header(handle: BinaryIO, shown: str, location: str) -> tuple[str, int, int]:
    """``(header text, offset of the data, bytes of data)`` of the open checkpoint ``handle``.

    The header's stated length is checked before it is read: at most
    :func:`header_limit` bytes, and inside the file. ``shown`` names the file in
    messages. Raises :class:`~qkvcli.reading.problems.FixtureError` at ``location``.
    """
    try:
        head = handle.read(HEADER_LENGTH_BYTES)
        size = os.fstat(handle.fileno()).st_size
    except OSError as error:
        raise FixtureError(location, f"{shown}: cannot read ({error.strerror})") from None
    if len(head) < HEADER_LENGTH_BYTES:
        raise FixtureError(location, f"{shown}: not a .safetensors file (shorter than the "
                           f"{HEADER_LENGTH_BYTES}-byte length of its header)")
    stated = int.from_bytes(head, "little")
    limit = header_limit()
    if stated > limit:
        raise FixtureError(location, f"{shown}: its header would be {stated} bytes, more than "
                           f"the limit {limit}{_other_format(head)}")
    if HEADER_LENGTH_BYTES + stated > size:
        raise FixtureError(location, f"{shown}: its header would be {stated} bytes, but the "
                           f"file has only {size}{_other_format(head)}")
    try:
        data = handle.read(stated)
    except OSError as error:
        raise FixtureError(location, f"{shown}: cannot read ({error.strerror})") from None
    if len(data) != stated:
        raise FixtureError(location, f"{shown}: the file ended inside its header")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise FixtureError(location, f"{shown}: cannot be read as .safetensors (its header is "
                           f"not UTF-8 at byte {error.start})") from None
    data_start = HEADER_LENGTH_BYTES + stated
    return text, data_start, size - data_start


# What a newcomer hands qkv instead of a .safetensors file, by its first bytes.
_OTHER_FORMATS = ((b"PK\x03\x04", "a zip archive, as torch.save writes pytorch_model.bin"),
                  (b"\x80", "a Python pickle, as old torch.save wrote pytorch_model.bin"),
                  (b"{", "JSON text (a config.json? a sharded checkpoint's index must end "
                   "in .index.json)"),
                  (b"GGUF", "a GGUF file"))


def _other_format(head: bytes) -> str:
    """``"; it looks like ..."`` when ``head`` starts as a well-known other format, else ''."""
    for magic, what in _OTHER_FORMATS:
        if head.startswith(magic):
            return f"; it looks like {what}, not .safetensors"
    return ""


def header_limit() -> int:
    """The largest header read: the format's own 100 MB, or the byte limit if lower."""
    return min(MAX_HEADER_BYTES, limits.MAX_FILE_BYTES)


def check_entry(name: str, entry: Any, data_bytes: int) -> tuple[str, tuple[int, ...], int, int]:
    """``(dtype, shape, begin, end)`` of one header entry, checked against the format.

    Raises :class:`HeaderError`: not an object with ``dtype``, ``shape`` and
    ``data_offsets``, an unknown dtype, a shape that is not a list of non-negative
    integers, offsets outside the ``data_bytes`` of data or not as long as the shape needs.
    """
    def problem(what: str) -> HeaderError:
        return HeaderError(f"tensor {printable(name)}: {what}")

    if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= set(entry):
        raise problem("its entry needs dtype, shape and data_offsets")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise problem(f"unknown dtype {printable(repr(dtype))}")
    if not isinstance(shape, list) or not all(
            type(dim) is int and dim >= 0 for dim in shape):
        raise problem("shape must be a list of non-negative integers")
    if not (isinstance(offsets, list) and len(offsets) == 2
            and all(type(value) is int and value >= 0 for value in offsets)):
        raise problem("data_offsets must be two non-negative integers")
    begin, end = offsets
    if end < begin:
        raise problem(f"data_offsets {printable(json.dumps(offsets))} end before they begin")
    if end > data_bytes:
        raise problem(f"data_offsets {printable(json.dumps(offsets))} point past the end of "
                      f"the data ({data_bytes} bytes)")
    bits = DTYPE_BITS[dtype]
    for dim in shape:  # one axis at a time: a long shape never makes a huge product
        bits *= dim
        if bits > 8 * data_bytes:
            raise problem(f"shape {printable(json.dumps(shape))} needs more bytes than the "
                          "data holds (an overflow?)")
    if bits != 8 * (end - begin):
        raise problem(f"data_offsets {printable(json.dumps(offsets))} hold {end - begin} "
                      f"bytes, its shape and dtype need {bits / 8:g}")
    return dtype, tuple(shape), begin, end


def list_tensors(path: StrPath) -> list[tuple[str, str, tuple[int, ...]]]:
    """``(name, dtype, shape)`` of every tensor in the checkpoint at ``path``, sorted by name.

    Reads the header only, and checks every entry. Raises
    :class:`~qkvcli.reading.files.InputFileError` for a missing or special file and
    :class:`~qkvcli.reading.problems.FixtureError` for one that is not a checkpoint.
    """
    name = os.fspath(path)
    shown = printable(name)
    with open_regular(name, ".safetensors") as handle:
        text, _, data_bytes = read_header(handle, shown, "")
    try:
        entries = scan_header(text, None, data_bytes)
        _check_metadata(entries)
        found = []
        for key in sorted(set(entries) - {METADATA}):
            dtype, shape, _, _ = check_entry(key, entries[key], data_bytes)
            found.append((key, dtype, shape))
    except HeaderError as error:
        raise FixtureError("$", f"{shown}: cannot be read as .safetensors ({error})") from None
    return found


def _check_metadata(entries: dict[str, Any]) -> None:
    metadata = entries.get(METADATA, {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise HeaderError(f"{METADATA} must map names to strings")


def load_safetensors(
    value: dict[str, Any], location: str, base_dir: StrPath | None, max_elements: int
) -> Array:
    """The float64 tensor ``value["tensor"]`` of the checkpoint ``value["safetensors"]``.

    Raises :class:`~qkvcli.reading.problems.FixtureError` at ``location`` (bad or escaping
    path, not a regular file, not a checkpoint, a name given twice, no such tensor, too
    many elements, an unsupported dtype, non-finite values).
    """
    raw = value["safetensors"]
    tensor = value.get("tensor")
    if not isinstance(tensor, str) or not tensor:
        raise FixtureError(f"{location}.tensor", "expected the tensor's name, a non-empty string")
    try:
        path = confined(base_dir, raw, f"{location}.safetensors")
    except FixtureError as error:
        if "refused" not in error.message:
            raise
        # a checkpoint in a hub cache links out of any fixture's directory
        raise FixtureError(error.location, f"{error.message} (--trust-paths of qkv attend "
                           "or qkv validate reads it: see docs/fixtures.md, the confinement "
                           "rule)") from None
    shown, named = printable(str(raw)), printable(tensor)
    try:
        handle = open_regular(path, ".safetensors")
    except InputFileError as error:
        raise FixtureError(f"{location}.safetensors", f"{shown}: {error.problem}") from None
    with handle:
        text, data_start, data_bytes = read_header(handle, shown, f"{location}.safetensors")
        try:
            entries = scan_header(text, (tensor,), data_bytes)
            del text  # up to 100 MB, no longer needed
            _check_metadata(entries)
            if tensor not in entries or tensor == METADATA:
                raise FixtureError(f"{location}.tensor", f"{shown} has no tensor named {named}")
            dtype, shape, begin, end = check_entry(tensor, entries[tensor], data_bytes)
        except HeaderError as error:
            raise FixtureError(location, f"{shown}: cannot be read as .safetensors ({error})") from None
        problem = dtype_problem(dtype)
        if problem is not None:
            raise FixtureError(location, f"{shown}: tensor {named} {problem}")
        check_size(shape, location, max_elements)  # from the header, before any data
        try:
            handle.seek(data_start + begin)
            data = handle.read(end - begin)
        except OSError as error:
            raise FixtureError(location, f"{shown}: cannot read ({error.strerror})") from None
    if len(data) != end - begin:
        raise FixtureError(location, f"{shown}: the file ended inside tensor {named}")
    array = as_float64(data, dtype).reshape(shape)
    if not all_finite(array):
        index = int(np.argmin(np.isfinite(array).reshape(-1)))
        raise FixtureError(location, f"{shown}: tensor {named}: value at flat index {index} is "
                           f"not finite ({float(array.reshape(-1)[index])})")
    return array


def dtype_problem(dtype: str) -> str | None:
    """Why a tensor of safetensors ``dtype`` cannot be read here (the end of a sentence
    after the tensor's name), or ``None`` when it can: what ``qkv init`` checks so that
    it never writes a fixture that ``attend`` refuses."""
    if dtype not in FLOAT_DTYPES and dtype not in WIDENED_DTYPES:
        return f"has dtype {printable(dtype)}; only F16, F32, F64 and BF16 are read"
    return None


def as_float64(data: bytes, dtype: str) -> Array:
    """The little-endian values ``data`` of safetensors ``dtype`` (F16, F32, F64 or BF16)
    as a flat float64 array, every value exact."""
    if dtype == "BF16":
        # bfloat16 keeps float32's sign, exponent and top 7 mantissa bits: shifted into
        # the upper half of a 32-bit word, its bits are the float32 of the same value.
        halves = np.frombuffer(data, dtype="<u2")
        words = halves.astype(np.uint32) << np.uint32(16)
        with np.errstate(invalid="ignore"):  # a signalling NaN stays NaN, refused by the caller
            widened: Array = words.view(np.float32).astype(np.float64)
        return widened
    exact: Array = np.frombuffer(data, dtype=np.dtype(FLOAT_DTYPES[dtype])).astype(np.float64)
    return exact
