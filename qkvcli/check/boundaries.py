"""The ``shapes`` and ``errors`` families of every kind (``head-shapes``, ``rope-errors``)
and ``single-token`` of every kind with an attention matrix: empty axes kept, bad
requests rejected, one token weighed exactly 1; each fixture once (in the kind's last
mode). A chapter's bad inputs, which the engine must refuse with its typed errors, are
data judged here too (:func:`typed_refusals`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial

import numpy as np

from qkvcli.check.cases import Run
from qkvcli.check.engine import Bundle
from qkvcli.check.kinds import Kind, Probe, Request, Shape
from qkvcli.check.result import not_run, not_run_after
from qkvcli.check.session import Session
from qkvcli.core.arrays import coordinate
from qkvcli.core.errors import QkvError, format_shape
from qkvcli.core.invariants import single_token
from qkvcli.core.results import Failure, FamilyCheck, Refusal, ShapeProbe, judge, refused
from qkvcli.protocol.errors import BadResult, Broken, CallFailed


def measure(session: Session, kind: Kind, run: Run, probe: Probe, backward: bool,
            seen: list[Bundle] | None = None) -> ShapeProbe | Failure:
    """The probe's results, each with its shape and the shape it must have (from the
    run's position), or the failure of its call (not run when the implementation
    stopped). ``seen``, when given, gets each call's results (a plan that reads more of
    them than their shapes)."""
    family, case = kind.family("shapes"), run.case
    wanted = expected_shapes(session, kind, run, probe, backward)
    calls = (None, probe.upstream) if backward else (None,)
    shapes: list[Shape] = []
    try:
        for upstream in calls:  # each call's results dropped before the next, unless seen
            results = session.call(kind, run, (probe.x, *case.weights), upstream)
            shapes += [tuple(int(size) for size in result.shape) for result in results]
            if seen is not None:
                seen.append(results)
    except Broken:
        return not_run(family, case.label, "stopped")
    except CallFailed as failure:
        return Failure(family, case.label, probe.where, code="probe-failed",
                       facts=(failure.operation, probe.what,
                              format_shape(list(probe.x.shape)), failure.message))
    names = (*kind.forward_names, *kind.backward_names)
    return ShapeProbe(probe.what, tuple(int(size) for size in probe.x.shape), tuple(
        (name, shape, expected) for name, shape, expected in zip(names, shapes, wanted,
                                                                 strict=False)),
        offset=case.offset)


def probed(session: Session, kind: Kind, run: Run, probe: Probe, backward: bool,
           seen: list[Bundle] | None = None) -> ShapeProbe:
    """:func:`measure`'s probe as the one record of a report: a probe whose call failed
    has no results, its ``refusal`` the failure's code (``probe-failed``, or ``stopped``)."""
    shaped = measure(session, kind, run, probe, backward, seen)
    return shaped if isinstance(shaped, ShapeProbe) else ShapeProbe(
        probe.what, tuple(int(size) for size in probe.x.shape), (),
        refusal=shaped.code or shaped.not_run, offset=run.case.offset)


def expected_shapes(session: Session, kind: Kind, run: Run, probe: Probe,
                    backward: bool) -> tuple[Shape, ...]:
    """The shapes the probe's results must have: the kind's rule, else the engine's."""
    weights = tuple(run.case.weights)
    if kind.shape_rule is not None:
        rule = kind.shape_rule(probe.x, weights)
        return rule if backward else rule[:len(kind.forward_names)]
    calls = (None, probe.upstream) if backward else (None,)
    return tuple(tuple(int(size) for size in result.shape) for upstream in calls
                 for result in session.engine(kind, run, (probe.x, *weights), upstream))


def misshapen(kind: Kind, shaped: ShapeProbe, probe: Probe, label: str) -> Failure | None:
    """The first result of the probe whose shape is not the one it must have."""
    for name, shape, wanted in shaped.results:
        if shape != wanted:
            return Failure(kind.family("shapes"), label, probe.where, code="probe-shape",
                           facts=(probe.what, format_shape(list(probe.x.shape)), name,
                                  format_shape(list(shape)), format_shape(list(wanted))))
    return None


def _probe(session: Session, kind: Kind, run: Run, probe: Probe,
           backward: bool) -> Failure | None:
    """The probe's failed call, or its first result whose shape is not the one wanted
    (forward, then backward); ``None`` when every shape is right."""
    shaped = measure(session, kind, run, probe, backward)
    if isinstance(shaped, Failure):
        return shaped
    return misshapen(kind, shaped, probe, run.case.label)


def check_shapes(session: Session, kind: Kind) -> tuple[FamilyCheck, list[Failure]]:
    """Forward (and backward) keep every axis on the kind's probes (an empty batch, no
    tokens; a head's one token too): the first failing probe of each fixture."""
    failures = []
    backward = session.offers(kind.backward)
    for case in session.cases_of(kind):
        for probe in kind.probes(case):
            found = _probe(session, kind, kind.run(case), probe, backward)
            if found is not None:
                failures.append(found)
                break
    return judge(kind.family("shapes"), failures, len(session.cases_of(kind)),
                 backward=backward), failures


