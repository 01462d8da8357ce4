"""A rotary position embedding as a fixture describes it, below the reader and the engine.

:class:`Rope` (its base or table of frequencies, the coordinates it turns, their
pairing, a :class:`RopeScaling`), the checks that refuse one no head can use
(:func:`check_rope`, :class:`~qkvcli.core.errors.RopeError`), and each pair's inverse
frequency with a scaling's attention factor (:func:`inverse_frequencies`,
:func:`attention_factor`). The reader checks a fixture's ``rope`` with these, the engine
turns Q and K with them (:func:`qkvcli.attention.maths.rotate`).
"""

from __future__ import annotations

import math

import numpy as np

from qkvcli.core.arrays import Array
from qkvcli.core.errors import RopeError
from qkvcli.core.record import Record

ROPE_LAYOUTS = ("half", "interleaved")


SCALINGS = ("linear", "dynamic", "yarn", "longrope", "llama3")


class RopeScaling(Record):
    """A RoPE scaling (transformers' ``rope_type`` other than ``default``): it changes each
    pair's inverse frequency and multiplies ``cos`` and ``sin`` by ``attention_factor``.

    ``kind`` is one of :data:`SCALINGS`; ``original`` is the length the model was trained
    on (``original_max_position_embeddings``; ``dynamic``: ``max_position_embeddings``).
    Each kind reads only its own fields (:func:`inverse_frequencies`); ``dynamic`` and
    ``longrope`` depend on the length of the sequence at hand, as transformers recomputes
    them in its forward pass.
    """

    kind: str
    factor: float = 1.0
    attention_factor: float | None = None  # yarn, longrope: None is the type's default
    original: int = 0
    beta_fast: float = 32.0  # yarn
    beta_slow: float = 1.0  # yarn
    truncate: bool = True  # yarn: the ramp's ends rounded outwards
    low_freq_factor: float = 1.0  # llama3
    high_freq_factor: float = 4.0  # llama3
    short_factor: tuple[float, ...] = ()  # longrope: a sequence up to original long
    long_factor: tuple[float, ...] = ()  # longrope: a longer one
    mscale: float | None = None  # yarn: the default attention factor's weights
    mscale_all_dim: float | None = None


class Rope(Record):
    """Rotary position embedding of the first ``dims`` coordinates of each query and key head.

    Position ``offset + t`` (``t = 0 .. T-1``) turns pair ``i`` (``i < dims/2``) by the
    angle ``(offset + t) * theta^(-2i/dims)``, or ``(offset + t) * frequencies[i]`` when
    the frequencies are given as a table (``theta`` then ``None``: ESM's model loads its
    ``inv_freq`` from the checkpoint as stored). ``layout`` says which coordinates pair
    up: ``"half"`` pairs ``i`` with ``i + dims/2`` (LLaMA's and GPT-NeoX's
    ``rotate_half``), ``"interleaved"`` pairs ``2i`` with ``2i+1`` (GPT-J). Coordinates
    from ``dims`` on pass through (GPT-NeoX's partial rotary). A ``scaling`` changes the
    frequencies of a theta and multiplies the turned pairs by its attention factor
    (:class:`RopeScaling`).
    """

    theta: float | None  # None: the frequencies are the given table
    dims: int
    layout: str = "half"
    offset: int = 0
    angles: str = "float64"  # "float32": the angles and their tables in float32, as some write them
    scaling: RopeScaling | None = None
    frequencies: tuple[float, ...] | None = None  # each pair's, given (one per pair)

    def pairs(self) -> tuple[slice, slice]:
        """The two coordinate slices that rotate together, ``dims/2`` each."""
        half = self.dims // 2
        if self.layout == "half":
            return slice(0, half), slice(half, self.dims)
        return slice(0, self.dims, 2), slice(1, self.dims, 2)


