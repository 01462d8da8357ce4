"""Why attention divides by sqrt(d_k): the variance of a dot product grows with d_k.

For independent standard normal ``q, k`` in ``R^d``, each product ``q_m k_m`` has
variance 1, so ``var(q.k) = d`` and ``var(q.k / sqrt(d)) = 1``. This module samples
that claim: seeded SplitMix64 unit draws become normals by Box-Muller, deterministic
bit for bit. The standard error of the estimated ratio ``var(q.k)/d`` is
``sqrt((2 + 6/d) / n)`` for ``n`` samples, since ``E[(q.k)^4] = 3d^2 + 6d``.
"""

from __future__ import annotations

import math

import numpy as np

from qkvcli.core.arrays import Array
from qkvcli.core.errors import QkvError
from qkvcli.core.record import Record
from qkvcli.core.splitmix import DEFAULT_SEED, SplitMix64

DEFAULT_MIN = 4
DEFAULT_MAX = 512
DEFAULT_SAMPLES = 4096


class WidthRange(QkvError):
    """No width to sample: ``minimum`` below 1 or above ``maximum``."""

    def __init__(self, minimum: int, maximum: int) -> None:
        self.minimum = minimum
        self.maximum = maximum
        super().__init__(f"need 1 <= min <= max, got min {minimum}, max {maximum}")


class TooFewSamples(QkvError):
    """A sample variance needs at least two samples."""

    def __init__(self, samples: int) -> None:
        self.samples = samples
        super().__init__(f"need at least 2 samples, got {samples}")


class VarianceRow(Record):
    """One width: the sampled variance of ``q.k``, its ratio to ``d_k``, the scaled variance
    (the same number, computed from the scaled products) and the ratio's standard error."""

    d_k: int
    variance: float
    ratio: float
    scaled_variance: float
    std_error: float

    @property
    def std(self) -> float:
        return math.sqrt(self.variance)

    @property
    def z(self) -> float:
        """How many standard errors the sampled ratio lies from the theory's 1.

        ``ratio`` and ``scaled_variance`` are equal by ``var(x/c) = var(x)/c^2`` (up to
        rounding), so showing both says nothing; this says whether the sample agrees with
        the claim: about 95% of rows lie within +-2.
        """
        return (self.ratio - 1.0) / self.std_error


class VarianceResult(Record):
    seed: int
    samples: int
    rows: tuple[VarianceRow, ...]


def widths(minimum: int = DEFAULT_MIN, maximum: int = DEFAULT_MAX) -> list[int]:
    """``minimum, 2*minimum, ...`` up to ``maximum``. Raises :class:`WidthRange` if empty or < 1."""
    if minimum < 1 or maximum < minimum:
        raise WidthRange(minimum, maximum)
    result = []
    width = minimum
    while width <= maximum:
        result.append(width)
        width *= 2
    return result


def standard_normals(rng: SplitMix64, count: int) -> Array:
    """``count`` standard normals by Box-Muller from pairs of unit draws (``u1``, ``u2``).

    ``1 - u1`` lies in ``(0, 1]``, so the logarithm is always finite.
    """
    pairs = (count + 1) // 2
    units = rng.next_unit_block(2 * pairs).reshape(pairs, 2)
    radius = np.sqrt(-2.0 * np.log1p(-units[:, 0]))  # log(1 - u1), exact near u1 = 0
    angle = 2.0 * math.pi * units[:, 1]
    both = np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=1)
    return both.reshape(-1)[:count]


def dot_variance(
    d_ks: list[int], samples: int = DEFAULT_SAMPLES, seed: int = DEFAULT_SEED
) -> VarianceResult:
    """Sample ``samples`` pairs ``q, k`` per width, in order from one SplitMix64(seed).

    Takes widths and a sample count (at least 2); gives a :class:`VarianceResult`.
    Raises :class:`TooFewSamples` for fewer than 2 samples.
    """
    if samples < 2:
        raise TooFewSamples(samples)
    rng = SplitMix64(seed)
    rows = []
    for d in d_ks:
        q = standard_normals(rng, samples * d).reshape(samples, d)
        k = standard_normals(rng, samples * d).reshape(samples, d)
        dots = np.einsum("nd,nd->n", q, k)  # one dot product per sample
        variance = float(np.var(dots, ddof=1))
        scaled = float(np.var(dots / math.sqrt(d), ddof=1))
        rows.append(VarianceRow(d, variance, variance / d, scaled,
                                math.sqrt((2.0 + 6.0 / d) / samples)))
    return VarianceResult(seed, samples, tuple(rows))
