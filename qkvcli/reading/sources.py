"""Tensor sources: inline values, ``.npy`` files and generated tensors.

``.npy`` tensors next to a fixture: ``{"npy": "data/input.npy"}``.

The path goes through :func:`~qkvcli.reading.files.confined` (relative to the
fixture's directory, never outside it) and the file through
:func:`~qkvcli.reading.files.open_regular` (regular files only). The header is read
first and the shape checked against ``--max-elements`` before any data is read; object
(pickle) arrays are never loaded; float and integer dtypes are accepted and converted to
float64. The data is read whole into memory before anything is computed, never mapped:
a file truncated or rewritten while qkv runs cannot change the tensor under the
evidence (one reading, never a mix) nor kill qkv with SIGBUS. Exactly the bytes the
header promises are read, no more. The header's shape must be
non-negative integers (``True`` is no dimension). Byte order and Fortran order are
encodings: the tensor, and so the report, is the same as the plain form's, and a
``-0.0`` reads as ``0.0`` as it does in JSON.

Tensors too large for JSON: ``.npy`` files next to the fixture, or seeded generation.

Anywhere a fixture holds a tensor it may instead hold one of::

    {"npy": "data/input.npy"}
    {"generate": {"seed": 7, "shape": [8, 512, 1024], "distribution": "uniform", "scale": 1.0}}
    {"safetensors": "gpt2.safetensors", "tensor": "h.0.attn.c_attn.weight"}

``npy``: a path relative to the fixture file's directory (the current directory for a
fixture given as data), read by :mod:`qkvcli.reading.sources`. Absolute paths, ``..`` and
paths that resolve outside that directory (through a symbolic link) are refused, so a
fixture can only read what ships beside it.

``generate``: ``seed`` (0 to 2**64-1) drives SplitMix64 exactly as initialization
does; ``uniform`` (the default) gives ``2u - 1`` in ``[-1, 1)`` from each unit draw
``u``, ``normal`` gives standard normal values by Box-Muller from draw pairs; both
are multiplied by ``scale`` (default 1). The same spec always gives the same bits.

``safetensors``: one named tensor of a checkpoint, read by :mod:`qkvcli.reading.safetensors`.

This module only reads; what ``qkv init`` writes lives in :mod:`qkvcli.authoring.starter`.
Problems raise :class:`~qkvcli.reading.problems.FixtureError` with the JSON location.
"""

from __future__ import annotations

import math
from typing import Any, BinaryIO

import numpy as np
from numpy.lib import format as npy_format  # NumPy itself imports it

from qkvcli.core.arrays import Array, all_finite
from qkvcli.core.splitmix import SplitMix64
from qkvcli.core.text import printable
from qkvcli.reading.files import InputFileError, StrPath, confined, open_regular
from qkvcli.reading.json_values import is_json_int, json_type_name, refuse_unknown_keys
from qkvcli.reading.limits import MAX_SEED, check_size
from qkvcli.reading.problems import FixtureError


def _accepted_dtype(dtype: np.dtype[Any]) -> bool:
    if dtype.fields is not None or dtype.hasobject:
        return False
    if dtype.kind in "iu":
        return True
    return dtype.kind == "f" and dtype.itemsize <= 8


def _header(handle: BinaryIO, raw: str, location: str) -> tuple[tuple[int, ...], bool, Any]:
    """``(shape, fortran_order, dtype)`` from the header; the handle is left at the data."""
    try:
        version = npy_format.read_magic(handle)
    except ValueError:
        raise FixtureError(location, f"{printable(raw)} is not a .npy file") from None
    try:
        if version == (1, 0):
            header = npy_format.read_array_header_1_0(handle)
        elif version == (2, 0):
            header = npy_format.read_array_header_2_0(handle)
        else:
            raise FixtureError(location, f"{printable(raw)}: .npy format version "
                               f"{version[0]}.{version[1]} is not supported")
    except FixtureError:
        raise
    except Exception as error:  # numpy parses the header with tokenize and
        # ast.literal_eval, which raise many errors (TokenError, SyntaxError, ...): all mean
        # a header that cannot be read.
        raise FixtureError(
            location, f"{printable(raw)}: unreadable .npy header ({printable(str(error))})"
        ) from None
    shape = header[0]
    for index, dim in enumerate(shape):
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 0:
            raise FixtureError(
                location, f"{printable(raw)}: header shape entry {index} is "
                f"{printable(repr(dim), 40)}, not a non-negative integer"
            )
    return header


