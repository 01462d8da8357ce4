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
from qkvcli.check.kinds import MULTI_HEAD, Kind
from qkvcli.check.result import not_run, not_run_after
from qkvcli.check.session import Session
from qkvcli.core.arrays import Array
from qkvcli.core.invariants import isolated_heads
from qkvcli.core.results import Failure, FamilyCheck, found_at, judge
from qkvcli.protocol.errors import Broken, CallFailed


def _outputs(session: Session, kind: Kind, run: Run, case: Case,
             weights: tuple[Array, ...]) -> tuple[Array, Array]:
    """The implementation's weights and merged heads on the fixture with other weights."""
    found = session.call(kind, run, (case.input, *weights))
    return found[0], found[1]


def check_head_isolation(session: Session, kind: Kind = MULTI_HEAD
                         ) -> tuple[FamilyCheck, list[Failure]]:
    """Before the output projection the heads are apart
    (:func:`~qkvcli.core.invariants.isolated_heads`), on the implementation's own
    answers, in the kind's last mode (multi-head attention's causal with RoPE), its
    heads split by the kind's ``layout``; fixtures with a batch item and a token (with
    one, only the value probe applies)."""
    family = "head-isolation"
    assert kind.layout is not None
    failures: list[Failure] = []
    cases = [case for case in session.cases_of(kind)
             if case.input.shape[0] and case.input.shape[1]]
    for case in cases:
        run = kind.runs(case)[-1]  # labelled by its mode
        label = run.label
        layout = kind.layout(case)
        try:
            base = session.call(kind, run)
        except CallFailed as failure:
            failures.append(not_run_after(family, label, failure))
            continue
        batch, tokens = case.input.shape[:2]
        merged = (batch, tokens, layout.d_v * layout.heads)
        if base[0].shape != (batch, layout.heads, tokens, tokens) or base[1].shape != merged:
            # the forward says how; the heads' isolation is not judged
            failures.append(not_run(family, label, "multi-head-shape"))
            continue
        try:
            found = isolated_heads(partial(_outputs, session, kind, run, case), case.input,
                                   case.weights, (base[0], base[1]), layout,
                                   session.tolerance, (kind.forward_names[0],
                                                       kind.forward_names[1]))
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
