"""Chapter 28, the causal mask: its fixture read, and its whole evidence computed.

The head of chapter 27 with the keys after each query hidden: ``Z`` gets ``-inf`` above
the diagonal before the row softmax, so a query mixes only its own and earlier value
rows. The fixture is chapter 27's (:mod:`qkvcli.chapters.head_fixture`) and two keys
of its own: ``suffix_perturbation`` (``key`` and ``value``: the last token's new key and
value in the first batch item; default each coordinate plus one) and ``prefix_seed``
(an upstream ``[batch, tokens, d_v]`` that is zero from some position on; default
``upstream.output`` with the last position zeroed). The chapter's checks, each a
:class:`~qkvcli.core.results.FamilyCheck`:

- ``row_sums``: each probability row sums to 1 (within 1e-12);
- ``masked_rows``: every future key weighs exactly 0, in every row;
- ``prefix_invariance``: a new key and value at the last position leave every earlier
  output of that batch item bit for bit, and change the last one;
- ``suffix_gradient``: the gradient of the prefix seed's loss is exactly 0 at the
  positions where the seed is 0, for Q, K and V;
- ``single_token``: one token sees only itself (probability 1, its value row, no
  gradient to its query or key);
- ``empty_batch``: an empty batch gives empty probabilities and outputs of the right shapes;
- ``tape_finite``: every array of the reverse pass is finite (``-inf`` never leaks);
- ``gradcheck``: central differences of ``L`` against ``dQ``, ``dK``, ``dV``;
- ``rejected_inputs``: no tokens, a rank-one and a non-square score input to the causal
  softmax, a rank-two query, a token mismatch, and a reverse pass on a forward that
  kept no probabilities, in the course's order;
- ``replay``: the same fixture run twice gives the same bits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from qkvcli.chapters.head_fixture import HeadInputs, read_head_inputs, vector
from qkvcli.chapters.head_pass import (
    HeadPass,
    SingleToken,
    gradient_check,
    gradients,
    head_pass,
    same_pass,
    single_token,
)
from qkvcli.chapters.operands import (
    CausalSoftmaxNonSquare,
    CausalSoftmaxRank,
    EmptyTokenAxis,
    OperandRank,
    OperandTokenMismatch,
    ReleasedOperand,
    additive_mask,
    attend,
    causal_probabilities,
    reverse,
)
from qkvcli.core.arrays import Array, check_finite, readonly
from qkvcli.core.errors import QkvError
from qkvcli.core.invariants import prefix
from qkvcli.core.record import Record
from qkvcli.core.results import FamilyCheck, Refusal, refused, verdict
from qkvcli.gradcheck.records import GradcheckResult
from qkvcli.reading.json_values import expect_object, refuse_unknown_keys
from qkvcli.reading.limits import DEFAULT_MAX_ELEMENTS, expect_shape
from qkvcli.reading.problems import FixtureError, Problems
from qkvcli.reading.tensors import parse_tensor

if TYPE_CHECKING:
    from qkvcli.reading.files import StrPath

NAME = "28-causal-masking"
FIXTURE = "ch28-causal-masking.json"
CAUSAL = True
KEYS = ("suffix_perturbation", "prefix_seed")
"""The fixture keys chapter 28 adds to chapter 27's."""


class CausalFixture(Record):
    """Chapter 28's fixture: the head's inputs, the last token's new key and value, and
    the prefix seed (``suffix_start``: the first position from which it is all zero)."""

    inputs: HeadInputs
    perturbed_key: Array
    perturbed_value: Array
    prefix_seed: Array
    suffix_start: int


