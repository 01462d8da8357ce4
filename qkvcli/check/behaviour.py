"""The ``independence`` family (the projections'), ``replay`` and ``purity`` of every kind
(``head-replay``, ``rope-purity``) and ``prefix`` of every kind with an attention
matrix (``head-prefix``): how results depend on arguments.

Independence, every cross pair: with each weight ``W_i[r,0]`` raised by one in turn
(``r``: the first feature the input uses) only output ``i`` may change, and it must;
with each upstream gradient ``dL/dY_j`` changed in turn (by ``j + 1``) the other two
weight gradients may not change. A ``V = X W_K`` slip is caught by the change of
``W_K``, a ``dW_V = X^T dK`` slip by the change of ``dL/dK``.
"""

from __future__ import annotations

import numpy as np

from qkvcli.check.cases import Case
from qkvcli.check.kinds import Kind
from qkvcli.check.result import not_applicable, not_run, not_run_after
from qkvcli.check.session import Session
from qkvcli.core.arrays import Array, all_finite, close, first_difference, first_outside
from qkvcli.core.invariants import Prefix, prefix
from qkvcli.core.results import Failure, FamilyCheck, judge
from qkvcli.protocol.errors import Broken, CallFailed

LETTERS = ("Q", "K", "V")


def _used_feature(x: Array) -> int | None:
    used = np.flatnonzero(np.any(x.reshape(-1, x.shape[-1]) != 0, axis=0))
    return int(used[0]) if used.size else None


Finding = tuple[str, tuple[str, ...]]  # a code of result.FINDINGS and its facts


def _changed(what: str, name: str, after: Array, before: Array,
             tolerance: float) -> Finding | None:
    """``moved`` (``key[0,1,0]`` from 0.5 to 1.5) for the first element that moved, or
    ``reshaped``; ``None`` when nothing moved."""
    if after.shape != before.shape:
        return "reshaped", (what, name)
    found = first_outside(after, before, tolerance)
    if found is None:
        return None
    where, new, old = found
    return "moved", (what, f"{name}{where}", repr(old), repr(new))


def raised_weight(case: Case, branch: int) -> tuple[str, list[Array]]:
    """The weights with branch ``branch``'s ``W[r,0]`` raised by one (``r``: the first
    feature the input uses; every entry when it uses none), and what was changed."""
    row = _used_feature(case.input)
    weights = [np.array(w, copy=True) for w in case.weights]
    if row is not None:
        weights[branch][row, 0] += 1.0
    else:
        weights[branch] += 1.0
    return (f"W_{LETTERS[branch]}[{row},0]" if row is not None
            else f"W_{LETTERS[branch]}"), weights


def _forward_independence(session: Session, kind: Kind, case: Case,
                          base: tuple[Array, ...],
                          seen: list[tuple[Array, ...]] | None = None) -> Finding | None:
    """The first output that moved with another branch's weight, or did not move with
    its own; ``seen`` collects each branch's changed forward, in branch order."""
    row = _used_feature(case.input)
    for branch in range(3):
        what, weights = raised_weight(case, branch)
        changed = session.call(kind, kind.run(case), (case.input, *weights))
        if seen is not None:
            seen.append(changed)
        for index in range(3):
            if index == branch:
                continue
            found = _changed(what, kind.forward_names[index], changed[index], base[index],
                             session.tolerance)
            if found is not None:
                return found
        # an output that is not finite cannot show that it moved: not judged there
        if (row is not None and all_finite(base[branch])
                and close(changed[branch], base[branch], session.tolerance)):
            return "unmoved", (what, kind.forward_names[branch])
    return None


def _backward_independence(session: Session, kind: Kind, case: Case,
                           base: tuple[Array, ...]) -> Finding | None:
    for branch in range(3):
        upstream = [np.array(g, copy=True) for g in case.upstream]
        upstream[branch] = upstream[branch] + (branch + 1.0)
        got = session.call(kind, kind.run(case), None, tuple(upstream))
        for index in range(3):
            if index == branch:
                continue
            found = _changed(f"dL/d{LETTERS[branch]}", kind.backward_names[index + 1],
                             got[index + 1], base[index + 1], session.tolerance)
            if found is not None:
                return found
    return None


