"""The families only a head has: ``scaling``, ``mask`` and ``softmax``, judged on the
head's first results (:meth:`~qkvcli.check.session.Session.first`) against the engine's.

A head is ``head_forward(x, w_query, w_key, w_value, causal) -> (scores, weights,
output)`` with ``scores = Q Kᵀ/√d_k`` before the mask ``[B,T,T]``, ``weights`` the row
softmax of the masked scores and ``output = weights V`` (the families it shares with the
projections run over :data:`~qkvcli.check.kinds.HEAD`). A wrong result is compared with
the usual slips (:mod:`~qkvcli.check.diagnose`), so its finding (a code and facts,
worded in :mod:`qkvcli.render.check`) names the one it matches; a softmax without the
row maximum subtracted shows only on large scores, which :func:`check_softmax` probes.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from qkvcli.check.cases import Case, Run, fixtures_of
from qkvcli.check.diagnose import (
    Bundle,
    agreed,
    first_mismatch,
    mask_positions,
    named_slips,
)
from qkvcli.check.kinds import Kind
from qkvcli.check.reference import MASK_BUGS, SCALING_BUGS, SOFTMAX_BUGS, variant_forward
from qkvcli.check.relations import float32_rounded
from qkvcli.check.result import not_run, not_run_after
from qkvcli.check.session import Session
from qkvcli.core.arrays import close
from qkvcli.core.errors import format_shape
from qkvcli.core.invariants import row_sums
from qkvcli.core.results import Clause, Failure, FamilyCheck, found_at, judge
from qkvcli.protocol.errors import BadResult, Broken, CallFailed

LARGE = 30.0  # the input scale of the softmax probe: scaled scores in the thousands


def _in_mode(kind: Kind, case: Case, causal: bool) -> Run:
    return kind.runs(case)[kind.modes.index(causal)]


def _right_without_mask(session: Session, kind: Kind, case: Case) -> bool:
    """Whether the head's non-causal results on ``case`` are right: the mask and the
    overflow probe judge a head only on top of right scores and softmax."""
    run = _in_mode(kind, case, False)
    got = session.first(kind, run)
    return not isinstance(got, CallFailed) and all(
        close(g, e, session.tolerance)
        for g, e in zip(got, session.reference(kind, run), strict=True))


def _float32_weights(got: Bundle, expected: Bundle) -> bool:
    """Whether the weights are the engine's but for float32 rounding (a float32 softmax,
    whose tiny weights flush to 0): such zeros are its precision, not a mask."""
    return len(got) > 1 and bool(float32_rounded("weights", got[1], expected[1]))


def _first_results(session: Session, kind: Kind, family: str, causal: bool,
                   wanted: Callable[[Case], bool]) -> tuple[list[tuple[Run, Bundle]],
                                                            list[Failure]]:
    """The first head_forward results in one mode on the cases ``wanted`` takes, and why
    others did not run: the call failed, or its results are right but for their precision
    (said by head-forward; at the tolerance they cannot show the family's claim)."""
    found, skipped = [], []
    for run in (_in_mode(kind, case, causal) for case in session.cases_of(kind) if wanted(case)):
        got = session.first(kind, run)
        if isinstance(got, CallFailed):
            skipped.append(not_run_after(family, run.label, got))
        elif session.precision(kind, run) is not None or (family != "scaling" and _float32_weights(
                got, session.reference(kind, run))):
            skipped.append(not_run(family, run.label, "head-precision"))
        else:
            found.append((run, got))
    return found, skipped


def check_scaling(session: Session, kind: Kind) -> tuple[FamilyCheck, list[Failure]]:
    """scores are ``Q Kᵀ/√d_k`` (fixtures with ``d_k >= 2``, where it shows): a wrong one
    named when it is a known slip (:data:`~qkvcli.check.diagnose.SCALING_BUGS`, every one
    it matches when the fixture cannot tell them apart)."""
    results, failures = _first_results(session, kind, "scaling", False,
                                       lambda c: c.shape[3] >= 2 and c.input.size > 0)
    wrong: list[tuple[str, tuple[str, ...]]] = []
    for run, got in results:
        case = run.case
        compute = partial(variant_forward, case.input, case.weights, False)
        faults = named_slips(got[:1], SCALING_BUGS,
                             lambda bug: compute(bug)[:1], session.tolerance)  # noqa: B023
        if not faults and close(got[0], compute("")[0], session.tolerance):
            if named_slips(got[1:2], ("unscaled",), lambda bug: compute(bug)[1:2],  # noqa: B023
                           session.tolerance):
                faults = ("unscaled-weights",)
        elif not faults:
            faults = ("not-scaled",)
        if faults:
            wrong.append((run.label, faults))
    agree = agreed([faults if faults[0] in SCALING_BUGS else () for _, faults in wrong
                    if faults != ("unscaled-weights",)])
    for label, faults in wrong:
        if faults[0] in SCALING_BUGS:
            faults = tuple(fault for fault in faults if fault in agree) or ("not-scaled",)
        failures.append(found_at("scaling", label, "scores", Clause("slip", (faults,))))
    return judge("scaling", failures, len(results),
                 fixture_of=fixtures_of(session.runs(kind))), failures


def _empty_row(session: Session, kind: Kind, skipped: Failure) -> Failure:
    """A causal run whose head_forward gave something not finite, while its non-causal
    results are right: with one token, query 0's only key is the diagonal. When the head
    gives NaN there too, its mask hides the diagonal, and a row with every key at -inf is
    0/0 (``diagonal-hidden``); else the reason the run was skipped stands."""
    run = next((run for run in session.runs(kind) if run.label == skipped.fixture), None)
    if run is None or not isinstance(session.first(kind, run), BadResult) or isinstance(
            session.first(kind, run), Broken) or not _right_without_mask(session, kind, run.case):
        return skipped
    one = run.case.input[:1, :1]
    try:
        session.call(kind, run, (one, *run.case.weights))
    except Broken:
        return skipped
    except BadResult as failure:
        return found_at("mask", run.label, "weights", Clause("diagonal-hidden", (
            format_shape(list(one.shape)), failure.message)))
    except CallFailed:
        return skipped
    return skipped


def check_mask(session: Session, kind: Kind) -> tuple[FamilyCheck, list[Failure]]:
    """causal=true: exactly the later positions hidden (the diagonal and the earlier ones
    seen), rows summing to 1, scores unmasked; causal=false: no mask. On fixtures with two
    tokens or more. A wrong head whose non-causal results are right fails here, judged
    position by position (:func:`~qkvcli.check.diagnose.mask_positions`) and named when
    it is a known slip."""
    failures: list[Failure] = []
    wrong: list[tuple[str, tuple[str, ...], tuple[Clause, ...]]] = []
    judged = 0
    for causal in (False, True):
        results, skipped = _first_results(session, kind, "mask", causal,
                                          lambda c: c.shape[1] >= 2 and c.shape[0] >= 1)
        if causal:
            skipped = [_empty_row(session, kind, failure) for failure in skipped]
        failures += skipped
        judged = max(judged, len(results))
        for run, got in results:
            case, label = run.case, run.label
            expected = session.reference(kind, run)
            if all(close(g, e, session.tolerance) for g, e in zip(got, expected, strict=True)):
                continue
            if causal and not _right_without_mask(session, kind, case):
                failures.append(not_run("mask", label, "head"))
                continue
            slips = named_slips(got, MASK_BUGS,
                                partial(variant_forward, case.input, case.weights, causal),
                                session.tolerance)
            positions = (mask_positions(got[1], expected[1], causal, session.tolerance)
                         if got[1].shape == expected[1].shape else ())
            if slips or positions:
                wrong.append((label, slips, positions))
            elif causal and not close(got[0], expected[0], session.tolerance):
                failures.append(found_at("mask", label, "scores",
                                         Clause("slip", (("mask-moves-scores",),))))
            elif causal:  # the right keys hidden, rows summing to 1, yet other weights
                where, mismatch = next(
                    found for name, g, e in zip(kind.forward_names, got, expected, strict=True)
                    if (found := first_mismatch(name, g, e, session.tolerance)) is not None)
                failures.append(found_at("mask", label, where, Clause("mask-differs", (mismatch,))))
                wrong.append((label, (), ()))
    agree = agreed([slips for _, slips, _ in wrong])
    failures += [found_at("mask", label, "weights", Clause("mask-positions", (
        tuple(slip for slip in slips if slip in agree), positions)))
        for label, slips, positions in wrong if slips or positions]
    order = [run.label for run in session.runs(kind)]
    failures.sort(key=lambda failure: order.index(failure.fixture) if failure.fixture in order
                  else len(order))
    return judge("mask", failures, judged, fixture_of=fixtures_of(session.runs(kind))), failures


def check_softmax(session: Session, kind: Kind) -> tuple[FamilyCheck, list[Failure]]:
    """Non-causal weights that are a known slip of the softmax of right scores are named
    (:data:`~qkvcli.check.diagnose.SOFTMAX_BUGS`); causal rows of weights are >= 0 and
    sum to 1 (:func:`~qkvcli.core.invariants.row_sums`, scaled, 16 times the tolerance);
    and large scores do not overflow (checked last of the head's calls: a NaN a program
    writes ends its session)."""
    plain, _ = _first_results(session, kind, "softmax", False, lambda c: c.input.size > 0)
    failures: list[Failure] = []
    wrong: list[tuple[Run, tuple[str, ...]]] = []
    named = set()
    for run, got in plain:
        case, expected = run.case, session.reference(kind, run)
        if not close(got[0], expected[0], session.tolerance) or close(
                got[1], expected[1], session.tolerance):
            continue  # wrong scores are scaling's to say; right weights need no name
        wrong.append((run, named_slips(got, SOFTMAX_BUGS,
                                       partial(variant_forward, case.input, case.weights,
                                               False), session.tolerance)))
    agree = agreed([slips for _, slips in wrong])
    for run, slips in wrong:
        slips = tuple(slip for slip in slips if slip in agree)
        if slips:
            named.add(run.case.label)
            failures.append(found_at("softmax", run.label, "weights", Clause("slip", (slips,))))
    results, skipped = _first_results(session, kind, "softmax", True,
                                      lambda c: c.input.size > 0)
    failures += skipped  # the causal runs' reasons: those the row sums could not judge
    fixture_of = fixtures_of(session.runs(kind))
    for run, got in results:
        if run.case.label in named:
            continue
        if not row_sums(got[1], session.tolerance * 16, scaled=True).passed:
            sums = got[1].sum(axis=-1)
            failures.append(found_at("softmax", run.label, "weights", Clause(
                "row-sums", (float(np.min(sums)), float(np.max(sums)), float(np.min(got[1]))))))
    if failures:
        return judge("softmax", failures, len(results), fixture_of=fixture_of), failures
    probed = [run.case for run, _ in results if _right_without_mask(session, kind, run.case)][:2]
    for case in probed:
        x = case.input * LARGE
        expected = variant_forward(x, case.weights, False)
        largest = float(np.max(np.abs(expected[0]))) if expected[0].size else 0.0
        label = f"{case.label} x{LARGE:g}"
        fixture_of[label] = case.label
        try:
            got = session.call(kind, _in_mode(kind, case, False), (x, *case.weights))
        except (BadResult, Broken) as failure:
            failures.append(found_at("softmax", label, "weights",
                                     Clause("overflow-said", (largest, failure.message))))
            break
        except CallFailed as failure:
            failures.append(found_at("softmax", label, None,
                                     Clause("large-call-failed", (failure.message,))))
            break
        found = first_mismatch("weights", got[1], expected[1], session.tolerance)
        if found is not None:
            finite = bool(np.isfinite(got[1]).all())
            failures.append(found_at("softmax", label, found[0], Clause("large-differs", (
                largest, found[1])) if finite else Clause("overflow", (largest,))))
            break
    return judge("softmax", failures, len(results), calls=len(probed),
                 fixture_of=fixture_of), failures
