"""Chapter 30, multi-head attention: a layer fixture read into plain records, its evidence built.

The chapter projects ``X [B,T,d_model]`` once per branch, splits the projections into H
heads of ``d_h`` features (``[B,H,T,d_h]``), turns each head's Q and K by RoPE, runs a
causal softmax per head, merges the heads' outputs back (``[B,T,H*d_h]``) and mixes them
with the output projection ``W_O``. Its probes: each head normalises its own causal rows,
the future weighs exactly zero, a change to the last token leaves every earlier token's
output bit for bit, a change confined to one head's lane leaves the other heads' outputs
bit for bit (heads are isolated before ``W_O``), split and merge are exact inverses, and a
common position offset keeps every weight.

Forward, reverse and the gradient check are the one engine's
(:class:`~qkvcli.attention.multihead.MultiHeadLayer`, :mod:`qkvcli.attention.engine`,
:func:`~qkvcli.attention.gradcheck.gradcheck_attention`). What this module adds is the
chapter's input rule around it (:func:`forward_checked`: a readable operand, the engine's
rank and width, at least one token, the positions within the RoPE table of chapter 29).
No I/O, no prose.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from qkvcli.attention import engine
from qkvcli.attention.engine import LayerForward, LayerGradients
from qkvcli.attention.errors import (
    EmptyLayerInput,
    HeadCountMismatch,
    PositionOffsetOverflow,
    PositionRangeExceeded,
    ReleasedBuffer,
    RotaryRefusal,
)
from qkvcli.attention.gradcheck import gradcheck_attention, plan_check
from qkvcli.attention.head import AttentionHead
from qkvcli.attention.maths import causal_mask
from qkvcli.attention.multihead import MultiHeadLayer
from qkvcli.chapters.ch29 import (
    LAYOUTS,
    RotaryTable,
    check_chapter,
    check_interval,
    check_table,
    count_of,
    invariant_tolerance,
    positions_of,
    read_operand,
    released,
    rope_settings,
)
from qkvcli.chapters.registry import Chapter, ChapterEvidence
from qkvcli.check.behaviour import Perturbed, check_prefix, check_replay
from qkvcli.check.boundaries import BadInput, probed, typed_refusals
from qkvcli.check.cases import Case
from qkvcli.check.kinds import MULTI_HEAD, Probe
from qkvcli.check.multihead import check_head_isolation
from qkvcli.check.plans import CH30, PLANS
from qkvcli.check.rotary import relative_dot
from qkvcli.check.session import Session
from qkvcli.core.arrays import Array, all_finite, check_finite, same_bits
from qkvcli.core.errors import InputRank, InputWidthMismatch, ProjectionError, QkvError, RopeError
from qkvcli.core.invariants import future_zero, prefix, row_sums
from qkvcli.core.record import Record
from qkvcli.core.results import ShapeProbe, judge_plan
from qkvcli.core.rope import Rope
from qkvcli.gradcheck.settings import MAX_EVALUATIONS, evaluations_allowed
from qkvcli.protocol.python import PythonImplementation
from qkvcli.reading.json_values import keyed_object
from qkvcli.reading.limits import DEFAULT_MAX_ELEMENTS, check_scores_size, check_step_fits, expect_shape
from qkvcli.reading.problems import FixtureError, Problems
from qkvcli.reading.settings import parse_gradcheck
from qkvcli.reading.tensors import parse_tensor
from qkvcli.reading.weights import engine_check

if TYPE_CHECKING:
    from qkvcli.reading.files import StrPath

NAME = "30-multi-head-attention"
FIXTURE = "ch30-multi-head-attention.json"

PROJECTION_STAGE = "query-projection"
"""The first stage that reads the layer's input: the query projection."""

BRANCH_NAMES = ("attention.query.weight", "attention.key.weight", "attention.value.weight")
"""The engine's names of the three projections (the output projection is unnamed there)."""

