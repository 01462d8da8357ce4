"""The ``forward`` and ``reverse`` families of every kind (``head-forward``,
``rope-reverse``: each mode): the implementation's results against qkv's engine.

A wrong result's finding is its first mismatch and why, diagnosed precision first
(results right but for their precision: ``forward-differs`` with the first cause,
``reverse-differs`` with each; a forward's by ``kind.precision``), then by the kind's
known slips (``kind.explain_forward``, ``kind.explain_backward``); a valid input the
implementation failed on is :func:`~qkvcli.check.result.call_failure`'s finding.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from qkvcli.check.cases import Run, fixtures_of
from qkvcli.check.kinds import Kind
from qkvcli.check.result import call_failure, not_applicable
from qkvcli.check.session import Session
from qkvcli.core.arrays import Array, all_finite, close, coordinate
from qkvcli.core.errors import format_shape
from qkvcli.core.results import Clause, Failure, FamilyCheck, found_at, judge
from qkvcli.protocol.errors import BadResult, CallFailed

UNEXPLAINED = ("slip-differs", "value-differs", "shape-differs", "relation-differs")
"""A head's wrong maths: named as a slip, or its first mismatch alone, or by relation."""

Settled = list[tuple[Run, str, Clause, tuple[tuple[Array, ...], tuple[Array, ...]]]]


def _relation_clauses(why: Clause) -> list[Clause]:
    """The ``relation-differs`` or ``relations`` clauses of a finding: itself, or those
    inside a ``forward-differs`` or ``reverse-differs``."""
    if why.code == "relation-differs":
        return [why]
    nested = [fact for fact in why.facts if isinstance(fact, Clause)]
    nested += [fact for facts in why.facts if isinstance(facts, tuple) for fact in facts
               if isinstance(fact, Clause)]
    return [fact for fact in nested if fact.code == "relations"]


def _said(why: Clause) -> tuple[Clause, ...]:
    """The relations a finding names: a ``relation-differs``'s, or those of the
    ``relations`` clauses inside a ``forward-differs`` or ``reverse-differs``."""
    return tuple(clause for fact in _relation_clauses(why) for clause in fact.facts[0])


def _held(why: Clause) -> tuple[Clause, ...]:
    """Every relation that holds beside those a finding names (each relation clause's
    third fact, where it has one)."""
    return tuple(clause for fact in _relation_clauses(why) if len(fact.facts) > 2
                 for clause in fact.facts[2])


def _keep(why: Clause, left: tuple[Clause, ...]) -> Clause:
    """``why`` naming only the relations of ``left``: a ``relation-differs`` left with none
    is its mismatch, a ``relations`` clause left with none what it would say otherwise."""
    if why.code == "relation-differs":
        return Clause("relation-differs", (left, why.facts[1])) if left else why.facts[1]

    def kept_in(fact: Any) -> Any:
        if isinstance(fact, Clause) and fact.code == "relations":
            held = (*fact.facts[0], *(fact.facts[2] if len(fact.facts) > 2 else ()))
            mine = tuple(clause for clause in left if clause in held)
            return Clause("relations", (mine, fact.facts[1])) if mine else fact.facts[1]
        if isinstance(fact, tuple):
            return tuple(found for found in map(kept_in, fact) if found is not None)
        return fact

    return Clause(why.code, tuple(kept_in(fact) for fact in why.facts))


def _agreed_relations(settled: Settled, names: tuple[str, ...], operation: str,
                      tolerance: float) -> Settled:
    """Each finding naming only the relations that hold on every run its tensor (or, for
    the engine with a part changed, its operation) is wrong on (:func:`_keep`): its own,
    or where the run's cheapest relation is not agreed on, another that holds there."""
    from qkvcli.check.relations import agreed as agreed_relations
    from qkvcli.check.relations import unexplained

    marked: list[tuple[Clause, ...]] = []
    held: list[tuple[Clause, ...]] = []
    for _, _, why, (got, expected) in settled:
        if why.code not in (*UNEXPLAINED, "forward-differs", "reverse-differs"):
            marked.append(())
            held.append(())
            continue
        said = _said(why)
        tensors = {clause.facts[0] for clause in said}
        wrong = [name for name, g, e in zip(names, got, expected, strict=True)
                 if not close(g, e, tolerance)]
        marks = tuple(unexplained(name) for name in (*wrong, operation) if name not in tensors)
        marked.append((*said, *marks))
        held.append(_held(why))
    kept_relations = agreed_relations(marked, held)
    return [(run, where, _keep(why, left) if _said(why) else why, pair)
            for (run, where, why, pair), left in zip(settled, kept_relations, strict=True)]


def _forward_wrong(session: Session, kind: Kind, run: Run) -> bool:
    """Whether the run's first forward answered, and wrongly (not only in precision)."""
    got = session.first(kind, run)
    if isinstance(got, CallFailed):
        return False
    expected = session.reference(kind, run)
    return kind.precision(kind.forward_names, got, expected, session.tolerance) is None and not all(
        close(g, e, session.tolerance) for g, e in zip(got, expected, strict=True))


