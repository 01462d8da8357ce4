"""Chapter 37, incremental attention: a layer and its KV cache read from a fixture, its evidence built.

The chapter's layer is chapter 30's (the same weights, heads and RoPE, causal); the
chapter adds a layer-local KV cache of ``capacity`` positions
(:mod:`qkvcli.attention.cache`) and feeds it the input one token at a time. Its evidence:
each cached step equals the last row of the causal pass over its prefix; the cache holds
that pass's rotated keys and values; it grows by one position a step inside storage made
once; each step turns Q and K at the cache's length; what the steps read against what
the whole prefixes would; a reset forgets the positions and keeps the storage, and the
same tokens replay bit for bit; and eight bad steps are refused, each leaving the cache
as it was.

This module holds the fixture's parsing and the chapter's plan: the layer with its cache
is an implementation in a :class:`~qkvcli.check.session.Session` (:class:`ChapterCache`,
engine-only operations), each piece of evidence a family run through it. No I/O, no
prose.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from qkvcli.attention import engine
from qkvcli.attention.cache import DecodingLayer, IncrementalStep, KvCache, step
from qkvcli.attention.errors import (
    CacheChanged,
    CacheFull,
    CacheHeadCountMismatch,
    CacheLayerMismatch,
    CacheModelWidthMismatch,
    CacheRefusal,
    CacheRopeMismatch,
    IncrementalProjectionRefusal,
    IncrementalSoftmaxRefusal,
    SingleTokenRequired,
)
from qkvcli.chapters.ch29 import check_chapter, count_of, invariant_tolerance
from qkvcli.chapters.ch30 import MultiHeadSpec, build_layer, layer_at, read_spec
from qkvcli.chapters.registry import Chapter
from qkvcli.check.behaviour import check_replay
from qkvcli.check.boundaries import BadInput, typed_refusals
from qkvcli.check.cases import Case
from qkvcli.check.incremental import CACHE, StepMatch, check_cached_steps
from qkvcli.check.plans import CH37, PLANS
from qkvcli.check.session import Session
from qkvcli.core.arrays import Array, check_finite, same_bits
from qkvcli.core.errors import QkvError
from qkvcli.core.record import Record
from qkvcli.core.results import FamilyCheck, Refusal, judge_plan
from qkvcli.protocol.python import PythonImplementation
from qkvcli.reading.json_values import keyed_object
from qkvcli.reading.limits import DEFAULT_MAX_ELEMENTS, check_scores_size
from qkvcli.reading.problems import FixtureError
from qkvcli.reading.tensors import parse_tensor
from qkvcli.reading.weights import engine_check

if TYPE_CHECKING:
    from qkvcli.reading.files import StrPath

NAME = "37-incremental-attention"
FIXTURE = "ch37-incremental-attention.json"

DOCUMENT_KEYS = ("chapter", "description", "heads", "rope", "input", "weights", "capacity",
                 "invariant_tolerance")
ROPE_KEYS = ("positions", "base", "layout")
"""The cache turns each step at its own length: a fixture gives no offset."""


# --- the fixture ------------------------------------------------------------------------


class IncrementalFixture(Record):
    """A chapter 37 fixture, validated: chapter 30's layer (no offset), the cache's
    capacity, the tokens ``[B,T,d_model]`` fed one at a time, and the tolerance of the
    steps against the whole pass."""

    spec: MultiHeadSpec
    capacity: int
    input: Array
    invariant_tolerance: float


def decoding_layer(spec: MultiHeadSpec) -> DecodingLayer:
    """The fixture's layer as a cache binds to it: positions from 0, its table's rows."""
    return DecodingLayer(layer_at(spec, 0), spec.table.positions)


def parse(document: object, max_elements: int = DEFAULT_MAX_ELEMENTS,
          base_dir: StrPath | None = None) -> IncrementalFixture:
    """A chapter 37 fixture document validated into an :class:`IncrementalFixture`. Order:
    the document's keys (``chapter``, when given, must be :data:`NAME`); the layer
    (``$.heads``, ``$.rope``, ``$.weights``, as chapter 30 reads them); ``$.capacity`` (a
    cache of it must be possible: nonzero, within the RoPE table); ``$.input`` (the
    layer's rank and width, finite, at least one batch item and one token, no more
    tokens than the capacity); ``$.invariant_tolerance``. Raises
    :class:`~qkvcli.reading.problems.FixtureError` naming the ``$.path`` of the first
    problem."""
    data = keyed_object(document, "$", DOCUMENT_KEYS)
    check_chapter(data, NAME)
    keyed_object(data, "$", DOCUMENT_KEYS, ("heads", "rope", "input", "weights", "capacity"))
    spec = read_spec(data, max_elements, base_dir, ROPE_KEYS)
    layer = decoding_layer(spec)
    capacity = count_of(data["capacity"], "$.capacity")
    try:
        KvCache.for_layer(layer, 1, capacity)
    except QkvError as error:
        raise FixtureError("$.capacity", str(error)) from None
    x = parse_tensor(data["input"], "$.input", max_elements, base_dir=base_dir)
    try:
        x = layer.layer.projections.check_input(x)
    except QkvError as error:
        raise FixtureError("$.input", str(error)) from None
    engine_check(check_finite, x, "input", location="$.input")
    batch, tokens, _ = (int(d) for d in x.shape)
    if batch == 0 or tokens == 0:
        raise FixtureError("$.input", "the cache needs at least one batch item and one "
                                      f"token, got shape [{batch},{tokens},{x.shape[2]}]")
    if tokens > capacity:
        raise FixtureError("$.input", f"{tokens} tokens do not fit the cache: a step per "
                                      f"token, and the capacity is {capacity}")
    check_scores_size(batch, spec.heads, tokens, "$.input", max_elements)
    return IncrementalFixture(spec, capacity, x, invariant_tolerance(data))


# --- the layer with its cache, as an implementation ----------------------------------------


class StepRecord(Record):
    """What the cache was around one step of its first run: the step, the length before
    and after it, the logical keys and values after it ``[B,H,length,d_h]``, and whether
    it wrote into the storage the cache was made with."""

    step: IncrementalStep
    before: int
    after: int
    keys: Array
    values: Array
    storage_shape: tuple[int, ...]
    same_storage: bool


class ResetRecord(Record):
    """A reset of a cache in use: the length before and after, whether the storage is
    the same arrays and holds the same bits."""

    before: int
    after: int
    allocation_reused: bool
    storage_unchanged: bool


class ChapterCache(PythonImplementation):
    """The chapter's layer and one cache of the fixture's capacity as ``cache_run`` (the
    cache reset, then each token a step) and ``cache_prefix`` (the layer's causal pass),
    keeping its first run's steps and the first reset of a cache in use."""

    fresh = True  # the engine's own new arrays

    def __init__(self, layer: DecodingLayer, batch: int, capacity: int) -> None:
        super().__init__("chapter 37's cache", None, cache_run=self.run,
                         cache_prefix=self.prefix)
        self.layer = layer
        self.cache = KvCache.for_layer(layer, batch, capacity)
        self.storage = (self.cache.keys, self.cache.values)
        self.steps: list[StepRecord] | None = None
        self.reset: ResetRecord | None = None

    def _reset(self) -> None:
        cache, before = self.cache, self.cache.state()
        cache.reset()
        if self.reset is None and before.length:
            self.reset = ResetRecord(
                before.length, cache.length,
                cache.keys is self.storage[0] and cache.values is self.storage[1],
                same_bits(cache.keys, before.keys) and same_bits(cache.values, before.values))

    def run(self, x: Array) -> tuple[Array, ...]:
        """``cache_run``: each token of ``x`` a step of the reset cache."""
        self._reset()
        cache, records = self.cache, []
        for t in range(int(x.shape[1])):
            before = cache.length
            done = step(self.layer, cache, x[:, t:t + 1])
            records.append(StepRecord(
                done, before, cache.length, cache.logical_keys(), cache.logical_values(),
                tuple(int(d) for d in cache.keys.shape),
                cache.keys is self.storage[0] and cache.values is self.storage[1]))
        if self.steps is None:
            self.steps = records
        batch, tokens = (int(d) for d in x.shape[:2])
        weights = np.zeros((batch, cache.heads, tokens, tokens))
        for t, record in enumerate(records):
            weights[:, :, t, :t + 1] = record.step.weights[:, :, 0]
        outputs = np.concatenate([record.step.output for record in records], axis=1)
        lengths = np.array([record.after for record in records], dtype=np.float64)
        return outputs, weights, cache.logical_keys(), cache.logical_values(), lengths

    def prefix(self, x: Array) -> tuple[Array, ...]:
        """``cache_prefix``: the layer's causal pass over ``x``, the engine's forward."""
        with np.errstate(over="ignore", invalid="ignore"):
            done = engine.forward(self.layer.layer, x, True)
        return done.output, done.stacked["rotated_key"], done.stacked["value"]


def judge_session(fixture: IncrementalFixture) -> Session:
    """The fixture as the one case of a session whose implementation is the chapter's
    layer with its cache (:class:`ChapterCache`), judged at the chapter's tolerance."""
    spec = fixture.spec
    case = Case("fixture", fixture.input, (spec.w_query, spec.w_key, spec.w_value, spec.w_out),
                (), 0.0, 0.0, None, heads=spec.heads, base=spec.table.base)
    chapter = ChapterCache(decoding_layer(spec), int(fixture.input.shape[0]), fixture.capacity)
    return Session(chapter, [case], fixture.invariant_tolerance, isolated=False,
                   given_only=True)


# --- the evidence -----------------------------------------------------------------------


class StepEvidence(Record):
    """One step as the report shows it: its position, the cache's length before and
    after, the token ``[B,d_model]``, its output and the pass's last row ``[B,E]`` and
    their largest difference; the logical cache's shape and the storage's; per head the
    appended rotated key and value, the cached keys and values after it and the weights
    (``[B,H,...]``); its work: rows read for the whole prefix, here, and reused."""

    position: int
    cache_before: int
    cache_after: int
    input: Array
    output: Array
    full: Array
    max_abs_difference: float
    cache_shape: tuple[int, ...]
    storage_shape: tuple[int, ...]
    appended_key: Array
    appended_value: Array
    keys: Array
    values: Array
    weights: Array
    full_prefix_rows: int
    incremental_rows: int
    reused_rows: int


class WorkEvidence(Record):
    """Rows each projection reads over every step, for whole prefixes and incrementally;
    the rows of K (and of V) the cache spares, and those of K and V together."""

    full_rows_per_projection: int
    incremental_rows_per_projection: int
    reused_rows_per_kv_projection: int
    avoided_rows_across_kv: int


class CacheHistory(Record):
    """The rows the newest query reads at each step, and what complete prefixes would
    project against what the cache projects and reuses (keys and values alike)."""

    newest_query_key_rows: tuple[int, ...]
    complete_prefix_rows_per_projection: int
    incremental_rows_per_projection: int
    reused_key_rows: int
    reused_value_rows: int


class IncrementalEvidence(Record):
    """Chapter 37's whole evidence for one fixture, its families judged in ``checks``
    (report order): the steps and the steps family's own judgement, whether the cache
    grew as it must (:func:`grows`) and turned each step at its length
    (:func:`turned_at_length`), the work and whether it follows its formulas
    (:func:`work_holds`), the reset
    (its replay ``replay_bitwise``), the eight refusals (``errors``: each the exact error
    with the cache unchanged; ``kept``: whether each left its cache as it was) and the
    history."""

    fixture: IncrementalFixture
    steps: tuple[StepEvidence, ...]
    cached_steps: FamilyCheck
    growth: bool
    offset: bool
    work: WorkEvidence
    counted: bool
    reset: ResetRecord
    replay_bitwise: bool
    errors: tuple[Refusal, ...]
    history: CacheHistory
    checks: tuple[FamilyCheck, ...]
    kept: tuple[bool, ...] = ()

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)

    @property
    def unchanged(self) -> bool:
        """Every bad step left its cache as it was (``kept``: one verdict per refusal, in
        ``errors``' order)."""
        return len(self.kept) == len(self.errors) and all(self.kept)


