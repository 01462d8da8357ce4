"""Tensors from ``.safetensors`` checkpoints, one named tensor at a time.

``{"safetensors": "gpt2.safetensors", "tensor": "h.0.attn.c_attn.weight"}``

The path goes through :func:`~qkvcli.reading.files.confined` exactly as an ``npy``
path does (relative to the fixture's directory, never outside it), and must be a
regular file. The file is read with the ``safetensors`` library's NumPy API (imported
here, only when a fixture names a checkpoint: start-up does not pay for it); only the
named tensor is read, and its shape, from the file's header, is checked against
``--max-elements`` before any of its data is. float16, float32 and float64 become
float64. bfloat16, which NumPy cannot hold, is widened through ``ml_dtypes`` when it is
installed (the ``checkpoints`` extra) and refused in one line naming the tensor and its
dtype when it is not; any other dtype is refused the same way. The format is never
parsed by hand.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qkvcli.core.arrays import Array, all_finite
from qkvcli.core.text import printable
from qkvcli.reading import limits
from qkvcli.reading.files import InputFileError, StrPath, confined, open_regular
from qkvcli.reading.limits import check_size
from qkvcli.reading.problems import FixtureError

SAFETENSORS_KEYS = ("safetensors", "tensor")
# safetensors dtype names that become float64 exactly (every value widens without rounding).
FLOAT_DTYPES = ("F16", "F32", "F64")
WIDENED_DTYPES = ("BF16",)
HEADER_LENGTH_BYTES = 8  # a little-endian u64: the header's length, then the header
MAX_HEADER_BYTES = 100_000_000  # the format's own limit on the header
LIBRARY_TEXT = 200  # characters of the library's own message quoted (it can list every dtype)
INSTALL_HINT = "install the checkpoints extra: pip install 'qkv[checkpoints]'"


def _library(location: str) -> Any:
    try:
        from safetensors import safe_open
    except ImportError:
        raise FixtureError(location, f"reading .safetensors needs the safetensors package; "
                           f"{INSTALL_HINT}") from None
    return safe_open


def _bfloat16_ready() -> bool:
    try:
        import ml_dtypes  # noqa: F401 - registers bfloat16 with NumPy for the library
    except ImportError:
        return False
    return True


def check_header(path: StrPath, shown: str, location: str) -> None:
    """Open ``path`` (a regular file, never blocking) and check the header's stated length
    before the library reads it: at most :func:`header_limit` bytes, and inside the file.

    ``shown`` names the file in messages. Raises
    :class:`~qkvcli.reading.files.InputFileError` (missing, special) or
    :class:`~qkvcli.reading.problems.FixtureError` at ``location``.
    """
    import os

    with open_regular(path, ".safetensors") as handle:
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
                           f"the limit {limit}")
    if HEADER_LENGTH_BYTES + stated > size:
        raise FixtureError(location, f"{shown}: its header would be {stated} bytes, but the "
                           f"file has only {size}")


def header_limit() -> int:
    """The largest header read: the format's own 100 MB, or the byte limit if lower."""
    return min(MAX_HEADER_BYTES, limits.MAX_FILE_BYTES)


def list_tensors(path: StrPath) -> list[tuple[str, str, tuple[int, ...]]]:
    """``(name, dtype, shape)`` of every tensor in the checkpoint at ``path``, sorted by name.

    Reads the header only. Raises :class:`~qkvcli.reading.files.InputFileError` for a
    missing or special file and :class:`~qkvcli.reading.problems.FixtureError` for one the
    library cannot read.
    """
    import os

    name = os.fspath(path)
    check_header(name, printable(name), "")
    safe_open = _library("$")
    try:
        with safe_open(name, framework="numpy") as handle:
            found = []
            for key in sorted(handle.keys()):
                view = handle.get_slice(key)
                found.append((key, str(view.get_dtype()), tuple(int(d) for d in view.get_shape())))
            return found
    except Exception as error:  # the library's SafetensorError, OSError, ValueError...
        said = printable(str(error), LIBRARY_TEXT)
        raise FixtureError("$", f"{printable(name)}: cannot be read as .safetensors ({said})") from None


def load_safetensors(
    value: dict[str, Any], location: str, base_dir: StrPath | None, max_elements: int
) -> Array:
    """The float64 tensor ``value["tensor"]`` of the checkpoint ``value["safetensors"]``.

    Raises :class:`~qkvcli.reading.problems.FixtureError` at ``location`` (bad or escaping
    path, not a regular file, not a checkpoint, no such tensor, too many elements, an
    unsupported dtype, non-finite values).
    """
    raw = value["safetensors"]
    tensor = value.get("tensor")
    if not isinstance(tensor, str) or not tensor:
        raise FixtureError(f"{location}.tensor", "expected the tensor's name, a non-empty string")
    path = confined(base_dir, raw, f"{location}.safetensors")
    try:
        check_header(path, printable(str(raw)), f"{location}.safetensors")
    except InputFileError as error:
        raise FixtureError(f"{location}.safetensors", f"{raw}: {error.problem}") from None
    safe_open = _library(location)
    try:
        with safe_open(str(path), framework="numpy") as handle:
            if tensor not in handle.keys():
                raise FixtureError(f"{location}.tensor", f"{raw} has no tensor named {tensor}")
            view = handle.get_slice(tensor)
            dtype = str(view.get_dtype())
            shape = tuple(int(d) for d in view.get_shape())
            if dtype in WIDENED_DTYPES and not _bfloat16_ready():
                raise FixtureError(location, f"{raw}: tensor {tensor} is {dtype} (bfloat16); "
                                   f"widening it needs ml_dtypes: {INSTALL_HINT}")
            if dtype not in FLOAT_DTYPES + WIDENED_DTYPES:
                raise FixtureError(location, f"{raw}: tensor {tensor} has dtype {dtype}; only "
                                   "F16, F32, F64 and BF16 are read")
            check_size(shape, location, max_elements)  # from the header, before any data
            data = handle.get_tensor(tensor)
    except FixtureError:
        raise
    except Exception as error:  # the library's SafetensorError, OSError, ValueError...
        said = printable(str(error), LIBRARY_TEXT)
        raise FixtureError(location, f"{raw}: cannot be read as .safetensors ({said})") from None
    array: Array = np.array(data, dtype=np.float64)
    if array.shape != shape:
        raise FixtureError(location, f"{raw}: tensor {tensor} does not match its header's shape")
    if not all_finite(array):
        index = int(np.argmin(np.isfinite(array).reshape(-1)))
        raise FixtureError(location, f"{raw}: tensor {tensor}: value at flat index {index} is "
                           f"not finite ({float(array.reshape(-1)[index])})")
    return array
