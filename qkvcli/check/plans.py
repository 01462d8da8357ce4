"""Every report's plan, in one table: which families, in what order, with which settings.

A plan never computes. Each report's evidence is computed by ``check``'s families on an
implementation (qkv's engine for chapters 26 to 30, a real layer for attend: see
:mod:`qkvcli.check.chapter26`, :mod:`qkvcli.chapters`, :mod:`qkvcli.check.attend`); its
plan is a row of :data:`PLANS`, each family's id in report order with what reads its
verdict off that evidence (a claim that holds or not, the gradient check's own
judgement, or ``None`` where the family does not apply), judged by
:func:`~qkvcli.core.results.judge_plan`. Each id's published name is the names table's
(:mod:`qkvcli.render.names`), under the same report key. ``qkv check``'s plan, which
runs its families on a learner's implementation kind by kind, is
:data:`qkvcli.check.run.PLANS`.

A new chapter, or a new family in a report, is a row or an entry here.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from qkvcli.core.invariants import Prefix
from qkvcli.core.names import CHAPTER_IDS
from qkvcli.core.results import FamilyCheck, Plan

RUN = "run"
ATTEND = "attend"
CHECK = "check"
CH27, CH28, CH29, CH30, CH37 = (CHAPTER_IDS[number] for number in (27, 28, 29, 30, 37))
"""The reports' keys, here and in the names table."""

ATTEND_ORDER = ("forward", "attention", "mask", "hull", "scale_probe", "prefix",
                "single_token", "head_isolation", "position_zero", "decode", "reverse",
                "shapes", "replay", "gradcheck")
"""attend's families, in report order (the renderers publish ``attention`` as
``weights``); ``prefix`` only with the causal mask, ``head_isolation`` only for a layer
of two heads or more whose heads a q/k norm does not join, ``position_zero`` only with
RoPE, ``decode`` only when asked (``--decode``: the layer one token at a time through a
KV cache against its full causal pass): its evidence holds what it found of each, by
name."""


def judged_gradcheck(evidence: Any, fixtures: int = 0) -> FamilyCheck:
    """A chapter's gradient check as its plan judges it: its own verdict, with its
    tolerance and count (``fixtures``: the fixtures its report counts, 1 for chapters 29
    and 30, none said for 27 and 28)."""
    check = evidence.gradcheck
    return FamilyCheck("gradcheck", check.passed, "passed" if check.passed else "failed",
                       fixtures=fixtures, tolerance=check.tolerance, coordinates=check.count)


def _rows(e: Any) -> bool:
    return bool(e.primary.rows_sum_to_one and e.primary.terms_make_output)


def _refused(e: Any) -> bool:
    return all(case.rejected for case in e.errors)


def _found(name: str, found: dict[str, Any]) -> bool | None:
    """attend's verdict of ``name``: the claim its family found (``None``: it does not
    apply), or the ``passed`` of the record it found (weights, mask, hull, gradient
    check); its shape probes pass when every probe kept its shape."""
    fact = found.get(name)
    if name == "shapes" and fact is not None:
        return all(probe.kept for probe in fact)
    return fact if fact is None or isinstance(fact, bool) else bool(fact.passed)


PLANS: dict[str, Plan[Any]] = {
    RUN: (
        ("forward", lambda e: e.forward_ok),
        ("reverse", lambda e: e.reverse_ok),
        ("shapes", lambda e: e.shapes.passed),
        ("errors", lambda e: e.errors.passed),
        ("initialization", lambda e: e.initialization.passed),
        ("independence", lambda e: e.independence.passed),
        ("replay", lambda e: e.replay_bitwise),
        ("gradcheck", lambda e: e.gradcheck.passed),
        ("expect", lambda e: None if e.expect is None else e.expect.passed),
    ),
    CH27: (
        ("row_sums", _rows), ("scale_probe", lambda e: e.scale.holds),
        ("single_token", lambda e: e.single.holds),
        ("batch_isolation", lambda e: e.batch_isolated),
        ("empty_batch", lambda e: e.empty_holds), ("gradcheck", judged_gradcheck),
        ("rejected_inputs", _refused), ("replay", lambda e: e.replay_bitwise),
    ),
    CH28: (
        ("row_sums", _rows), ("masked_rows", lambda e: e.future_zero),
        ("prefix_invariance", lambda e: e.prefix.invariant),
        ("suffix_gradient", lambda e: e.prefix.suffix_zero),
        ("single_token", lambda e: e.single.holds), ("empty_batch", lambda e: e.empty.kept),
        ("tape_finite", lambda e: e.primary.tape_finite), ("gradcheck", judged_gradcheck),
        ("rejected_inputs", _refused), ("replay", lambda e: e.replay_bitwise),
    ),
    CH29: (
        ("position_zero", lambda e: e.primary.position_zero_identity),
        ("norms", lambda e: e.primary.norm_preserved),
        ("relative_dot", lambda e: e.primary.common_shift_preserved),
        ("shapes", lambda e: all(p.kept for p in e.probes)),
        ("errors", _refused),
        ("gradcheck", lambda e: judged_gradcheck(e, fixtures=1)),
        ("tape_finite", lambda e: e.primary.tape_finite),
        ("replay", lambda e: e.replay_bitwise),
    ),
    CH30: (
        ("causal", lambda e: e.probes.future_zero and e.probes.rows_normalized),
        ("prefix", lambda e: Prefix(e.probes.prefix_unchanged, e.probes.suffix_changed).holds),
        ("head_isolation", lambda e: e.probes.head_isolation),
        ("split_merge", lambda e: e.probes.split_merge),
        ("common_offset", lambda e: e.probes.common_offset),
        ("shapes", lambda e: all(p.kept for p in e.shapes)),
        ("parameters", lambda e: e.parameters.distinct),
        ("errors", _refused),
        ("gradcheck", lambda e: judged_gradcheck(e, fixtures=1)),
        ("tape_finite", lambda e: e.tape_finite),
        ("replay", lambda e: e.replay_bitwise),
    ),
    CH37: (
        ("steps", lambda e: e.cached_steps.passed),
        ("growth", lambda e: e.growth),
        ("offset", lambda e: e.offset),
        ("work", lambda e: e.counted),
        ("reset", lambda e: e.reset.after == 0 and e.reset.allocation_reused
         and e.reset.storage_unchanged),
        ("replay", lambda e: e.replay_bitwise),
        ("errors", _refused),
    ),
    ATTEND: tuple((name, partial(_found, name)) for name in ATTEND_ORDER),
}
"""Each report's plan by its key: chapter 26's (``qkv run``), chapters 27 to 30's and 37's,
attend's, each family's id in report order with what reads its verdict."""


def order(report: str) -> tuple[str, ...]:
    """The ids of ``report``'s families, in report order."""
    return tuple(name for name, _ in PLANS[report])
