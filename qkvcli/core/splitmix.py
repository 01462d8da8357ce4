"""SplitMix64 and Xavier-uniform initialization, bit for bit as the reference does them.

The generator's state is a plain integer in ``[0, 2**64)``. ``seed`` is the raw state
before the first increment and draw, so seed 0's first draw is ``0xe220a8397b1dcdaf``.
Blocks of draws are computed with vectorized ``uint64`` arithmetic (which wraps modulo
2**64 exactly like the reference's ``wrapping_*`` operations), so initializing a large
weight costs a few NumPy passes instead of a Python loop per value.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt  # annotations only: it costs ~1.5 ms of start-up

from qkvcli.core.errors import ZeroInputWidth, ZeroOutputWidth

MASK64 = (1 << 64) - 1
INCREMENT = 0x9E3779B97F4A7C15
MIX_ONE = 0xBF58476D1CE4E5B9
MIX_TWO = 0x94D049BB133111EB
UNIT_SCALE = 2.0**-53


def _mix(z: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    z = (z ^ (z >> np.uint64(30))) * np.uint64(MIX_ONE)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(MIX_TWO)
    mixed: npt.NDArray[np.uint64] = z ^ (z >> np.uint64(31))
    return mixed


class SplitMix64:
    """A small deterministic generator with an explicit, resumable 64-bit state.

    Suitable for reproducible teaching fixtures; not a cryptographic generator.
    """

    __slots__ = ("state",)

    def __init__(self, seed: int = 0) -> None:
        self.state = int(seed) & MASK64

    def copy(self) -> SplitMix64:
        """An independent generator at the same state."""
        return SplitMix64(self.state)

    def next_u64(self) -> int:
        """Advance and mix one 64-bit value."""
        self.state = (self.state + INCREMENT) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * MIX_ONE) & MASK64
        z = ((z ^ (z >> 27)) * MIX_TWO) & MASK64
        return z ^ (z >> 31)

    def next_unit_f64(self) -> float:
        """The high 53 bits of one draw mapped to ``[0, 1)``."""
        return (self.next_u64() >> 11) * UNIT_SCALE

    def next_u64_block(self, count: int) -> npt.NDArray[np.uint64]:
        """The next ``count`` draws as an array, advancing the state past them."""
        if count < 0:
            raise ValueError("count must be non-negative")
        steps = np.arange(1, count + 1, dtype=np.uint64)
        with np.errstate(over="ignore"):
            states = np.uint64(self.state) + steps * np.uint64(INCREMENT)
            out = _mix(states)
        self.state = (self.state + count * INCREMENT) & MASK64
        return out

    def next_unit_block(self, count: int) -> npt.NDArray[np.float64]:
        """The next ``count`` unit floats in ``[0, 1)``, as :meth:`next_unit_f64` gives them."""
        draws = self.next_u64_block(count)
        units: npt.NDArray[np.float64] = (draws >> np.uint64(11)).astype(np.float64) * UNIT_SCALE
        return units


def xavier_limit(fan_in: int, fan_out: int) -> float:
    """``sqrt(6 / (fan_in + fan_out))``: the Xavier-uniform bound."""
    return math.sqrt(6.0 / float(fan_in + fan_out))


def xavier_uniform(fan_in: int, fan_out: int, rng: SplitMix64) -> npt.NDArray[np.float64]:
    """A ``[fan_in, fan_out]`` Xavier-uniform matrix drawn row-major from ``rng``.

    Each value is ``limit * (2u - 1)``. Raises :class:`ZeroInputWidth` or
    :class:`ZeroOutputWidth` before drawing anything, so a rejected call leaves ``rng``
    untouched.
    """
    if fan_in <= 0:
        raise ZeroInputWidth()
    if fan_out <= 0:
        raise ZeroOutputWidth()
    limit = xavier_limit(fan_in, fan_out)
    units = rng.next_unit_block(fan_in * fan_out)
    centered = 2.0 * units - 1.0
    return (limit * centered).reshape(fan_in, fan_out)
