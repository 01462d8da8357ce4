"""The ``gradcheck`` family of every kind (``head-gradcheck``: each mode): the
implementation's own backward against central differences of its own forward.

The objective is ``L = sum <Y_i, U_i>`` over the forward results the kind's loss weighs
(the projections' ``Q``, ``K``, ``V``; a head's and a multi-head layer's ``output``;
RoPE's rotation), each with the fixture's upstream gradient in the same place. For each
tensor the forward takes (``x`` and the weights) the chapter's evenly spaced coordinates
(``sample_indices``) are perturbed by the fixture's step; a coordinate passes when the
scaled error ``|a-n|/max(1,|a|,|n|)`` is within the fixture's gradient-check tolerance.
"""

from __future__ import annotations

import numpy as np

from qkvcli.check.cases import Run, fixtures_of
from qkvcli.check.kinds import Kind
from qkvcli.check.result import not_applicable, not_run, not_run_after
from qkvcli.check.session import Session
from qkvcli.core.arrays import Array
from qkvcli.core.errors import format_shape
from qkvcli.core.results import Clause, Failure, FamilyCheck, found_at, judge
from qkvcli.gradcheck.batched import Checked, Points, check, perturbing
from qkvcli.protocol.errors import Broken, CallFailed


class Worst:
    """The largest scaled error seen so far, and where (a ``point`` or ``point-on``
    clause; ``None`` before the first)."""

    def __init__(self) -> None:
        self.error = -1.0
        self.point: Clause | None = None
        self.where = ""

    def offer(self, error: float, point: Clause, where: str = "") -> None:
        if not error <= self.error:  # NaN and infinity win
            self.error = error
            self.point = point
            self.where = where


def _objective(session: Session, kind: Kind, run: Run, tensors: list[Array]) -> float:
    """``L`` of the implementation's forward on ``tensors`` (the input, the weights). Raises
    :class:`CallFailed`, also for a weighed result of the wrong shape."""
    outputs = session.call(kind, run, tuple(tensors))
    for index, upstream in zip(kind.loss, run.upstream, strict=True):
        if outputs[index].shape != upstream.shape:
            raise CallFailed(kind.forward, f"{kind.forward} gave an output of the wrong shape")
    return loss_of(kind, outputs, run.upstream)


def loss_of(kind: Kind, outputs: tuple[Array, ...], upstream: tuple[Array, ...]) -> float:
    """``L = sum <Y_i, U_i>`` over the forward results the kind's loss weighs."""
    with np.errstate(over="ignore", invalid="ignore"):
        return sum((float(np.sum(outputs[index] * gradient))
                    for index, gradient in zip(kind.loss, upstream, strict=True)), 0.0)


def check_run(session: Session, kind: Kind, run: Run, analytic: tuple[Array, ...],
              worst: Worst) -> tuple[int, Failure | None]:
    """Central differences of ``L`` at the run's sampled coordinates against ``analytic``
    (``dL/dX`` and each ``dL/dW``), by the one checker
    (:func:`~qkvcli.gradcheck.batched.check`): how many coordinates, and the family's
    failure on the run when the worst is past the fixture's tolerance. Raises
    :class:`CallFailed` when a call fails."""
    case, family = run.case, kind.family("gradcheck")
    tensors = tuple(np.array(t, dtype=np.float64, copy=True) for t in case.tensors)
    count = 0
    run_worst = Worst()
    for position, (name, values) in enumerate(zip(kind.backward_names, tensors, strict=True)):
        gradient = analytic[position]
        if gradient.shape != values.shape:
            return count, found_at(family, run.label, name, Clause("gradient-shape", (name,)))

        def objective(probe: Array, position: int = position) -> float:
            given = (*tensors[:position], probe, *tensors[position + 1:])
            return _objective(session, kind, run, list(given))

        checked = check([Checked(name, values, gradient, Points(perturbing(objective, values)),
                                 "sampled", case.samples)], case.step, case.tolerance)
        for point in checked.tensors[0].checks:
            where = f"{name}{format_shape(list(point.coordinate))}"
            clause = Clause("point", (where, point.analytic, point.numerical,
                                      point.scaled_error, point.note))
            count += 1
            run_worst.offer(point.scaled_error, clause, where)
            worst.offer(point.scaled_error, Clause("point-on", (run.label, clause)))
    failed = not run_worst.error <= case.tolerance
    if count and failed and run_worst.point is not None:
        return count, found_at(family, run.label, run_worst.where, Clause(
            "gradcheck-worst", (run_worst.point, case.tolerance)))
    return count, None


def check_gradcheck(session: Session, kind: Kind) -> tuple[FamilyCheck, list[Failure]]:
    """Central differences of the implementation's forward against its own backward, each
    fixture in each mode; not run on any when its forward is lossy on one (exact values
    hide a lossy writer)."""
    family = kind.family("gradcheck")
    if not session.offers(kind.backward):
        return not_applicable(family, "no-backward"), [
            Failure(family, None, None, no_backward=True)]
    failures = []
    worst = Worst()
    total = 0
    runs = session.runs(kind)
    lossy = any(session.lossy(kind, run) for run in runs)
    for run in runs:
        analytic = session.first(kind, run, backward=True)
        if isinstance(analytic, CallFailed):
            failures.append(not_run_after(family, run.label, analytic))
            continue
        if lossy:
            failures.append(not_run(family, run.label, kind.family("lossy")))
            continue
        try:
            count, failure = check_run(session, kind, run, analytic, worst)
        except Broken:
            failures.append(not_run(family, run.label, "stopped"))
            continue
        except CallFailed as error:
            failures.append(found_at(family, run.label, None, Clause(
                "check-call-failed", (kind.forward, error.message))))
            continue
        total += count
        if failure is not None:
            failures.append(failure)
    # the tolerance the worst point was judged by: its fixture's (a page shows it beside
    # the point's scaled error)
    tolerances = {run.label: run.case.tolerance for run in runs}
    tolerance = tolerances.get(worst.point.facts[0], 0.0) if worst.point is not None else 0.0
    return judge(family, failures, len(session.cases_of(kind)), tolerance=tolerance,
                 coordinates=total, worst=worst.point, fixture_of=fixtures_of(runs)), failures