def _steps(chapter: ChapterCache, matches: list[StepMatch], x: Array) -> tuple[StepEvidence, ...]:
    assert chapter.steps is not None
    found = []
    for record, match in zip(chapter.steps, matches, strict=True):
        s = record.step
        found.append(StepEvidence(
            s.position, record.before, record.after, x[:, s.position], s.output[:, 0],
            match.full, match.max_abs_difference, tuple(int(d) for d in record.keys.shape),
            record.storage_shape, s.appended_key, s.appended_value, record.keys, record.values,
            s.weights, s.full_prefix_rows, s.incremental_rows, s.reused_rows))
    return tuple(found)


def work(steps: tuple[StepEvidence, ...]) -> WorkEvidence:
    """The steps' work summed (keys and values each spare the reused rows)."""
    reused = sum(s.reused_rows for s in steps)
    return WorkEvidence(sum(s.full_prefix_rows for s in steps),
                        sum(s.incremental_rows for s in steps), reused, 2 * reused)


def history(steps: tuple[StepEvidence, ...]) -> CacheHistory:
    """The rows each step's newest query reads (its weights' length), and the prefix
    rows the cache splits into projected and reused."""
    reused = sum(s.reused_rows for s in steps)
    return CacheHistory(tuple(int(s.weights.shape[-1]) for s in steps),
                           sum(s.full_prefix_rows for s in steps),
                           sum(s.incremental_rows for s in steps), reused, reused)


