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

from qkvcli.check.behaviour import check_replay
from qkvcli.check.cases import Case
from qkvcli.check.kinds import LAYER, Kind, cache_capacity
from qkvcli.check.result import call_failure, not_run, not_run_after
from qkvcli.check.session import Session
from qkvcli.core.arrays import Array, coordinate
from qkvcli.core.errors import format_shape
from qkvcli.core.record import Record
from qkvcli.core.results import Clause, Failure, FamilyCheck, judge
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


def _prefix_pass(session: Session, kind: Kind, case: Case, tokens: int) -> tuple[Array, ...]:
    """The layer's causal pass over the fixture's first ``tokens`` tokens: the engine's
    own layer (chapter 37's cache offers it, :data:`PREFIX_PASS`), or for a learner's
    cache the engine's layer of the fixture's weights."""
    prefix = case.input[:, :tokens]
    if kind.forward == CACHE.forward:
        return session.invoke(kind.family("purity"), case.label, PREFIX_PASS, (prefix,))
    from qkvcli.check.engine import cache_prefix

    w_query, w_key, w_value, w_output = case.weights
    return cache_prefix(prefix, w_query, w_key, w_value, w_output, case.heads, case.base)


def _near(got: Array, wanted: Array, tolerance: float) -> bool:
    return got.shape == wanted.shape and _largest_gap(got, wanted)[0] <= tolerance


def cache_slip(case: Case, held: dict[str, Array], lengths_wanted: Array,
               tolerance: float) -> Clause | None:
    """The known slip a learner's wrong cache run shows, as a clause, or ``None``: the
    cache kept positions from an earlier run (its first length above a fresh cache's: the
    reset did not empty it); keys turned at position 0 (the unturned keys cached: RoPE
    not at the cache's length); the queries cached instead of the keys; the values turned
    too. ``held``: the run's results by name, on the fixture's whole input."""
    lengths = held["lengths"]
    if lengths.size and lengths_wanted.size and lengths[0] > lengths_wanted[0]:
        return Clause("slip-kept-after-reset", (int(lengths[0]), int(lengths_wanted[0])))
    if not case.weights or int(case.input.shape[1]) < 2:
        return None
    from qkvcli.check.engine import cache_prefix

    w_query, w_key, w_value, w_output = case.weights
    keys, values = held["keys"], held["values"]
    batch, tokens, _ = (int(d) for d in case.input.shape)
    heads = case.heads
    unturned = (case.input @ w_key).reshape(batch, tokens, heads, -1).transpose(0, 2, 1, 3)
    turned = cache_prefix(case.input, w_query, w_key, w_value, w_output, heads, case.base)
    if _near(keys, unturned, tolerance) and not _near(unturned, turned[1], tolerance):
        return Clause("slip-keys-at-zero", ())
    queries = cache_prefix(case.input, w_query, w_query, w_value, w_output, heads, case.base)[1]
    if _near(keys, queries, tolerance) and not _near(queries, turned[1], tolerance):
        return Clause("slip-query-cached", ())
    spun = cache_prefix(case.input, w_query, w_value, w_value, w_output, heads, case.base)[1]
    if _near(values, spun, tolerance) and not _near(spun, turned[2], tolerance):
        return Clause("slip-values-turned", ())
    return None


def cache_related(case: Case, held: dict[str, Array], tolerance: float) -> Clause | None:
    """The stages with one part changed whose causal pass gives the run ``held`` (its
    outputs, keys and values: :func:`~qkvcli.check.relate.cache_variants`), as a
    ``relations`` clause, or ``None``."""
    if not case.weights:
        return None
    from qkvcli.check.relate import cache_variants

    found = cache_variants(case.input, case.weights, case.heads, case.base,
                           (held["output"], held["keys"], held["values"]), tolerance)
    return Clause("relations", (found, None)) if found else None


def _named(failure: Failure, slip: Clause | None) -> Failure:
    """The failure with the slip that explains it said after it (``cache-slip``)."""
    if slip is None or failure.code is None:
        return failure
    return failure._replace(code="cache-slip", facts=(Clause(failure.code, failure.facts), slip))