INDEPENDENCE_ROWS = 64
"""The most rows (tokens, over the batch) the independence family changes the weights
for. Its claim holds row by row, so a slice from the first row that uses the changed
feature shows it as well as the whole input does, at a cost that does not grow with the
fixture (chapter 26 runs it on fixtures of millions of rows)."""


def _slice(case: Case) -> Case | None:
    """At most :data:`INDEPENDENCE_ROWS` rows of the fixture as one batch item, from the
    first row that uses the first feature the input uses; ``None`` when the fixture is
    no larger."""
    batch, tokens, width = case.input.shape
    rows = batch * tokens
    if rows <= INDEPENDENCE_ROWS:
        return None
    flat = case.input.reshape(rows, width)
    feature = _used_feature(case.input)
    first = 0 if feature is None else int(np.flatnonzero(flat[:, feature] != 0)[0])
    pick = slice(min(first, rows - INDEPENDENCE_ROWS), min(first, rows - INDEPENDENCE_ROWS)
                 + INDEPENDENCE_ROWS)
    return case._replace(input=flat[pick][None], upstream=tuple(
        gradient.reshape(rows, -1)[pick][None] for gradient in case.upstream))


def check_independence(session: Session, kind: Kind,
                       seen: list[tuple[Array, ...]] | None = None
                       ) -> tuple[FamilyCheck, list[Failure]]:
    """Each branch's output and weight gradient depend only on its own weight and path
    (on at most :data:`INDEPENDENCE_ROWS` rows of each fixture); ``seen`` collects the
    forward the changes are compared with, then the forwards with each weight changed
    (chapter 26's record reads the first two: ``W_Q`` changed)."""
    failures = []
    backward = session.offers(kind.backward)
    for whole in session.cases_of(kind):
        case = _slice(whole) or whole
        run = kind.run(case)
        if case is whole:
            base = session.first(kind, run)
            grads = session.first(kind, run, backward=True) if backward else None
        else:
            try:
                base = session.call(kind, run)
                grads = session.call(kind, run, None, run.upstream) if backward else None
            except CallFailed as failure:
                base = grads = failure
        failed = next((first for first in (base, grads) if isinstance(first, CallFailed)), None)
        if failed is not None or isinstance(base, CallFailed):
            assert failed is not None
            failures.append(not_run_after("independence", case.label, failed))
            continue
        if seen is not None:
            seen.append(base)
        try:
            problem = _forward_independence(session, kind, case, base, seen)
            if problem is None and grads is not None and not isinstance(grads, CallFailed):
                problem = _backward_independence(session, kind, case, grads)
        except Broken as failure:
            failures.append(not_run_after("independence", case.label, failure))
            continue
        except CallFailed as failure:
            failures.append(Failure("independence", case.label, None, code="call-failed",
                                    facts=(failure.message,)))
            continue
        if problem is not None:
            failures.append(Failure("independence", case.label, None, code=problem[0],
                                    facts=problem[1]))
    return judge("independence", failures, len(session.cases_of(kind)),
                 backward=backward), failures


def _differs(first: tuple[Array, ...], second: tuple[Array, ...],
             names: tuple[str, ...]) -> tuple[str, str, str] | None:
    """``(tensor and coordinate, first, second)`` where two results first differ bit for bit."""
    for name, left, right in zip(names, first, second, strict=True):
        found = first_difference(left, right)
        if found is not None:
            where, old, new = found
            return f"{name}{where}", old, new
    return None