def grows(fixture: IncrementalFixture, steps: tuple[StepEvidence, ...]) -> bool:
    """Each step adds one position (``t -> t+1``), the logical cache is ``[B,H,t+1,d_h]``
    and the storage stays ``[B,H,C,d_h]``."""
    batch = int(fixture.input.shape[0])
    heads = fixture.spec.heads
    d_h = fixture.spec.table.features
    return all(s.cache_before == t and s.cache_after == t + 1
               and s.cache_shape == (batch, heads, t + 1, d_h)
               and s.storage_shape == (batch, heads, fixture.capacity, d_h)
               for t, s in enumerate(steps))


def turned_at_length(steps: tuple[StepEvidence, ...]) -> bool:
    """Each step turned Q and K at the cache's length before it (its absolute position)."""
    return all(s.position == s.cache_before for s in steps)


def work_holds(steps: tuple[StepEvidence, ...], found: WorkEvidence,
               rows: CacheHistory) -> bool:
    """The counts follow their formulas over ``T`` steps: ``T(T+1)/2`` rows for whole
    prefixes, ``T`` incrementally, ``T(T-1)/2`` reused (twice, K and V); the newest query
    reads the cache's length after its step, and complete prefixes are what the cache
    projects plus what it reuses."""
    tokens = len(steps)
    return (found.full_rows_per_projection == tokens * (tokens + 1) // 2
            and found.incremental_rows_per_projection == tokens
            and found.reused_rows_per_kv_projection == tokens * (tokens - 1) // 2
            and found.avoided_rows_across_kv == 2 * found.reused_rows_per_kv_projection
            and rows.newest_query_key_rows == tuple(s.cache_after for s in steps)
            and rows.complete_prefix_rows_per_projection == (
                rows.incremental_rows_per_projection + rows.reused_key_rows))


