"""The outcome of ``qkv check`` as data: one judgement per evidence family, and every failure.

A judgement is a code (``outcome``) and the facts its wording needs; the words are
:mod:`qkvcli.render.conformance`'s. A :class:`Failure` carries the family's own finding
(what was wrong and where, as the family diagnosed it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from qkvcli.conformance.errors import Broken, CallFailed, Rejected
from qkvcli.core.record import Record

PROJECTION_FAMILIES: tuple[str, ...] = (
    "forward", "reverse", "shapes", "errors", "independence", "replay", "purity", "gradcheck",
)
HEAD_FAMILIES: tuple[str, ...] = (
    "head-forward", "scaling", "softmax", "mask", "head-reverse", "head-shapes", "head-errors",
    "head-replay", "head-purity", "head-gradcheck",
)
FAMILIES: tuple[str, ...] = (*PROJECTION_FAMILIES, *HEAD_FAMILIES, "protocol")
"""Every family in report order: the projections' (an implementation with ``forward``),
the head's (with ``head_forward``), then the protocol."""

OUTCOMES: tuple[str, ...] = ("passed", "failed", "no-backward", "command", "not-run")
"""``passed`` and ``failed`` judge a family; ``no-backward`` (reverse and gradcheck of an
implementation without a backward: fails the check) and ``command`` (purity of a
``--command`` program: does not count) mark a family that does not apply; ``not-run``
a family that could not run (a call it needed failed, or the implementation stopped):
neither a pass nor a failure, it is not counted (the failure that stopped it is)."""

NOT_RUN: tuple[str, ...] = (
    "stopped", "forward", "backward", "head_forward", "head_backward", "lossy", "head-lossy",
    "head-precision", "head",
)
"""Why a family could not run on a fixture: the implementation stopped answering (the
protocol family says why), the operation named failed on the fixture (``forward``,
``backward``, ``head_forward``, ``head_backward``: the family judging that operation
says how), its forward or head_forward is too imprecise for central differences
(``lossy``, ``head-lossy``), its head's results are right but for their precision
(``head-precision``: at the tolerance they cannot show the family's claim), or its head
is wrong before the family's step (``head``; head-forward says how of these three)."""


class Clause(Record):
    """A piece of a finding as data: a ``code`` (the renderer's words for it) and the
    ``facts`` those words need (names, coordinates and shapes as shown, numbers as
    measured, and nested clauses)."""

    code: str
    facts: tuple[Any, ...] = ()


FINDINGS: dict[str, int] = {
    "changed-argument": 4,  # operation, argument and coordinate, before, after
    "moved": 4,  # what was changed, tensor and coordinate, before, after
    "reshaped": 2,  # what was changed, tensor
    "unmoved": 2,  # what was changed, tensor
    "replay-differs": 4,  # operation, tensor and coordinate, first, second
    "replay-failed": 2,  # operation, what it said
    "probe-failed": 4,  # operation, probe (empty batch, no tokens), input shape, what it said
    "probe-shape": 5,  # probe, input shape, tensor, its shape, the shape expected
    "accepted": 0,  # any number: each request silently accepted, (request code, its facts)
}
"""The finding codes and how many facts each carries."""


class Failure(Record):
    """Where a family failed: the fixture's label and the coordinate (``None`` when none applies).

    ``detail`` holds only the protocol family's finding (the conversation's own verdict,
    :mod:`~qkvcli.conformance.target`'s); ``no_backward`` marks the one failure that is not
    a finding but the want of a backward (its words are the renderer's); ``not_run``
    (one of :data:`NOT_RUN`) marks no finding either, but why the family could not run
    on the fixture. Every other family's finding is a ``code`` (one of :data:`FINDINGS`
    or a :class:`Clause` code) and its ``facts`` (names, coordinates and shapes as
    shown, numbers as measured, nested clauses), worded by the renderer.
    """

    family: str
    fixture: str | None
    coordinate: str | None
    detail: str = ""
    no_backward: bool = False
    not_run: str = ""
    code: str = ""
    facts: tuple[Any, ...] = ()


