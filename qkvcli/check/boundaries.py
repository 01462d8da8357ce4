"""The ``shapes`` and ``errors`` families, and a head's (``head-shapes``, ``head-errors``):
empty axes kept, bad shapes rejected."""

from __future__ import annotations

import numpy as np

from qkvcli.check.cases import Case
from qkvcli.check.errors import BadResult, Broken, CallFailed
from qkvcli.check.heads import Heads
from qkvcli.check.kinds import Kind
from qkvcli.check.result import not_run
from qkvcli.check.session import Session
from qkvcli.check.target import BACKWARD_NAMES, FORWARD_NAMES
from qkvcli.check.wire import HEAD_BACKWARD_NAMES
from qkvcli.core.arrays import Array
from qkvcli.core.errors import format_shape
from qkvcli.core.results import Failure, FamilyCheck, judge


def _empty_inputs(case: Case) -> list[tuple[str, Array]]:
    batch, tokens, d_model, _ = case.shape
    return [("empty batch", np.zeros((0, max(tokens, 1), d_model))),
            ("no tokens", np.zeros((max(batch, 1), 0, d_model)))]


def _probe(session: Session, case: Case, what: str, x: Array) -> Failure | None:
    batch, tokens, d_model, d_head = (*x.shape, case.shape[3])
    shown = format_shape(list(x.shape))
    try:
        outputs = session.call_forward(case, x, case.weights)
        expected: list[tuple[str, tuple[int, ...]]] = [
            (name, (batch, tokens, d_head)) for name in FORWARD_NAMES]
        results = list(outputs)
        if session.implementation.has_backward:
            upstream = tuple(np.zeros((batch, tokens, d_head)) for _ in range(3))
            results += session.call_backward(case, x, case.weights, upstream)
            expected += [(BACKWARD_NAMES[0], (batch, tokens, d_model))]
            expected += [(name, (d_model, d_head)) for name in BACKWARD_NAMES[1:]]
    except Broken:
        return not_run("shapes", case.label, "stopped")
    except CallFailed as failure:
        return Failure("shapes", case.label, shown, code="probe-failed",
                       facts=(failure.operation, what, shown, failure.message))
    for (name, shape), result in zip(expected, results, strict=True):
        if result.shape != shape:
            return Failure("shapes", case.label, shown, code="probe-shape",
                           facts=(what, shown, name, format_shape(list(result.shape)),
                                  format_shape(list(shape))))
    return None


def check_shapes(session: Session, kind: Kind) -> tuple[FamilyCheck, list[Failure]]:
    """Forward (and backward) on an empty batch and on no tokens keep every axis."""
    failures = []
    for case in session.cases:
        for what, x in _empty_inputs(case):
            found = _probe(session, case, what, x)
            if found is not None:
                failures.append(found)
                break
    return judge("shapes", failures, len(session.cases),
                 backward=session.implementation.has_backward), failures


Request = tuple[str, tuple[str, ...]]
"""A bad request as data: its code (the renderer's ``REQUEST_WORDS``) and facts."""


def bad_inputs(case: Case) -> list[tuple[Request, Array, tuple[Array, Array, Array]]]:
    """``(request, x, weights)`` for each forward input the implementation must reject."""
    batch, tokens, d_model, d_head = case.shape
    x = np.ones((max(batch, 1), max(tokens, 1), d_model))
    w_query, w_key, w_value = (np.ones((d_model, d_head)) for _ in range(3))
    return [
        (("rank-2", (format_shape([x.shape[1], d_model]),)), x[0], (w_query, w_key, w_value)),
        (("input-width", (str(d_model + 1), str(d_model))),
         np.ones((*x.shape[:2], d_model + 1)), (w_query, w_key, w_value)),
        (("model-widths", (str(d_model), str(d_model + 1))), x,
         (w_query, np.ones((d_model + 1, d_head)), w_value)),
        (("head-widths", (str(d_head), str(d_head + 1))), x,
         (w_query, np.ones((d_model, d_head + 1)), w_value)),
    ]


def bad_backward_inputs(case: Case) -> list[tuple[Request, Array, tuple[Array, Array, Array],
                                                   tuple[Array, Array, Array]]]:
    """``(request, x, weights, upstream)`` for each backward request to reject: the
    input's rank and width, and upstream gradients of the wrong tokens or head width."""
    batch, tokens, d_model, d_head = case.shape
    batch, tokens = max(batch, 1), max(tokens, 1)
    x = np.ones((batch, tokens, d_model))
    weights = (np.ones((d_model, d_head)), np.ones((d_model, d_head)), np.ones((d_model, d_head)))
    upstream = np.ones((batch, tokens, d_head))
    return [
        (("backward-rank-2", (format_shape([tokens, d_model]),)), x[0], weights,
         (upstream, upstream, upstream)),
        (("backward-input-width", (str(d_model + 1), str(d_model))),
         np.ones((batch, tokens, d_model + 1)), weights, (upstream, upstream, upstream)),
        (("backward-grad-key", (format_shape([batch, tokens + 1, d_head]), str(tokens))), x,
         weights, (upstream, np.ones((batch, tokens + 1, d_head)), upstream)),
        (("backward-grad-value", (format_shape([batch, tokens, d_head + 1]), str(d_head))), x,
         weights, (upstream, upstream, np.ones((batch, tokens, d_head + 1)))),
    ]


