"""Chapter 26's evidence (``qkv run``) as plain immutable records: facts only, no wording.

One record per evidence family (forward/reverse values, shapes, rejected inputs,
initialization, independence, history), a judgement
(:class:`~qkvcli.core.results.FamilyCheck`) per declared check, and
:class:`Evidence`, which holds them all, judged by the chapter's row of the one plan table
(:data:`qkvcli.check.plans.PLANS`). The
families that compute them are check's, run on qkv's engine by
:mod:`qkvcli.check.chapter26`; every sentence about them lives in ``qkvcli.render``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qkvcli.check.plans import PLANS, RUN, order
from qkvcli.core.arrays import Array
from qkvcli.core.record import Record
from qkvcli.core.results import Failure, FamilyCheck, Refusal, ShapeProbe, judge_plan

if TYPE_CHECKING:
    from qkvcli.check.expect import ExpectResult
    from qkvcli.gradcheck.records import GradcheckResult

Shape = tuple[int, ...]

class Config(Record):
    batch: int
    tokens: int
    d_model: int
    d_head: int
    bias: bool = False
    layout: str = "separate"


class Primary(Record):
    """Forward values, the loss and the reverse gradients of one run.

    Fields follow the vocabulary (``qkvcli.core.names``); :meth:`tensors` gives the
    published names the report, the JSON and a fixture's ``expect`` section use.
    """

    input: Array
    w_query: Array
    w_key: Array
    w_value: Array
    query: Array
    key: Array
    value: Array
    grad_query: Array
    grad_key: Array
    grad_value: Array
    loss: float
    grad_input: Array
    grad_w_query: Array
    grad_w_key: Array
    grad_w_value: Array
    parameter_names: tuple[str, str, str]
    parameter_count: int

    def tensors(self) -> dict[str, Array]:
        """Every tensor by its field name, in report order (render/ publishes the names)."""
        return {
            "input": self.input,
            "w_query": self.w_query,
            "w_key": self.w_key,
            "w_value": self.w_value,
            "query": self.query,
            "key": self.key,
            "value": self.value,
            "grad_query": self.grad_query,
            "grad_key": self.grad_key,
            "grad_value": self.grad_value,
            "grad_input": self.grad_input,
            "grad_w_query": self.grad_w_query,
            "grad_w_key": self.grad_w_key,
            "grad_w_value": self.grad_w_value,
        }

    @property
    def weights(self) -> tuple[Array, Array, Array]:
        """W_Q, W_K, W_V in branch order."""
        return (self.w_query, self.w_key, self.w_value)

    @property
    def outputs(self) -> tuple[Array, Array, Array]:
        """Q, K, V in branch order."""
        return (self.query, self.key, self.value)

    @property
    def weight_gradients(self) -> tuple[Array, Array, Array]:
        """dW_Q, dW_K, dW_V in branch order."""
        return (self.grad_w_query, self.grad_w_key, self.grad_w_value)


class ShapeEvidence(Record):
    rule: ShapeProbe
    batch: ShapeProbe
    empty_batch: ShapeProbe
    empty_tokens: ShapeProbe
    report_empty_tokens: ShapeProbe
    d_head: int

    @property
    def passed(self) -> bool:
        probes = (self.rule, self.batch, self.empty_batch, self.empty_tokens,
                  self.report_empty_tokens)
        return all(probe.kept for probe in probes)


class ErrorEvidence(Record):
    """The chapter's five bad inputs, each refused with exactly its expected error."""

    rank: Refusal
    width: Refusal
    model_mismatch: Refusal
    head_mismatch: Refusal
    duplicate_name: Refusal

    def cases(self) -> tuple[Refusal, ...]:
        return (self.rank, self.width, self.model_mismatch, self.head_mismatch,
                self.duplicate_name)

    @property
    def rejected_count(self) -> int:
        return sum(case.rejected for case in self.cases())

    @property
    def passed(self) -> bool:
        return all(case.rejected for case in self.cases())


class InitializationEvidence(Record):
    seed: int
    reproducible: bool
    independent: bool
    transactional: bool
    rejection: str

    @property
    def passed(self) -> bool:
        return self.reproducible and self.independent and self.transactional


class IndependenceEvidence(Record):
    """Add 1 to ``W_Q[row, 0]``: Q should change, K and V stay bitwise unchanged."""

    applicable: bool
    row: int | None
    query_changed: bool
    key_unchanged: bool
    value_unchanged: bool
    other: Failure | None = None  # the family's finding on another pair, if any

    @property
    def passed(self) -> bool:
        if not self.applicable:
            return self.other is None
        return (self.query_changed and self.key_unchanged and self.value_unchanged
                and self.other is None)


class HistoryEvidence(Record):
    earlier_left: str = "decoder-state"
    earlier_right: str = "encoder-annotations"
    transformer_source: str = "one-sequence"
    mapping: str = "retrospective"


class Evidence(Record):
    chapter: str
    seed: int
    config: Config
    primary: Primary
    forward_ok: bool
    reverse_ok: bool
    shapes: ShapeEvidence
    errors: ErrorEvidence
    initialization: InitializationEvidence
    independence: IndependenceEvidence
    history: HistoryEvidence
    replay_bitwise: bool
    gradcheck: GradcheckResult
    expect: ExpectResult | None = None

    @property
    def checks(self) -> tuple[FamilyCheck, ...]:
        """Every check of the chapter's plan that applies, in its order."""
        return judge_plan(PLANS[RUN], self)

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)


CHECK_ORDER = order(RUN)
"""The declared order of the chapter's checks; ``expect`` only when a fixture has one."""
