"""Chapters 27 and 28, one attention head without and with the causal mask: their evidence.

Every query scores every key (``S = Q K^T``), the scores are scaled by ``1/sqrt(d_k)``,
each row becomes probabilities over the keys, and the probabilities mix the value rows
(``O = A V``); ``L = <O, U>`` is taken back to ``dQ, dK, dV``. Chapter 28 hides the keys
after each query (``-inf`` above the diagonal before the softmax), so a query mixes only
its own and earlier value rows. Both chapters run on qkv's engine as one head on given
operands (:func:`~qkvcli.check.kinds.operand_head`), called through a
:class:`~qkvcli.check.session.Session` as any implementation is (:func:`head_session`):
the forward and reverse pass are the session's first calls (:func:`head_pass`), replay,
the single token and the prefix are check's families
(:func:`~qkvcli.check.behaviour.check_replay`,
:func:`~qkvcli.check.boundaries.check_single_token`,
:func:`~qkvcli.check.behaviour.check_prefix`), the gradient check the one checker
(:func:`~qkvcli.gradcheck.batched.plain_check`) on the session's forward; each chapter
is then a row of the one plan table (:data:`~qkvcli.check.plans.PLANS`: names and
verdicts) judged on its evidence, each a :class:`~qkvcli.core.results.FamilyCheck`:

- ``row_sums``: each probability row sums to 1 and the first batch item's mixture terms
  add up to its output;
- ``scale_probe`` (27): on orthogonal unit queries and keys (``e0``, ``e1`` of width
  ``d_k``) the scale softens the focus ``A[0,0]`` exactly when it shrinks the scores;
- ``masked_rows`` (28): every future key weighs exactly 0, in every row;
- ``prefix_invariance`` (28): a new key and value at the last position leave every
  earlier output of that batch item bit for bit, and change the last one;
- ``suffix_gradient`` (28): the gradient of the prefix seed's loss is exactly 0 at the
  positions where the seed is 0, for Q, K and V;
- ``single_token``: one token has probability 1, outputs its value row, and sends no
  gradient to its query or key;
- ``batch_isolation`` (27): the fixture's batch stacked twice gives the same output in
  both halves, bit for bit;
- ``empty_batch``: an empty batch gives empty probabilities and outputs of the right
  shapes (27: with a value one wider, and a value of width 1 gives an output of width 1);
- ``tape_finite`` (28): every array of the reverse pass is finite (``-inf`` never leaks);
- ``gradcheck``: central differences of ``L`` against ``dQ``, ``dK``, ``dV``;
- ``rejected_inputs``: the chapter's bad inputs, built from the fixture's shapes, each
  refused by the engine's checks with the right error, in the course's order;
- ``replay``: the same fixture run twice gives the same bits.

The fixtures are read by :mod:`qkvcli.chapters.head_fixture`. Plain records, no wording.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from qkvcli.attention.head import ScaleProbe, scale_probe
from qkvcli.attention.maths import score_factor
from qkvcli.attention.operands import (
    OPERANDS,
    CausalSoftmaxNonSquare,
    CausalSoftmaxRank,
    EmptyTokenAxis,
    OperandBatchMismatch,
    OperandRank,
    OperandTokenMismatch,
    QueryKeyWidthMismatch,
    ReleasedOperand,
    additive_mask,
    attend,
    causal_probabilities,
    reverse,
)
from qkvcli.chapters.head_fixture import (
    CausalFixture,
    HeadInputs,
    parse_causal,
    parse_self_attention,
)
from qkvcli.chapters.registry import (
    Chapter,
    ChapterEvidence,
    settings_replaced,
)
from qkvcli.check.behaviour import Perturbed, check_prefix, check_replay
from qkvcli.check.boundaries import BadInput, check_single_token, probed, typed_refusals
from qkvcli.check.cases import Case, Run
from qkvcli.check.engine import Bundle, operands_implementation
from qkvcli.check.kinds import Kind, Probe, Shape, operand_head
from qkvcli.check.numerical import loss_of
from qkvcli.check.plans import CH27, CH28, PLANS
from qkvcli.check.session import Session
from qkvcli.core.arrays import Array, all_finite, same_bits
from qkvcli.core.invariants import Prefix, future_zero, row_sums
from qkvcli.core.names import CHAPTER_IDS
from qkvcli.core.record import Record
from qkvcli.core.results import Plan, ShapeProbe, judge_plan
from qkvcli.gradcheck.batched import plain_check
from qkvcli.gradcheck.records import GradcheckResult
from qkvcli.gradcheck.settings import AUTO_FULL_LIMIT, DEFAULT_SAMPLES

ROW_SUM_TOLERANCE = 1e-12
"""How far from 1 a probability row's sum may be (the course's bound, for a short row)."""
MIXTURE_LIMIT = 1 << 22
"""The most mixture terms ``A[i,j] V[j]`` kept: the first batch item's first
``MIXTURE_LIMIT // (T d_v)`` query rows (all of them up to ``T = 2048`` at ``d_v = 1``)."""


