"""A head's results against qkv's :class:`AttentionHead`: the head calls of a session
(:class:`Heads`) and the families only a head has (scaling, mask, softmax; the others
are the shared families of :mod:`~qkvcli.check.values`, :mod:`~qkvcli.check.boundaries`,
:mod:`~qkvcli.check.behaviour` and :mod:`~qkvcli.check.numerical` run on the head, the
order in :mod:`~qkvcli.check.run`).

A head is ``head_forward(x, w_query, w_key, w_value, causal) -> (scores, weights,
output)`` with ``scores = Q Kᵀ/√d_k`` before the mask ``[B,T,T]``, ``weights`` the row
softmax of the masked scores and ``output = weights V``; and optionally
``head_backward(x, w_query, w_key, w_value, causal, grad_output) -> (grad_input,
grad_w_query, grad_w_key, grad_w_value)``. Each fixture is checked with ``causal``
false and true; ``grad_output`` is the fixture's value upstream gradient.

A wrong result is compared with the usual slips (:mod:`~qkvcli.check.diagnose`),
so its finding (a code and facts, worded in :mod:`qkvcli.render.check`) names the
one it matches; a softmax without the row maximum subtracted shows only on large
scores, which :func:`check_softmax` probes.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from qkvcli.check.cases import Case, Run
from qkvcli.check.diagnose import (
    Precision,
    close,
    first_mismatch,
    named_slip,
    variant_forward,
)
from qkvcli.check.errors import BadResult, Broken, CallFailed
from qkvcli.check.kinds import HEAD, Kind
from qkvcli.check.result import not_run, not_run_after
from qkvcli.check.session import Session
from qkvcli.check.wire import HEAD_FORWARD_NAMES
from qkvcli.core.arrays import Array
from qkvcli.core.results import Clause, Failure, FamilyCheck, found_at, judge

MODES = (False, True)  # causal
LARGE = 30.0  # the input scale of the softmax probe: scaled scores in the thousands

Bundle = tuple[Array, ...]


class Heads:
    """A head family's view of the session: the head's first results per fixture and mode,
    the reference, and the labels of its runs (for judge)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.backward = session.offers(HEAD.backward)
        self.fixture_of: dict[str, str] = {}  # each run's label: its fixture's (for judge)

    def label(self, case: Case, causal: bool) -> str:
        """The label of ``case`` run in one mode: ``chapter causal``, ``chapter non-causal``."""
        return self._run(case, "causal" if causal else "non-causal")

    def probe_label(self, case: Case) -> str:
        """The label of the softmax probe on ``case``: ``chapter x30``."""
        return self._run(case, f"x{LARGE:g}")

    def _run(self, case: Case, run: str) -> str:
        label = f"{case.label} {run}"
        self.fixture_of[label] = case.label
        return label

    def _in(self, case: Case, causal: bool) -> Run:
        return HEAD.runs(case)[HEAD.modes.index(causal)]

    def forward(self, case: Case, causal: bool) -> Bundle | CallFailed:
        return self.session.first(HEAD, self._in(case, causal))

    def grads(self, case: Case, causal: bool) -> Bundle | CallFailed:
        return self.session.first(HEAD, self._in(case, causal), backward=True)

    def reference(self, case: Case, causal: bool) -> tuple[Bundle, Bundle]:
        """qkv's engine: ``(scores, weights, output)`` and the four gradients."""
        run = self._in(case, causal)
        return (self.session.reference(HEAD, run),
                self.session.reference(HEAD, run, backward=True))

    def precision(self, case: Case, causal: bool) -> list[tuple[str, Precision]] | None:
        return self.session.precision(HEAD, self._in(case, causal))

    def lossy(self, case: Case, causal: bool) -> bool:
        return self.session.lossy(HEAD, self._in(case, causal))


def _right_without_mask(heads: Heads, case: Case) -> bool:
    """Whether the head's non-causal results on ``case`` are right: the mask and the
    overflow probe judge a head only on top of right scores and softmax."""
    got = heads.forward(case, False)
    return not isinstance(got, CallFailed) and all(
        close(g, e, heads.session.tolerance)
        for g, e in zip(got, heads.reference(case, False)[0], strict=True))


def _first_results(family: str, heads: Heads, causal: bool,
                   wanted: Callable[[Case], bool]) -> tuple[list[tuple[Case, Bundle]],
                                                            list[Failure]]:
    """The first head_forward results of the cases ``wanted`` takes, and why others did not
    run: the call failed, or its results are right but for their precision (said by
    head-forward; at the tolerance they cannot show the family's claim)."""
    found, skipped = [], []
    for case in heads.session.cases:
        if not wanted(case):
            continue
        got = heads.forward(case, causal)
        if isinstance(got, CallFailed):
            skipped.append(not_run_after(family, heads.label(case, causal), got))
        elif heads.precision(case, causal) is not None:
            skipped.append(not_run(family, heads.label(case, causal), "head-precision"))
        else:
            found.append((case, got))
    return found, skipped


