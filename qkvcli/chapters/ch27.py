"""Chapter 27, one self-attention head: its fixture read, and its whole evidence computed.

Every query scores every key (``S = Q K^T``), the scores are scaled by ``1/sqrt(d_k)``,
each row becomes probabilities over the keys, and the probabilities mix the value rows
(``O = A V``); ``L = <O, U>`` is taken back to ``dQ, dK, dV``. The chapter's own checks,
each a :class:`~qkvcli.core.results.FamilyCheck`, in the report's order:

- ``row_sums``: each probability row sums to 1 (within 1e-12) and the first batch item's
  mixture terms add up to its output;
- ``scale_probe``: on orthogonal unit queries and keys (``e0``, ``e1`` of width ``d_k``)
  the scale softens the focus ``A[0,0]`` exactly when it shrinks the scores (``d_k > 1``);
- ``single_token``: one token has probability 1, outputs its value row, and sends no
  gradient to its query or key;
- ``batch_isolation``: the fixture's batch stacked twice gives the shapes and the same
  output in both halves, bit for bit;
- ``empty_batch``: an empty batch (value one wider) gives empty probabilities and outputs
  of the right shapes, and a value of width 1 gives an output of width 1;
- ``gradcheck``: central differences of ``L`` against ``dQ``, ``dK``, ``dV``;
- ``rejected_inputs``: a rank-two query, mismatched batches, mismatched tokens, no
  tokens and mismatched query/key widths, built from the fixture's shapes and refused by
  the engine's checks with the right error;
- ``replay``: the same fixture run twice gives the same bits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from qkvcli.attention.maths import score_factor, softmax
from qkvcli.chapters.head_fixture import HeadInputs, read_head_inputs
from qkvcli.chapters.head_pass import (
    HeadPass,
    SingleToken,
    gradient_check,
    head_pass,
    same_pass,
    single_token,
)
from qkvcli.chapters.operands import (
    EmptyTokenAxis,
    OperandBatchMismatch,
    OperandRank,
    OperandTokenMismatch,
    QueryKeyWidthMismatch,
    attend,
)
from qkvcli.core.arrays import Array, same_bits
from qkvcli.core.record import Record
from qkvcli.core.results import FamilyCheck, Refusal, refused, verdict
from qkvcli.gradcheck.records import GradcheckResult
from qkvcli.reading.limits import DEFAULT_MAX_ELEMENTS

if TYPE_CHECKING:
    from qkvcli.reading.files import StrPath

NAME = "27-self-attention"
FIXTURE = "ch27-self-attention.json"
CAUSAL = False


def parse(document: object, *, max_elements: int = DEFAULT_MAX_ELEMENTS,
          base_dir: StrPath | None = None) -> HeadInputs:
    """The chapter's fixture (see :mod:`qkvcli.chapters.head_fixture`) validated.
    Raises :class:`~qkvcli.reading.problems.FixtureError` naming the ``$.path``."""
    inputs, _ = read_head_inputs(document, NAME, (), max_elements, base_dir)
    return inputs


def with_settings(fixture: HeadInputs, **settings: float | int | None) -> HeadInputs:
    """``fixture`` with the gradient check's ``step``, ``tolerance`` or ``samples`` replaced."""
    return fixture._replace(**settings)


class ScaleProbe(Record):
    """The scale probe: ``A[0,0]`` without and with the scale, and ``A[0,1]``."""

    d_k: int
    scale: float
    unscaled_focus: float
    scaled_focus: float
    orthogonal_probability: float

    @property
    def softened(self) -> bool:
        return self.scaled_focus < self.unscaled_focus

    @property
    def holds(self) -> bool:
        """The focus is softened exactly when the scale shrinks the scores."""
        return self.softened == (self.scale < 1.0)


class ShapeProbes(Record):
    """The batch, empty-batch and value-width probes: their shapes and verdicts."""

    batch_query: tuple[int, ...]
    batch_key: tuple[int, ...]
    batch_value: tuple[int, ...]
    batch_probabilities: tuple[int, ...]
    batch_output: tuple[int, ...]
    isolated: bool
    empty_query: tuple[int, ...]
    empty_key: tuple[int, ...]
    empty_value: tuple[int, ...]
    empty_probabilities: tuple[int, ...]
    empty_output: tuple[int, ...]
    value_width_output: tuple[int, ...]

    @property
    def empty_holds(self) -> bool:
        b, t, w = self.empty_value
        return (self.empty_probabilities == (b, t, t) and self.empty_output == (b, t, w)
                and self.value_width_output[2] == 1)


class SelfAttentionEvidence(Record):
    """Chapter 27's whole evidence: the pass, the probes, the check, the cases, the verdicts."""

    chapter: str
    source: str
    primary: HeadPass
    scale: ScaleProbe
    single: SingleToken
    shapes: ShapeProbes
    gradcheck: GradcheckResult
    errors: tuple[Refusal, ...]
    replay_bitwise: bool
    checks: tuple[FamilyCheck, ...]

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)