def check_cached_steps(session: Session, kind: Kind, seen: list[StepMatch] | None = None
                       ) -> tuple[FamilyCheck, list[Failure]]:
    """Each step of the kind's cache run equals the last row of the causal pass over its
    prefix within the session's tolerance, the cache grows by one position a step, and
    after the last step it holds the pass's rotated keys and values (within the
    tolerance): each fixture with at least one token. ``seen`` collects each step's match,
    in order. A learner's wrong run is said with the slip it shows (:func:`cache_slip`)."""
    family = kind.family("steps")
    failures: list[Failure] = []
    tolerance = session.tolerance
    learner = kind.forward != CACHE.forward
    related: dict[int, Clause | None] = {}  # a failure's index: the relations of its run
    cases = [case for case in session.cases_of(kind) if case.input.shape[1]]
    for case in cases:
        run = kind.run(case)
        first = session.first(kind, run)
        if isinstance(first, CallFailed):  # the call this family judges: its finding
            failures.append(call_failure(family, case.label,
                                         format_shape(list(case.input.shape)), first))
            continue
        held = dict(zip(kind.forward_names, first, strict=True))
        outputs, keys, values, lengths = (held[name] for name in
                                          ("output", "keys", "values", "lengths"))
        found: Failure | None = None
        full: tuple[Array, ...] = ()
        tokens = int(case.input.shape[1])
        if learner and (outputs.shape[:2] != case.input.shape[:2] or lengths.shape != (tokens,)):
            name, shape, expected = (("lengths", lengths.shape, (tokens,))
                                   if outputs.shape[:2] == case.input.shape[:2] else
                                   ("output", outputs.shape, case.input.shape))
            failures.append(Failure(family, case.label, name, code="cache-differs", facts=(
                f"{name}.shape", str(list(shape)), str(list(expected)))))
            continue
        try:
            for position in range(tokens):
                full = _prefix_pass(session, kind, case, position + 1)
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
        for name, cached, wanted in (("keys", keys, full[1]), ("values", values, full[2])):
            if found is not None:
                break
            if cached.shape != wanted.shape:
                found = Failure(family, case.label, name, code="cache-differs",
                                facts=(name, str(list(cached.shape)), str(list(wanted.shape))))
                break
            gap, where = _largest_gap(cached, wanted)
            if not gap <= tolerance:
                at = coordinate(cached.shape, where)
                found = Failure(family, case.label, f"{name}{at}", code="cache-differs",
                                facts=(f"{name}{at}", repr(float(cached.reshape(-1)[where])),
                                       repr(float(wanted.reshape(-1)[where]))))
        if found is not None:
            slip = (cache_slip(case, held, np.arange(1.0, tokens + 1), tolerance)
                    if learner else None)
            if learner and slip is None:
                related[len(failures)] = cache_related(case, held, tolerance)
            failures.append(_named(found, slip))
    failures = _agreed(failures, related)
    return judge(family, failures, len(cases), tolerance=tolerance), failures


def _agreed(failures: list[Failure], related: dict[int, Clause | None]) -> list[Failure]:
    """Each failure ``related`` holds named by the relations that hold on every fixture
    of them (a fixture none explains names none): what the fixtures agree on."""
    if not related:
        return failures
    sets = [set(clause.facts[0]) if clause is not None else set()
            for clause in related.values()]
    common = set.intersection(*sets)
    named = list(failures)
    for index, clause in related.items():
        if clause is not None:
            kept = tuple(c for c in clause.facts[0] if c in common)
            named[index] = _named(failures[index], Clause("relations", (kept, None))
                                  if kept else None)
    return named


REFUSALS: tuple[tuple[str, int, int, bool], ...] = (
    ("two tokens a step", 0, 2, False),
    ("a cache one position short", -1, 1, False),
    ("a non-finite logit", 0, 1, True),
)
"""The refused steps a learner's cache is given: each its request as said, the capacity
(its offset from the fixture's tokens), the tokens a step, and whether the middle token
is scaled past what a score can hold: two tokens at once (every step refused but a lone
last token), a cache one position short (the last step refused), and a token whose
score with its own key overflows (that step refused, the steps after it going on from
the cache as it was)."""

OVERFLOW = 1e200
"""The factor that makes the middle token's score with its own key overflow: its query
and key stay finite (about ``1e200`` times the weights), their product does not."""


