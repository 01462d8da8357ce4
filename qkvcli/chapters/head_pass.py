"""A head chapter's evidence pieces: one pass forward and back, and its probes.

Chapters 27 (no mask) and 28 (causal mask) judge one head on the same pieces, computed
here from the engine (:mod:`qkvcli.chapters.operands`): :func:`head_pass` (the forward
tensors, the mixture terms of the first batch item, ``L = <O, U>`` and ``dQ, dK, dV``),
:func:`single_token` (one token: probability 1, the value row, no gradient to Q or K),
:func:`gradient_check` (central differences of ``L`` through the engine, by the one
checker, :func:`~qkvcli.gradcheck.batched.plain_check`) and :func:`same_pass` (bitwise
replay). Plain records, no wording.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from qkvcli.attention.maths import scale, score_factor
from qkvcli.chapters.operands import OPERANDS, additive_mask, attend, loss, reverse
from qkvcli.core.arrays import Array, all_finite, same_bits
from qkvcli.core.invariants import single_token as single_token_claim
from qkvcli.core.record import Record
from qkvcli.gradcheck.batched import plain_check
from qkvcli.gradcheck.records import GradcheckResult
from qkvcli.gradcheck.settings import AUTO_FULL_LIMIT, DEFAULT_SAMPLES

ROW_SUM_TOLERANCE = 1e-12
"""How far from 1 a probability row's sum may be (the course's bound, for a short row)."""
MIXTURE_LIMIT = 1 << 22
"""The most mixture terms ``A[i,j] V[j]`` kept: the first batch item's first
``MIXTURE_LIMIT // (T d_v)`` query rows (all of them up to ``T = 2048`` at ``d_v = 1``)."""


def row_sum_tolerance(tokens: int) -> float:
    """The course's 1e-12, or the rounding a sum of ``tokens`` terms may carry when that is
    more (``T`` units in the last place of 1)."""
    return max(ROW_SUM_TOLERANCE, tokens * float(np.finfo(np.float64).eps))


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
        """The bound of :attr:`rows_sum_to_one` (:func:`row_sum_tolerance` of ``T``)."""
        return row_sum_tolerance(int(self.query.shape[1]))

    @property
    def rows_sum_to_one(self) -> bool:
        """Every probability row sums to 1 within :attr:`row_sum_tolerance`."""
        return bool(np.all(np.abs(self.row_sums - 1.0) <= self.row_sum_tolerance))

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


def gradients(upstream: Array, query: Array, key: Array, value: Array,
              causal: bool) -> tuple[Array, Array, Array]:
    """``dQ, dK, dV`` of ``L = <O, U>`` for ``upstream = U``, by the engine's reverse."""
    run = attend(query, key, value, causal)
    head = reverse(run, upstream).heads[0]
    return np.array(head.grad_query), np.array(head.grad_key), np.array(head.grad_value)


def head_pass(query: Array, key: Array, value: Array, upstream: Array, causal: bool) -> HeadPass:
    """Run the head forward and back on the operands (see :class:`HeadPass`)."""
    run = attend(query, key, value, causal)
    f = run.forward.heads[0]
    grads = reverse(run, upstream)
    g = grads.heads[0]
    batch, tokens, d_k = query.shape
    scaled = run.forward.stacked["scaled_scores"][:, 0]  # masked in place by the engine
    # Z before the mask: the engine's scale of S (the mask changes only hidden entries)
    unmasked = scale(np.array(f.scores), d_k, run.layer.given_scale)
    probabilities = np.array(f.attention)
    rows = min(tokens, MIXTURE_LIMIT // max(1, tokens * int(value.shape[2]))) if batch else 0
    # [R,T,1] * [1,T,d_v] -> [R,T,d_v]: each kept query's weighted value rows
    terms = (probabilities[0, :rows][:, :, None] * value[0][None, :, :] if batch
             else np.zeros((0, tokens, int(value.shape[2]))))
    tape = (probabilities, np.array(f.output), *(np.asarray(a) for a in (
        g.grad_attention, g.grad_scaled_scores, g.grad_scores, g.grad_query, g.grad_key,
        g.grad_value)))
    return HeadPass(
        np.array(query), np.array(key), np.array(value), additive_mask(tokens, causal),
        np.array(f.scores), unmasked, np.array(scaled), probabilities, np.array(f.output),
        probabilities.sum(axis=-1), terms, score_factor(d_k, run.layer.given_scale),
        np.array(upstream), loss(run, upstream), np.array(g.grad_query), np.array(g.grad_key),
        np.array(g.grad_value), all(all_finite(a) for a in tape))


def same_pass(a: HeadPass, b: HeadPass) -> bool:
    """Whether two passes agree bit for bit in every array and number."""
    for name in a.__record_fields__:
        left, right = getattr(a, name), getattr(b, name)
        if isinstance(left, np.ndarray):
            if not same_bits(np.asarray(left, dtype=np.float64),
                             np.asarray(right, dtype=np.float64)):
                return False
        elif isinstance(left, float):
            if not same_bits(np.array([left]), np.array([right])):
                return False
        elif left != right:
            return False
    return True


class SingleToken(HeadPass):
    """The one-token probe: the head's pass on operands ``[1,1,d]`` for ``L = sum(O)``
    (one token: its scaled scores are its masked ones)."""

    @property
    def query_gradient_zero(self) -> bool:
        return bool(np.all(self.grad_query == 0.0))

    @property
    def key_gradient_zero(self) -> bool:
        return bool(np.all(self.grad_key == 0.0))

    @property
    def holds(self) -> bool:
        """Probability exactly 1 and no gradient to Q or K (the claim every attention
        keeps, :func:`~qkvcli.core.invariants.single_token`), and the output the value row."""
        return single_token_claim(self.probabilities, self.grad_query, self.grad_key) and (
            same_bits(self.output.reshape(-1), self.value.reshape(-1)))


def single_token(vectors: tuple[Array, Array, Array], causal: bool) -> SingleToken:
    """The probe on one token whose Q, K, V are ``vectors``."""
    query, key, value = (np.asarray(v, dtype=np.float64).reshape(1, 1, -1) for v in vectors)
    return SingleToken(*head_pass(query, key, value, np.ones(value.shape), causal)._values())


def gradient_check(p: HeadPass, causal: bool, step: float, tolerance: float,
                   samples: int | None) -> GradcheckResult:
    """Check ``p``'s gradients at every coordinate (``samples``: that many evenly spaced
    ones per operand; ``None``: every one up to 4096 elements, 6 above)."""
    operands = (p.query, p.key, p.value)
    analytic = (p.grad_query, p.grad_key, p.grad_value)

    def objective(index: int) -> Callable[[Array], float]:
        def of(probe: Array) -> float:
            given = list(operands)
            given[index] = probe
            return loss(attend(given[0], given[1], given[2], causal, records=False), p.upstream)

        return of

    def count(values: Array) -> int | None:
        return DEFAULT_SAMPLES if samples is None and values.size > AUTO_FULL_LIMIT else samples

    return plain_check(((name, operands[index], analytic[index], objective(index),
                         count(operands[index])) for index, name in enumerate(OPERANDS)),
                       step, tolerance, "full" if samples is None else "sampled")
