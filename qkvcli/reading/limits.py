"""How big things may get: the size limits of inputs and of what they make qkv derive.

Defaults and limits of the fixture format: the numbers every reader of fixtures shares.

Readers look ``MAX_FILE_BYTES`` up at call time (``limits.MAX_FILE_BYTES``), so a test
may lower it.

Shape checks that name a JSON location: the element limit, and an expected shape.

Run before anything is allocated, so a fixture cannot make qkv build a huge array.

Limits on what a valid fixture makes qkv derive: projections, scores, perturbed values.

Each tensor a fixture holds is checked against ``--max-elements`` as it is read
(:mod:`qkvcli.reading.limits`); the tensors qkv *computes* from them can still be far
larger (an input ``[1, 2**20, 1]`` and a weight ``[1, 2**20]`` are small, yet their
projection ``[1, 2**20, 2**20]`` is not). These checks run once the sizes are known and
before anything derived is allocated, naming the limit and ``--max-elements``, the
option that raises it. :func:`check_step_fits` refuses a central-difference step that
would overflow when added to the fixture's values (``1e308`` beside a weight of ``1e308``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from qkvcli.core.arrays import Array
from qkvcli.core.splitmix import DEFAULT_SEED as DEFAULT_SEED  # a fixture's default seed
from qkvcli.core.splitmix import MASK64
from qkvcli.reading.problems import FixtureError

MAX_SEED = MASK64  # a seed is SplitMix64's whole 64-bit state
DEFAULT_MAX_ELEMENTS = 1 << 27
MAX_FILE_BYTES = 256 * 1024 * 1024


def check_size(shape: list[int] | tuple[int, ...], location: str, max_elements: int) -> None:
    """Refuse a shape over ``max_elements``, counting the non-empty axes of an empty one too."""
    count = math.prod(shape)
    if count > max_elements:
        raise FixtureError(
            location,
            f"shape [{','.join(map(str, shape))}] has {count} elements, more than the limit "
            f"{max_elements} (raise it with --max-elements)",
        )
    # An empty axis makes the count 0, yet work over the other axes (and NumPy's own
    # limits) still scale with them: [10**11, 0, 3] would take hours, [0, 2**62, 3]
    # cannot even be shaped. So the non-empty axes must fit the limit too.
    spanned = math.prod(max(dim, 1) for dim in shape)
    if spanned > max_elements:
        raise FixtureError(
            location,
            f"shape [{','.join(map(str, shape))}] is empty, but its other axes span {spanned} "
            f"elements, more than the limit {max_elements} (raise it with --max-elements)",
        )


def expect_shape(grad: Array, expected: tuple[int, ...], axes: str | None, location: str) -> Array:
    """``grad`` if its shape is ``expected``; the message names the ``axes`` of the shape
    (``None``: it does not)."""
    if grad.shape != expected:
        named = f" ({axes})" if axes else ""
        raise FixtureError(
            location,
            f"expected shape [{','.join(map(str, expected))}]{named}, "
            f"got [{','.join(map(str, grad.shape))}]",
        )
    return grad


def check_derived(
    what: str, axes: str, shape: tuple[int, ...], location: str, max_elements: int
) -> None:
    """Refuse a computed tensor ``what`` of ``shape`` (``axes`` names them) over the limit."""
    count = math.prod(shape)
    if count > max_elements:
        raise FixtureError(
            location,
            f"the {what} {axes} would be [{','.join(map(str, shape))}], {count} elements, "
            f"more than the limit {max_elements} (raise it with --max-elements)",
        )


def check_projection_size(
    batch: int, tokens: int, d_head: int, location: str, max_elements: int
) -> None:
    """Refuse projections ``[B,T,d_head]`` over ``max_elements``."""
    check_derived("projections", "[B,T,d_head]", (batch, tokens, d_head), location, max_elements)


def check_scores_size(
    batch: int, heads: int | None, tokens: int, location: str, max_elements: int
) -> None:
    """Refuse attention scores ``[B,(H,)T,T]`` over ``max_elements`` (``heads`` ``None``: one)."""
    if heads is None:
        check_derived("attention scores", "[B,T,T]", (batch, tokens, tokens), location,
                      max_elements)
    else:
        check_derived("attention scores", "[B,H,T,T]", (batch, heads, tokens, tokens),
                      location, max_elements)


def largest_magnitude(arrays: Iterable[Array]) -> float:
    """The largest ``|value|`` over ``arrays`` (0 when all are empty), without temporaries."""
    largest = 0.0
    for array in arrays:
        if array.size:
            largest = max(largest, float(array.max()), -float(array.min()))
    return largest


def check_step_fits(step: float, arrays: Iterable[Array], location: str) -> None:
    """Refuse a step whose perturbations ``x ± step`` would overflow binary64.

    The check perturbs each value by up to ``step`` (a random direction has entries of at
    most 1), so ``max |x| + 2 step`` must be finite. Raises :class:`FixtureError`.
    """
    largest = largest_magnitude(arrays)
    if not math.isfinite(largest + 2.0 * step):
        raise FixtureError(
            location,
            f"step {step!r} overflows binary64 beside a value of magnitude {largest!r} "
            "(x + 2*step is not finite); use a smaller step",
        )