def check_scaling(session: Session, kind: Kind) -> tuple[FamilyCheck, list[Failure]]:
    """scores are ``Q Kᵀ/√d_k`` (fixtures with ``d_k >= 2``, where it shows)."""
    heads = Heads(session)
    results, failures = _first_results("scaling", heads, False,
                                       lambda c: c.shape[3] >= 2 and c.input.size > 0)
    for case, got in results:
        compute = partial(variant_forward, case.input, case.weights, False)
        fault = named_slip(got[:1], ("unscaled", "by-d_k"),
                           lambda bug: compute(bug)[:1], session.tolerance)  # noqa: B023
        if fault is None and close(got[0], compute("")[0], session.tolerance):
            if named_slip(got[1:2], ("unscaled",), lambda bug: compute(bug)[1:2],  # noqa: B023
                          session.tolerance) is not None:
                fault = "unscaled-weights"
        elif fault is None:
            fault = "not-scaled"
        if fault is not None:
            failures.append(found_at("scaling", heads.label(case, False), "scores",
                                     Clause("slip", (fault,))))
    return judge("scaling", failures, len(results), fixture_of=heads.fixture_of), failures


MASK_SLIPS = ("diagonal", "hides-past", "after-softmax", "no-mask", "always-mask")
"""The mask slips :func:`check_mask` names, in the order they are tried."""


def check_mask(session: Session, kind: Kind) -> tuple[FamilyCheck, list[Failure]]:
    """causal=true: exactly the later positions hidden (the diagonal and the earlier ones
    seen), rows summing to 1, scores unmasked; causal=false: no mask. On fixtures with two
    tokens or more. A wrong causal head whose non-causal results are right fails here,
    named when it is a known slip."""
    heads = Heads(session)
    failures: list[Failure] = []
    judged = 0
    for causal in MODES:
        results, skipped = _first_results("mask", heads, causal,
                                          lambda c: c.shape[1] >= 2 and c.shape[0] >= 1)
        failures += skipped
        judged = max(judged, len(results))
        for case, got in results:
            expected = heads.reference(case, causal)[0]
            if all(close(g, e, session.tolerance) for g, e in zip(got, expected, strict=True)):
                continue
            label = heads.label(case, causal)
            if causal and not _right_without_mask(heads, case):
                failures.append(not_run("mask", label, "head"))
                continue
            fault = named_slip(got, MASK_SLIPS,
                               partial(variant_forward, case.input, case.weights, causal),
                               session.tolerance)
            if fault is None and causal and not close(got[0], expected[0], session.tolerance):
                fault = "mask-moves-scores"
            if fault is not None:
                failures.append(found_at("mask", label, "weights", Clause("slip", (fault,))))
            elif causal:  # right without the mask, wrong with it: a mask no slip names
                where, mismatch = next(
                    found for name, g, e in zip(HEAD_FORWARD_NAMES, got, expected, strict=True)
                    if (found := first_mismatch(name, g, e, session.tolerance)) is not None)
                failures.append(found_at("mask", label, where, Clause("mask-differs", (mismatch,))))
    return judge("mask", failures, judged, fixture_of=heads.fixture_of), failures


def check_softmax(session: Session, kind: Kind) -> tuple[FamilyCheck, list[Failure]]:
    """Rows of weights are >= 0 and sum to 1, and large scores do not overflow (checked
    last of the head's calls: a NaN a program writes ends its session)."""
    heads = Heads(session)
    results, failures = _first_results("softmax", heads, True, lambda c: c.input.size > 0)
    for case, got in results:
        sums = got[1].sum(axis=-1)
        if got[1].size and (np.min(got[1]) < 0 or not close(sums, np.ones_like(sums),
                                                           session.tolerance * 16)):
            failures.append(found_at("softmax", heads.label(case, True), "weights", Clause(
                "row-sums", (float(np.min(sums)), float(np.max(sums)), float(np.min(got[1]))))))
    if failures:
        return judge("softmax", failures, len(results), fixture_of=heads.fixture_of), failures
    probed = [case for case, _ in results if _right_without_mask(heads, case)][:2]
    for case in probed:
        x = case.input * LARGE
        expected = variant_forward(x, case.weights, False)
        largest = float(np.max(np.abs(expected[0]))) if expected[0].size else 0.0
        label = heads.probe_label(case)
        try:
            got = session.call_head_forward(case, x, case.weights, False)
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
                 fixture_of=heads.fixture_of), failures