DOCUMENT_KEYS = ("chapter", "description", "heads", "rope", "input", "weights", "upstream", "suffix",
                 "gradcheck", "invariant_tolerance")
ROPE_KEYS = ("positions", "base", "layout", "offset", "shift")
WEIGHT_KEYS = ("query", "key", "value", "output")


class MultiHeadSpec(Record):
    """What the chapter's layer is made of: the four weights (``X W`` layout), the head
    count and the RoPE table of each head (``features`` = ``d_h``)."""

    w_query: Array
    w_key: Array
    w_value: Array
    w_out: Array
    heads: int
    table: RotaryTable


def build_layer(w_query: Any, w_key: Any, w_value: Any, w_out: Any, heads: int,
                base: float, layout: str = "adjacent", offset: int = 0) -> MultiHeadLayer:
    """The engine's layer, validated by the engine in the chapter's order: the three
    projections (widths, finite values), the head count against their widths and the
    output projection, then RoPE on each head (an even head width). Raises a ``QkvError``."""
    plain = AttentionHead.from_arrays(w_query, w_key, w_value, names=BRANCH_NAMES)
    MultiHeadLayer.build(plain, heads, w_out)  # the heads and W_O, before RoPE asks for a width
    rope = Rope(base, plain.d_k // heads, LAYOUTS[layout], offset)
    projections = AttentionHead.from_arrays(w_query, w_key, w_value, names=BRANCH_NAMES,
                                            rope=rope)
    return MultiHeadLayer.build(projections, heads, w_out)


def layer_at(spec: MultiHeadSpec, offset: int) -> MultiHeadLayer:
    """The fixture's layer with its positions starting at ``offset``."""
    return build_layer(spec.w_query, spec.w_key, spec.w_value, spec.w_out, spec.heads,
                       spec.table.base, spec.table.layout, offset)


def forward_checked(spec: MultiHeadSpec, values: Any,
                    offset: int) -> tuple[MultiHeadLayer, Array, LayerForward]:
    """The causal forward of the layer at positions ``offset ..`` after the chapter's input
    checks, in its order: a readable operand (:class:`~qkvcli.attention.errors.ReleasedBuffer`),
    rank three and the model width (the engine's), at least one token (:class:`EmptyLayerInput`),
    the position interval (chapter 29's table). Gives the layer, the input and the pass."""
    layer = layer_at(spec, offset)
    x = layer.projections.check_input(read_operand(values, PROJECTION_STAGE))
    if x.shape[1] == 0:
        raise EmptyLayerInput()
    check_interval(spec.table, offset, int(x.shape[1]))
    with np.errstate(over="ignore", invalid="ignore"):
        return layer, x, engine.forward(layer, x, True)


# --- the fixture ------------------------------------------------------------------------


class MultiHeadFixture(Record):
    """A chapter 30 fixture, validated: the layer, where the positions start and how far
    the common offset moves them, the input ``[B,T,d_model]``, the upstream gradient of the
    output, the last token's replacement for the prefix probe, and the checks' settings."""

    spec: MultiHeadSpec
    offset: int
    shift: int
    input: Array
    upstream: Array
    suffix: Array
    step: float
    tolerance: float
    samples: int | None
    invariant_tolerance: float


def read_spec(data: dict[str, Any], max_elements: int, base_dir: StrPath | None,
              rope_keys: tuple[str, ...] = ROPE_KEYS) -> MultiHeadSpec:
    """The layer of a fixture in chapter 30's form (``$.heads``, ``$.rope`` of
    ``rope_keys``, ``$.weights``), validated in that order: the projections, the head
    count, the output projection, then RoPE on a head. Raises :class:`FixtureError`."""
    heads = count_of(data["heads"], "$.heads")
    rope = keyed_object(data["rope"], "$.rope", rope_keys, ("positions", "base"))
    positions, base, layout = rope_settings(rope)
    weights = keyed_object(data["weights"], "$.weights", WEIGHT_KEYS, WEIGHT_KEYS)
    arrays = [parse_tensor(weights[b], f"$.weights.{b}", max_elements, base_dir=base_dir)
              for b in WEIGHT_KEYS]
    plain: AttentionHead = engine_check(lambda: AttentionHead.from_arrays(
        arrays[0], arrays[1], arrays[2], names=BRANCH_NAMES), location="$.weights")
    try:
        MultiHeadLayer.build(plain, heads, arrays[3])
    except QkvError as error:
        where = "$.weights.output" if "out_proj" in str(error) else "$.heads"
        raise FixtureError(where, str(error)) from None
    head_width = plain.d_k // heads
    try:
        table = check_table(head_width, positions, base, layout)
    except RotaryRefusal as error:
        where = "$.heads" if head_width % 2 else ("$.rope.positions" if positions == 0
                                                  else "$.rope.base")
        raise FixtureError(where, f"{error} (the head width is RoPE's feature width)") from None
    return MultiHeadSpec(arrays[0], arrays[1], arrays[2], arrays[3], heads, table)


def parse(document: object, max_elements: int = DEFAULT_MAX_ELEMENTS,
          base_dir: StrPath | None = None) -> MultiHeadFixture:
    """A chapter 30 fixture document (parsed by qkv's strict JSON reader) validated into a
    :class:`MultiHeadFixture`. Order: the document's keys (``chapter``, when given, must be
    :data:`NAME`); ``$.heads``; ``$.rope``'s keys;
    ``$.weights`` (the projections, the head count, the output projection, then RoPE on a
    head); ``$.input`` (the chapter's input rule); the positions the report needs
    (``$.rope.offset``, ``$.rope.shift``); ``$.upstream``; ``$.suffix``; ``$.gradcheck``;
    ``$.invariant_tolerance``. Raises :class:`~qkvcli.reading.problems.FixtureError`
    naming the ``$.path`` of the first problem."""
    data = keyed_object(document, "$", DOCUMENT_KEYS)
    check_chapter(data, NAME)
    keyed_object(data, "$", DOCUMENT_KEYS, ("heads", "rope", "input", "weights"))
    spec = read_spec(data, max_elements, base_dir)
    x = parse_tensor(data["input"], "$.input", max_elements, base_dir=base_dir)
    try:
        layer = layer_at(spec, 0)
        x = layer.projections.check_input(x)
        if x.shape[1] == 0:
            raise EmptyLayerInput()
    except QkvError as error:
        raise FixtureError("$.input", str(error)) from None
    if x.shape[0] == 0:  # the probes change a token of the first batch item
        raise FixtureError("$.input", "the chapter's probes need at least one batch item, "
                                      "got an empty batch axis")
    batch, tokens, d_model = (int(d) for d in x.shape)
    check_scores_size(batch, spec.heads, tokens, "$.input", max_elements)
    offset, shift = positions_of(data["rope"], spec.table, tokens)
    shape = (batch, tokens, layer.e_out)
    upstream = np.ones(shape)
    if "upstream" in data:
        upstream = expect_shape(parse_tensor(data["upstream"], "$.upstream", max_elements,
                                             base_dir=base_dir),
                                shape, "batch, tokens, output width", "$.upstream")
    suffix = x[0, -1] + 1.0
    if "suffix" in data:
        suffix = expect_shape(parse_tensor(data["suffix"], "$.suffix", max_elements,
                                           base_dir=base_dir),
                              (d_model,), "d_model", "$.suffix")
    for location, array in (("$.upstream", upstream), ("$.suffix", suffix)):
        engine_check(check_finite, array, location[2:], location=location)
    step, tolerance, samples = parse_gradcheck(data.get("gradcheck"), Problems())
    check_step_fits(step, (x, *layer.projections.weights, spec.w_out), "$.gradcheck.step")
    engine_check(lambda: plan_check(layer, x, step, tolerance, samples, causal=True,
                                    mode="full" if samples is None else "sampled",
                                    limit=evaluations_allowed() or MAX_EVALUATIONS),
                 location="$.gradcheck")
    invariant = invariant_tolerance(data)
    return MultiHeadFixture(spec, offset, shift, x, upstream, suffix, step, tolerance, samples,
                        invariant)


# --- the evidence -----------------------------------------------------------------------


class MultiHeadPrimary(Record):
    """The chapter's numbers, from the engine's forward and reverse at the fixture's
    positions: the heads' projections before and after RoPE ``[B,H,T,d_h]``, the causal
    weights ``[B,H,T,T]``, the heads' outputs, their merge ``C``, ``W_O``, the output ``Y``,
    the objective ``L = <Y, U>`` and the gradients of the input and the four weights."""

    input: Array
    projected_query: Array
    projected_key: Array
    projected_value: Array
    rotated_query: Array
    rotated_key: Array
    attention: Array
    head_outputs: Array
    merged: Array
    output_weight: Array
    output: Array
    upstream: Array
    loss: float
    grad_input: Array
    grad_w_query: Array
    grad_w_key: Array
    grad_w_value: Array
    grad_w_out: Array

    def stages(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """Each stage's name and shape, in the layer's order: the input, its heads split and
        turned, the weights, the heads' outputs, their merge, ``W_O`` and the output."""
        return tuple((name, tuple(int(d) for d in a.shape)) for name, a in (
            ("input", self.input), ("split", self.projected_query),
            ("rotated", self.rotated_query), ("weights", self.attention),
            ("head_output", self.head_outputs), ("merged", self.merged),
            ("output_weight", self.output_weight), ("output", self.output)))

    def arrays(self) -> tuple[Array, ...]:
        """Every array, in field order (what ``tape_finite`` judges)."""
        return (self.input, self.projected_query, self.projected_key, self.projected_value,
                self.rotated_query, self.rotated_key, self.attention, self.head_outputs,
                self.merged, self.output_weight, self.output, self.upstream, self.grad_input,
                self.grad_w_query, self.grad_w_key, self.grad_w_value, self.grad_w_out)


class MultiHeadProbes(Record):
    """What the chapter's probes found. ``head_0_uniform``: head 0 weighs every visible key
    alike; ``heads_distinct``: every other head's weights differ from head 0's;
    ``future_zero``: every masked weight is exactly 0; ``rows_normalized``: every row sums to
    1 within the tolerance. ``suffix_output``: ``Y`` with the last token replaced,
    ``prefix_unchanged`` per earlier token (bit for bit), ``suffix_changed`` the last.
    ``head_isolation``: the heads are apart before the output projection
    (:func:`~qkvcli.core.invariants.isolated_heads`). ``split_merge``: splitting ``C``
    into heads gives the heads' outputs and merging them gives ``C``, bit for bit.
    ``common_offset``: the weights at the shifted positions equal these within the
    tolerance."""

    head_0_uniform: bool
    heads_distinct: bool
    future_zero: bool
    rows_normalized: bool
    suffix_output: Array
    prefix_unchanged: tuple[bool, ...]
    suffix_changed: bool
    head_isolation: bool
    split_merge: bool
    common_offset: bool


class MultiHeadParameters(Record):
    """The layer's parameters: their shapes in the chapter's order (query, key, value,
    output), how many numbers they hold, whether any bias is present, and whether any two
    share memory."""

    shapes: tuple[tuple[int, ...], ...]
    count: int
    bias_free: bool
    distinct: bool


class MultiHeadHistory(Record):
    """The chapter's contrast with what came before: an earlier attention's one weighted
    context per target, and one full-width causal head's single table against the layer's
    H tables (their shapes, counts, and whether every row sums to 1)."""

    earlier_context: Array
    single_head_shape: tuple[int, ...]
    multi_head_shape: tuple[int, ...]
    single_head_tables: int
    multi_head_tables: int
    rows_normalized: bool


class MultiHeadEvidence(ChapterEvidence):
    """Chapter 30's whole evidence for one fixture, the chapter's checks judged in
    ``checks`` (report order); ``shapes`` are the passes on an empty batch and on one
    token (at the table's last position), check's shape probes."""

    fixture: MultiHeadFixture
    primary: MultiHeadPrimary
    probes: MultiHeadProbes
    shapes: tuple[ShapeProbe, ...]
    parameters: MultiHeadParameters
    history: MultiHeadHistory
    tape_finite: bool


def primary(session: Session) -> tuple[MultiHeadPrimary, MultiHeadLayer, LayerForward, LayerGradients]:
    """The session's first forward and backward of the fixture (the chapter's layer, causal
    with RoPE), the stages of that forward the layer kept; the layer, its pass, gradients."""
    chapter, run = session.implementation, MULTI_HEAD.run(session.cases[0])
    outputs, grads = (session.answered(MULTI_HEAD, run, backward) for backward in (False, True))
    assert isinstance(chapter, ChapterLayer) and chapter.first is not None and chapter.grads is not None
    layer, x, done = chapter.first
    assert layer.out_weight is not None and done.output is outputs[2]
    s = done.stacked
    head_outputs = np.stack([head.output for head in done.heads], axis=1)  # [B,H,T,d_v]
    return MultiHeadPrimary(
        x, s["query"], s["key"], s["value"], s["rotated_query"], s["rotated_key"], outputs[0],
        head_outputs, outputs[1], layer.out_weight, outputs[2], run.upstream[0],
        engine.loss(done, run.upstream[0]), *grads), layer, done, chapter.grads


def _close(a: Array, b: Array, tolerance: float) -> bool:
    return a.shape == b.shape and bool(np.all(np.abs(a - b) <= tolerance))


class ChapterLayer(PythonImplementation):
    """The chapter's layer (:func:`forward_checked`: always causal, the chapter's RoPE table;
    the weights and head count asked for) as ``mha_forward`` and ``mha_backward``, keeping
    its first pass (the stages the report shows) and gradients (the gradient check's)."""

    fresh = True  # the engine's own new arrays

    def __init__(self, spec: MultiHeadSpec) -> None:
        super().__init__("chapter 30's layer", None, mha_forward=self.run, mha_backward=self.run)
        self.spec = spec
        self.first: tuple[MultiHeadLayer, Array, LayerForward] | None = None
        self.grads: LayerGradients | None = None

    def run(self, x: Array, w_query: Array, w_key: Array, w_value: Array, w_output: Array,
            heads: int, causal: bool, rope: bool, base: float, offset: int,
            upstream: Array | None = None) -> tuple[Array | None, ...]:
        """``mha_forward``, or ``mha_backward`` given the output's upstream gradient."""
        layer, x, done = forward_checked(self.spec._replace(
            w_query=w_query, w_key=w_key, w_value=w_value, w_out=w_output, heads=heads), x, offset)
        if upstream is None:
            self.first = self.first or (layer, x, done)
            return done.attention, done.concat, done.output
        grads = layer.backward(x, done, upstream)
        self.grads = self.grads or grads
        return (grads.grad_input, grads.grad_w_query, grads.grad_w_key, grads.grad_w_value,
                grads.grad_out_weight)


def judge_session(fixture: MultiHeadFixture) -> Session:
    """The fixture as the one case of a session whose implementation is the chapter's
    layer (:class:`ChapterLayer`), judged at the chapter's invariant tolerance."""
    spec = fixture.spec
    case = Case("fixture", fixture.input, (spec.w_query, spec.w_key, spec.w_value, spec.w_out),
                (fixture.upstream,), fixture.step, fixture.tolerance, fixture.samples,
                heads=spec.heads, base=spec.table.base, offset=fixture.offset,
                suffix=fixture.suffix)
    return Session(ChapterLayer(spec), [case], fixture.invariant_tolerance, isolated=False,
                   given_only=True)


def probes(fixture: MultiHeadFixture, found: MultiHeadPrimary, session: Session) -> MultiHeadProbes:
    """The chapter's probes, each a pass of the chapter's layer in ``session``."""
    spec, tolerance = fixture.spec, fixture.invariant_tolerance
    a = found.attention
    tokens = a.shape[-1]
    masked = causal_mask(tokens)
    uniform = np.where(masked, 0.0, 1.0 / np.arange(1, tokens + 1)[:, None])
    others = range(1, spec.heads)
    # The prefix and head-isolation families of qkv check, run on the chapter's layer as
    # an implementation of multi-head attention: the last token replaced by the
    # fixture's suffix, every earlier output bit for bit; the heads apart before W_O.
    seen: list[Perturbed] = []
    check_prefix(session, MULTI_HEAD, seen)
    isolation, _ = check_head_isolation(session)
    suffix_output, kept = seen[0] if seen else (found.output, prefix(found.output,
                                                                      found.output))
    split = engine.heads_axis(found.merged, spec.heads)
    shifted = session.call(MULTI_HEAD, MULTI_HEAD.run(session.cases[0]._replace(
        offset=fixture.offset + fixture.shift)))[0]
    return MultiHeadProbes(
        head_0_uniform=_close(a[:, 0], np.broadcast_to(uniform, a[:, 0].shape), tolerance),
        heads_distinct=spec.heads > 1 and all(not _close(a[:, 0], a[:, h], tolerance)
                                              for h in others),
        future_zero=future_zero(a, masked).passed,
        rows_normalized=row_sums(a, tolerance).passed,
        suffix_output=suffix_output,
        prefix_unchanged=kept.unchanged,
        suffix_changed=kept.last_changed,
        head_isolation=isolation.passed,
        split_merge=(same_bits(split, found.head_outputs)
                     and same_bits(engine.merge_heads(split), found.merged)),
        common_offset=relative_dot(a, shifted, tolerance, scaled=False) is None,
    )


def shapes(fixture: MultiHeadFixture, session: Session) -> tuple[ShapeProbe, ...]:
    """check's shape probes on the chapter's layer in ``session``
    (:func:`~qkvcli.check.boundaries.probed`): an empty batch, and one token at the last
    position of the table, judged by the layer's rule (``[B,H,T,T]`` weights, the merged
    heads ``W_V``'s width and the output ``W_O``'s)."""
    case, heads = session.cases[0], fixture.spec.heads
    tokens, d_model = (int(d) for d in fixture.input.shape[1:])

    def rule(x: Array, weights: tuple[Array, ...]) -> tuple[tuple[int, ...], ...]:
        batch, length = (int(d) for d in x.shape[:2])
        return ((batch, heads, length, length),
                *((batch, length, int(weights[index].shape[1])) for index in (2, 3)))

    kind = MULTI_HEAD._replace(shape_rule=rule)
    return tuple(probed(session, kind, kind.run(case._replace(offset=offset)),
                        Probe(what, what, x, ()), False)
                 for what, x, offset in (
                     ("empty batch", np.zeros((0, tokens, d_model)), fixture.offset),
                     ("single token", fixture.input[:1, :1], fixture.spec.table.positions - 1)))


def parameters(layer: MultiHeadLayer) -> MultiHeadParameters:
    """The layer's parameters as the engine holds them."""
    assert layer.out_weight is not None
    arrays = [*layer.projections.weights, layer.out_weight]
    distinct = not any(np.shares_memory(arrays[i], arrays[j])
                       for i in range(len(arrays)) for j in range(i + 1, len(arrays)))
    return MultiHeadParameters(tuple(tuple(int(d) for d in a.shape) for a in arrays),
                           layer.parameter_count,
                           not any(layer.branch_biases) and layer.out_bias is None, distinct)


def bad_inputs(fixture: MultiHeadFixture) -> tuple[BadInput, ...]:
    """The chapter's bad configurations and inputs, each given to the engine (the layer's
    validation, its input check) or the chapter's input rule, in the chapter's order."""
    spec = fixture.spec
    base, layout = spec.table.base, spec.table.layout
    d_model = int(spec.w_query.shape[0])
    tokens = int(fixture.input.shape[1])

    def layer(width: int, heads: int) -> Any:
        return lambda: build_layer(np.eye(width), np.eye(width), np.eye(width), np.eye(width),
                                   heads, base, layout)

    def given(values: Any, offset: int) -> Any:
        return lambda: forward_checked(spec, values, offset)

    capacity = spec.table.positions
    return (
        ("zero_model_width", ProjectionError, layer(0, 0)),
        ("zero_heads", HeadCountMismatch, layer(4, 0)),
        ("nondivisible", HeadCountMismatch, layer(6, 4)),
        ("odd_head_width", RopeError, layer(4, 4)),
        ("input_rank", InputRank, given(np.zeros(d_model), 0)),
        ("input_width", InputWidthMismatch, given(np.zeros((1, 2, d_model // 2)), 0)),
        ("empty_tokens", EmptyLayerInput, given(np.zeros((1, 0, d_model)), 0)),
        ("offset_overflow", PositionOffsetOverflow, given(np.zeros((1, 1, d_model)), 2 ** 64 - 1)),
        ("position_range", PositionRangeExceeded, given(np.zeros((1, 2, d_model)), capacity - 1)),
        ("released_input", ReleasedBuffer, given(released((1, tokens, d_model)), 0)),
    )


def history(fixture: MultiHeadFixture, found: MultiHeadPrimary) -> MultiHeadHistory:
    """One causal head over the whole width (Q = K = V = X, by the engine with identity
    projections and no RoPE) against the layer's heads; and an earlier attention's one
    weighted context, ``[0.25, 0.75]`` over two one-hot annotations."""
    x = found.input
    width = x.shape[-1]
    head = AttentionHead.from_arrays(np.eye(width), np.eye(width), np.eye(width))
    single = head.forward(x, causal=True).attention  # [B,T,T]
    context = np.array([0.25, 0.75]) @ np.eye(2)  # [2] @ [2,2] annotations -> [2]
    tokens = x.shape[1]
    tolerance = fixture.invariant_tolerance
    return MultiHeadHistory(
        context, tuple(int(d) for d in single.shape), tuple(int(d) for d in found.attention.shape),
        int(single.size // (tokens * tokens)), int(found.attention.size // (tokens * tokens)),
        row_sums(single, tolerance).passed and row_sums(found.attention, tolerance).passed,
    )


def build(fixture: MultiHeadFixture) -> MultiHeadEvidence:
    """Chapter 30's evidence for ``fixture``: the forward and reverse and their replay on the
    chapter's layer (:func:`judge_session`), the probes, the shapes, the parameters, the
    rejected inputs, the history and the gradient check of the input and the four weights."""
    # overflow is evidence (tape_finite fails), not a warning on stderr
    with np.errstate(over="ignore", invalid="ignore"):
        session = judge_session(fixture)
        found, layer, done, grads = primary(session)
        replay, _ = check_replay(session, MULTI_HEAD)  # a second forward and backward, bit for bit
        checked = gradcheck_attention(layer, found.input, fixture.upstream, grads, True,
                                      fixture.step, fixture.tolerance, fixture.samples,
                                      mode="full" if fixture.samples is None else "sampled",
                                      forward=done, has_fast=False,
                                      limit=evaluations_allowed() or MAX_EVALUATIONS)
        tape_finite = all(all_finite(a) for a in found.arrays()) and bool(np.isfinite(found.loss))
        evidence = MultiHeadEvidence(errors=typed_refusals(bad_inputs(fixture)), gradcheck=checked,
                                     replay_bitwise=replay.passed, checks=(), fixture=fixture,
                                     primary=found, probes=probes(fixture, found, session),
                                     shapes=shapes(fixture, session), parameters=parameters(layer),
                                     history=history(fixture, found), tape_finite=tape_finite)
        return evidence._replace(checks=judge_plan(PLANS[CH30], evidence))


CHAPTER = Chapter(30, NAME, FIXTURE, parse, build)
