"""The outcome of ``qkv check``: one check per evidence family, and every failure found."""

from __future__ import annotations

from dataclasses import dataclass

FAMILIES: tuple[str, ...] = (
    "forward", "reverse", "shapes", "errors", "independence", "replay", "purity",
    "gradcheck", "protocol",
)
NO_BACKWARD = "not applicable: no backward"


@dataclass(frozen=True)
class Failure:
    """Where a family failed: the fixture's label and the coordinate (``None`` when none applies)."""

    family: str
    fixture: str | None
    coordinate: str | None
    detail: str


@dataclass(frozen=True)
class FamilyCheck:
    """One family judged over all fixtures.

    ``applicable`` is false for a "not applicable" check; such a check either does not
    count (``passed`` true: purity with ``--command``, shown as N/A) or fails the check
    (``passed`` false: reverse and gradcheck without a backward).
    """

    name: str
    passed: bool
    detail: str
    applicable: bool = True


@dataclass(frozen=True)
class ConformanceResult:
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


def judge(name: str, failures: list[Failure], passed_detail: str) -> FamilyCheck:
    """The family's check: its first failure (and how many fixtures failed), or ``passed_detail``."""
    if not failures:
        return FamilyCheck(name, True, passed_detail)
    first = failures[0]
    where = f"{first.fixture}: " if first.fixture is not None else ""
    more = len({failure.fixture for failure in failures}) - 1
    tail = f" (and {more} more {'fixture' if more == 1 else 'fixtures'})" if more > 0 else ""
    return FamilyCheck(name, False, f"{where}{first.detail}{tail}")
