"""The ``gradcheck`` family: the implementation's own backward against central differences.

The objective is ``L = <Q,U_Q> + <K,U_K> + <V,U_V>`` of the implementation's own
forward, with the fixture's upstream gradients ``U``. For each of ``x``, ``W_Q``,
``W_K``, ``W_V`` the chapter's evenly spaced coordinates (``sample_indices``) are
perturbed by the fixture's step; a coordinate passes when the scaled error
``|a-n|/max(1,|a|,|n|)`` is within the fixture's gradient-check tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from qkvcli.check.cases import Case
from qkvcli.check.diagnose import coordinate
from qkvcli.check.errors import Broken, CallFailed
from qkvcli.check.kinds import Kind
from qkvcli.check.result import not_applicable, not_run, not_run_after
from qkvcli.check.session import Session
from qkvcli.check.target import BACKWARD_NAMES
from qkvcli.core.arrays import Array
from qkvcli.core.results import Clause, Failure, FamilyCheck, found_at, judge
from qkvcli.gradcheck.central import central_difference, sample_indices, scaled_error


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


def _objective(session: Session, case: Case, tensors: list[Array]) -> float:
    outputs = session.call_forward(case, tensors[0], (tensors[1], tensors[2], tensors[3]))
    total = 0.0
    for out, up in zip(outputs, case.upstream, strict=True):
        if out.shape != up.shape:
            raise CallFailed("forward", "forward gave an output of the wrong shape")
        total += float(np.sum(out * up))
    return total


def check_case(session: Session, case: Case, analytic: tuple[Array, ...], worst: Worst,
               objective: Callable[[list[Array]], float] | None = None,
               family: str = "gradcheck", label: str | None = None) -> tuple[int, Failure | None]:
    """Central differences of ``objective`` (of ``[x, W_Q, W_K, W_V]``; the projections'
    ``L`` by default) at the case's sampled coordinates against ``analytic`` (``dL/dX``
    and the three ``dL/dW``): how many coordinates, and the failure of ``family`` on
    the fixture ``label`` (the case's by default) when the worst is past its tolerance.
    Raises :class:`CallFailed` when a call fails."""
    label = case.label if label is None else label
    if objective is None:
        def objective(tensors: list[Array]) -> float:
            return _objective(session, case, tensors)
    tensors = [np.array(t, dtype=np.float64, copy=True)
               for t in (case.input, *case.weights)]
    count = 0
    case_worst = Worst()
    for position, (name, values) in enumerate(zip(BACKWARD_NAMES, tensors, strict=True)):
        flat = values.reshape(-1)
        gradient = analytic[position]
        if gradient.shape != values.shape:
            return count, found_at(family, label, name, Clause("gradient-shape", (name,)))
        for index in sample_indices(flat.size, case.samples):
            original = float(flat[index])

            def evaluate(point: float, index: int = index, original: float = original,
                         flat: Array = flat) -> float:
                flat[index] = point
                try:
                    return objective(tensors)
                finally:
                    flat[index] = original

            numerical, note = central_difference(original, case.step, evaluate)
            a = float(gradient.reshape(-1)[index])
            error = scaled_error(a, numerical) if not note else math.inf
            where = f"{name}{coordinate(values.shape, index)}"
            point = Clause("point", (where, a, numerical, error, note))
            count += 1
            case_worst.offer(error, point, where)
            worst.offer(error, Clause("point-on", (label, point)))
    failed = not case_worst.error <= case.tolerance
    if count and failed and case_worst.point is not None:
        return count, found_at(family, label, case_worst.where, Clause(
            "gradcheck-worst", (case_worst.point, case.tolerance)))
    return count, None


def check_gradcheck(session: Session, kind: Kind) -> tuple[FamilyCheck, list[Failure]]:
    """Central differences of the implementation's forward against its own backward."""
    if not session.implementation.has_backward:
        return not_applicable("gradcheck", "no-backward"), [
            Failure("gradcheck", None, None, no_backward=True)]
    failures = []
    worst = Worst()
    total = 0
    # Lossy on one fixture, lossy on all (exact values hide it).
    lossy = any(session.lossy(kind, run) for run in session.runs(kind))
    for case in session.cases:
        analytic = session.backward(case)
        if isinstance(analytic, CallFailed):
            failures.append(not_run_after("gradcheck", case.label, analytic))
            continue
        if lossy:
            failures.append(not_run("gradcheck", case.label, "lossy"))
            continue
        try:
            count, failure = check_case(session, case, analytic, worst)
        except Broken:
            failures.append(not_run("gradcheck", case.label, "stopped"))
            continue
        except CallFailed as error:
            failures.append(found_at("gradcheck", case.label, None, Clause(
                "check-call-failed", ("forward", error.message))))
            continue
        total += count
        if failure is not None:
            failures.append(failure)
    return judge("gradcheck", failures, len(session.cases), coordinates=total,
                 worst=worst.point), failures