def _data(
    handle: BinaryIO, shape: tuple[int, ...], fortran: bool, dtype: Any, raw: str, location: str
) -> Array:
    """The array the header describes, read whole from the handle's position."""
    count = math.prod(shape)
    wanted = count * dtype.itemsize
    if dtype == np.dtype(np.float64) and not fortran:
        # Used as it is (native float64, C order): read straight into the array, one copy.
        array = np.empty(shape, dtype=np.float64)
        if count == 0:
            return array
        got = _read_into(handle, array.data.cast("B"))
        if got < wanted:
            raise FixtureError(location, f"cannot read {printable(raw)} (it ends after {got} "
                               f"of {wanted} data bytes)")
        if has_negative_zero(array):
            array += 0.0
        array.flags.writeable = False  # the fixture's tensor: nothing may change it
        return array
    data = handle.read(wanted)
    if len(data) < wanted:
        raise FixtureError(
            location, f"cannot read {printable(raw)} (it ends after {len(data)} of {wanted} data bytes)"
        )
    flat = np.frombuffer(data, dtype=dtype, count=count)
    if fortran:
        array = np.array(flat.reshape(shape[::-1]).T, dtype=np.float64, order="C")
    else:
        array = np.array(flat.reshape(shape), dtype=np.float64)
    array += 0.0  # -0.0 becomes 0.0, as in JSON tensors
    return array


def _read_into(handle: BinaryIO, buffer: memoryview) -> int:
    """Fill ``buffer`` from ``handle``; the bytes read (fewer only at the file's end)."""
    done = 0
    while done < len(buffer):
        got = handle.readinto(buffer[done:])  # type: ignore[attr-defined]
        if not got:
            break
        done += got
    return done


def has_negative_zero(array: Array, block: int = 1 << 20) -> bool:
    """Whether ``array`` holds a ``-0.0``, checked in blocks (no array-sized temporary)."""
    flat = array.reshape(-1)
    for start in range(0, flat.size, block):
        part = flat[start:start + block]
        if np.any(np.signbit(part) & (part == 0)):
            return True
    return False


def load_npy(raw: Any, location: str, base_dir: StrPath | None, max_elements: int) -> Array:
    """Load the ``.npy`` file at relative path ``raw`` (inside ``base_dir``) as float64.

    Raises :class:`~qkvcli.reading.problems.FixtureError` at ``location`` (bad or escaping
    path, not a regular file, not a ``.npy`` file, object/pickle or other unsupported dtype,
    too many elements, truncated data, non-finite values).
    """
    path = confined(base_dir, raw, location)
    try:
        with open_regular(path, ".npy") as handle:
            shape, fortran, dtype = _header(handle, raw, location)
            if not _accepted_dtype(dtype):
                what = "object arrays (pickles) are refused" if dtype.hasobject else (
                    f"dtype {dtype} is not supported; use a float or integer dtype"
                )
                raise FixtureError(location, f"{printable(raw)}: {what}")
            check_size(shape, location, max_elements)
            array = _data(handle, tuple(shape), fortran, dtype, raw, location)
    except FixtureError:
        raise
    except InputFileError as error:
        raise FixtureError(location, f"{printable(raw)}: {error.problem}") from None
    except (ValueError, OSError) as error:
        raise FixtureError(location, f"cannot read {printable(raw)} ({printable(str(error))})") from None
    if not all_finite(array):
        index = int(np.argmin(np.isfinite(array).reshape(-1)))
        value = float(array.reshape(-1)[index])
        raise FixtureError(location, f"{printable(raw)}: value at flat index {index} is not finite ({value})")
    return array


GENERATE_KEYS = ("seed", "shape", "distribution", "scale")
DISTRIBUTIONS = ("uniform", "normal")
# Values generated per block. Each block needs two uint64 buffers of its size (and, for
# ``normal``, draws for two values per value): 512 KiB each, so loading a generated tensor
# costs the tensor plus about 3 MiB, at any size (1 << 20 cost 32 MiB of temporaries).
GENERATE_BLOCK = 1 << 16


def load_source(
    value: dict[str, Any],
    location: str,
    base_dir: StrPath | None,
    max_elements: int,
    extra_keys: tuple[str, ...] = (),
) -> Array:
    """The float64 tensor an ``npy``, ``generate`` or ``safetensors`` object describes.

    ``base_dir`` is the fixture file's directory (``None``: the current directory);
    ``extra_keys`` are keys the caller handles itself (a weight's ``name``). Raises
    :class:`~qkvcli.reading.problems.FixtureError`.
    """
    if "npy" in value and "generate" in value:
        raise FixtureError(location, 'give either "npy" or "generate", not both')
    if "safetensors" in value:
        from qkvcli.reading.safetensors import SAFETENSORS_KEYS, load_safetensors

        if "npy" in value or "generate" in value:
            raise FixtureError(location, 'give one of "npy", "generate" or "safetensors"')
        refuse_unknown_keys(value, (*SAFETENSORS_KEYS, *extra_keys), location)
        return load_safetensors(value, location, base_dir, max_elements)
    source = "npy" if "npy" in value else "generate"
    refuse_unknown_keys(value, (source, *extra_keys), location)
    if source == "npy":
        return load_npy(value["npy"], f"{location}.npy", base_dir, max_elements)
    return generate_spec(value["generate"], f"{location}.generate", max_elements)


