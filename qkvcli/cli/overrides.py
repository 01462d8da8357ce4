"""Gradient-check settings given on the command line: what they override, what they leave
unused, and the limits they must respect before any work starts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from qkvcli.fixtures.fixture import Fixture


class CheckOverrides:
    """Gradient-check settings given on the command line (``None``: the fixture's own).

    ``max_evaluations`` is a limit, not a setting of the fixture: :meth:`check` refuses a
    check that would evaluate the objective more often.
    """

    __slots__ = ("directions", "max_evaluations", "mode", "samples", "step", "tolerance")
    SETTINGS = ("directions", "mode", "samples", "step", "tolerance")

    def __init__(self, step: float | None = None, tolerance: float | None = None,
                 samples: int | None = None, mode: str | None = None,
                 directions: int | None = None, max_evaluations: int | None = None) -> None:
        self.step = step
        self.tolerance = tolerance
        self.samples = samples
        self.mode = mode
        self.directions = directions
        self.max_evaluations = max_evaluations

    def changes(self) -> dict[str, Any]:
        """The settings that were given, by field name."""
        return {name: getattr(self, name) for name in self.SETTINGS
                if getattr(self, name) is not None}

    def ignored(self, mode: str) -> list[str]:
        """Warnings for options given here that the gradient check in ``mode`` does not use."""
        warnings = []
        if self.directions is not None and mode != "fast":
            warnings.append(f"--directions is used only by --mode fast; ignored with mode {mode}")
        if self.samples is not None and mode in ("full", "fast"):
            what = "every coordinate is checked" if mode == "full" else "it checks directions"
            warnings.append(f"--samples is ignored by --mode {mode} ({what})")
        return warnings

    def apply(self, fixture: Fixture) -> Fixture:
        """``fixture`` with these settings in place of its own, checked by :meth:`check`."""
        changes = self.changes()
        fixture = fixture._replace(**changes) if changes else fixture
        self.check(fixture.step, (fixture.input, *fixture.weights), fixture.mode,
                   fixture.samples, fixture.directions)
        return fixture

    def check(self, step: float, arrays: Sequence[Any], mode: str, samples: int | None,
              directions: int, has_fast: bool = True) -> None:
        """Refuse a ``--step`` that overflows beside ``arrays``, or too many evaluations.

        ``has_fast``: whether the command offers ``--mode fast`` (``attend`` does not).
        """
        from qkvcli.cli.budget import check_gradcheck_budget

        check_gradcheck_budget(self.step, self.max_evaluations, step, arrays, mode, samples,
                               directions, has_fast)