def parse(document: object, *, max_elements: int = DEFAULT_MAX_ELEMENTS,
          base_dir: StrPath | None = None) -> CausalFixture:
    """The chapter's fixture validated. Raises
    :class:`~qkvcli.reading.problems.FixtureError` naming the ``$.path``."""
    inputs, data = read_head_inputs(document, NAME, KEYS, max_elements, base_dir)
    _, tokens, d_k = inputs.key.shape
    d_v = int(inputs.value.shape[2])
    if inputs.key.shape[0] == 0:
        raise FixtureError("$.query", "chapter 28 perturbs the first batch item's last token: "
                           "give at least one batch item")
    key_after, value_after = inputs.key[0, -1] + 1.0, inputs.value[0, -1] + 1.0
    if "suffix_perturbation" in data:
        raw = expect_object(data["suffix_perturbation"], "$.suffix_perturbation", Problems())
        assert raw is not None  # fail-fast: a problem raised
        refuse_unknown_keys(raw, ("key", "value"), "$.suffix_perturbation")
        if "key" in raw:
            key_after = vector(raw["key"], "$.suffix_perturbation.key", int(d_k))
        if "value" in raw:
            value_after = vector(raw["value"], "$.suffix_perturbation.value", d_v)
    if (np.array_equal(key_after, inputs.key[0, -1])
            and np.array_equal(value_after, inputs.value[0, -1])):
        raise FixtureError("$.suffix_perturbation", "changes nothing: give the last token a "
                           "new key or a new value")
    if "prefix_seed" in data:
        seed = parse_tensor(data["prefix_seed"], "$.prefix_seed", max_elements, base_dir=base_dir)
        expect_shape(seed, inputs.value.shape, "batch, tokens, d_v", "$.prefix_seed")
        try:
            check_finite(seed, "prefix seed")
        except QkvError as error:
            raise FixtureError("$.prefix_seed", str(error)) from None
    else:
        seed = np.array(inputs.upstream)
        seed[:, -1, :] = 0.0
    start = suffix_start(seed)
    if start >= tokens:
        raise FixtureError("$.prefix_seed", "must be zero at the last position at least (the "
                           "positions whose gradient must vanish)")
    return CausalFixture(inputs, readonly(key_after), readonly(value_after), readonly(seed),
                         start)


def suffix_start(seed: Array) -> int:
    """The first position from which ``seed`` ``[B,T,d]`` is zero in every batch item."""
    nonzero = np.flatnonzero(np.any(seed != 0.0, axis=(0, 2)))
    return int(nonzero[-1]) + 1 if nonzero.size else 0


def with_settings(fixture: CausalFixture, **settings: float | int | None) -> CausalFixture:
    """``fixture`` with the gradient check's ``step``, ``tolerance`` or ``samples`` replaced."""
    return fixture._replace(inputs=fixture.inputs._replace(**settings))


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
        return all(self.unchanged) and self.last_changed

    @property
    def suffix_zero(self) -> bool:
        """``dQ``, ``dK``, ``dV`` exactly 0 from :attr:`suffix_start` on."""
        s = self.suffix_start
        return all(bool(np.all(g[:, s:, :] == 0.0))
                   for g in (self.grad_query, self.grad_key, self.grad_value))


class EmptyProbe(Record):
    """An empty batch through the causal head: its shapes and whether they hold."""

    query: tuple[int, ...]
    key: tuple[int, ...]
    value: tuple[int, ...]
    mask: tuple[int, ...]
    probabilities: tuple[int, ...]
    output: tuple[int, ...]

    @property
    def valid(self) -> bool:
        _, tokens, d_v = self.value
        return (self.probabilities == (0, tokens, tokens) and self.output == (0, tokens, d_v)
                and self.mask == (tokens, tokens))


class CausalEvidence(Record):
    """Chapter 28's whole evidence: the pass, the probes, the check, the cases, the verdicts."""

    chapter: str
    source: str
    primary: HeadPass
    prefix: PrefixProbe
    single: SingleToken
    empty: EmptyProbe
    gradcheck: GradcheckResult
    errors: tuple[Refusal, ...]
    future_zero: bool
    replay_bitwise: bool
    checks: tuple[FamilyCheck, ...]

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)