# --- seeded generation --------------------------------------------------------------------


def generate_tensor(
    seed: int, shape: tuple[int, ...], distribution: str = "uniform", scale: float = 1.0
) -> Array:
    """A float64 tensor of ``shape`` drawn row-major from ``SplitMix64(seed)``.

    ``uniform``: ``scale * (2u - 1)``; ``normal``: ``scale * sqrt(-2 ln(1-u1)) cos(2π u2)``
    from consecutive draws ``u1, u2``. Generated in place, a block at a time, so memory
    stays within a few MiB of the output's size. Raises :class:`FixtureError` for an
    unknown distribution.
    """
    if distribution not in DISTRIBUTIONS:
        raise FixtureError("", f"distribution must be one of {', '.join(DISTRIBUTIONS)}")
    count = math.prod(shape)
    rng = SplitMix64(seed)
    out = np.empty(count, dtype=np.float64)
    normal = distribution == "normal"
    # Scratch for one block, made once: every block is generated in place in ``out``.
    pairs = np.empty((GENERATE_BLOCK, 2) if normal else 0, dtype=np.float64)
    angle = np.empty(GENERATE_BLOCK if normal else 0, dtype=np.float64)
    for start in range(0, count, GENERATE_BLOCK):
        size = min(GENERATE_BLOCK, count - start)
        block = out[start:start + size]
        if not normal:
            rng.next_unit_block(size, out=block)
            block *= 2.0
            block -= 1.0
        else:
            drawn = pairs[:size]
            rng.next_unit_block(2 * size, out=drawn.reshape(-1))
            radius = block  # sqrt(-2 ln(1-u1)), then times cos(2 pi u2): the same operations
            np.negative(drawn[:, 0], out=radius)
            np.log1p(radius, out=radius)
            np.multiply(-2.0, radius, out=radius)
            np.sqrt(radius, out=radius)
            cosine = angle[:size]
            np.multiply(2.0 * math.pi, drawn[:, 1], out=cosine)
            np.cos(cosine, out=cosine)
            np.multiply(radius, cosine, out=block)
        if scale != 1.0:
            block *= scale
    return out.reshape(shape)


def generate_spec(spec: Any, location: str, max_elements: int) -> Array:
    """The tensor a ``generate`` object's body describes. Raises :class:`FixtureError`."""
    if not isinstance(spec, dict):
        raise FixtureError(location, f"expected an object, got {json_type_name(spec)}")
    refuse_unknown_keys(spec, GENERATE_KEYS, location)
    for key in ("seed", "shape"):
        if key not in spec:
            raise FixtureError(location, f'missing key "{key}"')
    seed = spec["seed"]
    if not is_json_int(seed) or not 0 <= seed <= MAX_SEED:
        raise FixtureError(f"{location}.seed", f"expected an integer from 0 to {MAX_SEED}")
    raw_shape = spec["shape"]
    if not isinstance(raw_shape, list):
        raise FixtureError(f"{location}.shape", f"expected an array, got {json_type_name(raw_shape)}")
    for i, dim in enumerate(raw_shape):
        if not is_json_int(dim) or dim < 0:
            raise FixtureError(f"{location}.shape[{i}]", "expected a non-negative integer")
    shape = tuple(int(dim) for dim in raw_shape)
    check_size(shape, f"{location}.shape", max_elements)
    distribution = spec.get("distribution", "uniform")
    if distribution not in DISTRIBUTIONS:
        raise FixtureError(
            f"{location}.distribution", f"expected one of {', '.join(DISTRIBUTIONS)}"
        )
    scale = spec.get("scale", 1.0)
    if not (isinstance(scale, (int, float)) and not isinstance(scale, bool)) or not (
        scale > 0 and (isinstance(scale, int) or math.isfinite(scale))
    ):
        raise FixtureError(f"{location}.scale", "expected a finite number greater than zero")
    try:
        scale_value = float(scale)
    except OverflowError:
        raise FixtureError(f"{location}.scale", "number is too large for binary64") from None
    # The largest draw is 1 (uniform) or sqrt(-2 ln 2**-53) < 8.6 (normal): refuse a
    # scale that would overflow before generating anything.
    largest = 1.0 if distribution == "uniform" else 8.6
    if not math.isfinite(scale_value * largest):
        raise FixtureError(
            f"{location}.scale",
            f"scale {scale_value!r} times a draw of up to {largest} overflows binary64",
        )
    return generate_tensor(int(seed), shape, str(distribution), scale_value)
