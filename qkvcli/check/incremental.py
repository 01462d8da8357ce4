"""The ``steps`` family of a layer's KV cache (``cache-steps``): a cached step is the last
row of the causal pass over its prefix.

The kind (:data:`CACHE`) is a layer with its cache, offered by qkv's engine (chapter 37's
cache, :mod:`qkvcli.chapters.ch37`) or, later, by a learner's: ``cache_run(x)`` resets the
cache and gives it each token of ``x`` in turn, ``cache_prefix(x)`` is the layer's causal
pass over a whole prefix. The family compares the two computations: each step's output
with the last row of the pass over the tokens up to it, within the session's tolerance;
the cache's length after each step with one more than before; and the keys and values it
holds after the last step with the pass's rotated keys and projected values. Replay is
:func:`~qkvcli.check.behaviour.check_replay` on the same kind: a reset cache given the
same tokens again gives the same bits.
"""

from __future__ import annotations

import numpy as np

from qkvcli.check.kinds import LAYER, Kind
from qkvcli.check.result import not_run_after
from qkvcli.check.session import Session
from qkvcli.core.arrays import Array, coordinate
from qkvcli.core.record import Record
from qkvcli.core.results import Failure, FamilyCheck, judge
from qkvcli.protocol.errors import Broken, CallFailed
from qkvcli.protocol.wire import CACHE_RUN_NAMES

CACHE = LAYER._replace(
    prefix="cache-", forward="cache_run", backward="", forward_names=CACHE_RUN_NAMES,
    backward_names=(), loss=(0,), arguments=lambda case, mode, tensors, upstream: (tensors[0],))
"""A layer with its KV cache: ``cache_run(x) -> (output, weights, keys, values, lengths)``,
each token of ``x`` a step of a reset cache. Only the engine offers it yet."""
PREFIX_PASS = "cache_prefix"
"""The layer's causal pass over a prefix: ``(output, rotated_key, value)``."""


class StepMatch(Record):
    """One step against the pass over its prefix: its position, the pass's last row
    ``[B,E]`` and the largest absolute difference from the step's output."""

    position: int
    full: Array
    max_abs_difference: float


def _largest_gap(got: Array, wanted: Array) -> tuple[float, int]:
    """The largest ``|got - wanted|`` (``inf`` when either is not finite there) and where."""
    gap = np.abs(got - wanted).reshape(-1)
    if gap.size == 0:
        return 0.0, 0
    gap = np.where(np.isnan(gap), np.inf, gap)
    where = int(np.argmax(gap))
    return float(gap[where]), where


def check_cached_steps(session: Session, kind: Kind, seen: list[StepMatch] | None = None
                       ) -> tuple[FamilyCheck, list[Failure]]:
    """Each step of the kind's cache run equals the last row of the causal pass over its
    prefix within the session's tolerance, the cache grows by one position a step, and
    after the last step it holds the pass's rotated keys and values (within the
    tolerance): each fixture with at least one token. ``seen`` collects each step's match,
    in order."""
    family = kind.family("steps")
    failures: list[Failure] = []
    tolerance = session.tolerance
    cases = [case for case in session.cases_of(kind) if case.input.shape[1]]
    for case in cases:
        run = kind.run(case)
        first = session.first(kind, run)
        if isinstance(first, CallFailed):
            failures.append(not_run_after(family, case.label, first))
            continue
        outputs, _, keys, values, lengths = first
        found: Failure | None = None
        full: tuple[Array, ...] = ()
        try:
            for position in range(int(case.input.shape[1])):
                full = session.invoke(kind.family("purity"), case.label, PREFIX_PASS,
                                      (case.input[:, :position + 1],))
                gap, where = _largest_gap(outputs[:, position], full[0][:, -1])
                if seen is not None:
                    seen.append(StepMatch(position, full[0][:, -1], gap))
                if found is None and not gap <= tolerance:
                    at = coordinate(outputs[:, position].shape, where)
                    found = Failure(family, case.label, f"output{at}", code="step-differs", facts=(
                        position, f"output{at}", repr(float(outputs[:, position].reshape(-1)[where])),
                        repr(float(full[0][:, -1].reshape(-1)[where]))))
                if found is None and int(lengths[position]) != position + 1:
                    found = Failure(family, case.label, "lengths", code="length-differs",
                                    facts=(position, int(lengths[position]), position + 1))
        except Broken as failure:
            failures.append(not_run_after(family, case.label, failure))
            break
        except CallFailed as failure:
            failures.append(not_run_after(family, case.label, failure))
            continue
        for name, held, wanted in (("keys", keys, full[1]), ("values", values, full[2])):
            if found is not None:
                break
            if held.shape != wanted.shape:
                found = Failure(family, case.label, name, code="cache-differs",
                                facts=(name, str(list(held.shape)), str(list(wanted.shape))))
                break
            gap, where = _largest_gap(held, wanted)
            if not gap <= tolerance:
                at = coordinate(held.shape, where)
                found = Failure(family, case.label, f"{name}{at}", code="cache-differs",
                                facts=(f"{name}{at}", repr(float(held.reshape(-1)[where])),
                                       repr(float(wanted.reshape(-1)[where]))))
        if found is not None:
            failures.append(found)
    return judge(family, failures, len(cases), tolerance=tolerance), failures
