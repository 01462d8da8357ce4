"""The families only RoPE has (chapter 29): ``position-zero`` and ``relative-dot``.

An implementation's ``rope(x, base, offset) -> rotated`` turns each adjacent pair
``(2i, 2i+1)`` of the last axis of ``x [batch, tokens, d]`` at token ``t`` by the angle
``(offset + t) * base^(-2i/d)``; the families RoPE shares with every kind (its values
against qkv's engine, its reverse, shapes, errors, replay, purity and the gradient check
of ``rope_reverse`` against central differences of ``rope``) run over
:data:`~qkvcli.check.kinds.ROPE`. The chapter's two claims are judged here on the
implementation's own answers: position zero is the identity (every token, each turned
as if it stood at position 0, is the input's own:
:func:`~qkvcli.core.invariants.position_zero`), and a common shift of every position
keeps every dot product between the rotated tokens (``rope(x, base, o)`` and
``rope(x, base, o + 5)`` have the same Gram matrix per batch item). That claim is
:func:`relative_dot`, defined here once: chapter 29 judges its query-key dot products by
it, and chapter 30 its layer's weights.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from qkvcli.check.cases import Case
from qkvcli.check.kinds import ROPE
from qkvcli.check.result import not_run, not_run_after
from qkvcli.check.session import Session
from qkvcli.core.arrays import Array, first_difference, mismatches
from qkvcli.core.invariants import position_zero
from qkvcli.core.results import Failure, FamilyCheck, judge
from qkvcli.protocol.errors import CallFailed

SHIFT = 5
"""How far the relative-dot family moves every position."""


def _rotated(session: Session, family: str, case: Case,
             offset: int) -> Array | Failure:
    """The implementation's rotation of the fixture from ``offset``, or why not."""
    run = ROPE.run(case._replace(offset=offset))
    try:
        return session.call(ROPE, run)[0]
    except CallFailed as failure:
        return not_run_after(family, case.label, failure)


def _judged(session: Session) -> list[Case]:
    """The fixtures with a token (the claims say nothing of an empty one)."""
    return [case for case in session.cases_of(ROPE) if case.input.size]


def check_position_zero(session: Session, at_zero: Callable[[Array], Array] | None = None
                        ) -> tuple[FamilyCheck, list[Failure]]:
    """Every token turned as if it stood at position 0 is the input's own, exactly: the
    angle at position 0 is 0 for every pair. Each token of ``x [B,T,d]`` is its own
    batch item of one token (``[B T, 1, d]``), turned from offset 0. ``at_zero`` gives
    what the tokens must turn into where that is not themselves (a scaled RoPE's
    attention factor times its turned coordinates: ``cos 0`` is the factor)."""
    family, failures = "position-zero", []
    cases = _judged(session)
    for case in cases:
        rows = case.input.reshape(-1, 1, case.input.shape[-1])
        turned = _rotated(session, family, case._replace(input=rows), 0)
        if isinstance(turned, Failure):
            failures.append(turned)
            if turned.not_run == "stopped":
                break
            continue
        if turned.shape != rows.shape:  # rope says how; position zero is not judged
            failures.append(not_run(family, case.label, "rope-shape"))
            continue
        found = position_zero(turned, rows if at_zero is None else at_zero(rows))
        if found is not None:
            where, got, wanted = found
            failures.append(Failure(family, case.label, f"rope{where}", code="not-identity",
                                    facts=(f"rope{where}", got, wanted)))
    return judge(family, failures, len(cases)), failures


def dots(queries: Array, keys: Array) -> Array:
    """Every dot product of a query row with a key row: ``[...,T,d], [...,S,d] -> [...,T,S]``."""
    found: Array = queries @ np.swapaxes(keys, -1, -2)
    return found


def relative_dot(before: Array, after: Array, tolerance: float,
                 scaled: bool = True) -> tuple[str, str, str] | None:
    """The relative-dot claim: ``before`` (the :func:`dots` of the rotated tokens, or a
    layer's weights of them) stays ``after`` every position moves by a common shift, within
    ``tolerance`` as a scaled error (``qkv check``'s) or, not ``scaled``, an absolute one
    (the chapters'). ``None``, or :func:`~qkvcli.core.arrays.first_difference`'s finding."""
    with np.errstate(invalid="ignore"):
        return first_difference(after, before, partial(mismatches, tolerance=tolerance) if scaled
                                else lambda a, b: ~(np.abs(a - b) <= tolerance))


def check_relative_dot(session: Session) -> tuple[FamilyCheck, list[Failure]]:
    """Every position moved by the same :data:`SHIFT` keeps every dot product between the
    rotated tokens (within the tolerance): RoPE's scores see only relative positions."""
    family, failures = "relative-dot", []
    cases = _judged(session)
    for case in cases:
        turned = [_rotated(session, family, case, offset)
                  for offset in (case.offset, case.offset + SHIFT)]
        failed = next((t for t in turned if isinstance(t, Failure)), None)
        if failed is not None:
            failures.append(failed)
            if failed.not_run == "stopped":
                break
            continue
        first, shifted = (t for t in turned if not isinstance(t, Failure))
        if first.shape != case.input.shape or shifted.shape != case.input.shape:
            failures.append(not_run(family, case.label, "rope-shape"))
            continue
        with np.errstate(all="ignore"):
            found = relative_dot(dots(first, first), dots(shifted, shifted), session.tolerance)
        if found is not None:
            where, new, old = found
            failures.append(Failure(family, case.label, f"dot{where}", code="shift-moved",
                                    facts=(SHIFT, f"dot{where}", old, new)))
    return judge(family, failures, len(cases), session.tolerance), failures

