"""How much of each tensor a report shows: every value, or a summary with an exact digest.

Policies (``--tensors``): ``full`` shows every value; ``summary`` (the default) shows
every value of a tensor of at most :data:`SUMMARY_THRESHOLD` elements and a
:class:`TensorSummary` of a larger one; ``none`` shows a summary's shape, count and
digest only, for every tensor. Under the threshold, the chapter fixture and every small
fixture show every value, as the reference's report does.

The digest is the SHA-256 of the tensor's values as little-endian float64, C order
(row-major): ``hashlib.sha256(np.ascontiguousarray(a, dtype="<f8").tobytes())``, so
two runs (or a run and a stored file) agree bit for bit exactly when their digests do.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from qkvcli.core.arrays import Array
from qkvcli.core.record import Record

POLICIES = ("full", "summary", "none")
SUMMARY_THRESHOLD = 4096
"""Largest tensor (in elements) that ``summary`` still shows in full (as the gradient check's
``auto`` mode checks every coordinate up to the same size)."""
HEAD = 4
"""Values shown from each end of a summarised tensor."""
DIGEST_BLOCK = 1 << 20
"""Elements hashed per block, so a strided view is never copied whole."""
PARALLEL_ELEMENTS = 1 << 20
"""Elements in all, below which :func:`summarise_many` does not start a second thread."""


class TensorSummary(Record):
    """Shape, count, first and last values, min/max/mean/L2 norm and the exact digest."""

    shape: tuple[int, ...]
    count: int
    head: tuple[float, ...]
    tail: tuple[float, ...]
    minimum: float
    maximum: float
    mean: float
    l2_norm: float
    sha256: str


def shows_values(size: int, policy: str) -> bool:
    """Whether ``policy`` prints every value of a tensor of ``size`` elements."""
    return policy == "full" or (policy == "summary" and size <= SUMMARY_THRESHOLD)


def digest(values: Array) -> str:
    """SHA-256 (hex) of ``values`` as little-endian float64 bytes in C order."""
    import hashlib  # only when a tensor is summarised: OpenSSL costs start-up time

    array = np.asarray(values, dtype="<f8")
    hasher = hashlib.sha256()
    for block in blocks(array):
        hasher.update(np.ascontiguousarray(block).data)
    return hasher.hexdigest()


def blocks(array: Array) -> list[Array]:
    """Row-major pieces of ``array`` of at most about :data:`DIGEST_BLOCK` elements."""
    if array.flags.c_contiguous or array.size <= DIGEST_BLOCK or array.ndim <= 1:
        flat = array.reshape(-1) if array.flags.c_contiguous else array
        if flat.ndim == 1:
            return [flat[i:i + DIGEST_BLOCK] for i in range(0, max(flat.size, 1), DIGEST_BLOCK)]
        return [flat]
    out: list[Array] = []
    for sub in array:
        out.extend(blocks(sub))
    return out


def l2_norm(values: Array) -> float:
    """The L2 norm of ``values`` in C order, summed by NumPy's own loop (never BLAS).

    ``np.linalg.norm`` calls BLAS ``ddot``, which OpenBLAS splits across threads above
    10,000 elements: its last bits then depend on the thread count, and once a process has
    run a matrix product each call waits for the sleeping worker threads (~8 ms a call on a
    busy 2-core machine, 14 calls per report). ``einsum`` sums on the calling thread in
    a fixed order, so the norm is the same under any ``OPENBLAS_NUM_THREADS``.
    """
    flat = np.asarray(values, dtype=np.float64).reshape(-1)  # one C-order pass: layout-free
    return math.sqrt(float(np.einsum("i,i->", flat, flat)))


def summarise(values: Array) -> TensorSummary:
    """The :class:`TensorSummary` of ``values`` (statistics are ``nan`` when it is empty)."""
    array = np.asarray(values, dtype=np.float64)
    count = int(array.size)
    head = [float(array[np.unravel_index(i, array.shape)]) for i in range(min(HEAD, count))]
    tail_start = max(count - HEAD, 0)
    tail = [float(array[np.unravel_index(i, array.shape)]) for i in range(tail_start, count)]
    if count:
        with np.errstate(over="ignore", invalid="ignore"):
            minimum, maximum = float(array.min()), float(array.max())
            mean = float(array.mean())
            norm = l2_norm(array)
    else:
        minimum = maximum = mean = norm = math.nan
    return TensorSummary(
        shape=tuple(int(d) for d in array.shape), count=count,
        head=tuple(head), tail=tuple(tail),
        minimum=minimum, maximum=maximum, mean=mean, l2_norm=norm, sha256=digest(array),
    )


def summarise_many(arrays: Sequence[Array]) -> list[TensorSummary]:
    """:func:`summarise` of each of ``arrays``, in order, two at a time when there is much to do.

    SHA-256 and NumPy's reductions release the GIL, so a second thread (largest arrays
    dealt alternately to each) nearly halves the wall time on a machine with a core to
    spare; each summary is computed exactly as :func:`summarise` computes it alone.
    Raises what :func:`summarise` raises.
    """
    if len(arrays) < 2 or sum(int(np.size(a)) for a in arrays) < PARALLEL_ELEMENTS:
        return [summarise(a) for a in arrays]
    import threading  # only for large tensors: nothing on the start-up path needs it

    found: dict[int, TensorSummary] = {}
    failed: list[BaseException] = []
    order = sorted(range(len(arrays)), key=lambda i: -int(np.size(arrays[i])))

    def run(indices: list[int]) -> None:
        try:
            for i in indices:
                found[i] = summarise(arrays[i])
        except BaseException as error:  # re-raised in the caller's thread below
            failed.append(error)

    worker = threading.Thread(target=run, args=(order[1::2],), daemon=True)
    worker.start()
    run(order[0::2])
    worker.join()
    if failed:
        raise failed[0]
    return [found[i] for i in range(len(arrays))]


class Summaries:
    """Summaries computed ahead by :func:`summarise_many`, found again by the very array.

    Call it like :func:`summarise`; an array it was not given is summarised on the spot.
    """

    def __init__(self, arrays: Iterable[Array]) -> None:
        listed = list(arrays)
        self.known = {id(a): (a, s) for a, s in zip(listed, summarise_many(listed), strict=True)}

    def __call__(self, values: Array) -> TensorSummary:
        hit = self.known.get(id(values))
        return hit[1] if hit is not None and hit[0] is values else summarise(values)