def check_rope(rope: Rope, width: int) -> None:
    """Refuse a RoPE that cannot turn a head of ``width`` coordinates (:class:`RopeError`)."""
    if rope.layout not in ROPE_LAYOUTS:
        raise RopeError(f"rope layout must be \"half\" or \"interleaved\", got {rope.layout!r}")
    if (rope.theta is None) is (rope.frequencies is None):
        raise RopeError("rope needs a theta or a table of frequencies, and not both")
    if rope.theta is not None and not (math.isfinite(rope.theta) and rope.theta > 0.0):
        raise RopeError(f"rope theta must be finite and positive, got {rope.theta!r}")
    if rope.dims < 2 or rope.dims % 2 or rope.dims > width:
        raise RopeError(f"rope dims must be even, at least 2 and at most the head's key width "
                        f"{width}, got {rope.dims}")
    if rope.offset < 0:
        raise RopeError(f"rope offset must be at least 0, got {rope.offset}")
    if rope.frequencies is not None:
        check_frequencies(rope.frequencies, rope.dims)
        if rope.scaling is not None:
            raise RopeError("a rope scaling changes the frequencies of a theta, not a table of "
                            "frequencies")
        return
    if rope.scaling is not None:
        check_scaling(rope.scaling, rope.dims)
        if rope.angles != "float64":
            raise RopeError("a rope scaling is computed in float64 angles only")
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        if not np.all(np.isfinite(inverse_frequencies(rope))):
            raise RopeError(f"rope theta {rope.theta!r} makes the frequencies "
                            f"theta^(-2i/{rope.dims}) overflow")


def check_frequencies(frequencies: tuple[float, ...], dims: int) -> None:
    """Refuse a table of frequencies that is not one finite positive number per pair of
    ``dims`` coordinates (:class:`RopeError`)."""
    if len(frequencies) != dims // 2:
        raise RopeError(f"rope frequencies must give one per pair, {dims // 2} for dims "
                        f"{dims}, got {len(frequencies)}")
    for i, value in enumerate(frequencies):
        if not (math.isfinite(value) and value > 0.0):
            raise RopeError(f"rope frequencies must be finite and positive, got {value!r} "
                            f"at pair {i}")


