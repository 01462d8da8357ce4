"""Gradient-check settings: the modes, their defaults, and the errors of unusable settings.

Every default of the check is here, once: the step, the tolerance, the mode, the samples
a sampled tensor gets, the directions of ``fast`` and their seed. A fixture without a
``gradcheck`` section gets them (:mod:`qkvcli.reading.settings`), as does a command line
that does not say.

Modes (see :mod:`qkvcli.gradcheck.projections`): ``full`` checks every coordinate, ``sampled``
evenly spaced ones, ``fast`` random directions, and ``auto`` picks ``full`` or
``sampled`` by size (:func:`resolve_mode`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from qkvcli.core.errors import QkvError, format_float_debug
from qkvcli.core.splitmix import DEFAULT_SEED

MODES: tuple[str, str, str, str] = ("auto", "full", "sampled", "fast")
DEFAULT_MODE = "auto"
DEFAULT_STEP = 1e-6
DEFAULT_TOLERANCE = 2e-6
AUTO_FULL_LIMIT = 4096
DEFAULT_SAMPLES = 6
DEFAULT_DIRECTIONS = 3
DEFAULT_DIRECTION_SEED = DEFAULT_SEED
MAX_EVALUATIONS = 1 << 20
"""Objective evaluations one gradient check may make (two per coordinate or direction);
``--max-evaluations`` raises it. Refused before the check starts."""


class GradcheckSettingError(QkvError):
    """A step, tolerance or sample count the check cannot use."""


class InvalidStep(GradcheckSettingError):
    def __init__(self, step: float) -> None:
        self.step = step
        super().__init__(
            f"central-difference step {format_float_debug(step)} must be positive and finite"
        )


class InvalidTolerance(GradcheckSettingError):
    def __init__(self, tolerance: float) -> None:
        self.tolerance = tolerance
        super().__init__(
            f"gradient-check tolerance {format_float_debug(tolerance)} "
            "must be finite and nonnegative"
        )


class ZeroSamples(GradcheckSettingError):
    def __init__(self) -> None:
        super().__init__("gradient check needs at least one sample per tensor")


class InvalidMode(GradcheckSettingError):
    def __init__(self, mode: str) -> None:
        self.mode = mode
        super().__init__(
            f"gradient-check mode {mode!r} is not one of {', '.join(MODES)}"
        )


class ZeroDirections(GradcheckSettingError):
    def __init__(self) -> None:
        super().__init__("fast gradient check needs at least one direction per tensor")


class TooManyEvaluations(GradcheckSettingError):
    """A check that would evaluate the objective more than ``limit`` times."""

    def __init__(self, evaluations: int, limit: int, cause: str, has_fast: bool = True,
                 weighted: bool = False, less: str | None = None) -> None:
        self.evaluations = evaluations
        self.limit = limit
        self.cause = cause
        self.has_fast = has_fast
        # less: how to check less, when --samples or --mode fast would not help
        less = less or ("--samples or --mode fast" if has_fast else "--samples")
        # weighted: attention counts evaluations by their cost (see qkvcli.attention.gradcheck)
        made = (f"cost {evaluations} evaluation units" if weighted
                else f"make {evaluations} evaluations")
        super().__init__(
            f"the gradient check would {made} ({cause}), more than "
            f"the limit {limit} (raise it with --max-evaluations, or check less with {less})"
        )


def planned_evaluations(
    mode: str, samples: int | None, directions: int, elements: list[int]
) -> tuple[int, str]:
    """Objective evaluations a check of tensors of ``elements`` makes, and what drives them."""
    total = 0
    causes = set()
    for count in elements:
        tensor_mode, tensor_samples = resolve_mode(mode, count, samples)
        if tensor_mode == "fast":
            total += 2 * directions
            causes.add(f"--directions {directions}")
        elif tensor_mode == "full":
            total += 2 * count
            causes.add(f"every coordinate of {len(elements)} tensors")
        else:
            total += 2 * min(count, tensor_samples or count)
            causes.add(f"--samples {tensor_samples}")
    return total, ", ".join(sorted(causes))


_BUDGET: ContextVar[int | None] = ContextVar("qkv_evaluation_budget", default=None)


@contextmanager
def evaluation_budget(limit: int | None) -> Iterator[None]:
    """Within the block, a check whose tensors its caller never sees (a chapter's, made
    inside the chapter's evidence) refuses to make more than ``limit`` evaluations
    (``None``: no limit beyond its own sampling): the command line's
    ``--max-evaluations`` reaching a check it cannot plan."""
    token = _BUDGET.set(limit)
    try:
        yield
    finally:
        _BUDGET.reset(token)


def evaluations_allowed() -> int | None:
    """The limit :func:`evaluation_budget` set, ``None`` outside one."""
    return _BUDGET.get()


def check_evaluations(
    mode: str, samples: int | None, directions: int, elements: list[int],
    limit: int = MAX_EVALUATIONS, has_fast: bool = True,
) -> None:
    """Raise :class:`TooManyEvaluations` for a check over ``limit`` evaluations.

    ``has_fast``: whether the command offers ``--mode fast`` (the hint names it only then).
    """
    total, cause = planned_evaluations(mode, samples, directions, elements)
    if total > limit:
        raise TooManyEvaluations(total, limit, cause, has_fast)


def validate_settings(
    step: float, tolerance: float, samples: int | None,
    mode: str = DEFAULT_MODE, directions: int = DEFAULT_DIRECTIONS,
) -> None:
    """Raise a :class:`GradcheckSettingError` for a step, tolerance or count that cannot work.

    Order: step, tolerance, samples, mode, directions.
    """
    check_step(step)
    check_tolerance(tolerance)
    if samples is not None and samples < 1:
        raise ZeroSamples()
    if mode not in MODES:
        raise InvalidMode(mode)
    if directions < 1:
        raise ZeroDirections()


def check_step(step: float) -> float:
    """``step`` if a central difference can use it (positive, finite, and ``2*step``
    finite); else raise :class:`InvalidStep`. The one rule, for the engine and the CLI."""
    if not (math.isfinite(step) and step > 0.0 and math.isfinite(2.0 * step)):
        raise InvalidStep(step)
    return step


def check_tolerance(tolerance: float) -> float:
    """``tolerance`` if finite and nonnegative; else raise :class:`InvalidTolerance`."""
    if not (math.isfinite(tolerance) and tolerance >= 0.0):
        raise InvalidTolerance(tolerance)
    return tolerance


def resolve_mode(mode: str, elements: int, samples: int | None) -> tuple[str, int | None]:
    """The mode a tensor of ``elements`` gets, and its sample count (``None``: all).

    ``auto``: ``sampled`` with ``samples`` when given, else ``full`` up to
    :data:`AUTO_FULL_LIMIT` elements and ``sampled`` with :data:`DEFAULT_SAMPLES` above.
    ``full`` ignores ``samples``; ``sampled`` defaults to :data:`DEFAULT_SAMPLES`.
    """
    if mode == "auto":
        if samples is not None:
            return "sampled", samples
        if elements <= AUTO_FULL_LIMIT:
            return "full", None
        return "sampled", DEFAULT_SAMPLES
    if mode == "sampled":
        return "sampled", DEFAULT_SAMPLES if samples is None else samples
    return mode, None
