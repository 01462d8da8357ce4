"""Chapter 29, RoPE: a rotary fixture read into plain records, and the chapter's evidence built.

The chapter turns each adjacent pair of a query's and a key's features by an angle that
grows with the token's absolute position (``position * base^(-2i/features)``), and proves
what that buys: position zero is the identity, a rotation keeps every vector's norm, and
shifting every position by the same amount keeps every query-key dot product. Its
objective ``L = <rot(Q), U_Q> + <rot(K), U_K>`` is taken on the rotated Q and K; its
gradient is the rotation turned back, checked by central differences.

The rotation and its tables are :mod:`qkvcli.attention.maths`' (``Rope`` with its
``offset``, ``inverse_frequencies``, ``rope_tables``, ``rotate``, ``check_rope``). What
this module adds is the chapter's table of a fixed position capacity and its validator
(:func:`check_table`, :func:`rotate_checked`): the engine's typed refusals
(:class:`~qkvcli.attention.errors.RotaryRefusal`) raised in the chapter's order, which
its rejected inputs exercise and :func:`parse` applies to a user's fixture too. No I/O,
no prose.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np

from qkvcli.attention.errors import (
    InvalidRopeBase,
    OddFeatureWidth,
    PositionOffsetOverflow,
    PositionRangeExceeded,
    ReleasedBuffer,
    RotaryInputRank,
    RotaryRefusal,
    RotaryWidthMismatch,
    ZeroFeatureWidth,
    ZeroPositionCapacity,
)
from qkvcli.attention.maths import rope_tables, rotate
from qkvcli.chapters.registry import Chapter, ChapterEvidence
from qkvcli.check.behaviour import check_replay
from qkvcli.check.boundaries import BadInput, probed, typed_refusals
from qkvcli.check.cases import Case
from qkvcli.check.kinds import ROPE, Probe
from qkvcli.check.plans import CH29, PLANS
from qkvcli.check.rotary import check_position_zero, dots, relative_dot
from qkvcli.check.session import Session
from qkvcli.core.arrays import Array, all_finite, check_finite
from qkvcli.core.record import Record
from qkvcli.core.results import ShapeProbe, judge_plan
from qkvcli.core.rope import Rope, check_rope, inverse_frequencies
from qkvcli.gradcheck.batched import plain_check
from qkvcli.gradcheck.records import GradcheckResult
from qkvcli.gradcheck.settings import MAX_EVALUATIONS, check_evaluations, evaluations_allowed
from qkvcli.protocol.python import PythonImplementation
from qkvcli.reading.json_values import (
    finite_number,
    is_json_int,
    is_number,
    json_type_name,
    keyed_object,
)
from qkvcli.reading.limits import DEFAULT_MAX_ELEMENTS, check_derived, check_step_fits, expect_shape
from qkvcli.reading.problems import FixtureError, Problems
from qkvcli.reading.settings import parse_gradcheck
from qkvcli.reading.tensors import parse_tensor
from qkvcli.reading.weights import engine_check

if TYPE_CHECKING:
    from qkvcli.reading.files import StrPath

NAME = "29-rope"
FIXTURE = "ch29-rope.json"

LAYOUTS = {"adjacent": "interleaved", "half": "half"}
"""The fixture's pairings and :class:`~qkvcli.core.rope.Rope`'s names for them:
``adjacent`` turns features ``2i`` and ``2i+1`` together (the chapter's, GPT-J's),
``half`` features ``i`` and ``i + features/2`` (LLaMA's ``rotate_half``)."""

LAST_POSITION = 2 ** 53
"""Positions up to here are exact in binary64, the type the angles are computed in: an
interval that reaches past it overflows (the chapter's ``usize`` overflow)."""

DEFAULT_INVARIANT_TOLERANCE = 1e-12
"""The absolute tolerance of chapters 29 and 30's invariants (the norms, the shifted dot
products, uniform and distinct weights, the common offset), unless a fixture gives one."""

ROTARY_STAGE = "rotary-pairs"
"""The stage that reads the operand: the rotation of its feature pairs."""

DOCUMENT_KEYS = ("chapter", "description", "rope", "query", "key", "upstream", "gradcheck",
                 "invariant_tolerance")
ROPE_KEYS = ("features", "positions", "base", "layout", "offset", "shift")


def read_operand(values: Any, stage: str) -> Array:
    """``values`` as float64; a released buffer (a ``memoryview`` after ``release()``) is
    refused as :class:`ReleasedBuffer` instead of being read as an object."""
    if isinstance(values, memoryview):
        try:
            values.nbytes  # noqa: B018 - any access of a released view raises
        except ValueError:
            raise ReleasedBuffer(stage) from None
    return np.asarray(values, dtype=np.float64)


class RotaryTable(Record):
    """The chapter's rotary embedding: ``features`` turned in pairs (``layout``), angles
    ``base^(-2i/features)`` per position, tables for ``positions`` positions."""

    features: int
    positions: int
    base: float
    layout: str = "adjacent"

    @property
    def pairs(self) -> int:
        return self.features // 2

    def rope(self, offset: int) -> Rope:
        """The engine's :class:`Rope` of this table, its first position at ``offset``."""
        return Rope(self.base, self.features, LAYOUTS[self.layout], offset)

    def pair_features(self) -> tuple[tuple[int, int], ...]:
        """The two features each pair turns, in pair order."""
        first, second = self.rope(0).pairs()
        index = np.arange(self.features)
        return tuple(zip(index[first].tolist(), index[second].tolist(), strict=True))


def check_table(features: int, positions: int, base: float, layout: str = "adjacent") -> RotaryTable:
    """The chapter's table, validated in its order: the feature width (nonzero, even), the
    position capacity (nonzero), the base (finite, positive); then the engine's own rule
    (:func:`~qkvcli.core.rope.check_rope`). Raises a
    :class:`~qkvcli.attention.errors.RotaryRefusal`, or
    :class:`~qkvcli.core.errors.RopeError` for an unknown layout."""
    if features == 0:
        raise ZeroFeatureWidth()
    if features % 2:
        raise OddFeatureWidth(features)
    if positions == 0:
        raise ZeroPositionCapacity()
    if not (np.isfinite(base) and base > 0.0):
        raise InvalidRopeBase(base)
    table = RotaryTable(features, positions, float(base), layout)
    check_rope(table.rope(0), features)
    return table


def check_interval(table: RotaryTable, offset: int, tokens: int) -> None:
    """Positions ``offset .. offset+tokens-1`` fit the table: exact in binary64
    (:class:`PositionOffsetOverflow`), then within the capacity (:class:`PositionRangeExceeded`)."""
    if offset + tokens > LAST_POSITION:
        raise PositionOffsetOverflow(offset, tokens)
    if offset + tokens > table.positions:
        raise PositionRangeExceeded(offset, tokens, table.positions)


def rotate_checked(table: RotaryTable, values: Any, offset: int, inverse: bool = False) -> Array:
    """``values [..., tokens, features]`` turned (``inverse``: turned back) at positions
    ``offset ..``, after the chapter's checks in its order: a readable operand, rank at
    least two, the feature width, the position interval. The turn is
    :func:`~qkvcli.attention.maths.rotate`'s."""
    x = read_operand(values, ROTARY_STAGE)
    if x.ndim < 2:
        raise RotaryInputRank(x.ndim)
    if x.shape[-1] != table.features:
        raise RotaryWidthMismatch(table.features, int(x.shape[-1]))
    check_interval(table, offset, int(x.shape[-2]))
    return rotate(x, table.rope(offset), inverse=inverse)


# --- the fixture ------------------------------------------------------------------------


class RopeFixture(Record):
    """A chapter 29 fixture, validated: the table, where the positions start (``offset``)
    and how far the common shift moves them (``shift``), Q and K ``[tokens, features]``,
    their upstream gradients, the gradient check's settings and the invariants' tolerance."""

    table: RotaryTable
    offset: int
    shift: int
    query: Array
    key: Array
    upstream_query: Array
    upstream_key: Array
    step: float
    tolerance: float
    samples: int | None
    invariant_tolerance: float


def count_of(raw: Any, location: str, default: int | None = None) -> int:
    """A non-negative JSON integer (``default`` when ``raw`` is ``None`` and one is given)."""
    if raw is None and default is not None:
        return default
    if not is_json_int(raw) or raw < 0:
        shown = json.dumps(raw) if is_number(raw) else json_type_name(raw)
        raise FixtureError(location, f"expected a non-negative integer, got {shown}")
    return int(raw)


def check_chapter(data: dict[str, Any], name: str = NAME) -> None:
    """A document's optional ``chapter`` key (the chapter it is a fixture of, ``name``) and
    ``description`` (text)."""
    if "chapter" in data and data["chapter"] != name:
        shown = json.dumps(data["chapter"]) if isinstance(data["chapter"], str) else \
            json_type_name(data["chapter"])
        raise FixtureError("$.chapter", f'expected "{name}", got {shown}')
    if "description" in data and not isinstance(data["description"], str):
        raise FixtureError("$.description",
                           f"expected a string, got {json_type_name(data['description'])}")


def rope_settings(rope: dict[str, Any]) -> tuple[int, float, str]:
    """``$.rope``'s ``positions``, ``base`` and ``layout`` (``adjacent`` unless given), in
    that order. Raises :class:`FixtureError`."""
    positions = count_of(rope["positions"], "$.rope.positions")
    if positions >= LAST_POSITION:  # the probes one past the table's end must stay exact
        raise FixtureError("$.rope.positions", f"{positions} positions, more than 2^53 - 1 "
                           f"({LAST_POSITION - 1}): the positions just past the table must be "
                           "exact in binary64")
    base = finite_number(rope["base"], "$.rope.base")
    layout = rope.get("layout", "adjacent")
    if not isinstance(layout, str) or layout not in LAYOUTS:
        shown = json.dumps(layout) if isinstance(layout, str) else json_type_name(layout)
        raise FixtureError("$.rope.layout", f'expected "adjacent" or "half", got {shown}')
    return positions, base, layout


def positions_of(rope: dict[str, Any], table: RotaryTable, tokens: int) -> tuple[int, int]:
    """``$.rope``'s ``offset`` (0 unless given) and ``shift`` (``tokens`` unless given),
    the ``tokens`` positions from each within the table (chapters 29 and 30)."""
    offset = count_of(rope.get("offset"), "$.rope.offset", 0)
    shift = count_of(rope.get("shift"), "$.rope.shift", tokens)
    for location, start in (("$.rope.offset", offset), ("$.rope.shift", offset + shift)):
        try:
            check_interval(table, start, tokens)
        except RotaryRefusal as error:
            if (not isinstance(error, PositionRangeExceeded) or location != "$.rope.offset"
                    or (offset and tokens <= table.positions)):
                # the offset (or the shift) moves tokens that fit past the table
                raise FixtureError(location, str(error)) from None
            # The table holds fewer positions than there are tokens: the offset is not why.
            raise FixtureError("$.rope.positions", f"{table.positions} positions, fewer "
                               f"than the {tokens} tokens need (from $.rope.offset "
                               f"{offset}: positions [{offset}, {offset + tokens}))") from None
    return offset, shift


def _table(raw: Any, max_elements: int) -> RotaryTable:
    rope = keyed_object(raw, "$.rope", ROPE_KEYS, ("features", "positions", "base"))
    features = count_of(rope["features"], "$.rope.features")
    if features > max_elements:  # before the table's frequencies are allocated
        raise FixtureError("$.rope.features", f"{features} features, more than the limit "
                           f"{max_elements} (raise it with --max-elements)")
    positions, base, layout = rope_settings(rope)
    try:
        return check_table(features, positions, base, layout)
    except (ZeroFeatureWidth, OddFeatureWidth) as error:
        raise FixtureError("$.rope.features", str(error)) from None
    except ZeroPositionCapacity as error:
        raise FixtureError("$.rope.positions", str(error)) from None
    except InvalidRopeBase as error:
        raise FixtureError("$.rope.base", str(error)) from None


def _operand(raw: Any, location: str, table: RotaryTable, max_elements: int,
             base_dir: StrPath | None) -> Array:
    x = parse_tensor(raw, location, max_elements, base_dir=base_dir)
    if x.ndim != 2:
        raise FixtureError(location, f"expected [tokens, features], got rank {x.ndim}")
    try:
        rotate_checked(table, np.zeros((0, x.shape[1])), 0)  # the width, by the chapter's rule
    except RotaryRefusal as error:
        raise FixtureError(location, str(error)) from None
    engine_check(check_finite, x, location.rsplit(".", 1)[-1], location=location)
    return x


def parse(document: object, max_elements: int = DEFAULT_MAX_ELEMENTS,
          base_dir: StrPath | None = None) -> RopeFixture:
    """A chapter 29 fixture document (parsed by qkv's strict JSON reader) validated into a
    :class:`RopeFixture`. Order: the document's keys (``chapter``, when given, must be
    :data:`NAME`); ``$.rope`` (keys, then the table in
    the chapter's order); ``$.query``; ``$.key`` (its shape is the query's); the positions
    the report needs; ``$.upstream``; ``$.gradcheck``; ``$.invariant_tolerance``. Raises
    :class:`~qkvcli.reading.problems.FixtureError` naming the ``$.path`` of the first problem."""
    problems = Problems()
    data = keyed_object(document, "$", DOCUMENT_KEYS)
    check_chapter(data)
    keyed_object(data, "$", DOCUMENT_KEYS, ("rope", "query", "key"))
    table = _table(data["rope"], max_elements)
    query = _operand(data["query"], "$.query", table, max_elements, base_dir)
    key = _operand(data["key"], "$.key", table, max_elements, base_dir)
    expect_shape(key, query.shape, "tokens, features", "$.key")
    tokens = int(query.shape[0])
    check_derived("dot products", "[T,T]", (tokens, tokens), "$.query", max_elements)
    offset, shift = positions_of(data["rope"], table, tokens)
    upstream = [np.ones(query.shape), np.ones(query.shape)]
    if "upstream" in data:
        given = keyed_object(data["upstream"], "$.upstream", ("query", "key"))
        for i, branch in enumerate(("query", "key")):
            if branch in given:
                location = f"$.upstream.{branch}"
                grad = expect_shape(parse_tensor(given[branch], location, max_elements,
                                                 base_dir=base_dir),
                                    query.shape, "tokens, features", location)
                engine_check(check_finite, grad, f"upstream {branch}", location=location)
                upstream[i] = grad
    step, tolerance, samples = parse_gradcheck(data.get("gradcheck"), problems)
    check_step_fits(step, (query, key), "$.gradcheck.step")
    engine_check(lambda: check_evaluations("full" if samples is None else "sampled", samples, 0,
                                           [query.size, key.size], has_fast=False,
                                           limit=evaluations_allowed() or MAX_EVALUATIONS),
                 location="$.gradcheck")
    invariant = invariant_tolerance(data)
    return RopeFixture(table, offset, shift, query, key, upstream[0], upstream[1], step,
                       tolerance, samples, invariant)


def invariant_tolerance(data: dict[str, Any]) -> float:
    """The fixture's ``invariant_tolerance`` (at least 0), else the chapter's 1e-12."""
    if "invariant_tolerance" not in data:
        return DEFAULT_INVARIANT_TOLERANCE
    invariant = finite_number(data["invariant_tolerance"], "$.invariant_tolerance")
    if invariant < 0.0:
        raise FixtureError("$.invariant_tolerance", f"expected at least 0, got {invariant!r}")
    return invariant


# --- the evidence -----------------------------------------------------------------------


class RopeTables(Record):
    """The angles of the fixture's positions: per pair its inverse frequency, per position
    (``positions``, absolute) its angles, cosines and sines ``[tokens, pairs]``."""

    inverse_frequencies: Array
    positions: tuple[int, ...]
    angles: Array
    cosines: Array
    sines: Array


class RopePrimary(Record):
    """The chapter's numbers: Q and K before and after the turn at the fixture's positions
    and at the shifted ones, the query rows' norms, both dot-product grids, the objective
    and its gradients, and the invariants they show."""

    tables: RopeTables
    query: Array
    key: Array
    rotated_query: Array
    rotated_key: Array
    shifted_query: Array
    shifted_key: Array
    input_norms: Array
    rotated_norms: Array
    shifted_norms: Array
    dot_grid: Array
    shifted_dot_grid: Array
    upstream_query: Array
    upstream_key: Array
    loss: float
    query_gradient: Array
    key_gradient: Array
    position_zero_identity: bool
    norm_preserved: bool
    common_shift_preserved: bool
    tape_finite: bool


class RopeEvidence(ChapterEvidence):
    """Chapter 29's whole evidence for one fixture: the fixture, the primary numbers, the
    shape probes, the rejected inputs, the gradient check of Q and K, the replay, and the
    chapter's checks judged (``checks``, in report order)."""

    fixture: RopeFixture
    primary: RopePrimary
    probes: tuple[ShapeProbe, ...]


def _norms(rows: Array) -> Array:
    result: Array = np.sqrt(np.sum(rows * rows, axis=-1))
    return result


def _loss(fixture: RopeFixture, rotated_query: Array, rotated_key: Array) -> float:
    """``L = <rot(Q), U_Q> + <rot(K), U_K>`` of Q and K turned at the fixture's positions."""
    return (float(np.sum(rotated_query * fixture.upstream_query))
            + float(np.sum(rotated_key * fixture.upstream_key)))


def judge_session(fixture: RopeFixture) -> Session:
    """Q and K as the one fixture ``[2,T,d]`` (Q's rows, then K's; their upstream gradients
    alike) of a session whose implementation is the chapter's rotation (its table, through
    :func:`rotate_checked`), judged at the chapter's invariant tolerance."""
    table = fixture.table
    rotation = PythonImplementation(
        "chapter 29's rotation", None, rope=lambda x, base, offset: rotate_checked(table, x, offset),
        # the gradient of <rot(x), U> is U turned back: the rotation's transpose
        rope_reverse=lambda upstream, base, offset: rotate_checked(table, upstream, offset, inverse=True))
    rotation.fresh = True  # the engine's own new arrays
    case = Case("fixture", np.stack([fixture.query, fixture.key]), (),
                (np.stack([fixture.upstream_query, fixture.upstream_key]),), fixture.step,
                fixture.tolerance, base=table.base, offset=fixture.offset)
    return Session(rotation, [case], fixture.invariant_tolerance, isolated=False,
                   given_only=True)


def position_zero_holds(fixture: RopeFixture) -> bool:
    """``qkv check``'s position-zero family on the chapter's rotation: every row of Q and
    K, turned as if it stood at position 0, is itself."""
    return check_position_zero(judge_session(fixture))[0].passed


def primary(fixture: RopeFixture, session: Session) -> RopePrimary:
    """The chapter's numbers: Q and K turned, and their upstream gradients turned back, by
    the session's first ``rope`` and ``rope_reverse`` (:func:`judge_session`), Q and K at
    the shifted positions by its ``rope``; the tables by the engine's."""
    table, offset, tolerance = fixture.table, fixture.offset, fixture.invariant_tolerance
    tokens = int(fixture.query.shape[0])
    rope = table.rope(offset)
    frequencies = inverse_frequencies(rope)
    positions = tuple(range(offset, offset + tokens))
    # the angle each table row is the cosine and sine of: position * inverse frequency
    angles = np.arange(offset, offset + tokens, dtype=np.float64)[:, None] * frequencies[None, :]
    cosines, sines = (np.array(t) for t in rope_tables(rope, 0, tokens))
    q, k = fixture.query, fixture.key
    case = session.cases[0]
    rotated, turned_back = (session.answered(ROPE, ROPE.run(case), backward)
                            for backward in (False, True))
    (rotated_query, rotated_key), (query_gradient, key_gradient) = rotated[0], turned_back[0]
    shifted_query, shifted_key = session.call(
        ROPE, ROPE.run(case._replace(offset=offset + fixture.shift)))[0]
    dot_grid = dots(rotated_query, rotated_key)  # [T,d] @ [d,T] -> [T,T]
    shifted_dot_grid = dots(shifted_query, shifted_key)
    norms = (_norms(q), _norms(rotated_query), _norms(shifted_query))
    loss = _loss(fixture, rotated_query, rotated_key)
    arrays = (rotated_query, rotated_key, shifted_query, shifted_key, cosines, sines,
              query_gradient, key_gradient, dot_grid, shifted_dot_grid)
    return RopePrimary(
        RopeTables(frequencies, positions, angles, cosines, sines),
        q, k, rotated_query, rotated_key, shifted_query, shifted_key, *norms,
        dot_grid, shifted_dot_grid, fixture.upstream_query, fixture.upstream_key, loss,
        query_gradient, key_gradient,
        position_zero_identity=check_position_zero(session)[0].passed,
        norm_preserved=bool(np.all(np.abs(norms[0] - norms[1]) <= tolerance)
                            and np.all(np.abs(norms[0] - norms[2]) <= tolerance)),
        common_shift_preserved=relative_dot(dot_grid, shifted_dot_grid, tolerance,
                                            scaled=False) is None,
        tape_finite=all(all_finite(a) for a in arrays) and bool(np.isfinite(loss)),
    )


def probes(fixture: RopeFixture, session: Session) -> tuple[ShapeProbe, ...]:
    """The shapes the rotation keeps, check's shapes family on it in ``session``
    (:func:`~qkvcli.check.boundaries.probed`): batched lanes of rank three and four, an
    empty leading axis, and no tokens at the very end of the table."""
    case, positions = session.cases[0], fixture.table.positions
    tokens, features = (int(d) for d in fixture.query.shape)
    return tuple(probed(session, ROPE, ROPE.run(case._replace(offset=offset)),
                        Probe(what, what, np.zeros(shape), ()), False)
                 for what, shape, offset in (
                     ("rank3", (2, tokens, features), fixture.offset),
                     ("rank4", (2, 2, tokens, features), fixture.offset),
                     ("empty_leading", (0, tokens, features), fixture.offset),
                     ("empty_tokens", (2, 0, features), positions)))


def released(shape: tuple[int, ...]) -> memoryview[float]:
    """A buffer of ``shape`` already released: an operand no stage may read (the
    chapters' released-input case)."""
    view = memoryview(bytearray(8 * int(np.prod(shape)))).cast("d", shape)
    view.release()
    return view


SMALL_CAPACITY = 3
"""The rejected inputs' table: three positions, so that two tokens from position 2 do
not fit."""


def bad_inputs(fixture: RopeFixture) -> tuple[BadInput, ...]:
    """The chapter's bad inputs, each given to the validator, in the chapter's order: each
    must raise exactly the error expected, fields and all."""
    t = fixture.table
    small = RotaryTable(t.features, SMALL_CAPACITY, t.base, t.layout)
    overflow = 2 ** 64 - 1
    return (
        ("zero-width", ZeroFeatureWidth(), lambda: check_table(0, t.positions, t.base, t.layout)),
        ("odd-width", OddFeatureWidth(t.features - 1),
         lambda: check_table(t.features - 1, t.positions, t.base, t.layout)),
        ("invalid-base", InvalidRopeBase(0.0),
         lambda: check_table(t.features, t.positions, 0.0, t.layout)),
        ("input-rank", RotaryInputRank(1), lambda: rotate_checked(small, np.zeros(t.features), 0)),
        ("width-mismatch", RotaryWidthMismatch(t.features, t.features // 2),
         lambda: rotate_checked(small, np.zeros((1, t.features // 2)), 0)),
        ("position-range", PositionRangeExceeded(2, 2, SMALL_CAPACITY),
         lambda: rotate_checked(small, np.zeros((2, t.features)), 2)),
        ("offset-overflow", PositionOffsetOverflow(overflow, 1),
         lambda: rotate_checked(small, np.zeros((1, t.features)), overflow)),
        ("released-input", ReleasedBuffer(ROTARY_STAGE),
         lambda: rotate_checked(small, released((1, t.features)), 0)),
    )


def gradient_check(fixture: RopeFixture, found: RopePrimary) -> GradcheckResult:
    """Central differences of the chapter's objective against the gradients of Q and K."""
    def of_query(probe: Array) -> float:
        return _loss(fixture, rotate_checked(fixture.table, probe, fixture.offset), found.rotated_key)

    def of_key(probe: Array) -> float:
        return _loss(fixture, found.rotated_query, rotate_checked(fixture.table, probe, fixture.offset))

    samples = fixture.samples
    return plain_check((("query", fixture.query, found.query_gradient, of_query, samples),
                        ("key", fixture.key, found.key_gradient, of_key, samples)),
                       fixture.step, fixture.tolerance, "full" if samples is None else "sampled")


def build(fixture: RopeFixture) -> RopeEvidence:
    """Chapter 29's evidence for ``fixture``: the primary numbers and their replay (check's
    family), on the chapter's rotation as an implementation (:func:`judge_session`); the
    probes, the rejected inputs, the gradient check, and each check judged."""
    # overflow is evidence (tape_finite fails), not a warning on stderr
    with np.errstate(over="ignore", invalid="ignore"):
        session = judge_session(fixture)
        found = primary(fixture, session)
        replay, _ = check_replay(session, ROPE)  # a second rope and rope_reverse, bit for bit
        shapes = probes(fixture, session)
        errors = typed_refusals(bad_inputs(fixture))
        checked = gradient_check(fixture, found)
        evidence = RopeEvidence(errors=errors, gradcheck=checked, replay_bitwise=replay.passed,
                                checks=(), fixture=fixture, primary=found, probes=shapes)
        return evidence._replace(checks=judge_plan(PLANS[CH29], evidence))


CHAPTER = Chapter(29, NAME, FIXTURE, parse, build)