class FamilyCheck(Record):
    """One family judged over all fixtures: its ``outcome`` (:data:`OUTCOMES`) and facts.

    ``fixtures`` (how many were judged), ``tolerance``, ``backward`` (whether the
    implementation has one), ``calls`` and ``coordinates`` (counts), ``finding`` (the
    protocol's own verdict), ``worst`` (the gradient check's worst coordinate) describe a passing
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
    worst: Clause | None = None

    @property
    def applicable(self) -> bool:
        """False for a family that does not apply (``no-backward``, ``command``) or did not run."""
        return self.outcome in ("passed", "failed")


class ConformanceResult(Record):
    """Every family's check in :data:`FAMILIES` order, the failures, (``command``: a
    ``--command`` program was checked) the program's stderr, and the operations the
    implementation offered."""

    implementation: str
    fixtures: tuple[str, ...]
    checks: tuple[FamilyCheck, ...]
    failures: tuple[Failure, ...]
    stderr: str = ""
    command: bool = False
    operations: tuple[str, ...] = ()

    def failing_fixtures(self) -> tuple[str, ...]:
        """The labels of the fixtures with a finding, in order (a head's ``chapter causal``
        and the softmax probe's ``chapter x30`` are the fixture ``chapter``)."""
        found = {failure.fixture for failure in self.failures if failure.fixture is not None}
        return tuple(label for label in self.fixtures
                     if any(f == label or f.startswith(label + " ") for f in found))

    @property
    def passed(self) -> bool:
        """No family failed (one not run is no pass either, but a failure stopped it)."""
        return all(check.passed or check.outcome == "not-run" for check in self.checks)


def judge(name: str, failures: list[Failure], fixtures: int, tolerance: float = 0.0,
          backward: bool = True, calls: int = 0, coordinates: int = 0,
          finding: str = "", worst: Clause | None = None,
          fixture_of: Mapping[str, str] | None = None) -> FamilyCheck:
    """The family's check: failed at its first finding (and how many other fixtures
    failed), not run when it could not run on some fixture, or passed with the facts given.

    ``fixture_of`` maps a failure's label to its fixture's where one fixture is run more
    than once (a head's ``chapter causal`` and ``chapter non-causal`` are ``chapter``):
    the other fixtures are counted, not the other runs."""
    def count_others(found: list[Failure]) -> int:
        labels = {failure.fixture for failure in found}
        if fixture_of is not None:
            labels = {fixture_of.get(label, label) if label is not None else None
                      for label in labels}
        return max(len(labels) - 1, 0)

    findings = [failure for failure in failures if not failure.not_run]
    if not failures:
        return FamilyCheck(name, True, "passed", fixtures, tolerance, backward, calls,
                           coordinates, finding, worst=worst)
    if not findings:
        return FamilyCheck(name, False, "not-run", fixtures, tolerance, backward, calls,
                           coordinates, finding, failures[0], count_others(failures), worst)
    more = count_others(findings)
    return FamilyCheck(name, False, "failed", fixtures, tolerance, backward, calls, coordinates,
                       finding, findings[0], more, worst)


def found_at(family: str, fixture: str | None, coordinate: str | None,
             finding: Clause) -> Failure:
    """A failure of ``family`` on ``fixture`` at ``coordinate``, whose finding is ``finding``."""
    return Failure(family, fixture, coordinate, code=finding.code, facts=finding.facts)


def not_run(family: str, fixture: str | None, why: str, stopped: bool = False) -> Failure:
    """The family could not run on ``fixture``: ``why`` is one of :data:`NOT_RUN`;
    ``stopped`` (the implementation stopped) wins. Raises ``ValueError`` for another
    ``why`` (a reason the renderer has no words for)."""
    if why not in NOT_RUN:
        raise ValueError(f"not_run reason {why!r} is not one of {NOT_RUN}")
    return Failure(family, fixture, None, not_run="stopped" if stopped else why)


def call_failure(family: str, fixture: str | None, shape: str, failure: CallFailed) -> Failure:
    """A call that failed on a valid input (of ``shape``, as shown), as a finding of
    ``family``, the same for every operation: ``rejected-valid`` (operation, shape, what
    it said) when it raised or answered with an error, ``call-failed`` (what was wrong)
    when it returned something that is not its tensors; not run when the implementation
    stopped (the protocol family says why)."""
    if isinstance(failure, Broken):
        return not_run(family, fixture, "stopped")
    if isinstance(failure, Rejected):
        return found_at(family, fixture, None, Clause(
            "rejected-valid", (failure.operation, shape, failure.message)))
    return found_at(family, fixture, None, Clause("call-failed", (failure.message,)))


def not_run_after(family: str, fixture: str | None, failure: CallFailed) -> Failure:
    """``family`` could not run on ``fixture`` because a call it builds on failed: the
    failed operation is the reason (its own family says how), or the implementation
    stopped."""
    return not_run(family, fixture, failure.operation, stopped=isinstance(failure, Broken))


def not_applicable(name: str, outcome: str) -> FamilyCheck:
    """A family that does not apply: ``no-backward`` fails the check, ``command`` does not count."""
    return FamilyCheck(name, outcome == "command", outcome)