def check_single_token(session: Session, kind: Kind) -> tuple[FamilyCheck, list[Failure]]:
    """One token (each fixture's first, in the kind's last mode): every attention weight
    exactly 1 and, from the backward (``grad_output`` ones), what only the scores reach
    (``W_Q`` and ``W_K``; given operands' ``Q`` and ``K``) no gradient at all
    (:func:`~qkvcli.core.invariants.single_token`)."""
    family = kind.family("single-token")
    assert kind.attention is not None
    failures: list[Failure] = []
    backward = session.offers(kind.backward)
    cases = [case for case in session.cases_of(kind) if case.input.shape[0]
             and case.input.shape[1]]
    for case in cases:
        run = kind.run(case)
        tensors = (case.input[:, :1], *case.weights)
        try:
            got = session.call(kind, run, tensors)
            named = [(kind.forward_names[kind.attention], got[kind.attention], 1.0)]
            if backward:
                grads = session.call(kind, run, tensors, (np.ones(got[kind.loss[0]].shape),))
                named += [(kind.backward_names[i], grads[i], 0.0) for i in kind.score_gradients]
        except Broken as failure:
            failures.append(not_run_after(family, case.label, failure))
            break
        except CallFailed as failure:
            failures.append(not_run_after(family, case.label, failure))
            continue
        if any(values.size == 0 for _, values, _ in named):
            # a token's weights and gradients are never empty: the forward says how
            failures.append(not_run(family, case.label, kind.family("shape")))
            continue
        if single_token(*(values for _, values, _ in named)):
            continue
        for name, values, wanted in named:
            off = np.flatnonzero(values.reshape(-1) != wanted)
            if off.size:
                where = coordinate(values.shape, int(off[0]))
                failures.append(Failure(family, case.label, f"{name}{where}", code="one-token",
                                        facts=(f"{name}{where}", repr(float(
                                            values.reshape(-1)[off[0]])), repr(wanted))))
                break
    return judge(family, failures, len(cases), backward=backward), failures


def check_errors(session: Session, kind: Kind) -> tuple[FamilyCheck, list[Failure]]:
    """Every bad forward (and backward) request raises (or is answered with an error);
    lists what was silently accepted. Not run when the forward failed on every valid
    fixture (an implementation that rejects everything rejects these too)."""
    family = kind.family("errors")
    failures = []
    backward = session.offers(kind.backward)
    # An implementation that failed every valid input rejects anything: nothing to judge.
    firsts = [session.first(kind, run) for run in session.runs(kind)]
    if firsts and all(isinstance(first, CallFailed) for first in firsts):
        failed = next(first for first in firsts if isinstance(first, CallFailed))
        skipped = [not_run_after(family, None, failed)]
        return judge(family, skipped, len(session.cases_of(kind)), backward=backward), skipped
    # Requests that do not depend on the fixture are made once, under the kind's label.
    cases = session.cases_of(kind)[:1] if kind.requests_label else session.cases_of(kind)
    for case in cases:
        label = kind.requests_label or case.label
        failures += refusals(family, label, (
            (request, partial(session.invoke, kind.family("purity"), label, operation, args))
            for request, operation, args in kind.requests(case, backward)))
    sent = len(kind.requests(cases[0], backward)) if cases else 0
    return judge(family, failures, len(cases), backward=backward, calls=sent), failures


Answer = tuple[Request, CallFailed | None]
"""A bad request and what refused it (``None``: it was accepted, or garbage returned)."""


def answers(requests: Iterable[tuple[Request, Callable[[], object]]]
            ) -> tuple[list[Answer], bool]:
    """Make each bad request in turn: each with what refused it, and whether the session
    broke (the requests after it are not made)."""
    found: list[Answer] = []
    for request, call in requests:
        try:
            call()
        except BadResult:
            pass  # returned garbage instead of raising: still accepted
        except Broken:
            return found, True
        except CallFailed as failure:
            found.append((request, failure))
            continue
        found.append((request, None))
    return found, False


def refusals(family: str, label: str,
             requests: Iterable[tuple[Request, Callable[[], object]]]) -> list[Failure]:
    """Make each bad request in turn; the findings: one ``accepted`` failure listing every
    request that was not refused (garbage returned counts as accepted), or ``stopped``
    when the session broke (the requests after it are not made)."""
    found, stopped = answers(requests)
    failures = [not_run(family, label, "stopped")] if stopped else []
    accepted = [request for request, refusal in found if refusal is None]
    if accepted:
        failures.append(Failure(family, label, accepted[0][0], code="accepted",
                                facts=tuple(accepted)))
    return failures


BadInput = tuple[str, "QkvError | type[QkvError]", Callable[[], object]]
"""A bad input the engine must refuse: its case, the error expected (an instance: that
type, every field equal; a class: that type) and the call that makes it."""


def typed_refusals(bad: Iterable[BadInput]) -> tuple[Refusal, ...]:
    """Each bad input made in turn, in the list's order, and what it raised recorded
    (:func:`~qkvcli.core.results.refused`: the one typed refusal, field for field)."""
    return tuple(refused(case, expected, call) for case, expected, call in bad)
