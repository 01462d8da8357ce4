"""The multi-head families (chapter 30): ``multi-head``, ``multi-head-reverse``,
``head-isolation`` and ``multi-head-errors``.

An implementation's ``mha_forward(x, w_query, w_key, w_value, w_output, heads, causal,
rope, base, offset) -> (weights, merged, output)`` projects ``x [B,T,d_model]`` with the
``[d_model, d_model]`` weights, splits each projection into ``heads`` heads of width
``d_h = d_model / heads`` (head ``h`` takes columns ``h d_h .. (h+1) d_h``), turns each
head's queries and keys with RoPE when ``rope`` (adjacent pairs, ``base``, positions from
``offset``), attends in each head (``weights [B,heads,T,T]``, scaled by ``1/√d_h``,
masked when ``causal``), merges the heads' outputs back into ``merged [B,T,d_model]``
and applies the output projection: ``output = merged W_O``. ``mha_backward(...,
grad_output)`` gives ``(grad_input, grad_w_query, grad_w_key, grad_w_value,
grad_w_output)``.

Each fixture runs without and with the mask and RoPE, against qkv's engine (a
:class:`~qkvcli.attention.multihead.MultiHeadLayer`); a wrong answer is compared with
what each known slip gives, each the engine on a transformed input: heads split by a
bare reshape (``[B,T,d] -> [B,H,T,d_h]`` without the transpose, so heads leak into each
other: the engine on projections permuted to match), merged by one (the engine's head
outputs reshaped the same way), ``W_O`` applied to each head before the merge (the
engine with ``W_O``'s off-diagonal blocks zeroed), scores scaled by ``1/√d_model``, and
RoPE with half-split pairs, left out or always applied.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from qkvcli.check.boundaries import refusals
from qkvcli.check.diagnose import (
    Bundle,
    agreed,
    first_mismatch,
    first_outside,
    kept,
    named_slips,
    precision_clauses,
    precision_faults,
)
from qkvcli.check.errors import Broken, CallFailed
from qkvcli.check.reference import engine_mha, engine_mha_backward
from qkvcli.check.result import call_failure, not_applicable, not_run, not_run_after
from qkvcli.check.session import Session
from qkvcli.check.wire import MHA_BACKWARD_NAMES, MHA_FORWARD_NAMES
from qkvcli.core.arrays import Array
from qkvcli.core.errors import format_shape
from qkvcli.core.record import Record
from qkvcli.core.results import Clause, Failure, FamilyCheck, found_at, judge
from qkvcli.core.splitmix import SplitMix64

MHA_BUGS = ("split-no-transpose", "merge-no-transpose", "wo-before-merge", "scale-d_model",
            "rope-half-split", "no-rope", "rope-always")
"""The multi-head slips, in the order they are tried. Positions counted from 1 are not
among them: a common shift of every position leaves RoPE's scores as they are (the
``rope`` family judges the offset)."""
MODES = ((False, False), (True, False), (False, True), (True, True))
"""``(causal, rope)``: each fixture without and with the mask and RoPE."""


class MhaCase(Record):
    """One multi-head fixture: the input, ``W_Q``, ``W_K``, ``W_V``, ``W_O``, the head
    count, RoPE's base and offset, and the output's upstream gradient."""

    label: str
    input: Array
    weights: tuple[Array, Array, Array, Array]
    heads: int
    base: float
    offset: int
    upstream: Array


MHA_SHAPES: tuple[tuple[tuple[int, int, int], int, float, int], ...] = (
    ((1, 3, 4), 2, 100.0, 0),  # the chapter's sizes: two heads of width 2
    ((2, 4, 8), 2, 100.0, 1),  # heads of width 4: half-split pairs differ from adjacent ones
    ((2, 4, 6), 3, 10000.0, 2),  # three heads, batch items that differ, an offset
    ((0, 3, 4), 2, 100.0, 0),  # an empty batch
    ((1, 1, 4), 2, 100.0, 0),  # one token
)
MHA_SEED = 30


def mha_cases() -> list[MhaCase]:
    """The multi-head fixtures, labelled ``mha[2,4,6/3,base=10000,offset=2]`` (the input's
    shape and the head count, RoPE's base and offset); values drawn uniform in ``[-1, 1)``."""
    rng = SplitMix64(MHA_SEED)

    def uniform(*dims: int) -> Array:
        values: Array = (rng.next_unit_block(int(np.prod(dims))) * 2.0 - 1.0).reshape(dims)
        return values

    found = []
    for (batch, tokens, width), heads, base, offset in MHA_SHAPES:
        x = uniform(batch, tokens, width)
        w = [uniform(width, width) for _ in range(4)]
        label = f"mha[{batch},{tokens},{width}/{heads},base={base:g},offset={offset}]"
        found.append(MhaCase(label, x, (w[0], w[1], w[2], w[3]), heads, base, offset,
                             uniform(batch, tokens, width)))
    return found


def _run_label(case: MhaCase, causal: bool, rope: bool) -> str:
    """``mha[...] causal rope``: the fixture in one mode."""
    return " ".join((case.label, "causal" if causal else "non-causal", *(("rope",) if rope
                                                                          else ())))


def _arguments(case: MhaCase, causal: bool, rope: bool,
               weights: tuple[Array, ...] | None = None) -> tuple[object, ...]:
    return (case.input, *(weights or case.weights), case.heads, causal, rope, case.base,
            case.offset)


def _values(session: Session, backward: bool) -> tuple[FamilyCheck, list[Failure]]:
    family = "multi-head-reverse" if backward else "multi-head"
    operation = "mha_backward" if backward else "mha_forward"
    if backward and not session.offers(operation):
        return not_applicable(family, "no-backward"), [Failure(family, None, None,
                                                               no_backward=True)]
    names = MHA_BACKWARD_NAMES if backward else MHA_FORWARD_NAMES
    failures: list[Failure] = []
    wrong: list[tuple[str, str, Clause]] = []
    fixture_of = {}
    cases = mha_cases()
    for case in cases:
        for causal, rope in MODES:
            label = _run_label(case, causal, rope)
            fixture_of[label] = case.label
            args = _arguments(case, causal, rope)
            try:
                got = session.invoke(family, label, operation,
                                     (*args, case.upstream) if backward else args)
            except CallFailed as failure:
                failures.append(call_failure(family, label, format_shape(
                    list(case.input.shape)), failure))
                if isinstance(failure, Broken):
                    return judge(family, failures, len(cases), fixture_of=fixture_of), failures
                continue
            session.worked.add(operation)
            expected = (engine_mha_backward(case.input, case.weights, case.heads, causal, rope,
                                            case.base, case.offset, case.upstream)
                        if backward else engine_mha(case.input, case.weights, case.heads,
                                                    causal, rope, case.base, case.offset))
            found = next((first for name, g, e in zip(names, got, expected, strict=True)
                          if (first := first_mismatch(name, g, e, session.tolerance))
                          is not None), None)
            if found is None:
                continue
            where, mismatch = found
            faults = precision_faults(names, got, expected, session.tolerance)
            if faults is not None:
                why = Clause("forward-differs", (mismatch, precision_clauses(
                    faults, session.tolerance)[0]))
            elif backward:
                why = mismatch
            else:
                def compute(bug: str, c: MhaCase = case, m: bool = causal,
                            r: bool = rope) -> Bundle:
                    return engine_mha(c.input, c.weights, c.heads, m, r, c.base, c.offset, bug)

                slips = named_slips(got, MHA_BUGS, compute, session.tolerance)
                why = Clause("slip-differs", (slips, mismatch)) if slips else mismatch
            wrong.append((label, where, why))
    agree = agreed([why.facts[0] if why.code == "slip-differs" else () for _, _, why in wrong
                    if why.code != "forward-differs"])
    failures += [found_at(family, label, where, kept(why, agree)) for label, where, why in wrong]
    failures += session.impurities.pop(family, [])
    return judge(family, failures, len(cases), session.tolerance,
                 fixture_of=fixture_of), failures


def check_multi_head(session: Session) -> tuple[FamilyCheck, list[Failure]]:
    """weights, merged and output as qkv's engine gives them, without and with the mask
    and RoPE; a wrong one named when it is a known slip."""
    return _values(session, backward=False)


def check_multi_head_reverse(session: Session) -> tuple[FamilyCheck, list[Failure]]:
    """The five gradients as qkv's engine gives them, without and with the mask and RoPE."""
    return _values(session, backward=True)


def check_head_isolation(session: Session) -> tuple[FamilyCheck, list[Failure]]:
    """Before the output projection the heads are apart: changing the ``W_Q`` columns of
    head 0 changes head 0's weights and no other head's, and changing the ``W_V`` columns
    of the last head changes only that head's columns of ``merged`` (causal, with RoPE;
    fixtures with two tokens or more and a batch item)."""
    family = "head-isolation"
    failures: list[Failure] = []
    cases = [case for case in mha_cases() if case.input.shape[0] and case.input.shape[1] >= 2]
    for case in cases:
        label = _run_label(case, True, True)
        width = int(case.input.shape[-1])
        size = width // case.heads
        try:
            base = session.invoke(family, label, "mha_forward", _arguments(case, True, True))
        except CallFailed as failure:
            failures.append(not_run_after(family, label, failure))
            continue
        for branch, head, tensor in ((0, 0, 0), (2, case.heads - 1, 1)):
            weights = [np.array(w, copy=True) for w in case.weights]
            weights[branch][:, head * size:(head + 1) * size] += 0.5
            what = f"W_{'QKV'[branch]}[:,{head * size}:{(head + 1) * size}]"
            try:
                changed = session.invoke(family, label, "mha_forward",
                                         _arguments(case, True, True, tuple(weights)))
            except Broken as failure:
                failures.append(not_run_after(family, label, failure))
                break
            except CallFailed as failure:
                failures.append(Failure(family, label, None, code="call-failed",
                                        facts=(failure.message,)))
                break
            before, after = base[tensor], changed[tensor]
            if before.shape != after.shape or before.ndim != 4 - tensor:
                break  # a wrong shape is multi-head's to say
            own = (np.s_[:, head] if tensor == 0 else np.s_[..., head * size:(head + 1) * size])
            others = np.ones(before.shape, dtype=bool)
            others[own] = False
            name = MHA_FORWARD_NAMES[tensor]
            moved = first_outside(np.where(others, after, 0.0), np.where(others, before, 0.0),
                                  session.tolerance)
            if moved is not None:
                where, new, old = moved
                failures.append(Failure(family, label, f"{name}{where}", code="moved",
                                        facts=(what, f"{name}{where}", repr(old), repr(new))))
                break
            if first_outside(after[own], before[own], session.tolerance) is None:
                failures.append(Failure(family, label, name, code="unmoved",
                                        facts=(what, f"{name}[:,{head}]" if tensor == 0
                                               else f"{name}[...,{head * size}:"
                                               f"{(head + 1) * size}]")))
                break
    failures += session.impurities.pop(family, [])
    return judge(family, failures, len(cases)), failures


def mha_requests() -> list[tuple[tuple[str, tuple[str, ...]], tuple[object, ...]]]:
    """The multi-head requests to reject (all ones, ``[1,3,4]``, causal with RoPE): a head
    count that does not divide ``d_model``, no heads, an odd head width with RoPE, ``W_O``
    of the wrong rows, an input width that is not the weights' rows."""
    x, w = np.ones((1, 3, 4)), np.ones((4, 4))
    wide = np.ones((6, 6))
    return [
        (("mha-heads", ("3", "4")), (x, w, w, w, w, 3, True, True, 100.0, 0)),
        (("mha-no-heads", ()), (x, w, w, w, w, 0, True, True, 100.0, 0)),
        (("mha-odd-head", ("3",)), (np.ones((1, 3, 6)), wide, wide, wide, wide, 2, True, True,
                                    100.0, 0)),
        (("mha-output-rows", ("5", "4")), (x, w, w, w, np.ones((5, 4)), 2, True, True, 100.0, 0)),
        (("input-width", ("5", "4")), (np.ones((1, 3, 5)), w, w, w, w, 2, True, True, 100.0, 0)),
    ]


def check_mha_errors(session: Session) -> tuple[FamilyCheck, list[Failure]]:
    """Every bad multi-head request raises (or is answered with an error)."""
    family, label = "multi-head-errors", "mha requests"
    if "mha_forward" not in session.worked:  # it rejects everything: says nothing here
        skipped = [not_run(family, None, "mha_forward", stopped=session.stopped is not None)]
        return judge(family, skipped, 1), skipped
    failures = refusals(family, label, (
        (request, partial(session.invoke, family, label, "mha_forward", args))
        for request, args in mha_requests()))
    failures += session.impurities.pop(family, [])
    return judge(family, failures, 1), failures