def check_replay(session: Session, kind: Kind) -> tuple[FamilyCheck, list[Failure]]:
    """A second forward (and backward) on each fixture (a head's: causal) agrees with the
    first bit for bit; a forward is judged also when the fixture's backward failed."""
    family = kind.family("replay")
    backward = session.offers(kind.backward)
    failures = []
    for case in session.cases_of(kind):
        run = kind.run(case)
        firsts: list[tuple[str, tuple[str, ...], tuple[Array, ...] | None,
                           tuple[Array, ...] | CallFailed]] = [
            (kind.forward, kind.forward_names, None, session.first(kind, run))]
        if backward:
            firsts.append((kind.backward, kind.backward_names, run.upstream,
                           session.first(kind, run, backward=True)))
        for operation, names, upstream, first in firsts:
            if isinstance(first, CallFailed):
                failures.append(not_run_after(family, case.label, first))
                break
            try:
                second = session.call(kind, run, None, upstream)
            except CallFailed as failure:
                failures.append(not_run_after(family, case.label, failure)
                                if isinstance(failure, Broken) else Failure(
                    family, case.label, None, code="replay-failed",
                    facts=(failure.operation, failure.message)))
                break
            found = _differs(first, second, names)
            del second  # let go before the next call (a layer's [B,H,T,T] arrays)
            if found is not None:
                failures.append(Failure(family, case.label, found[0], code="replay-differs",
                                        facts=(operation, *found)))
                break
    return judge(family, failures, len(session.cases_of(kind)), backward=backward), failures


Perturbed = tuple[Array, Prefix]
"""A prefix probe's facts: the output with the last token changed, and what it kept."""


def check_prefix(session: Session, kind: Kind, seen: list[Perturbed] | None = None
                 ) -> tuple[FamilyCheck, list[Failure]]:
    """Under the causal mask, the last token's input changed (each of its features plus
    one, or the fixture's own ``suffix``) leaves every earlier token's output bit for bit
    and changes the last one's (:func:`~qkvcli.core.invariants.prefix`): each fixture of
    two tokens or more (one, given its suffix), in the kind's last mode (a head's causal;
    multi-head attention's causal with RoPE). ``seen`` collects each fixture's facts."""
    family = kind.family("prefix")
    failures: list[Failure] = []
    cases = [case for case in session.cases_of(kind)
             if case.input.shape[0] and case.input.shape[1] >= (1 if case.suffix is not None
                                                                 else 2)]
    out = kind.loss[0]
    name = kind.forward_names[out]
    for case in cases:
        run = kind.run(case)
        first = session.first(kind, run)
        if isinstance(first, CallFailed):
            failures.append(not_run_after(family, case.label, first))
            continue
        changed = np.array(case.input, copy=True)
        if case.suffix is None:
            changed[:, -1, :] += 1.0
        else:
            changed[:, -1, :] = case.suffix
        try:
            after = session.call(kind, run, (changed, *case.weights))
        except Broken as failure:
            failures.append(not_run_after(family, case.label, failure))
            break
        except CallFailed as failure:
            failures.append(Failure(family, case.label, None, code="call-failed",
                                    facts=(failure.message,)))
            continue
        before = first[out]
        if (before.shape != after[out].shape or before.ndim < 2
                or before.shape[:2] != case.input.shape[:2]):
            # the forward family says how; here the claim was not judged
            failures.append(not_run(family, case.label, kind.family("shape")))
            continue
        kept = prefix(before, after[out])
        if seen is not None:
            seen.append((after[out], kept))
        if not all(kept.unchanged):
            found = first_difference(before[:, :-1], after[out][:, :-1])
            assert found is not None
            where, old, new = found
            failures.append(Failure(family, case.label, f"{name}{where}", code="prefix-moved",
                                    facts=(f"{name}{where}", old, new)))
        elif not kept.last_changed:
            failures.append(Failure(family, case.label, name, code="last-unmoved",
                                    facts=(name, int(before.shape[1]) - 1)))
    return judge(family, failures, len(cases)), failures


def check_purity(session: Session, kind: Kind) -> tuple[FamilyCheck, list[Failure]]:
    """No call of the kind changed its arguments (judged after every other family's calls).
    Not run when some of those calls never completed (the implementation stopped: what
    they would have changed is unknown)."""
    family = kind.family("purity")
    if session.implementation.is_command:
        return not_applicable(family, "command"), []
    # one finding per change: calls that change the same argument at the same coordinate
    # to the same value, on one fixture, are one finding, not one per call
    failures = list(dict.fromkeys(session.impurities.get(family, [])))
    if family in session.unfinished:
        failures.append(not_run(family, None, "stopped"))
    return judge(family, failures, len(session.cases_of(kind)),
                 calls=session.purity_calls.get(family, 0)), failures