def scale_probe(d_k: int) -> ScaleProbe:
    """The probe on two tokens whose queries, keys and values are ``e0`` and ``e1``."""
    units = np.zeros((1, 2, d_k))
    units[0, 0, 0] = 1.0
    if d_k > 1:
        units[0, 1, 1] = 1.0
    run = attend(units, units, units, CAUSAL)
    head = run.forward.heads[0]
    unscaled = softmax(np.array(head.scores))
    return ScaleProbe(d_k, score_factor(d_k, None), float(unscaled[0, 0, 0]),
                      float(head.attention[0, 0, 0]), float(head.attention[0, 0, 1]))


def shape_probes(query: Array, key: Array, value: Array) -> ShapeProbes:
    """The fixture's batch twice; an empty batch with a value one wider; a value of width 1."""
    twice = [np.concatenate([a, a], axis=0) for a in (query, key, value)]
    run = attend(twice[0], twice[1], twice[2], CAUSAL)
    batch = query.shape[0]
    out = run.forward.output
    isolated = same_bits(out[:batch], out[batch:])
    _, tokens, d_k = query.shape
    empty = (np.zeros((0, tokens, d_k)), np.zeros((0, tokens, d_k)),
             np.zeros((0, tokens, value.shape[2] + 1)))
    empty_run = attend(empty[0], empty[1], empty[2], CAUSAL)
    narrow = attend(query, key, value[..., :1], CAUSAL)
    return ShapeProbes(
        batch_query=twice[0].shape, batch_key=twice[1].shape, batch_value=twice[2].shape,
        batch_probabilities=run.forward.attention[:, 0].shape, batch_output=out.shape,
        isolated=isolated, empty_query=empty[0].shape, empty_key=empty[1].shape,
        empty_value=empty[2].shape, empty_probabilities=empty_run.forward.attention[:, 0].shape,
        empty_output=empty_run.forward.output.shape, value_width_output=narrow.forward.output.shape)


def rejected_inputs(query: Array, key: Array, value: Array) -> tuple[Refusal, ...]:
    """The chapter's five bad inputs, made from the fixture's shapes, in the anchor's order."""
    batch, tokens, d_k = query.shape

    def zeros(*shape: int) -> Array:
        return np.zeros(shape)

    return (
        refused("query-rank", OperandRank("query", 2),
                lambda: attend(query[0] if batch else zeros(tokens, d_k), key, value, CAUSAL)),
        refused("batch-mismatch", OperandBatchMismatch(batch, batch + 1, batch),
                lambda: attend(query, zeros(batch + 1, tokens, d_k), value, CAUSAL)),
        refused("token-mismatch", OperandTokenMismatch(tokens, tokens + 1, tokens),
                lambda: attend(query, zeros(batch, tokens + 1, d_k), value, CAUSAL)),
        refused("empty-tokens", EmptyTokenAxis(),
                lambda: attend(zeros(batch, 0, d_k), zeros(batch, 0, d_k),
                               zeros(batch, 0, value.shape[2]), CAUSAL)),
        refused("query-key-width", QueryKeyWidthMismatch(d_k, d_k + 1),
                lambda: attend(query, zeros(batch, tokens, d_k + 1), value, CAUSAL)),
    )


def build(fixture: HeadInputs) -> SelfAttentionEvidence:
    """The chapter's evidence for ``fixture`` (no I/O, no wording)."""
    q, k, v, u = fixture.query, fixture.key, fixture.value, fixture.upstream
    primary = head_pass(q, k, v, u, CAUSAL)
    replay = same_pass(primary, head_pass(q, k, v, u, CAUSAL))
    probe = scale_probe(int(q.shape[2]))
    single = single_token(fixture.single_token, CAUSAL)
    shapes = shape_probes(q, k, v)
    check = gradient_check(primary, CAUSAL, fixture.step, fixture.tolerance, fixture.samples)
    errors = rejected_inputs(q, k, v)
    checks = (
        verdict("row_sums", primary.rows_sum_to_one and primary.terms_make_output),
        verdict("scale_probe", probe.holds),
        verdict("single_token", single.holds),
        verdict("batch_isolation", shapes.isolated),
        verdict("empty_batch", shapes.empty_holds),
        FamilyCheck("gradcheck", check.passed, "passed" if check.passed else "failed",
                    tolerance=check.tolerance, coordinates=check.count),
        verdict("rejected_inputs", all(case.rejected for case in errors)),
        verdict("replay", replay),
    )
    return SelfAttentionEvidence(NAME, fixture.source, primary, probe, single, shapes, check,
                                 errors, replay, checks)

