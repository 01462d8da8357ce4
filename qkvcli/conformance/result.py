"""The outcome of ``qkv check`` as data: one judgement per evidence family, and every failure.

A judgement is a code (``outcome``) and the facts its wording needs; the words are
:mod:`qkvcli.render.conformance`'s. A :class:`Failure` carries the family's own finding
(what was wrong and where, as the family diagnosed it).
"""

from __future__ import annotations

from qkvcli.core.record import Record

FAMILIES: tuple[str, ...] = (
    "forward", "reverse", "shapes", "errors", "independence", "replay", "purity",
    "gradcheck", "protocol",
)

OUTCOMES: tuple[str, ...] = ("passed", "failed", "no-backward", "command")
"""``passed`` and ``failed`` judge a family; ``no-backward`` (reverse and gradcheck of an
implementation without a backward: fails the check) and ``command`` (purity of a
``--command`` program: does not count) mark a family that does not apply."""


class Failure(Record):
    """Where a family failed: the fixture's label and the coordinate (``None`` when none applies).

    ``detail`` is the family's finding; ``no_backward`` marks the one failure that is not
    a finding but the want of a backward (its words are the renderer's).
    """

    family: str
    fixture: str | None
    coordinate: str | None
    detail: str = ""
    no_backward: bool = False


class FamilyCheck(Record):
    """One family judged over all fixtures: its ``outcome`` (:data:`OUTCOMES`) and facts.

    ``fixtures`` (how many were judged), ``tolerance``, ``backward`` (whether the
    implementation has one), ``calls`` and ``coordinates`` (counts), ``finding`` (the
    gradient check's worst coordinate, the protocol's own verdict) describe a passing
    family; ``first`` (the first failure) and ``more`` (how many other fixtures failed)
    a failing one.
    """

    name: str
    passed: bool
    outcome: str
    fixtures: int = 0
    tolerance: float = 0.0
    backward: bool = True
    calls: int = 0
    coordinates: int = 0
    finding: str = ""
    first: Failure | None = None
    more: int = 0

    @property
    def applicable(self) -> bool:
        """False for a family that does not apply (``no-backward``, ``command``)."""
        return self.outcome in ("passed", "failed")


class ConformanceResult(Record):
    """Every family's check in :data:`FAMILIES` order, the failures, and (``command``: a
    ``--command`` program was checked) the program's stderr."""

    implementation: str
    fixtures: tuple[str, ...]
    checks: tuple[FamilyCheck, ...]
    failures: tuple[Failure, ...]
    stderr: str = ""
    command: bool = False

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)


def judge(name: str, failures: list[Failure], fixtures: int, tolerance: float = 0.0,
          backward: bool = True, calls: int = 0, coordinates: int = 0,
          finding: str = "") -> FamilyCheck:
    """The family's check: failed at its first failure (and how many other fixtures
    failed), or passed with the facts given."""
    if not failures:
        return FamilyCheck(name, True, "passed", fixtures, tolerance, backward, calls,
                           coordinates, finding)
    more = len({failure.fixture for failure in failures}) - 1
    return FamilyCheck(name, False, "failed", fixtures, tolerance, backward, calls, coordinates,
                       finding, failures[0], max(more, 0))


def not_applicable(name: str, outcome: str) -> FamilyCheck:
    """A family that does not apply: ``no-backward`` fails the check, ``command`` does not count."""
    return FamilyCheck(name, outcome == "command", outcome)