def unfinished(answer: tuple[Array, ...] | CallFailed,
               reference: Callable[[], tuple[Array, ...]]) -> tuple[Array, ...] | None:
    """The results to judge of a first call: its answer, or the tensors a call returned
    holding NaN or infinity (:class:`~qkvcli.protocol.errors.BadResult`'s ``results``),
    where they are shaped as the engine's (``reference``) and hold a finite value to judge them by (a
    slip that gives NaN is then named as the same slip giving finite values is, its
    finding still saying it holds NaN); ``None`` for any other failed call."""
    if not isinstance(answer, CallFailed):
        return answer
    results = answer.results if isinstance(answer, BadResult) else None
    if results is None:
        return None
    expected = reference()
    if len(results) != len(expected) or any(
            got.shape != wanted.shape for got, wanted in zip(results, expected, strict=True)):
        return None
    if not any(np.isfinite(got).any() for got in results):
        return None  # nothing to tell one slip from another by
    return results


def finite_and_shaped(kind: Kind, x: Array, weights: tuple[Array, ...],
                      results: tuple[Array, ...], backward: bool = False) -> bool:
    """The forward's (or the backward's) own claim where no reference judges it (qkv's
    engine, judged as itself: chapter 26's run, attend's layer): every result finite (but
    the kind's ``unbounded`` ones, masked scores), and shaped by the kind's rule."""
    assert kind.shape_rule is not None
    rule = kind.shape_rule(x, weights)
    names = kind.backward_names if backward else kind.forward_names
    wanted = rule[len(kind.forward_names):] if backward else rule[:len(kind.forward_names)]
    return len(results) == len(wanted) and all(
        (name in kind.unbounded or all_finite(result)) and tuple(result.shape) == shape
        for name, result, shape in zip(names, results, wanted, strict=True))


def check_forward(session: Session, kind: Kind) -> tuple[FamilyCheck, list[Failure]]:
    """The forward's results within the tolerance of the engine's, each fixture in each mode."""
    return _check_values(session, kind, backward=False)


def check_reverse(session: Session, kind: Kind) -> tuple[FamilyCheck, list[Failure]]:
    """The four gradients within the tolerance of the engine's; names the wrong path or slip."""
    return _check_values(session, kind, backward=True)


def _check_values(session: Session, kind: Kind,
                  backward: bool) -> tuple[FamilyCheck, list[Failure]]:
    from qkvcli.check.diagnose import (  # the diagnosis only where a reference judges
        agreed,
        first_mismatch,
        kept,
        precision_clauses,
        precision_faults,
    )

    family = kind.family("reverse" if backward else "forward")
    if backward and not session.offers(kind.backward):
        return not_applicable(family, "no-backward"), [
            Failure(family, None, None, no_backward=True)]
    names = kind.backward_names if backward else kind.forward_names
    failures = []
    found_wrong: list[tuple[Run, str, Clause, tuple[int, tuple[Array, ...], tuple[Array, ...],
                                                    Clause]]] = []
    runs = session.runs(kind)
    order = [run.label for run in runs]
    for run in runs:
        answer = session.first(kind, run, backward)
        got = unfinished(answer, lambda: session.reference(kind, run, backward))  # noqa: B023
        if got is None:
            assert isinstance(answer, CallFailed)
            failures.append(call_failure(family, run.label,
                                         format_shape(list(run.case.input.shape)), answer))
            continue
        expected = session.reference(kind, run, backward)
        found = next(((index, *first) for index, (name, actual, wanted)
                      in enumerate(zip(names, got, expected, strict=True))
                      if (first := first_mismatch(name, actual, wanted, session.tolerance))
                      is not None), None)
        if found is None:
            continue
        index, where, mismatch = found
        if isinstance(answer, CallFailed):  # NaN where the engine has none: said as it is
            mismatch = Clause("call-failed", (answer.message,))
            where = next(f"{name}{coordinate(actual.shape, int(np.argmin(np.isfinite(actual))))}"
                         for name, actual in zip(names, got, strict=True)
                         if not all_finite(actual))
        faults = None if isinstance(answer, CallFailed) else (
            precision_faults if backward else kind.precision)(
            names, got, expected, session.tolerance)
        if faults is not None:
            whys = precision_clauses(faults, session.tolerance)
            why = (Clause("reverse-differs", (tuple(whys), mismatch)) if backward
                   else Clause("forward-differs", (mismatch, whys[0])))
        else:
            explain = kind.explain_backward if backward else kind.explain_forward
            why = explain(run, got, expected, index, mismatch, session.tolerance)
        found_wrong.append((run, where, why, (index, got, expected, mismatch)))
    # A slip is named only where it fits every fixture the maths is wrong on.
    agree = agreed([why.facts[0] if why.code == "slip-differs" else ()
                    for _, _, why, _ in found_wrong if why.code in UNEXPLAINED])
    relate = kind.relate_backward if backward else kind.relate_forward
    settled = []
    for run, where, why, (index, got, expected, mismatch) in found_wrong:
        why = kept(why, agree)
        if why.code in UNEXPLAINED[1:] and relate is not None:
            why = relate(run, got, expected, index, mismatch, session.tolerance)
        settled.append((run, where, why, (got, expected)))
    settled = _agreed_relations(settled, names, kind.backward if backward else kind.forward,
                                session.tolerance)
    for run, where, why, _ in settled:
        if backward and why.code in UNEXPLAINED[1:] and _forward_wrong(session, kind, run):
            # Its gradients are of another function: head-gradcheck judges them against it.
            why = Clause("forward-wrong-too", (why, kind.forward, kind.family("forward"),
                                               kind.family("gradcheck")))
        failures.append(found_at(family, run.label, where, why))
    failures.sort(key=lambda failure: order.index(failure.fixture) if failure.fixture in order
                  else len(order))
    return judge(family, failures, len(session.cases_of(kind)), session.tolerance,
                 fixture_of=fixtures_of(runs)), failures
