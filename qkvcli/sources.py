"""Tensors too large for JSON: ``.npy`` files next to the fixture, or seeded generation.

Anywhere a fixture holds a tensor it may instead hold one of::

    {"npy": "data/input.npy"}
    {"generate": {"seed": 7, "shape": [8, 512, 1024], "distribution": "uniform", "scale": 1.0}}

``npy``: a path relative to the fixture file's directory (the current directory for a
fixture given as data). Absolute paths and paths that resolve outside that directory
(through ``..`` or a symbolic link) are refused, so a fixture can only read what ships
beside it. The header is read first and the shape checked against ``--max-elements``
before any data is read; the file is loaded with ``allow_pickle=False``; float and
integer dtypes are accepted and converted to float64, and a native float64 C-order
file is memory-mapped read-only instead of copied.

``generate``: ``seed`` (0 to 2**64-1) drives SplitMix64 exactly as initialization
does; ``uniform`` (the default) gives ``2u - 1`` in ``[-1, 1)`` from each unit draw
``u``, ``normal`` gives standard normal values by Box-Muller from draw pairs; both
are multiplied by ``scale`` (default 1). The same spec always gives the same bits.

Problems raise :class:`~qkvcli.fixture.FixtureError` with the JSON location.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from qkvcli.engine import Array, all_finite
from qkvcli.errors import BRANCHES
from qkvcli.fixture import FixtureError, check_size, is_json_int, json_type_name, refuse_unknown_keys
from qkvcli.splitmix import INCREMENT, MASK64, SplitMix64, xavier_limit

SOURCE_KEYS = ("npy", "generate")
GENERATE_KEYS = ("seed", "shape", "distribution", "scale")
DISTRIBUTIONS = ("uniform", "normal")
MAX_SEED = (1 << 64) - 1
# Values generated per block: bounds the generator's uint64 temporaries (8 MiB each).
GENERATE_BLOCK = 1 << 20


def is_source(value: Any) -> bool:
    """Whether a fixture tensor value is an ``npy`` or ``generate`` object."""
    return isinstance(value, dict) and any(key in value for key in SOURCE_KEYS)


def load_source(
    value: dict[str, Any],
    location: str,
    base_dir: Path | None,
    max_elements: int,
    extra_keys: tuple[str, ...] = (),
) -> Array:
    """The float64 tensor an ``npy`` or ``generate`` object describes.

    ``base_dir`` is the fixture file's directory (``None``: the current directory);
    ``extra_keys`` are keys the caller handles itself (a weight's ``name``). Raises
    :class:`~qkvcli.fixture.FixtureError`.
    """
    if "npy" in value and "generate" in value:
        raise FixtureError(location, 'give either "npy" or "generate", not both')
    kind = "npy" if "npy" in value else "generate"
    refuse_unknown_keys(value, (kind, *extra_keys), location)
    if kind == "npy":
        return load_npy(value["npy"], f"{location}.npy", base_dir, max_elements)
    return _generate_spec(value["generate"], f"{location}.generate", max_elements)


# --- .npy files ---------------------------------------------------------------------------


def _resolve(raw: Any, location: str, base_dir: Path | None) -> Path:
    if not isinstance(raw, str) or not raw:
        raise FixtureError(location, "expected a non-empty relative path string")
    relative = Path(raw)
    if relative.is_absolute():
        raise FixtureError(
            location,
            f"absolute path {raw} refused; give a path relative to the fixture's directory",
        )
    base = (base_dir if base_dir is not None else Path.cwd()).resolve()
    try:
        resolved = (base / relative).resolve(strict=True)
    except FileNotFoundError:
        raise FixtureError(location, f"no such file: {raw}") from None
    except (OSError, RuntimeError) as error:
        raise FixtureError(location, f"cannot open {raw} ({error})") from None
    if not resolved.is_relative_to(base):
        raise FixtureError(location, f"{raw} resolves outside the fixture's directory; refused")
    if resolved.is_dir():
        raise FixtureError(location, f"{raw} is a directory, not a .npy file")
    return resolved


def _accepted_dtype(dtype: np.dtype[Any]) -> bool:
    if dtype.fields is not None or dtype.hasobject:
        return False
    if dtype.kind in "iu":
        return True
    return dtype.kind == "f" and dtype.itemsize <= 8


def load_npy(raw: Any, location: str, base_dir: Path | None, max_elements: int) -> Array:
    """Load the ``.npy`` file at relative path ``raw`` as float64, header checked first.

    Raises :class:`~qkvcli.fixture.FixtureError` (bad path, not a ``.npy`` file,
    object/pickle or other unsupported dtype, too many elements, truncated data,
    non-finite values).
    """
    from numpy.lib import format as npy_format

    path = _resolve(raw, location, base_dir)
    try:
        with open(path, "rb") as handle:
            try:
                version = npy_format.read_magic(handle)
            except ValueError:
                raise FixtureError(location, f"{raw} is not a .npy file") from None
            if version == (1, 0):
                shape, fortran, dtype = npy_format.read_array_header_1_0(handle)
            elif version == (2, 0):
                shape, fortran, dtype = npy_format.read_array_header_2_0(handle)
            else:
                raise FixtureError(
                    location,
                    f"{raw}: .npy format version {version[0]}.{version[1]} is not supported",
                )
    except FixtureError:
        raise
    except (ValueError, EOFError) as error:
        raise FixtureError(location, f"{raw}: unreadable .npy header ({error})") from None
    except OSError as error:
        raise FixtureError(location, f"cannot read {raw} ({error.strerror or error})") from None
    if not _accepted_dtype(dtype):
        what = "object arrays (pickles) are refused" if dtype.hasobject else (
            f"dtype {dtype} is not supported; use a float or integer dtype"
        )
        raise FixtureError(location, f"{raw}: {what}")
    check_size(shape, location, max_elements)
    # Memory-map what can be used as it is (native float64, C order); anything else
    # is converted to float64 in memory anyway, so it is read plainly.
    direct = dtype == np.dtype(np.float64) and not fortran and math.prod(shape) > 0
    try:
        loaded = np.load(path, mmap_mode="r" if direct else None, allow_pickle=False)
    except (ValueError, OSError, EOFError) as error:
        raise FixtureError(location, f"cannot read {raw} ({error})") from None
    array: Array = np.asarray(loaded, dtype=np.float64)
    if array.shape != tuple(shape):
        raise FixtureError(location, f"{raw}: data does not match its header's shape")
    if not all_finite(array):
        index = int(np.argmin(np.isfinite(array).reshape(-1)))
        value = float(array.reshape(-1)[index])
        raise FixtureError(location, f"{raw}: value at flat index {index} is not finite ({value})")
    return array


def write_npy_atomic(path: Path, array: Array) -> None:
    """Write ``array`` to ``path`` as ``.npy`` through a temporary file and a rename.

    Nothing is left half-written: on any failure the temporary file is removed and an
    existing ``path`` is untouched. Raises ``OSError``.
    """
    directory = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        # The mode a plain open() would give, not mkstemp's private 0600.
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as handle:
            np.save(handle, np.ascontiguousarray(array), allow_pickle=False)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# --- seeded generation --------------------------------------------------------------------


def generate_tensor(
    seed: int, shape: tuple[int, ...], distribution: str = "uniform", scale: float = 1.0
) -> Array:
    """A float64 tensor of ``shape`` drawn row-major from ``SplitMix64(seed)``.

    ``uniform``: ``scale * (2u - 1)``; ``normal``: ``scale * sqrt(-2 ln(1-u1)) cos(2π u2)``
    from consecutive draws ``u1, u2``. Generated in blocks, so memory stays near the
    output's size. Raises ``ValueError`` for an unknown distribution.
    """
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"distribution must be one of {', '.join(DISTRIBUTIONS)}")
    count = math.prod(shape)
    rng = SplitMix64(seed)
    out = np.empty(count, dtype=np.float64)
    for start in range(0, count, GENERATE_BLOCK):
        size = min(GENERATE_BLOCK, count - start)
        block = out[start:start + size]
        if distribution == "uniform":
            np.multiply(rng.next_unit_block(size), 2.0, out=block)
            block -= 1.0
        else:
            pairs = rng.next_unit_block(2 * size).reshape(size, 2)
            radius = np.sqrt(-2.0 * np.log1p(-pairs[:, 0]))
            np.multiply(radius, np.cos(2.0 * math.pi * pairs[:, 1]), out=block)
    if scale != 1.0:
        out *= scale
    return out.reshape(shape)


def _generate_spec(spec: Any, location: str, max_elements: int) -> Array:
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
        math.isfinite(scale) and scale > 0
    ):
        raise FixtureError(f"{location}.scale", "expected a finite number greater than zero")
    return generate_tensor(int(seed), shape, str(distribution), float(scale))


def generated_fixture_document(
    seed: int, batch: int, tokens: int, d_model: int, d_head: int
) -> dict[str, Any]:
    """A fixture whose tensors are all ``generate`` specs: a few lines of JSON at any size.

    The weights are the reference's initialization for ``seed`` bit for bit: query, key
    and value continue one SplitMix64 stream, so each branch's spec starts where the
    previous branch's draws ended (state ``seed + k * d_model * d_head * increment``) and
    is scaled by the Xavier limit (``generate``'s ``scale * (2u - 1)`` is Xavier's
    ``limit * (2u - 1)``). The input and upstream are uniform in ``[-1, 1)`` from the
    starter fixture's streams of their own, so they never shift the weights.
    """
    from qkvcli.starter import INPUT_TAG, UPSTREAM_TAG, stream

    limit = xavier_limit(d_model, d_head)
    per_branch = d_model * d_head
    upstream_rng = stream(seed, UPSTREAM_TAG)
    upstream_seeds = [upstream_rng.next_u64() for _ in BRANCHES]

    def spec(tensor_seed: int, shape: list[int], scale: float = 1.0) -> dict[str, Any]:
        body: dict[str, Any] = {"seed": tensor_seed, "shape": shape}
        if scale != 1.0:
            body["scale"] = scale
        return {"generate": body}

    return {
        "chapter": f"generated-{batch}x{tokens}x{d_model}x{d_head}",
        "seed": seed,
        "input": spec(stream(seed, INPUT_TAG).state, [batch, tokens, d_model]),
        "weights": {
            branch: spec((seed + i * per_branch * INCREMENT) & MASK64, [d_model, d_head], limit)
            for i, branch in enumerate(BRANCHES)
        },
        "upstream": {
            branch: spec(upstream_seeds[i], [batch, tokens, d_head])
            for i, branch in enumerate(BRANCHES)
        },
    }


def npy_fixture_document(
    document: dict[str, Any], npy_dir: str
) -> tuple[dict[str, Any], dict[str, Array]]:
    """Turn every ``generate`` tensor of ``document`` into an ``npy`` reference.

    Gives the new document (tensors ``{"npy": "<npy_dir>/<tensor>.npy"}``) and the
    arrays to write, keyed by those relative paths (write them with
    :func:`write_npy_atomic` next to the fixture). Both documents load to the same
    bits. Raises :class:`~qkvcli.fixture.FixtureError` for a bad spec.
    """
    arrays: dict[str, Array] = {}

    def convert(value: Any, name: str, location: str) -> Any:
        if isinstance(value, dict) and "generate" in value:
            relative = f"{npy_dir}/{name}.npy" if npy_dir else f"{name}.npy"
            arrays[relative] = _generate_spec(value["generate"], f"{location}.generate", 1 << 62)
            rest = {key: item for key, item in value.items() if key != "generate"}
            return {**rest, "npy": relative}
        return value

    out = dict(document)
    out["input"] = convert(document["input"], "input", "$.input")
    for group, suffix in (("weights", "_weight"), ("upstream", "_upstream")):
        if isinstance(document.get(group), dict):
            out[group] = {
                branch: convert(value, f"{branch}{suffix}", f"$.{group}.{branch}")
                for branch, value in document[group].items()
            }
    return out, arrays


# --- small shared checks ------------------------------------------------------------------