def check_scaling(scaling: RopeScaling, dims: int) -> None:
    """Refuse a scaling whose frequencies are not defined (:class:`RopeError`)."""
    if scaling.kind not in SCALINGS:
        raise RopeError(f"rope scaling type must be one of {', '.join(SCALINGS)}, got "
                        f"{scaling.kind!r}")
    if scaling.kind in ("linear", "dynamic", "llama3") and scaling.attention_factor is not None:
        raise RopeError(f"rope scaling {scaling.kind} has no attention factor (transformers "
                        "multiplies its tables by 1)")
    if scaling.kind == "longrope" and scaling.factor > 1.0 and scaling.original == 1 and (
            scaling.attention_factor is None):
        raise RopeError("rope scaling longrope's default attention factor divides by ln 1: "
                        "an original length of 1 needs an attention_factor")
    numbers = (scaling.factor, attention_factor(scaling), scaling.beta_fast, scaling.beta_slow,
               scaling.low_freq_factor, scaling.high_freq_factor,
               *scaling.short_factor, *scaling.long_factor)
    if not all(math.isfinite(n) and n > 0 for n in numbers):
        raise RopeError("rope scaling numbers must be finite and positive")
    if scaling.kind != "linear" and scaling.original <= 0:
        raise RopeError(f"rope scaling {scaling.kind} needs the original length, at least 1")
    if scaling.kind == "dynamic" and dims == 2:  # its base's exponent dims/(dims-2)
        raise RopeError("rope scaling dynamic needs dims of at least 4")
    if scaling.kind == "llama3" and scaling.high_freq_factor == scaling.low_freq_factor:
        raise RopeError("rope scaling llama3 needs high_freq_factor and low_freq_factor apart")
    if scaling.kind == "longrope" and not (
            len(scaling.short_factor) == len(scaling.long_factor) == dims // 2):
        raise RopeError(f"rope scaling longrope needs short_factor and long_factor of "
                        f"{dims // 2} numbers each (one per pair)")


def yarn_attention_factor(factor: float, mscale: float | None = None,
                          mscale_all_dim: float | None = None) -> float:
    """YaRN's default attention factor: ``0.1 ln(factor) + 1`` (1 for a factor up to 1), or
    the ratio of two such terms weighted by ``mscale`` and ``mscale_all_dim`` when both
    are given (DeepSeek's spelling)."""
    def term(weight: float) -> float:
        return 1.0 if factor <= 1 else 0.1 * weight * math.log(factor) + 1.0

    if mscale and mscale_all_dim:
        return float(term(mscale) / term(mscale_all_dim))
    return term(1.0)


def longrope_attention_factor(factor: float, original: int) -> float:
    """LongRoPE's default attention factor: ``sqrt(1 + ln(factor) / ln(original))`` (1 for
    a factor up to 1)."""
    if factor <= 1.0:
        return 1.0
    return math.sqrt(1 + math.log(factor) / math.log(original))


def attention_factor(scaling: RopeScaling) -> float:
    """The factor a scaling multiplies ``cos`` and ``sin`` by: YaRN's and LongRoPE's given
    one or their default, 1 for the other types."""
    if scaling.attention_factor is not None:
        return scaling.attention_factor
    if scaling.kind == "yarn":
        return yarn_attention_factor(scaling.factor, scaling.mscale, scaling.mscale_all_dim)
    if scaling.kind == "longrope" and scaling.original > 1:
        return longrope_attention_factor(scaling.factor, scaling.original)
    return 1.0


def inverse_frequencies(rope: Rope, length: int | None = None) -> Array:
    """Each pair's inverse frequency, ``[dims/2]``: ``theta^(-2i/dims)``, changed by the
    rope's scaling as transformers' ``modeling_rope_utils`` computes it, for a sequence
    of ``length`` positions (``None``: no longer than the original length); a table of
    frequencies given as such is itself."""
    if rope.frequencies is not None:
        return np.array(rope.frequencies, dtype=np.float64)
    dims, theta = rope.dims, rope.theta
    assert theta is not None  # a rope has a theta or a table (check_rope)
    exponents = np.arange(0, dims, 2, dtype=np.float64) / dims
    scaling = rope.scaling
    if scaling is None:
        result: Array = 1.0 / (theta ** exponents)
        return result
    factor = scaling.factor
    if scaling.kind == "linear":  # positions divided by the factor
        result = 1.0 / (theta ** exponents) / factor
    elif scaling.kind == "dynamic":  # NTK: a larger base past the trained length
        seen = max(length or 0, scaling.original)
        base = theta * ((factor * seen / scaling.original) - (factor - 1)) ** (dims / (dims - 2))
        result = 1.0 / (base ** exponents)
    elif scaling.kind == "longrope":  # one factor per pair, the long ones past the original
        long = length is not None and length > scaling.original
        factors = np.asarray(scaling.long_factor if long else scaling.short_factor,
                             dtype=np.float64)
        result = 1.0 / (factors * theta ** exponents)
    elif scaling.kind == "llama3":
        result = _llama3(1.0 / (theta ** exponents), scaling)
    else:
        result = _yarn(theta, dims, scaling)
    return result


def _llama3(frequencies: Array, scaling: RopeScaling) -> Array:
    """LLaMA 3.1's: long wavelengths slowed by the factor, short ones kept, those between
    blended smoothly."""
    factor, low, high = scaling.factor, scaling.low_freq_factor, scaling.high_freq_factor
    wavelength = 2 * math.pi / frequencies
    slowed = np.where(wavelength > scaling.original / low, frequencies / factor, frequencies)
    smooth = (scaling.original / wavelength - low) / (high - low)
    blended = (1 - smooth) * slowed / factor + smooth * slowed
    middle = ~(wavelength < scaling.original / high) & ~(wavelength > scaling.original / low)
    result: Array = np.where(middle, blended, slowed)
    return result


def _yarn(theta: float, dims: int, scaling: RopeScaling) -> Array:
    """YaRN's: the pairs that turn fewer than ``beta_slow`` times over the original length
    interpolated (divided by the factor), those turning more than ``beta_fast`` times
    kept, a linear ramp between."""
    def pair_of(turns: float) -> float:  # the pair index that turns ``turns`` times
        return (dims * math.log(scaling.original / (turns * 2 * math.pi))) / (2 * math.log(theta))

    low, high = pair_of(scaling.beta_fast), pair_of(scaling.beta_slow)
    if scaling.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dims - 1)
    if low == high:
        high += 0.001  # as transformers: no zero-width ramp
    ramp = np.clip((np.arange(dims // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    kept = 1 - ramp
    powers = theta ** (np.arange(0, dims, 2, dtype=np.float64) / dims)
    result: Array = (1.0 / (scaling.factor * powers)) * (1 - kept) + (1.0 / powers) * kept
    return result