# --- one pass forward and back ----------------------------------------------------------

class HeadPass(Record):
    """One head's forward and reverse pass on the fixture's operands.

    ``scaled_scores`` are the scores before the mask, ``masked_scores`` after it (``-inf``
    where a query may not look); ``terms`` are the first batch item's mixture terms
    ``A[i,j] V[j]`` ``[R,T,d_v]`` of its first ``R`` query rows (all ``T`` unless that passes
    :data:`MIXTURE_LIMIT`); ``tape_finite``: every array the reverse pass read or
    made is finite (the mask's ``-inf`` never reaches it).
    """

    query: Array
    key: Array
    value: Array
    mask: Array
    scores: Array
    scaled_scores: Array
    masked_scores: Array
    probabilities: Array
    output: Array
    row_sums: Array
    terms: Array
    scale: float
    upstream: Array
    loss: float
    grad_query: Array
    grad_key: Array
    grad_value: Array
    tape_finite: bool

    @property
    def row_sum_tolerance(self) -> float:
        """The bound of :attr:`rows_sum_to_one`: the course's 1e-12, or the rounding a sum of
        ``T`` terms may carry when that is more (``T`` units in the last place of 1)."""
        return max(ROW_SUM_TOLERANCE, int(self.query.shape[1]) * float(np.finfo(np.float64).eps))

    @property
    def rows_sum_to_one(self) -> bool:
        """The row-sums claim within :attr:`row_sum_tolerance` (:func:`~qkvcli.core.invariants.row_sums`)."""
        return row_sums(self.probabilities, self.row_sum_tolerance).passed

    @property
    def terms_make_output(self) -> bool:
        """The kept mixture terms add up to their output rows, within the rounding of a
        sum of ``T`` terms (``T`` eps times the terms' absolute sum, at least 1e-12)."""
        rows = self.terms.shape[0]
        if self.output.shape[0] == 0 or rows == 0:
            return True
        eps = float(np.finfo(np.float64).eps)
        bound = np.maximum(ROW_SUM_TOLERANCE,
                           2 * self.terms.shape[1] * eps * np.abs(self.terms).sum(axis=1))
        return bool(np.all(np.abs(self.terms.sum(axis=1) - self.output[0, :rows]) <= bound))


class HeadSession(Record):
    """The chapter's fixture as the one case of a session whose implementation is qkv's
    engine as one head on given operands (:func:`~qkvcli.check.kinds.operand_head`):
    every pass and probe of the chapter is a call through it."""

    session: Session
    kind: Kind
    case: Case

    @property
    def run(self) -> Run:
        return self.kind.run(self.case)

    def call(self, *operands: Array) -> tuple[Array, ...]:
        """The forward on ``operands`` (``Q, K, V``) instead of the fixture's."""
        return self.session.call(self.kind, self.run, (np.concatenate(operands, axis=-1),))

    def backward(self, upstream: Array) -> tuple[Array, ...]:
        """The backward on the fixture's operands for ``dO = upstream``."""
        return self.session.call(self.kind, self.run, None, (upstream,))


