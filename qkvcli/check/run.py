"""Running every evidence family on an implementation and collecting one result.

Families are computed in an order that lets purity see every call (purity last, then
the conversation is closed and judged), and listed in the issue's order: forward,
reverse, shapes, errors, independence, replay, purity, gradcheck, protocol (for
``--command``; for a Python implementation only when its process died or hung). A
failed protocol comes first: it explains the families it stopped.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from qkvcli.check.behaviour import check_independence, check_prefix, check_purity, check_replay
from qkvcli.check.boundaries import check_errors, check_shapes, check_single_token
from qkvcli.check.cases import Case
from qkvcli.check.kinds import CACHE_STEPS, HEAD, KINDS, MULTI_HEAD, PROJECTIONS, ROPE, Kind
from qkvcli.check.numerical import check_gradcheck
from qkvcli.check.result import FAMILIES, CheckResult, not_run
from qkvcli.check.session import Session
from qkvcli.check.values import check_forward, check_reverse
from qkvcli.core.results import Clause, Failure, FamilyCheck, found_at, judge
from qkvcli.protocol.errors import Broken, NoReply

if TYPE_CHECKING:
    from qkvcli.protocol.python import Implementation

Judged = tuple[FamilyCheck, list[Failure]]
Family = Callable[[Session, Kind], Judged]


def _own(module: str, name: str, kind_too: bool = False) -> Family:
    """The family ``name`` only one kind has, in ``qkvcli.check.MODULE``, imported when
    it first runs (the projections' check loads no other kind's families and no
    attention engine); it takes the session alone unless ``kind_too``."""

    def family(session: Session, kind: Kind) -> Judged:
        found = getattr(importlib.import_module(f"qkvcli.check.{module}"), name)
        return found(session, kind) if kind_too else found(session)  # type: ignore[no-any-return]

    return family


SHARED: tuple[tuple[str, Family], ...] = (
    ("forward", check_forward),
    ("reverse", check_reverse),
    ("shapes", check_shapes),
    ("errors", check_errors),
    ("replay", check_replay),
    ("gradcheck", check_gradcheck),
)
"""The families every kind has, in the order they are computed (purity comes last)."""
ATTENTION: tuple[tuple[str, Family], ...] = (
    ("prefix", check_prefix),
    ("single-token", check_single_token),
)
"""The claims of every kind with an attention matrix (a head, multi-head attention)."""

PLANS: dict[str, tuple[tuple[str, Family], ...]] = {
    PROJECTIONS.forward: (*SHARED[:4], ("independence", check_independence), *SHARED[4:]),
    HEAD.forward: (SHARED[0], ("scaling", _own("heads", "check_scaling", True)),
                   ("mask", _own("heads", "check_mask", True)), *ATTENTION, *SHARED[1:],
                   # last: its overflow probe may end a program's session
                   ("softmax", _own("heads", "check_softmax", True))),
    ROPE.forward: (*SHARED[:2], ("position-zero", _own("rotary", "check_position_zero")),
                   ("relative-dot", _own("rotary", "check_relative_dot")), *SHARED[2:]),
    MULTI_HEAD.forward: (*SHARED[:2], ("head-isolation", _own("multihead", "check_head_isolation")),
                         *ATTENTION, *SHARED[2:]),
    CACHE_STEPS.forward: (("steps", _own("incremental", "check_cached_steps", True)),
                          ("refusals", _own("incremental", "check_refused_steps", True)),
                          ("errors", check_errors),
                          ("replay", _own("incremental", "check_cache_replay", True))),
}
"""Each kind's families in the order they are computed, by the kind's forward; its
purity follows them all, so that it sees every call. A name is the kind's own, published
through :meth:`~qkvcli.check.kinds.Kind.family`."""


def plan(kind: Kind) -> list[tuple[str, Family]]:
    """The kind's families by published name, in the order they are computed."""
    names = {"scaling", "mask", "softmax", "independence", "position-zero", "relative-dot",
             "head-isolation"}  # a kind's own families are published as they are
    return [(name if name in names else kind.family(name), family)
            for name, family in (*PLANS[kind.forward], ("purity", check_purity))]


