"""The gradient check's records and its progress callback.

Progress reporting of a gradient check: the callback's type and a counter across tensors.

What a gradient check gives: per coordinate, per tensor, and for the whole check.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol

from qkvcli.core.arrays import Array
from qkvcli.core.record import Record

Progress = Callable[[int, int], None]
"""``progress(done, total)``: called after each checked coordinate or direction."""
TensorObjective = Callable[[Array], float]
"""``L`` of a whole perturbed copy of one tensor."""
PointObjective = Callable[[int, float], float]
"""``L`` with one element (a flat index) of one tensor set to a value."""


class Objective(Protocol):
    """Slots of perturbed copies whose ``L`` is evaluated together: what the batched and
    directional checks take (:class:`~qkvcli.gradcheck.probes.StackedObjective` for the
    projections, the attention check's own for a head or layer)."""

    @property
    def slots(self) -> int: ...

    def put(self, k: int, flat_index: int, value: float) -> None: ...

    def slot(self, k: int) -> Array: ...

    def evaluate(self, count: int) -> Array: ...


class Ticker:
    """Counts finished checks across tensors and reports them to ``progress``."""

    def __init__(self, progress: Progress | None, total: int) -> None:
        self.progress = progress
        self.total = total
        self.done = 0

    def tick(self) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, self.total)


class CoordinateCheck(Record):
    """One checked coordinate (or, in fast mode, one direction) and its comparison.

    In fast mode ``direction`` is the direction's number, ``flat_index`` is -1 and
    ``coordinate`` is empty; ``analytic`` is the gradient's projection on it.
    """

    tensor: str
    flat_index: int
    coordinate: tuple[int, ...]
    analytic: float
    numerical: float
    scaled_error: float
    passed: bool
    note: str = ""
    direction: int | None = None


class TensorCheck(Record):
    """The checks of one tensor (input or one weight) and the mode that produced them."""

    tensor: str
    shape: tuple[int, ...]
    requested: int
    checks: tuple[CoordinateCheck, ...]
    mode: str = "full"
    recomputes: str = "full forward"
    """What each evaluation of the objective recomputed (see :mod:`qkvcli.gradcheck.probes`)."""

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)


class GradcheckResult(Record):
    """Every tensor's checks, with the settings that produced them."""

    step: float
    tolerance: float
    tensors: tuple[TensorCheck, ...]
    mode: str = "full"

    @property
    def passed(self) -> bool:
        return all(tensor.passed for tensor in self.tensors)

    @property
    def summary(self) -> str:
        """Which mode ran and what it checked, e.g. ``"full: 24 coordinates"``.

        Tensors resolved to different modes (``auto``) are listed per mode in tensor
        order, e.g. ``"sampled: 6 coordinates, full: 1536 coordinates"``.
        """
        counts: dict[str, int] = {}
        for tensor in self.tensors:
            counts[tensor.mode] = counts.get(tensor.mode, 0) + len(tensor.checks)
        if not counts:
            return f"{self.mode}: 0 coordinates"
        return ", ".join(
            f"{mode}: {count} {'directions' if mode == 'fast' else 'coordinates'}"
            for mode, count in counts.items()
        )

    @property
    def count(self) -> int:
        return sum(len(tensor.checks) for tensor in self.tensors)

    def checked(self, tensor: str) -> int:
        """How many coordinates (or directions) of ``tensor`` were checked."""
        return len(self.checks_of(tensor).checks)

    def checks_of(self, tensor: str) -> TensorCheck:
        for item in self.tensors:
            if item.tensor == tensor:
                return item
        raise KeyError(tensor)

    @property
    def worst(self) -> CoordinateCheck | None:
        """The coordinate with the largest scaled error (a failed one first)."""
        all_checks = [check for tensor in self.tensors for check in tensor.checks]
        if not all_checks:
            return None
        return max(
            all_checks,
            key=lambda c: (not c.passed, c.scaled_error if math.isfinite(c.scaled_error) else 0),
        )
