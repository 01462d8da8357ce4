"""The ``independence``, ``replay`` and ``purity`` families: how results depend on arguments.

Independence: with ``W_Q[r,0]`` raised by one (``r``: the first feature the input
uses) only Q may change; with ``dL/dK`` and ``dL/dV`` changed ``grad_w_query`` may not,
and with ``dL/dQ`` changed ``grad_w_key`` and ``grad_w_value`` may not.
"""

from __future__ import annotations

import numpy as np

from qkvcli.conformance.cases import Case
from qkvcli.conformance.diagnose import close, first_bit_difference, first_outside
from qkvcli.conformance.errors import CallFailed
from qkvcli.conformance.result import Failure, FamilyCheck, judge, not_applicable
from qkvcli.conformance.session import Session
from qkvcli.conformance.target import BACKWARD_NAMES, FORWARD_NAMES
from qkvcli.core.arrays import Array


def _used_feature(x: Array) -> int | None:
    used = np.flatnonzero(np.any(x.reshape(-1, x.shape[-1]) != 0, axis=0))
    return int(used[0]) if used.size else None


def _changed(name: str, after: Array, before: Array, tolerance: float) -> str | None:
    """``"key[0,1,0] from 0.5 to 1.5"`` for the first element that moved, else ``None``."""
    if after.shape != before.shape:
        return f"the shape of {name}"
    found = first_outside(after, before, tolerance)
    if found is None:
        return None
    where, new, old = found
    return f"{name}{where} from {old!r} to {new!r}"


def _forward_independence(session: Session, case: Case, base: tuple[Array, ...]) -> str | None:
    row = _used_feature(case.input)
    w_query = np.array(case.weights[0], copy=True)
    if row is not None:
        w_query[row, 0] += 1.0
    else:
        w_query += 1.0
    changed = session.call_forward(case, case.input, (w_query, *case.weights[1:]))
    what = f"W_Q[{row},0]" if row is not None else "W_Q"
    for index in (1, 2):
        found = _changed(FORWARD_NAMES[index], changed[index], base[index], session.tolerance)
        if found is not None:
            return f"changing {what} changed {found}"
    if row is not None and close(changed[0], base[0], session.tolerance):
        return f"changing W_Q[{row},0] left query unchanged"
    return None


def _backward_independence(session: Session, case: Case, base: tuple[Array, ...]) -> str | None:
    d_query, d_key, d_value = case.upstream
    trials = (
        ("grad_key and grad_value", (d_query, d_key + 1.0, d_value + 2.0), (1,)),
        ("grad_query", (d_query + 1.0, d_key, d_value), (2, 3)),
    )
    for changed_names, upstream, kept in trials:
        got = session.call_backward(case, case.input, case.weights, upstream)
        for index in kept:
            found = _changed(BACKWARD_NAMES[index], got[index], base[index], session.tolerance)
            if found is not None:
                return f"changing {changed_names} changed {found}"
    return None


def check_independence(session: Session) -> tuple[FamilyCheck, list[Failure]]:
    """Each branch's output and weight gradient depend only on its own weight and path."""
    failures = []
    backward = session.implementation.has_backward
    for case in session.cases:
        base = session.forward(case)
        grads = session.backward(case) if backward else None
        if isinstance(base, CallFailed) or isinstance(grads, CallFailed):
            operation = "forward" if isinstance(base, CallFailed) else "backward"
            failures.append(Failure("independence", case.label, None,
                                    f"not checked: {operation} failed"))
            continue
        try:
            problem = _forward_independence(session, case, base)
            if problem is None and grads is not None:
                problem = _backward_independence(session, case, grads)
        except CallFailed as failure:
            problem = failure.message
        if problem is not None:
            failures.append(Failure("independence", case.label, None, problem))
    return judge("independence", failures, len(session.cases), backward=backward), failures


def _differs(first: tuple[Array, ...], second: tuple[Array, ...],
             names: tuple[str, ...]) -> tuple[str, str] | None:
    for name, left, right in zip(names, first, second, strict=True):
        found = first_bit_difference(left, right)
        if found is not None:
            where, old, new = found
            return f"{name}{where}", f"{name}{where} was {old}, then {new}"
    return None


def check_replay(session: Session) -> tuple[FamilyCheck, list[Failure]]:
    """A second forward (and backward) on each fixture agrees with the first bit for bit."""
    failures = []
    for case in session.cases:
        first = session.forward(case)
        grads = session.backward(case) if session.implementation.has_backward else None
        failed = first if isinstance(first, CallFailed) else grads
        if isinstance(failed, CallFailed):
            failures.append(Failure("replay", case.label, None,
                                    f"not checked: {failed.operation} failed"))
            continue
        try:
            if not isinstance(first, CallFailed):
                again = session.call_forward(case, case.input, case.weights)
                found = _differs(first, again, FORWARD_NAMES)
                if found is not None:
                    failures.append(Failure("replay", case.label, found[0],
                                            f"second forward differs: {found[1]}"))
                    continue
            if grads is not None and not isinstance(grads, CallFailed):
                again = session.call_backward(case, case.input, case.weights, case.upstream)
                found = _differs(grads, again, BACKWARD_NAMES)
                if found is not None:
                    failures.append(Failure("replay", case.label, found[0],
                                            f"second backward differs: {found[1]}"))
        except CallFailed as failure:
            failures.append(Failure("replay", case.label, None,
                                    f"second {failure.operation} failed: {failure.message}"))
    return judge("replay", failures, len(session.cases),
                 backward=session.implementation.has_backward), failures


def check_purity(session: Session) -> tuple[FamilyCheck, list[Failure]]:
    """No call changed its arguments (judged after every other family's calls)."""
    if session.implementation.is_command:
        return not_applicable("purity", "command"), []
    failures = list(session.impurities)
    return judge("purity", failures, len(session.cases), calls=session.calls), failures