def _unchanged_after(layer: DecodingLayer, cache: KvCache, x: Array,
                     kept: list[bool]) -> Callable[[], object]:
    """A step that must be refused, whose refusal counts only if it left the cache as it
    was: its error re-raised, or :class:`CacheChanged` when the cache moved. Whether the
    cache was left as it was, refused or not, is appended to ``kept``."""

    def call() -> object:
        before = cache.state()
        try:
            return step(layer, cache, x)
        except QkvError as error:
            if not cache.unchanged(before):
                raise CacheChanged(str(error)) from None
            raise
        finally:
            kept.append(cache.unchanged(before))

    return call


def _turnable(d_model: int, heads: int) -> bool:
    """Whether ``heads`` split ``d_model`` into heads of even width, which RoPE turns."""
    return d_model % heads == 0 and (d_model // heads) % 2 == 0


def _other_heads(d_model: int, heads: int) -> int:
    """Another head count for the same width: the first (1, then 2, 3, …) that splits
    ``d_model`` into heads RoPE can turn; where none does (a width of 2 in one head), 2,
    whose heads of width 1 only a cache can have (:func:`_cache_of_heads`)."""
    return next((count for count in (1, *range(2, d_model + 1))
                 if count != heads and _turnable(d_model, count)), 2)


def _cache_of_heads(layer: DecodingLayer, heads: int, batch: int, capacity: int) -> KvCache:
    """A cache of ``heads`` heads over the layer's width, bound to the layer: the cache a
    layer of that head count would have, made where no such layer can turn its heads by
    RoPE (their width odd)."""
    width = layer.layer.d_model
    made = KvCache.for_layer(layer, batch, capacity)
    return KvCache(batch, heads, max(width // heads, 1), width, made.capacity, made.binding)


def _overflow_refusal(layer: DecodingLayer, x: Array) -> type[CacheRefusal]:
    """The refusal a token of the largest floats must get, in the course's order: its
    query, key or value projection overflows (any product ``x W`` not finite, computed
    here apart from the step), or else its scores do."""
    weight, _ = layer.layer.packed()
    with np.errstate(over="ignore", invalid="ignore"):
        overflows = not np.all(np.isfinite(x.reshape(-1, x.shape[-1]) @ weight))
    return IncrementalProjectionRefusal if overflows else IncrementalSoftmaxRefusal


def bad_steps(fixture: IncrementalFixture, kept: list[bool] | None = None) -> tuple[BadInput, ...]:
    """The chapter's eight bad steps, in its order, each on a cache of its own: two
    tokens; a full cache (capacity 1, one step taken); a cache made for a wider layer,
    for a layer of another head count, for another layer of the same values; the layer
    under another RoPE base, another table length (the same parameter arrays); and a
    finite token whose scores overflow. Each step made appends to ``kept`` whether its
    cache was left as it was."""
    spec = fixture.spec
    layer = decoding_layer(spec)
    base, positions = spec.table.base, spec.table.positions
    x = fixture.input
    batch, _, d_model = (int(d) for d in x.shape)
    single = x[:, :1]
    two = np.concatenate([single, x[:, 1:2] if x.shape[1] > 1 else single], axis=1)

    def cache_of(other: DecodingLayer, capacity: int = fixture.capacity) -> KvCache:
        return KvCache.for_layer(other, batch, min(capacity, other.positions))

    def alike(width: int, heads: int) -> DecodingLayer:
        eye = np.eye(width)
        return DecodingLayer(build_layer(eye, eye, eye, eye, heads, base,
                                         spec.table.layout), positions)

    full = cache_of(layer, 1)
    step(layer, full, single)
    huge = np.full((batch, 1, d_model), np.finfo(np.float64).max)
    other_heads = _other_heads(d_model, spec.heads)
    other_base = base * 2.0 if math.isfinite(base * 2.0) else base / 2.0
    rebuilt = DecodingLayer(layer_at(spec, 0), positions)  # the same values, new arrays
    d_h = spec.table.features
    kept = [] if kept is None else kept

    def refused(cache: KvCache, x: Array, decoder: DecodingLayer = layer) -> Callable[[], object]:
        return _unchanged_after(decoder, cache, x, kept)

    return (
        ("two_tokens", SingleTokenRequired(2), refused(cache_of(layer), two)),
        ("full_cache", CacheFull(1), refused(full, single)),
        ("model_mismatch", CacheModelWidthMismatch(d_model, 2 * d_model),
         refused(cache_of(alike(2 * d_model, spec.heads)), single)),
        ("head_mismatch", CacheHeadCountMismatch(spec.heads, other_heads),
         refused(cache_of(alike(d_model, other_heads)) if _turnable(d_model, other_heads)
                 else _cache_of_heads(layer, other_heads, batch, fixture.capacity), single)),
        ("layer_mismatch", CacheLayerMismatch(),
         refused(cache_of(rebuilt), single)),
        ("rope_mismatch", CacheRopeMismatch(d_h, d_h, positions, positions, base, other_base),
         refused(cache_of(layer), single, layer.with_table(other_base, positions))),
        ("rope_positions_mismatch",
         CacheRopeMismatch(d_h, d_h, positions, positions + 1, base, base),
         refused(cache_of(layer), single, layer.with_table(base, positions + 1))),
        ("nonfinite_projection", _overflow_refusal(layer, huge),
         refused(cache_of(layer), huge)),
    )


def build(fixture: IncrementalFixture) -> IncrementalEvidence:
    """Chapter 37's evidence for ``fixture``: the cache's first run through the session
    (:func:`judge_session`) judged step by step against the causal pass
    (:func:`~qkvcli.check.incremental.check_cached_steps`), its replay after a reset
    (:func:`~qkvcli.check.behaviour.check_replay`), the work and history, and the eight
    bad steps (:func:`~qkvcli.check.boundaries.typed_refusals`)."""
    session = judge_session(fixture)
    chapter = session.implementation
    assert isinstance(chapter, ChapterCache)
    session.answered(CACHE, CACHE.run(session.cases[0]))  # a step refused: the engine's error
    matches: list[StepMatch] = []
    cached, _ = check_cached_steps(session, CACHE, matches)
    steps = _steps(chapter, matches, fixture.input)
    replay, _ = check_replay(session, CACHE)  # the cache reset, the same tokens again
    assert chapter.reset is not None
    counts, rows = work(steps), history(steps)
    kept: list[bool] = []
    errors = typed_refusals(bad_steps(fixture, kept))
    evidence = IncrementalEvidence(
        fixture=fixture, steps=steps, cached_steps=cached, growth=grows(fixture, steps),
        offset=turned_at_length(steps), work=counts, counted=work_holds(steps, counts, rows),
        reset=chapter.reset, replay_bitwise=replay.passed,
        errors=errors, history=rows, checks=(), kept=tuple(kept))
    return evidence._replace(checks=judge_plan(PLANS[CH37], evidence))


def no_settings(fixture: IncrementalFixture, **settings: float | int | None) -> IncrementalFixture:
    """The fixture as it is: chapter 37 has no gradient check whose settings to replace."""
    return fixture


CHAPTER = Chapter(37, NAME, FIXTURE, parse, build, no_settings, settings=())