def check_errors(session: Session, kind: Kind) -> tuple[FamilyCheck, list[Failure]]:
    """Every bad forward (and backward) request raises (or is answered with an error);
    lists what was silently accepted."""
    failures = []
    backward = session.implementation.has_backward
    for case in session.cases:
        accepted: list[Request] = []
        requests: list[tuple[Request, Array, tuple[Array, ...], tuple[Array, ...] | None]] = [
            (request, x, weights, None) for request, x, weights in bad_inputs(case)]
        if backward:
            requests += bad_backward_inputs(case)
        for request, x, weights, upstream in requests:
            try:
                if upstream is None:
                    session.call_forward(case, x, weights)
                else:
                    session.call_backward(case, x, weights, upstream)
            except BadResult:
                pass  # returned garbage instead of raising: still accepted
            except Broken:
                failures.append(not_run("errors", case.label, "stopped"))
                break
            except CallFailed:
                continue
            accepted.append(request)
        if accepted:
            failures.append(Failure("errors", case.label, accepted[0][0], code="accepted",
                                    facts=tuple(accepted)))
    return judge("errors", failures, len(session.cases), backward=backward), failures


def check_head_shapes(session: Session, kind: Kind) -> tuple[FamilyCheck, list[Failure]]:
    """An empty batch, no tokens and one token keep every axis, forward and backward."""
    heads = Heads(session)
    failures: list[Failure] = []
    for case in session.cases:
        _, _, d_model, d_head = case.shape
        for what, batch, tokens in (("empty batch", 0, 2), ("no tokens", 1, 0), ("one token", 1, 1)):
            x = np.zeros((batch, tokens, d_model)) + 0.5
            expected: list[tuple[str, tuple[int, ...]]] = [
                ("scores", (batch, tokens, tokens)), ("weights", (batch, tokens, tokens)),
                ("output", (batch, tokens, d_head))]
            try:
                results = list(session.call_head_forward(case, x, case.weights, True))
                if heads.backward:
                    results += session.call_head_backward(case, x, case.weights, True,
                                                           np.ones((batch, tokens, d_head)))
                    expected += [("grad_input", x.shape)]
                    expected += [(name, (d_model, d_head)) for name in HEAD_BACKWARD_NAMES[1:]]
            except Broken:
                failures.append(not_run("head-shapes", case.label, "stopped"))
                break
            except CallFailed as failure:
                failures.append(Failure("head-shapes", case.label, what, code="probe-failed",
                                        facts=(failure.operation, what,
                                               format_shape(list(x.shape)), failure.message)))
                break
            wrong = next(((n, s, r) for (n, s), r in zip(expected, results, strict=True)
                          if r.shape != s), None)
            if wrong is not None:
                name, shape, result = wrong
                failures.append(Failure("head-shapes", case.label, what, code="probe-shape",
                                        facts=(what, format_shape(list(x.shape)), name,
                                               format_shape(list(result.shape)),
                                               format_shape(list(shape)))))
                break
    return judge("head-shapes", failures, len(session.cases), backward=heads.backward), failures


def check_head_errors(session: Session, kind: Kind) -> tuple[FamilyCheck, list[Failure]]:
    """Bad head requests are rejected: the input's rank and width, mismatched head widths,
    and (with a backward) a grad_output of the wrong shape."""
    heads = Heads(session)
    failures: list[Failure] = []
    for case in session.cases:
        batch, tokens, d_model, d_head = (max(d, 1) for d in case.shape)
        x = np.ones((batch, tokens, d_model))
        w = np.ones((d_model, d_head))
        requests: list[tuple[Request, Array, tuple[Array, ...], Array | None]] = [
            (("rank-2", (format_shape([tokens, d_model]),)), x[0], (w, w, w), None),
            (("input-width", (str(d_model + 1), str(d_model))),
             np.ones((batch, tokens, d_model + 1)), (w, w, w), None),
            (("key-width", (str(d_head + 1), str(d_head))), x,
             (w, np.ones((d_model, d_head + 1)), w), None),
        ]
        if heads.backward:
            longer = (batch, tokens + 1, d_head)
            requests.append((("grad-output", (format_shape(list(longer)), str(tokens))), x,
                             (w, w, w), np.ones(longer)))
        accepted: list[Request] = []  # codes (the renderer's REQUEST_WORDS) and facts
        for description, bad_x, weights, upstream in requests:
            try:
                if upstream is None:
                    session.call_head_forward(case, bad_x, weights, True)
                else:
                    session.call_head_backward(case, bad_x, weights, True, upstream)
            except BadResult:
                pass
            except Broken:
                failures.append(not_run("head-errors", case.label, "stopped"))
                break
            except CallFailed:
                continue
            accepted.append(description)
        if accepted:
            failures.append(Failure("head-errors", case.label, accepted[0][0], code="accepted",
                                    facts=tuple(accepted)))
    return judge("head-errors", failures, len(session.cases), backward=heads.backward), failures
