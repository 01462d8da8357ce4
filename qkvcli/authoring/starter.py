"""Starter fixtures for ``qkv init``: seeded weights, input and upstream, as JSON text.

The weights are exactly the reference's initialization for the seed: a fresh
SplitMix64 at state ``seed``, then query, key, value, each Xavier-uniform and drawn
row-major (:meth:`QkvProjections.from_seed`). The input and the upstream gradients come
from generators of their own, so they never shift the weights: each starts at the
first draw of ``SplitMix64(seed XOR tag)`` with a fixed per-stream ``tag``. Input values
are multiples of 1/8 in [-2, 2] and upstream values multiples of 1/4 in [-1, 1], so a
starter fixture is easy to read and to check by hand.

Floats are written with Python's shortest round-trip spelling, so loading the written
fixture gives the seeded weights back bit for bit.

What ``qkv init --generate`` and ``--npy`` write lives here too:
:func:`generated_fixture_document` describes every tensor by a ``generate`` spec (a few
lines of JSON at any size); :func:`npy_fixture_document` turns those specs into ``.npy``
files, written by :func:`write_npy_atomic`. Reading them back is the fixtures layer's
job (:mod:`qkvcli.reading.sources`).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from qkvcli.core.arrays import Array
from qkvcli.core.names import BRANCHES
from qkvcli.core.projections import QkvProjections
from qkvcli.core.splitmix import INCREMENT, MASK64, SplitMix64, xavier_limit
from qkvcli.gradcheck.settings import DEFAULT_STEP, DEFAULT_TOLERANCE
from qkvcli.reading.sources import generate_spec

# Fixed, documented constants: changing them would change every starter fixture's input.
INPUT_TAG = int.from_bytes(b"qkvinput", "big")
UPSTREAM_TAG = int.from_bytes(b"qkvupstr", "big")


def stream(seed: int, tag: int) -> SplitMix64:
    """A generator of its own for one stream: state = first draw of ``SplitMix64(seed ^ tag)``."""
    return SplitMix64(SplitMix64((seed ^ tag) & MASK64).next_u64())


def _steps(rng: SplitMix64, shape: tuple[int, ...], half_steps: int, step: float) -> Array:
    """Values ``k * step`` for integer ``k`` in ``[-half_steps, half_steps]``, drawn row-major."""
    count = int(np.prod(shape, dtype=np.int64))
    units = rng.next_unit_block(count)
    k = np.floor(units * (2 * half_steps + 1)) - half_steps
    return (k * step).reshape(shape)


def starter_values(
    seed: int, batch: int, tokens: int, d_model: int, d_head: int
) -> tuple[QkvProjections, Array, tuple[Array, Array, Array]]:
    """The seeded layer, input ``[batch, tokens, d_model]``, upstream ``[batch, tokens, d_head]``.

    Raises :class:`~qkvcli.core.errors.ProjectionError` when ``d_model`` or ``d_head`` is zero.
    """
    layer = QkvProjections.from_seed(d_model, d_head, SplitMix64(seed))
    x = _steps(stream(seed, INPUT_TAG), (batch, tokens, d_model), 16, 0.125)
    upstream_rng = stream(seed, UPSTREAM_TAG)
    shape = (batch, tokens, d_head)
    upstream = tuple(_steps(upstream_rng, shape, 4, 0.25) for _ in BRANCHES)
    return layer, x, (upstream[0], upstream[1], upstream[2])


def _tensor(array: Array) -> Any:
    """A nested list, or the flat form with a shape when an axis is empty (nesting can't say it)."""
    if 0 in array.shape:
        return {"shape": list(array.shape), "values": []}
    return array.tolist()


def starter_fixture(
    seed: int, batch: int, tokens: int, d_model: int, d_head: int
) -> dict[str, Any]:
    """A complete starter fixture as JSON-ready data (see the module docstring).

    It has no ``chapter``, so reports name it after its file.
    """
    layer, x, upstream = starter_values(seed, batch, tokens, d_model, d_head)
    weights = {
        branch: {"name": name, "values": weight.tolist()}
        for branch, name, weight in zip(BRANCHES, layer.names, layer.weights, strict=True)
    }
    return {
        "seed": seed,
        "input": _tensor(x),
        "weights": weights,
        "upstream": {branch: _tensor(u) for branch, u in zip(BRANCHES, upstream, strict=True)},
        "gradcheck": {"step": DEFAULT_STEP, "tolerance": DEFAULT_TOLERANCE},
    }


def dump_fixture(data: Any) -> str:
    """JSON text a person can read: objects indented, each innermost row of numbers on one line.

    Numbers use :func:`json.dumps`, whose floats are ``repr`` (shortest round-trip).
    Gives text ending with a newline.
    """
    return _dump(data, 0) + "\n"


def _dump(value: Any, indent: int) -> str:
    pad = " " * indent
    inner = " " * (indent + 2)
    if isinstance(value, dict) and value:
        items = [f"{inner}{json.dumps(key)}: {_dump(item, indent + 2)}"
                 for key, item in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(value, list) and value and all(isinstance(item, list) for item in value):
        rows = [f"{inner}{_dump(item, indent + 2)}" for item in value]
        return "[\n" + ",\n".join(rows) + f"\n{pad}]"
    return json.dumps(value, separators=(", ", ": "), allow_nan=False)


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
    bits. Raises :class:`~qkvcli.reading.problems.FixtureError` for a bad spec.
    """
    arrays: dict[str, Array] = {}

    def convert(value: Any, name: str, location: str) -> Any:
        if isinstance(value, dict) and "generate" in value:
            relative = f"{npy_dir}/{name}.npy" if npy_dir else f"{name}.npy"
            arrays[relative] = generate_spec(value["generate"], f"{location}.generate", 1 << 62)
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
