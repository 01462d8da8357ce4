"""The ``forward`` and ``reverse`` families: the implementation's tensors against qkv's engine.

A forward finding is ``forward-differs`` (the first mismatch, and what the wrong tensor
computed or ``None``); a reverse one ``reverse-differs`` (what each wrong gradient
computed, then the first mismatch); a valid input the implementation failed on is
:func:`~qkvcli.check.result.call_failure`'s finding, as for a head.
"""

from __future__ import annotations

from qkvcli.check import diagnose
from qkvcli.check.cases import Case
from qkvcli.check.diagnose import first_mismatch
from qkvcli.check.errors import CallFailed
from qkvcli.check.kinds import Kind
from qkvcli.check.result import call_failure, not_applicable
from qkvcli.check.session import Session
from qkvcli.check.target import BACKWARD_NAMES, FORWARD_NAMES
from qkvcli.core.errors import format_shape
from qkvcli.core.results import Clause, Failure, FamilyCheck, found_at, judge


def _call_failure(family: str, case: Case, failure: CallFailed) -> Failure:
    return call_failure(family, case.label, format_shape(list(case.input.shape)), failure)


def check_forward(session: Session, kind: Kind) -> tuple[FamilyCheck, list[Failure]]:
    """Q, K, V within the tolerance of the engine's; names the first failing coordinate."""
    failures = []
    for case in session.cases:
        got = session.forward(case)
        if isinstance(got, CallFailed):
            failures.append(_call_failure("forward", case, got))
            continue
        expected = session.reference(kind, kind.run(case))
        for index, (name, actual, wanted) in enumerate(
                zip(FORWARD_NAMES, got, expected, strict=True)):
            found = first_mismatch(name, actual, wanted, session.tolerance)
            if found is not None:
                where, mismatch = found
                why: Clause | None = None
                if actual.shape == wanted.shape:
                    low = diagnose.precision(actual, wanted)
                    if low is not None and low.cause in diagnose.LOSSY:
                        session.lossy.add(id(case))
                    why = (diagnose.precision_clause([name], low, session.tolerance)
                           if low else diagnose.output(index, actual, case.input,
                                                       case.weights, session.tolerance))
                failures.append(found_at("forward", case.label, where,
                                         Clause("forward-differs", (mismatch, why))))
                break
    return judge("forward", failures, len(session.cases), session.tolerance), failures


def check_reverse(session: Session, kind: Kind) -> tuple[FamilyCheck, list[Failure]]:
    """dX and the three dW within the tolerance of the engine's; names the wrong path or branch."""
    if not session.implementation.has_backward:
        return not_applicable("reverse", "no-backward"), [
            Failure("reverse", None, None, no_backward=True)]
    failures = []
    for case in session.cases:
        got = session.backward(case)
        if isinstance(got, CallFailed):
            failures.append(_call_failure("reverse", case, got))
            continue
        expected = session.reference(kind, kind.run(case), backward=True)
        wrong: list[tuple[Clause | None, str, Clause]] = []
        faults: list[tuple[str, diagnose.Precision]] = []
        for index, (name, actual, wanted) in enumerate(
                zip(BACKWARD_NAMES, got, expected, strict=True)):
            found = first_mismatch(name, actual, wanted, session.tolerance)
            if found is None:
                continue
            why: Clause | None
            if actual.shape != wanted.shape:
                why = Clause("wrong-shape", (name,))
            elif (low := diagnose.precision(actual, wanted)) is not None:
                faults.append((name, low))
                why = None  # said once per cause, after the others
            elif index == 0:
                why = diagnose.input_gradient(actual, case.weights, case.upstream,
                                              session.tolerance)
            else:
                why = diagnose.weight_gradient(index - 1, actual, case.input, case.upstream,
                                               session.tolerance)
            wrong.append((why, *found))
        if wrong:
            whys = [why for why, _, _ in wrong if why is not None]
            whys += diagnose.precision_clauses(faults, session.tolerance)
            _, where, mismatch = wrong[0]
            failures.append(found_at("reverse", case.label, where,
                                     Clause("reverse-differs", (tuple(whys), mismatch))))
    return judge("reverse", failures, len(session.cases), session.tolerance), failures