def prefix_probe(fixture: CausalFixture) -> PrefixProbe:
    """The first batch item's last token given a new key and value, and the prefix seed's
    gradients."""
    f = fixture.inputs
    last = int(f.key.shape[1]) - 1
    key, value = np.array(f.key), np.array(f.value)
    key[0, last], value[0, last] = fixture.perturbed_key, fixture.perturbed_value
    before = attend(f.query, f.key, f.value, CAUSAL).forward.output
    after = attend(f.query, key, value, CAUSAL).forward.output
    kept = prefix(before[:1], after[:1])  # the first batch item's last token changed
    grads = gradients(fixture.prefix_seed, f.query, f.key, f.value, CAUSAL)
    return PrefixProbe(last, np.array(f.key[0, last]), np.array(fixture.perturbed_key),
                       np.array(f.value[0, last]), np.array(fixture.perturbed_value),
                       np.array(after), kept.unchanged, kept.last_changed,
                       np.array(fixture.prefix_seed), fixture.suffix_start, *grads)


def empty_probe(query: Array, value: Array) -> EmptyProbe:
    """An empty batch of the fixture's tokens and widths."""
    _, tokens, d_k = query.shape
    q = np.zeros((0, tokens, d_k))
    v = np.zeros((0, tokens, value.shape[2]))
    run = attend(q, q, v, CAUSAL)
    mask = additive_mask(tokens, CAUSAL)
    return EmptyProbe(q.shape, q.shape, v.shape, mask.shape, run.forward.attention[:, 0].shape,
                      run.forward.output.shape)


def rejected_inputs(query: Array, key: Array, value: Array) -> tuple[Refusal, ...]:
    """The chapter's six bad inputs, made from the fixture's shapes, in the course's order."""
    batch, tokens, d_k = query.shape
    d_v = int(value.shape[2])

    def released() -> object:
        kept_nothing = attend(query, key, value, CAUSAL, records=False)
        return reverse(kept_nothing, np.ones(value.shape))

    return (
        refused("attention-empty-tokens", EmptyTokenAxis(),
                lambda: attend(np.zeros((batch, 0, d_k)), np.zeros((batch, 0, d_k)),
                               np.zeros((batch, 0, d_v)), CAUSAL)),
        refused("softmax-rank", CausalSoftmaxRank(1), lambda: causal_probabilities(np.zeros(1))),
        refused("softmax-shape", CausalSoftmaxNonSquare(tokens - 1, tokens),
                lambda: causal_probabilities(np.zeros((batch, tokens - 1, tokens)))),
        refused("query-rank", OperandRank("query", 2),
                lambda: attend(query[0], key, value, CAUSAL)),
        refused("token-mismatch", OperandTokenMismatch(tokens, tokens - 1, tokens),
                lambda: attend(query, key[:, :-1], value, CAUSAL)),
        refused("released-score", ReleasedOperand("causal-softmax", 0), released),
    )


def build(fixture: CausalFixture) -> CausalEvidence:
    """The chapter's evidence for ``fixture`` (no I/O, no wording)."""
    f = fixture.inputs
    q, k, v, u = f.query, f.key, f.value, f.upstream
    primary = head_pass(q, k, v, u, CAUSAL)
    replay = same_pass(primary, head_pass(q, k, v, u, CAUSAL))
    prefix = prefix_probe(fixture)
    single = single_token(f.single_token, CAUSAL)
    empty = empty_probe(q, v)
    check = gradient_check(primary, CAUSAL, f.step, f.tolerance, f.samples)
    errors = rejected_inputs(q, k, v)
    hidden = np.isneginf(primary.mask)
    future_zero = bool(np.all(primary.probabilities[:, hidden] == 0.0))
    checks = (
        verdict("row_sums", primary.rows_sum_to_one and primary.terms_make_output),
        verdict("masked_rows", future_zero),
        verdict("prefix_invariance", prefix.invariant),
        verdict("suffix_gradient", prefix.suffix_zero),
        verdict("single_token", single.holds),
        verdict("empty_batch", empty.valid),
        verdict("tape_finite", primary.tape_finite),
        FamilyCheck("gradcheck", check.passed, "passed" if check.passed else "failed",
                    tolerance=check.tolerance, coordinates=check.count),
        verdict("rejected_inputs", all(case.rejected for case in errors)),
        verdict("replay", replay),
    )
    return CausalEvidence(NAME, f.source, primary, prefix, single, empty, check, errors,
                          future_zero, replay, checks)