Progress = Callable[[str, int, int, int], None]
"""Told ``(family, families done, families in all, calls so far)`` before each family
and after each call (the CLI draws a progress bar from it)."""


def _protocol_failure(detail: str, stopped: tuple[str, Broken] | None) -> Failure:
    """The conversation's failure: on the fixture whose call broke it, when one did; a
    call that got no reply in time as ``no-reply`` (request, operation, seconds) for the
    renderer to name ``--timeout``, any other problem as the conversation's own words."""
    if stopped is None:
        return Failure("protocol", None, None, detail)
    fixture, error = stopped
    if isinstance(error, NoReply):
        return found_at("protocol", fixture, None, Clause(
            "no-reply", (error.request, error.operation, error.seconds)))
    return Failure("protocol", fixture, None, detail)


def _judged_some(check: FamilyCheck, failures: list[Failure]) -> Judged:
    """A family that passed on no fixture judged nothing (the fixtures given have no
    token, or one, where its claim needs two): not run, never a pass on none."""
    if check.outcome != "passed" or check.fixtures:
        return check, failures
    why = not_run(check.name, None, "no-fixture")
    return check._replace(passed=False, outcome="not-run", first=why), [*failures, why]


def run_checks(implementation: Implementation, cases: list[Case], tolerance: float,
               progress: Progress | None = None) -> CheckResult:
    """Every family on every case; for a ``--command`` program, ends the conversation too.

    ``tolerance`` bounds the scaled error against qkv's engine (forward, reverse,
    independence); the gradient check uses each case's own tolerance.
    """
    current: dict[str, Any] = {"family": "", "done": 0}
    total = [0]

    def on_call(calls: int) -> None:
        if progress is not None:
            progress(current["family"], current["done"], total[0], calls)

    session = Session(implementation, cases, tolerance, on_call)
    kinds = [kind for kind in KINDS if session.offers(kind.forward)]
    order: list[tuple[str, Callable[[], Judged]]] = [
        (name, partial(family, session, kind)) for kind in kinds for name, family in plan(kind)]
    total[0] = len(order)
    found: dict[str, tuple[FamilyCheck, list[Failure]]] = {}
    for done, (name, family) in enumerate(order):
        current.update(family=name, done=done)
        on_call(session.calls)
        found[name] = _judged_some(*family())
    stderr = ""
    implementation.finish()
    protocol = getattr(implementation, "protocol_detail", None)
    if protocol is not None:
        passed, detail = protocol()
        failures = [] if passed else [_protocol_failure(detail, session.stopped)]
        # A Python implementation's runner is qkv's: its conversation is worth a line
        # only when the implementation's process died or hung in it.
        if implementation.is_command or not passed:
            found["protocol"] = (judge("protocol", failures, len(cases), finding=detail),
                                 failures)
        stderr = implementation.stderr_text()  # type: ignore[attr-defined]
    names = [name for name in FAMILIES if name in found]
    if "protocol" in found and not found["protocol"][0].passed:
        names = ["protocol", *(name for name in names if name != "protocol")]  # said first
    ordered = [found[name] for name in names]
    return CheckResult(
        implementation=implementation.label,
        fixtures=(*(case.label for case in cases if any(
            kind.takes(case) for kind in kinds if kind.fixtures is None)),
                  *(case.label for kind in kinds if kind.fixtures is not None
                    for case in session.cases_of(kind))),
        checks=tuple(check for check, _ in ordered),
        # A family that could not run on a fixture found nothing there: not a failure.
        failures=tuple(failure for _, failures in ordered for failure in failures
                       if not failure.not_run),
        stderr=stderr,
        command=implementation.is_command,
        operations=tuple(implementation.operations),
    )
