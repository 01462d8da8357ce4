"""A family's judgement and its failures, as plain records: the one pass/fail vocabulary.

Every command that judges evidence says what it found in these: ``qkv run`` and
``qkv attend`` give a :class:`FamilyCheck` per declared check of their engine's evidence,
``qkv check`` a :class:`FamilyCheck` per family run against an implementation, each
failing one with its first :class:`Failure` (a finding's ``code`` and ``facts``, worded
by the renderers, never here).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from qkvcli.core.errors import QkvError
from qkvcli.core.record import Record

OUTCOMES: tuple[str, ...] = ("passed", "failed", "no-backward", "command", "not-run")
"""``passed`` and ``failed`` judge a family; ``no-backward`` (reverse and gradcheck of an
implementation without a backward: fails the check) and ``command`` (purity of a
``--command`` program: does not count) mark a family that does not apply; ``not-run``
a family that could not run (a call it needed failed, or the implementation stopped):
neither a pass nor a failure, it is not counted (the failure that stopped it is)."""

class Clause(Record):
    """A piece of a finding as data: a ``code`` (the renderer's words for it) and the
    ``facts`` those words need (names, coordinates and shapes as shown, numbers as
    measured, and nested clauses)."""

    code: str
    facts: tuple[Any, ...] = ()


class Failure(Record):
    """Where a family failed: the fixture's label and the coordinate (``None`` when none applies).

    ``detail`` holds only the protocol family's finding (the conversation's own verdict,
    :mod:`~qkvcli.protocol.runner`'s); ``no_backward`` marks the one failure that is not
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


class Refusal(Record):
    """A bad input given to a check that must refuse it: the ``case``, the error expected
    (a class name; ``""``: any refusal), what was raised (``""``: nothing), its message,
    the expected error's ``fields`` (when an exact one was expected), and whether it was
    refused as it must be (``rejected``). The record of the engine's typed refusals, in
    chapter 26's evidence and each chapter's. ``qkv check``'s errors family asks for any
    refusal, not a typed one, and keeps only what was accepted: one ``accepted``
    :class:`Failure` listing those requests."""

    case: str
    expected: str
    raised: str
    message: str
    fields: tuple[tuple[str, Any], ...] = ()
    rejected: bool = False


def refused(case: str, expected: QkvError | type[QkvError],
            call: Callable[[], object]) -> Refusal:
    """Run ``call`` (a bad input given to a check) and record what it raised. ``expected``
    is the error it must raise: an instance (the same type, every field equal) or a class
    (that type, any fields)."""
    wanted = expected if isinstance(expected, type) else type(expected)
    fields = () if isinstance(expected, type) else tuple(
        (key, value) for key, value in vars(expected).items() if key != "file")
    try:
        call()
    except QkvError as error:
        exact = type(error) is wanted and (isinstance(expected, type) or error == expected)
        return Refusal(case, wanted.__name__, type(error).__name__, str(error), fields, exact)
    return Refusal(case, wanted.__name__, "", "", fields)


Shape = tuple[int, ...]


class ShapeProbe(Record):
    """One probe of a shapes family, the record of every kind, command and chapter: its
    ``case`` (``empty batch``, ``rank4``), the input's shape (and the position it starts
    at, where a rotation has one), and each result by name with its shape and the shape
    it must have. A probe that was refused has no results, and ``refusal`` says why
    (the refusal's kind); one whose call failed otherwise has none either."""

    case: str
    input: Shape
    results: tuple[tuple[str, Shape, Shape], ...]
    refusal: str = ""
    offset: int = 0

    def shape(self, name: str) -> Shape | None:
        """The shape of the result ``name`` (``None``: no such result, or none at all)."""
        return next((shape for found, shape, _ in self.results if found == name), None)

    def holds(self, *names: str) -> bool:
        """Whether the results ``names`` (all, without names) have the shapes they must."""
        chosen = [(shape, wanted) for name, shape, wanted in self.results
                  if not names or name in names]
        return bool(chosen) and all(shape == wanted for shape, wanted in chosen)

    @property
    def kept(self) -> bool:
        """Every result has the shape it must (a refused probe keeps none)."""
        return not self.refusal and self.holds()


E = TypeVar("E")
Plan = tuple[tuple[str, Callable[[E], "bool | FamilyCheck | None"]], ...]
"""A command's or chapter's families as data: each published id, in report order, with
what judges it on the evidence: a claim that holds or not, a family's own judgement
(the gradient check's, with its facts), or ``None`` where the family does not apply to
this evidence. Reading the evidence is all a plan does; the families computed it."""


def judge_plan(plan: Plan[E], evidence: E) -> tuple[FamilyCheck, ...]:
    """Every family of ``plan`` that applies to ``evidence``, judged in the plan's order."""
    found = []
    for name, family in plan:
        result = family(evidence)
        if result is None:
            continue
        found.append(result if isinstance(result, FamilyCheck) else verdict(name, result))
    return tuple(found)


def verdict(name: str, passed: bool) -> FamilyCheck:
    """The judgement of a check that either holds or does not (no facts beyond that)."""
    return FamilyCheck(name, bool(passed), "passed" if passed else "failed")


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
