"""What ``qkv init --generate`` and ``--npy`` write: fixture documents and ``.npy`` files.

:func:`generated_fixture_document` describes every tensor by a ``generate`` spec (a few
lines of JSON at any size); :func:`npy_fixture_document` turns those specs into ``.npy``
files, written by :func:`write_npy_atomic`. Reading them back is the fixtures layer's
job (:mod:`qkvcli.reading.sources`).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from qkvcli.authoring.starter import INPUT_TAG, UPSTREAM_TAG, stream
from qkvcli.core.arrays import Array
from qkvcli.core.names import BRANCHES
from qkvcli.core.splitmix import INCREMENT, MASK64, xavier_limit
from qkvcli.reading.sources import generate_spec


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