def _refused_input(x: Array, overflow: bool) -> Array:
    """The fixture's input, or with ``overflow`` a copy whose middle token
    (``tokens // 2``) is scaled by :data:`OVERFLOW`."""
    if not overflow:
        return x
    scaled = np.array(x, dtype=np.float64)
    scaled[:, int(x.shape[1]) // 2] *= OVERFLOW
    return scaled


def check_refused_steps(session: Session, kind: Kind) -> tuple[FamilyCheck, list[Failure]]:
    """A refused step leaves the cache as it was: on each fixture of two tokens or more,
    a run in steps of two tokens, a run into a cache one position short and a run whose
    middle token's score overflows give the engine's outputs (zeros for a refused step),
    lengths after each step and cached keys and values. A run that fails instead of
    refusing the step and going on is a finding."""
    from qkvcli.check.engine import cache_steps

    family = kind.family("refusals")
    failures: list[Failure] = []
    tolerance = session.tolerance
    cases = [case for case in session.cases_of(kind) if int(case.input.shape[1]) >= 2]
    for case in cases:
        tokens = int(case.input.shape[1])
        found: Failure | None = None
        for request, capacity, step, overflow in REFUSALS:
            w_query, w_key, w_value, w_output = case.weights
            args = (_refused_input(case.input, overflow), w_query, w_key, w_value, w_output,
                    case.heads, case.base, tokens + capacity, step)
            wanted = dict(zip(kind.forward_names, cache_steps(*args), strict=True))
            try:
                got = session.invoke(kind.family("purity"), case.label, kind.forward, args)
            except Broken as failure:
                failures.append(not_run_after(family, case.label, failure))
                return judge(family, failures, len(cases)), failures
            except CallFailed as failure:
                found = Failure(family, case.label, None, code="refusal-failed",
                                facts=(request, failure.message))
                break
            held = dict(zip(kind.forward_names, got, strict=True))
            for name in ("lengths", "output", "keys", "values"):
                if held[name].shape != wanted[name].shape:
                    found = Failure(family, case.label, name, code="refusal-differs", facts=(
                        request, name, f"shape {list(held[name].shape)}",
                        f"shape {list(wanted[name].shape)}"))
                    break
                gap, where = _largest_gap(held[name], wanted[name])
                if not gap <= tolerance:
                    at = coordinate(held[name].shape, where)
                    found = Failure(family, case.label, f"{name}{at}", code="refusal-differs",
                                    facts=(request, f"{name}{at}",
                                           repr(float(held[name].reshape(-1)[where])),
                                           repr(float(wanted[name].reshape(-1)[where]))))
                    break
            if found is not None:
                lengths, expected = held["lengths"], wanted["lengths"]
                if (found.code == "refusal-differs" and found.coordinate != "lengths"
                        and _steps_wrong(session, kind, case)):
                    # the refusal's lengths are right; its values would be judged against
                    # steps the learner's cache already gets wrong (see cache-steps)
                    found = not_run(family, case.label, "cache-steps")
                    break
                grew = (lengths.shape == expected.shape and bool(np.any(lengths > expected)))
                slip = (cache_slip(case, held, expected, tolerance)
                        if lengths.size and expected.size and lengths[0] > expected[0]
                        else Clause("slip-refused-changed", ()) if grew else None)
                found = _named(found, slip)
                break
        if found is not None:
            failures.append(found)
    return judge(family, failures, len(cases)), failures


def _steps_wrong(session: Session, kind: Kind, case: Case) -> bool:
    """Whether the learner's cache, one token a step with room for all, gives other
    outputs, keys or values than the engine's (or fails): what ``cache-steps`` judges."""
    from qkvcli.check.engine import cache_steps

    first = session.first(kind, kind.run(case))
    if isinstance(first, CallFailed):
        return True
    w_query, w_key, w_value, w_output = case.weights
    wanted = cache_steps(case.input, w_query, w_key, w_value, w_output, case.heads, case.base,
                         cache_capacity(case, case.input), 1)
    held = dict(zip(kind.forward_names, first, strict=True))
    return not all(_near(held[name], want, session.tolerance) for name, want in
                   zip(kind.forward_names, wanted, strict=True) if name != "lengths")


def check_cache_replay(session: Session, kind: Kind) -> tuple[FamilyCheck, list[Failure]]:
    """:func:`~qkvcli.check.behaviour.check_replay` on a learner's cache: a second run of
    each fixture gives the same bits; when it does not, and a fresh cache's lengths are
    not what the run gives, said as the slip (a reset that did not empty the cache)."""
    check, failures = check_replay(session, kind)
    named = []
    for failure in failures:
        if failure.code == "replay-differs" and failure.coordinate is not None:
            case = next(case for case in session.cases_of(kind) if case.label == failure.fixture)
            try:
                again = session.call(kind, kind.run(case))
            except CallFailed:
                again = ()
            if again:
                held = dict(zip(kind.forward_names, again, strict=True))
                wanted = np.arange(1.0, int(case.input.shape[1]) + 1)
                failure = _named(failure, cache_slip(case, held, wanted, session.tolerance)
                                 if held["lengths"].size and held["lengths"][0] > 1 else None)
        named.append(failure)
    return judge(check.name, named, check.fixtures, backward=check.backward), named
