"""The RoPE families (chapter 29): ``rope``, ``rope-reverse`` and ``rope-errors``.

An implementation's ``rope(x, base, offset) -> rotated`` turns each adjacent pair
``(2i, 2i+1)`` of the last axis of ``x [batch, tokens, d]`` at token ``t`` by the angle
``(offset + t) * base^(-2i/d)``; ``rope_reverse(rotated, base, offset)`` turns it back
(the transpose, which also carries a gradient from after the rotation to before it).
Both are compared with qkv's engine (:func:`qkvcli.attention.maths.rotate`) on a few
fixtures, and a wrong answer with what each known slip gives: the engine given half-split
pairs (``i`` with ``i + d/2``), positions counted from 1 (the offset plus one), the angle
turned the other way, or ``base^(-i/d)`` (the engine with the root of the base).
"""

from __future__ import annotations

from functools import partial

import numpy as np

from qkvcli.check.boundaries import refusals
from qkvcli.check.diagnose import (
    Bundle,
    agreed,
    first_mismatch,
    kept,
    named_slips,
    precision_clauses,
    precision_faults,
)
from qkvcli.check.errors import Broken, CallFailed
from qkvcli.check.reference import engine_rope
from qkvcli.check.result import call_failure, not_applicable, not_run
from qkvcli.check.session import Session
from qkvcli.core.arrays import Array
from qkvcli.core.errors import format_shape
from qkvcli.core.record import Record
from qkvcli.core.results import Clause, Failure, FamilyCheck, found_at, judge
from qkvcli.core.splitmix import SplitMix64

ROPE_BUGS = ("half-split", "from-one", "turned-back", "frequency")
"""The slips of the rotation, in the order they are tried."""
REVERSE_BUGS = ("not-inverted", "half-split", "from-one", "frequency")
"""The slips of the reverse, in the order they are tried."""


class RopeCase(Record):
    """One RoPE fixture: ``x [batch, tokens, d]``, the base and the position offset."""

    label: str
    input: Array
    base: float
    offset: int


ROPE_SHAPES: tuple[tuple[tuple[int, int, int], float, int], ...] = (
    ((1, 3, 4), 100.0, 0),  # the chapter's sizes
    ((2, 5, 6), 10000.0, 0),  # LLaMA's base; half-split differs from adjacent from d = 4
    ((2, 5, 6), 100.0, 3),  # an offset: positions 3 .. 7
    ((1, 3, 2), 10.0, 1),  # one pair
    ((0, 3, 4), 100.0, 0),  # an empty batch
    ((2, 0, 4), 100.0, 2),  # no tokens
)
ROPE_SEED = 29


def rope_cases() -> list[RopeCase]:
    """The fixtures the RoPE families run on, labelled ``rope[2,5,6,base=100,offset=3]``:
    values drawn uniform in ``[-1, 1)`` (exact neither in 6 decimals nor in float32)."""
    rng = SplitMix64(ROPE_SEED)
    found = []
    for shape, base, offset in ROPE_SHAPES:
        size = int(np.prod(shape))
        x = (rng.next_unit_block(size) * 2.0 - 1.0).reshape(shape)
        label = "rope[{},{},{},base={:g},offset={}]".format(*shape, base, offset)
        found.append(RopeCase(label, x, base, offset))
    return found


def _values(session: Session, family: str, operation: str, reverse: bool,
            bugs: tuple[str, ...]) -> tuple[FamilyCheck, list[Failure]]:
    """``operation`` on every RoPE fixture against the engine's, a wrong one named."""
    failures: list[Failure] = []
    wrong: list[tuple[str, str, Clause]] = []
    names = (operation if not reverse else "turned_back",)
    cases = rope_cases()
    for case in cases:
        try:
            got = session.invoke(family, case.label, operation, (case.input, case.base,
                                                                 case.offset))
        except CallFailed as failure:
            failures.append(call_failure(family, case.label, format_shape(
                list(case.input.shape)), failure))
            if isinstance(failure, Broken):
                break
            continue
        session.worked.add(operation)
        expected = (engine_rope(case.input, case.base, case.offset, reverse=reverse),)
        found = first_mismatch(names[0], got[0], expected[0], session.tolerance)
        if found is None:
            continue
        where, mismatch = found
        faults = precision_faults(names, got, expected, session.tolerance)
        if faults is not None:
            why = Clause("forward-differs", (mismatch, precision_clauses(
                faults, session.tolerance)[0]))
        else:
            def compute(bug: str, c: RopeCase = case) -> Bundle:
                return (engine_rope(c.input, c.base, c.offset, bug, reverse),)

            slips = named_slips(got, bugs, compute, session.tolerance)
            why = Clause("slip-differs", (slips, mismatch)) if slips else mismatch
        wrong.append((case.label, where, why))
    agree = agreed([why.facts[0] if why.code == "slip-differs" else () for _, _, why in wrong
                    if why.code != "forward-differs"])
    failures += [found_at(family, label, where, kept(why, agree)) for label, where, why in wrong]
    failures += session.impurities.pop(family, [])
    return judge(family, failures, len(cases), session.tolerance), failures


def check_rope(session: Session) -> tuple[FamilyCheck, list[Failure]]:
    """``rope`` turns each adjacent pair by ``(offset + t) base^(-2i/d)``, exactly as qkv's
    engine does; a wrong one named when it is a known slip."""
    return _values(session, "rope", "rope", False, ROPE_BUGS)


def check_rope_reverse(session: Session) -> tuple[FamilyCheck, list[Failure]]:
    """``rope_reverse`` turns each pair back by the same angle (not run without it)."""
    if not session.offers("rope_reverse"):
        return not_applicable("rope-reverse", "no-backward"), [
            Failure("rope-reverse", None, None, no_backward=True)]
    return _values(session, "rope-reverse", "rope_reverse", True, REVERSE_BUGS)


def rope_requests() -> list[tuple[tuple[str, tuple[str, ...]], Array, float, int]]:
    """The RoPE requests to reject: an odd width, no width, a rank-1 input, a base of 0
    or below, a negative offset."""
    ones = np.ones((1, 3, 4))
    return [
        (("rope-odd-width", ("3",)), np.ones((1, 3, 3)), 100.0, 0),
        (("rope-zero-width", ()), np.ones((1, 3, 0)), 100.0, 0),
        (("rope-rank-1", ("[4]",)), np.ones(4), 100.0, 0),
        (("rope-base", ("0",)), ones, 0.0, 0),
        (("rope-base", ("-10",)), ones, -10.0, 0),
        (("rope-offset", ("-1",)), ones, 100.0, -1),
    ]


def check_rope_errors(session: Session) -> tuple[FamilyCheck, list[Failure]]:
    """Every bad RoPE request raises (or is answered with an error); lists what was
    silently accepted."""
    family, label = "rope-errors", "rope requests"
    if "rope" not in session.worked:  # it rejects everything: these too, says nothing
        skipped = [not_run(family, None, "rope", stopped=session.stopped is not None)]
        return judge(family, skipped, 1), skipped
    failures = refusals(family, label, (
        (request, partial(session.invoke, family, label, "rope", (x, base, offset)))
        for request, x, base, offset in rope_requests()))
    failures += session.impurities.pop(family, [])
    return judge(family, failures, 1), failures
