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
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from qkvcli.core.arrays import Array
from qkvcli.core.names import BRANCHES
from qkvcli.core.projections import QkvProjections
from qkvcli.core.splitmix import MASK64, SplitMix64
from qkvcli.reading.limits import DEFAULT_STEP, DEFAULT_TOLERANCE

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