def head_session(query: Array, key: Array, value: Array, upstream: Array, causal: bool,
                 suffix: Array | None = None) -> HeadSession:
    """The operands as one case (``[Q|K|V]``, the output's upstream gradient; ``suffix``:
    the last token's replacement in the prefix probe) of a session on qkv's engine."""
    case = Case("fixture", np.concatenate([query, key, value], axis=-1), (), (upstream,),
                0.0, 0.0, suffix=suffix, query_width=int(query.shape[2]))
    return HeadSession(Session(operands_implementation(), [case], 0.0, isolated=False,
                               given_only=True), operand_head(causal, case.query_width), case)


def head_pass(judge: HeadSession, query: Array, key: Array, value: Array,
              upstream: Array) -> HeadPass:
    """The session's first forward and backward on the fixture (see :class:`HeadPass`)."""
    run = judge.run
    forward = judge.session.answered(judge.kind, run)
    grads = judge.session.answered(judge.kind, run, backward=True)
    scores, unmasked, masked, probabilities, output = forward
    batch, tokens, d_k = query.shape
    rows = min(tokens, MIXTURE_LIMIT // max(1, tokens * int(value.shape[2]))) if batch else 0
    # [R,T,1] * [1,T,d_v] -> [R,T,d_v]: each kept query's weighted value rows
    terms = (probabilities[0, :rows][:, :, None] * value[0][None, :, :] if batch
             else np.zeros((0, tokens, int(value.shape[2]))))
    return HeadPass(
        np.array(query), np.array(key), np.array(value), additive_mask(tokens, run.mode),
        scores, unmasked, masked, probabilities, output, probabilities.sum(axis=-1), terms,
        score_factor(d_k, None), np.array(upstream), loss_of(judge.kind, forward, run.upstream),
        grads[0], grads[1], grads[2],
        all(all_finite(a) for a in (probabilities, output, *grads)))


def gradient_check(judge: HeadSession, p: HeadPass, step: float, tolerance: float,
                   samples: int | None) -> GradcheckResult:
    """Check ``p``'s gradients at every coordinate (``samples``: that many evenly spaced
    ones per operand; ``None``: every one up to 4096 elements, 6 above)."""
    operands = (p.query, p.key, p.value)
    analytic = (p.grad_query, p.grad_key, p.grad_value)

    def objective(index: int) -> Callable[[Array], float]:
        def of(probe: Array) -> float:
            given = list(operands)
            given[index] = probe
            return loss_of(judge.kind, judge.call(*given), judge.run.upstream)

        return of

    def count(values: Array) -> int | None:
        return DEFAULT_SAMPLES if samples is None and values.size > AUTO_FULL_LIMIT else samples

    return plain_check(((name, operands[index], analytic[index], objective(index),
                         count(operands[index])) for index, name in enumerate(OPERANDS)),
                       step, tolerance, "full" if samples is None else "sampled")


# --- the probes -------------------------------------------------------------------------

class SingleToken(HeadPass):
    """The one-token probe: the head's pass on operands ``[1,1,d]`` for ``L = sum(O)``
    (one token: its scaled scores are its masked ones), and the single-token family's
    verdict on it (``claim``)."""

    claim: bool

    @property
    def query_gradient_zero(self) -> bool:
        return bool(np.all(self.grad_query == 0.0))

    @property
    def key_gradient_zero(self) -> bool:
        return bool(np.all(self.grad_key == 0.0))

    @property
    def holds(self) -> bool:
        """The single-token family's claim (probability exactly 1, no gradient to Q or K:
        :func:`~qkvcli.check.boundaries.check_single_token`), and the output the value
        row."""
        return self.claim and same_bits(self.output.reshape(-1), self.value.reshape(-1))


def single_token(vectors: tuple[Array, Array, Array], causal: bool) -> SingleToken:
    """The probe on one token whose Q, K, V are ``vectors``."""
    query, key, value = (np.asarray(v, dtype=np.float64).reshape(1, 1, -1) for v in vectors)
    judge = head_session(query, key, value, np.ones(value.shape), causal)
    claim, _ = check_single_token(judge.session, judge.kind)
    found = head_pass(judge, query, key, value, np.ones(value.shape))
    return SingleToken(*found._values(), claim.passed)  # type: ignore[call-arg]


def shape_probe(judge: HeadSession, what: str, operands: tuple[Array, Array, Array],
                seen: list[Bundle] | None = None) -> ShapeProbe:
    """check's shapes family on the head (:func:`~qkvcli.check.boundaries.probed`):
    ``operands`` (Q, K, V) instead of the fixture's, each result's shape judged by the
    head's rule (``seen``: given, it gets the results)."""
    x = np.concatenate(operands, axis=-1)
    return probed(judge.session, judge.kind, judge.run, Probe(what, what, x, ()), False, seen)


def batch_probe(judge: HeadSession, query: Array, key: Array,
                value: Array) -> tuple[ShapeProbe, bool]:
    """The fixture's batch stacked twice: the probe, and whether both halves gave the
    same output bit for bit."""
    seen: list[Bundle] = []
    q, k, v = (np.concatenate([a, a], axis=0) for a in (query, key, value))
    probe = shape_probe(judge, "batch twice", (q, k, v), seen)
    out = seen[0][4] if seen else None
    batch = query.shape[0]
    return probe, out is not None and same_bits(out[:batch], out[batch:])


def empty_probe(judge: HeadSession, query: Array, value: Array, wider: int = 0) -> ShapeProbe:
    """An empty batch of the fixture's tokens and widths (the value ``wider``): the
    scores and the probabilities ``[0,T,T]``, the output ``[0,T,d_v]``."""
    _, tokens, d_k = query.shape
    q = np.zeros((0, tokens, d_k))
    return shape_probe(judge, "empty batch", (q, q, np.zeros((0, tokens, value.shape[2] + wider))))


class PrefixProbe(Record):
    """The suffix perturbation and the prefix seed: what a later token cannot change.

    ``unchanged[p]``: position ``p`` (before the last) of the first batch item kept its
    output bit for bit; ``last_changed``: the last one did not.
    """

    position: int
    key_before: Array
    key_after: Array
    value_before: Array
    value_after: Array
    perturbed_output: Array
    unchanged: tuple[bool, ...]
    last_changed: bool
    seed: Array
    suffix_start: int
    grad_query: Array
    grad_key: Array
    grad_value: Array

    @property
    def invariant(self) -> bool:
        """The prefix claim's verdict (:class:`~qkvcli.core.invariants.Prefix`)."""
        return Prefix(self.unchanged, self.last_changed).holds

    @property
    def suffix_zero(self) -> bool:
        """``dQ``, ``dK``, ``dV`` exactly 0 from :attr:`suffix_start` on."""
        s = self.suffix_start
        return all(bool(np.all(g[:, s:, :] == 0.0))
                   for g in (self.grad_query, self.grad_key, self.grad_value))


def causal_suffix(fixture: CausalFixture) -> Array:
    """The last token of every batch item as the prefix family changes it: the first
    item's key and value the fixture's new ones, every other token as it was."""
    f = fixture.inputs
    suffix = np.concatenate([f.query[:, -1], f.key[:, -1], f.value[:, -1]], axis=-1)
    width = int(f.query.shape[2])
    suffix[0, width:2 * width], suffix[0, 2 * width:] = fixture.perturbed_key, fixture.perturbed_value
    return suffix


def prefix_probe(judge: HeadSession, fixture: CausalFixture) -> PrefixProbe:
    """The prefix family on the fixture (its first batch item's last token given a new
    key and value), and the prefix seed's gradients."""
    f = fixture.inputs
    last = int(f.key.shape[1]) - 1
    seen: list[Perturbed] = []
    check_prefix(judge.session, judge.kind, seen)
    after, kept = seen[0]
    grads = judge.backward(fixture.prefix_seed)
    return PrefixProbe(last, np.array(f.key[0, last]), np.array(fixture.perturbed_key),
                       np.array(f.value[0, last]), np.array(fixture.perturbed_value),
                       after, kept.unchanged, kept.last_changed,
                       np.array(fixture.prefix_seed), fixture.suffix_start, *grads[:3])


# --- the rejected inputs ----------------------------------------------------------------

def self_attention_bad_inputs(query: Array, key: Array, value: Array) -> tuple[BadInput, ...]:
    """Chapter 27's five bad inputs, made from the fixture's shapes, in the anchor's order."""
    batch, tokens, d_k = query.shape

    def zeros(*shape: int) -> Array:
        return np.zeros(shape)

    return (
        ("query-rank", OperandRank("query", 2),
         lambda: attend(query[0] if batch else zeros(tokens, d_k), key, value, False)),
        ("batch-mismatch", OperandBatchMismatch(batch, batch + 1, batch),
         lambda: attend(query, zeros(batch + 1, tokens, d_k), value, False)),
        ("token-mismatch", OperandTokenMismatch(tokens, tokens + 1, tokens),
         lambda: attend(query, zeros(batch, tokens + 1, d_k), value, False)),
        ("empty-tokens", EmptyTokenAxis(),
         lambda: attend(zeros(batch, 0, d_k), zeros(batch, 0, d_k),
                        zeros(batch, 0, value.shape[2]), False)),
        ("query-key-width", QueryKeyWidthMismatch(d_k, d_k + 1),
         lambda: attend(query, zeros(batch, tokens, d_k + 1), value, False)),
    )


def causal_bad_inputs(query: Array, key: Array, value: Array) -> tuple[BadInput, ...]:
    """Chapter 28's six bad inputs, made from the fixture's shapes, in the course's order."""
    batch, tokens, d_k = query.shape
    d_v = int(value.shape[2])

    def released() -> object:
        kept_nothing = attend(query, key, value, True, records=False)
        return reverse(kept_nothing, np.ones(value.shape))

    return (
        ("attention-empty-tokens", EmptyTokenAxis(),
         lambda: attend(np.zeros((batch, 0, d_k)), np.zeros((batch, 0, d_k)),
                        np.zeros((batch, 0, d_v)), True)),
        ("softmax-rank", CausalSoftmaxRank(1), lambda: causal_probabilities(np.zeros(1))),
        ("softmax-shape", CausalSoftmaxNonSquare(tokens - 1, tokens),
         lambda: causal_probabilities(np.zeros((batch, tokens - 1, tokens)))),
        ("query-rank", OperandRank("query", 2), lambda: attend(query[0], key, value, True)),
        ("token-mismatch", OperandTokenMismatch(tokens, tokens - 1, tokens),
         lambda: attend(query, key[:, :-1], value, True)),
        ("released-score", ReleasedOperand("causal-softmax", 0), released),
    )


# --- the evidence and the chapters' plans -----------------------------------------------

class HeadChapterEvidence(ChapterEvidence):
    """A head chapter's evidence: the pass and the probes both chapters run (besides the
    cases, the check and the verdicts every chapter has)."""

    chapter: str
    source: str
    primary: HeadPass
    single: SingleToken
    empty: ShapeProbe

    def operands(self, probe: ShapeProbe) -> tuple[Shape, Shape, Shape]:
        """The shapes of a shape probe's Q, K and V: its input ``[Q|K|V]`` split at the
        fixture's query width."""
        *axes, joined = probe.input
        width = int(self.primary.query.shape[2])
        return (*axes, width), (*axes, width), (*axes, joined - 2 * width)


class SelfAttentionEvidence(HeadChapterEvidence):
    """Chapter 27's: the head without a mask, with its scale, batch and value-width probes
    (``batch_isolated``: the batch stacked twice gave the same output in both halves)."""

    scale: ScaleProbe
    batch: ShapeProbe
    batch_isolated: bool
    value_width: ShapeProbe

    @property
    def empty_holds(self) -> bool:
        """The empty batch's shapes, and a value of width 1 gives an output of width 1."""
        return self.empty.kept and self.value_width.kept


class CausalEvidence(HeadChapterEvidence):
    """Chapter 28's: the head with the causal mask, and what a later token cannot change."""

    prefix: PrefixProbe

    @property
    def future_zero(self) -> bool:
        """The future-zero claim (:func:`~qkvcli.core.invariants.future_zero`) on the pass."""
        return future_zero(self.primary.probabilities, np.isneginf(self.primary.mask)).passed


E = TypeVar("E", bound=HeadChapterEvidence)


def judged(evidence: E, plan: Plan[Any]) -> E:
    """``evidence`` with the families of ``plan`` judged on it, in the plan's order."""
    return evidence._replace(checks=judge_plan(plan, evidence))


def run_head(f: HeadInputs, causal: bool, suffix: Array | None = None
             ) -> tuple[HeadSession, HeadPass, bool, SingleToken, GradcheckResult]:
    """What both chapters compute: the session, the pass, whether a second one replays it
    bit for bit (the replay family), the single token and the gradient check."""
    judge = head_session(f.query, f.key, f.value, f.upstream, causal, suffix)
    primary = head_pass(judge, f.query, f.key, f.value, f.upstream)
    replay, _ = check_replay(judge.session, judge.kind)
    return (judge, primary, replay.passed, single_token(f.single_token, causal),
            gradient_check(judge, primary, f.step, f.tolerance, f.samples))


def build_self_attention(fixture: HeadInputs) -> SelfAttentionEvidence:
    """Chapter 27's evidence for ``fixture`` (no I/O, no wording)."""
    q, k, v = fixture.query, fixture.key, fixture.value
    judge, primary, replay, single, check = run_head(fixture, False)
    batch, isolated = batch_probe(judge, q, k, v)
    return judged(SelfAttentionEvidence(
        chapter=CHAPTER_IDS[27], source=fixture.source, primary=primary, single=single,
        empty=empty_probe(judge, q, v, wider=1), gradcheck=check,
        errors=typed_refusals(self_attention_bad_inputs(q, k, v)), replay_bitwise=replay, checks=(),
        scale=scale_probe(int(q.shape[2])), batch=batch, batch_isolated=isolated,
        value_width=shape_probe(judge, "value width 1", (q, k, v[..., :1]))),
        PLANS[CH27])


def build_causal(fixture: CausalFixture) -> CausalEvidence:
    """Chapter 28's evidence for ``fixture`` (no I/O, no wording)."""
    f = fixture.inputs
    judge, primary, replay, single, check = run_head(f, True, causal_suffix(fixture))
    return judged(CausalEvidence(
        chapter=CHAPTER_IDS[28], source=f.source, primary=primary, single=single,
        empty=empty_probe(judge, f.query, f.value), gradcheck=check,
        errors=typed_refusals(causal_bad_inputs(f.query, f.key, f.value)), replay_bitwise=replay, checks=(),
        prefix=prefix_probe(judge, fixture)), PLANS[CH28])


def _causal_settings(fixture: CausalFixture, **settings: float | int | None) -> CausalFixture:
    return fixture._replace(inputs=settings_replaced(fixture.inputs, **settings))


SELF_ATTENTION = Chapter(27, CHAPTER_IDS[27], "ch27-self-attention.json", parse_self_attention,
                         build_self_attention)
CAUSAL_MASKING = Chapter(28, CHAPTER_IDS[28], "ch28-causal-masking.json", parse_causal,
                         build_causal, _causal_settings)
