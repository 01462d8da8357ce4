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

from functools import partial

from qkvcli.check.cases import Case, Run
from qkvcli.check.kinds import MULTI_HEAD
from qkvcli.check.result import not_run, not_run_after
from qkvcli.check.session import Session
from qkvcli.core.arrays import Array
from qkvcli.core.invariants import HeadLayout, isolated_heads
from qkvcli.core.results import Failure, FamilyCheck, found_at, judge
from qkvcli.protocol.errors import Broken, CallFailed
from qkvcli.protocol.wire import MHA_FORWARD_NAMES


def _outputs(session: Session, run: Run, case: Case,
             weights: tuple[Array, ...]) -> tuple[Array, Array]:
    """The implementation's weights and merged heads on the fixture with other weights."""
    attention, merged, _ = session.call(MULTI_HEAD, run, (case.input, *weights))
    return attention, merged


def check_head_isolation(session: Session) -> tuple[FamilyCheck, list[Failure]]:
    """Before the output projection the heads are apart
    (:func:`~qkvcli.core.invariants.isolated_heads`), on the implementation's own
    answers: causal, with RoPE; fixtures with two tokens or more and a batch item."""
    family = "head-isolation"
    failures: list[Failure] = []
    cases = [case for case in session.cases_of(MULTI_HEAD)
             if case.input.shape[0] and case.input.shape[1] >= 2]
    for case in cases:
        run = next(r for r in MULTI_HEAD.runs(case) if r.mode == (True, True))
        label = run.label
        # each head's query/key and value widths, from the weights' columns (a chapter's
        # layer may project to another width than its input's)
        size, value_size = (int(case.weights[index].shape[1]) // case.heads for index in (0, 2))
        try:
            base = session.call(MULTI_HEAD, run)
        except CallFailed as failure:
            failures.append(not_run_after(family, label, failure))
            continue
        batch, tokens = case.input.shape[:2]
        merged = (batch, tokens, value_size * case.heads)
        if base[0].shape != (batch, case.heads, tokens, tokens) or base[1].shape != merged:
            # multi-head says how; the heads' isolation is not judged
            failures.append(not_run(family, label, "multi-head-shape"))
            continue
        try:
            found = isolated_heads(partial(_outputs, session, run, case), case.input,
                                   case.weights, (base[0], base[1]),
                                   HeadLayout(case.heads, case.heads, size, value_size),
                                   session.tolerance, MHA_FORWARD_NAMES[:2])
        except Broken as failure:
            failures.append(not_run_after(family, label, failure))
            continue
        except CallFailed as failure:
            failures.append(Failure(family, label, None, code="call-failed",
                                    facts=(failure.message,)))
            continue
        if found is not None:
            failures.append(found_at(family, label, *found))
    return judge(family, failures, len(cases)), failures
