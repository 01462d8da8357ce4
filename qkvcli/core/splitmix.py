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

DEFAULT_SEED = 26
"""The chapter's number: the seed of every seeded default (a fixture's initialization, the
gradient check's random directions, the variance demonstration)."""
MASK64 = (1 << 64) - 1
INCREMENT = 0x9E3779B97F4A7C15
MIX_ONE = 0xBF58476D1CE4E5B9
MIX_TWO = 0x94D049BB133111EB
UNIT_SCALE = 2.0**-53


def _mix(z: npt.NDArray[np.uint64], scratch: npt.NDArray[np.uint64]) -> None:
    """The SplitMix64 finalizer, in place on ``z``; ``scratch`` is a buffer of its size.

    Two buffers, whatever the block: written out as expressions, each step made a
    temporary of the block's size (five of them alive at the peak).
    """
    np.right_shift(z, np.uint64(30), out=scratch)
    z ^= scratch
    z *= np.uint64(MIX_ONE)
    np.right_shift(z, np.uint64(27), out=scratch)
    z ^= scratch
    z *= np.uint64(MIX_TWO)
    np.right_shift(z, np.uint64(31), out=scratch)
    z ^= scratch


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
        """The next ``count`` draws as an array, advancing the state past them.

        Needs one more ``uint64`` buffer of ``count`` while it runs, and nothing else.
        """
        if count < 0:
            raise ValueError("count must be non-negative")
        z = np.arange(1, count + 1, dtype=np.uint64)  # draw k mixes state + k * increment
        with np.errstate(over="ignore"):
            z *= np.uint64(INCREMENT)
            z += np.uint64(self.state)
            _mix(z, np.empty_like(z))
        self.state = (self.state + count * INCREMENT) & MASK64
        return z

    def next_unit_block(
        self, count: int, out: npt.NDArray[np.float64] | None = None
    ) -> npt.NDArray[np.float64]:
        """The next ``count`` unit floats in ``[0, 1)``, as :meth:`next_unit_f64` gives them.

        ``out``, when given, is a float64 array of ``count`` elements written in place
        and returned; the draws need two ``uint64`` buffers of ``count`` besides.
        """
        draws = self.next_u64_block(count)
        if out is None:
            out = np.empty(count, dtype=np.float64)
        draws >>= np.uint64(11)
        # The high 53 bits convert to float64 exactly; times 2**-53, exactly as one draw.
        np.multiply(draws, UNIT_SCALE, out=out)
        return out


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
