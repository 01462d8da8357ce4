"""The family only multi-head attention has (chapter 30): ``head-isolation``.

An implementation's ``mha_forward(x, w_query, w_key, w_value, w_output, heads, causal,
rope, base, offset) -> (weights, merged, output)`` projects ``x [B,T,d_model]`` with the
``[d_model, d_model]`` weights, splits each projection into ``heads`` heads of width
``d_h = d_model / heads`` (head ``h`` takes columns ``h d_h .. (h+1) d_h``), turns each
head's queries and keys with RoPE when ``rope``, attends in each head (``weights
[B,heads,T,T]``, scaled by ``1/√d_h``, masked when ``causal``), merges the heads'
outputs back into ``merged [B,T,d_model]`` and applies the output projection: ``output =
merged W_O``. The families it shares with every kind run over
:data:`~qkvcli.check.kinds.MULTI_HEAD`; here, the chapter's claim that the heads are
apart before ``W_O``, judged on the implementation's own answers.
"""

from __future__ import annotations

import numpy as np

from qkvcli.check.diagnose import first_outside
from qkvcli.check.kinds import MULTI_HEAD
from qkvcli.check.result import not_run, not_run_after
from qkvcli.check.session import Session
from qkvcli.core.results import Failure, FamilyCheck, judge
from qkvcli.protocol.errors import Broken, CallFailed
from qkvcli.protocol.wire import MHA_FORWARD_NAMES


def check_head_isolation(session: Session) -> tuple[FamilyCheck, list[Failure]]:
    """Before the output projection the heads are apart: changing the ``W_Q`` columns of
    head 0 changes head 0's weights and no other head's, and changing the ``W_V`` columns
    of the last head changes only that head's columns of ``merged`` (causal, with RoPE;
    fixtures with two tokens or more and a batch item)."""
    family = "head-isolation"
    failures: list[Failure] = []
    cases = [case for case in session.cases_of(MULTI_HEAD)
             if case.input.shape[0] and case.input.shape[1] >= 2]
    for case in cases:
        run = next(r for r in MULTI_HEAD.runs(case) if r.mode == (True, True))
        label = run.label
        width = int(case.input.shape[-1])
        size = width // case.heads
        try:
            base = session.call(MULTI_HEAD, run)
        except CallFailed as failure:
            failures.append(not_run_after(family, label, failure))
            continue
        for branch, head, tensor in ((0, 0, 0), (2, case.heads - 1, 1)):
            weights = [np.array(w, copy=True) for w in case.weights]
            weights[branch][:, head * size:(head + 1) * size] += 0.5
            what = f"W_{'QKV'[branch]}[:,{head * size}:{(head + 1) * size}]"
            try:
                changed = session.call(MULTI_HEAD, run, (case.input, *weights))
            except Broken as failure:
                failures.append(not_run_after(family, label, failure))
                break
            except CallFailed as failure:
                failures.append(Failure(family, label, None, code="call-failed",
                                        facts=(failure.message,)))
                break
            before, after = base[tensor], changed[tensor]
            batch, tokens = case.input.shape[:2]
            wanted = (batch, case.heads, tokens, tokens) if tensor == 0 else case.input.shape
            if before.shape != wanted or after.shape != wanted:
                # multi-head says how; the heads' isolation is not judged
                failures.append(not_run(family, label, "multi-head-shape"))
                break
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
    return judge(family, failures, len(cases)), failures
