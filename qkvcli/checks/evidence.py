"""Compute the chapter's evidence for one fixture, as plain frozen data (no I/O).

Every family of evidence becomes one :class:`Check` in :attr:`Evidence.checks`, in the
declared order forward, reverse, shapes, errors, initialization, independence, replay,
gradcheck, and expect when the fixture has an ``expect`` section. Renderers
(``qkvcli.render``) turn an :class:`Evidence` into text.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qkvcli.core.arrays import Array
from qkvcli.core.errors import (
    BranchInputWidthMismatch,
    BranchOutputWidthMismatch,
    DuplicateName,
    InputRank,
    InputWidthMismatch,
    ProjectionError,
    QkvError,
    ZeroOutputWidth,
)
from qkvcli.core.outputs import weighted_loss
from qkvcli.core.projections import QkvProjections
from qkvcli.core.record import Record
from qkvcli.core.splitmix import SplitMix64
from qkvcli.fixtures.fixture import Fixture
from qkvcli.gradcheck.layer import gradcheck_layer
from qkvcli.gradcheck.records import GradcheckResult

Shape = tuple[int, ...]
INIT_PREFIX = "decoder.block.0.attention"


class Config(Record):
    batch: int
    tokens: int
    d_model: int
    d_head: int
    bias: bool = False
    layout: str = "separate"


class Primary(Record):
    """Forward values, the loss and the reverse gradients of one run."""

    input: Array
    query_weight: Array
    key_weight: Array
    value_weight: Array
    query: Array
    key: Array
    value: Array
    upstream_query: Array
    upstream_key: Array
    upstream_value: Array
    loss: float
    input_gradient: Array
    query_weight_gradient: Array
    key_weight_gradient: Array
    value_weight_gradient: Array
    parameter_names: tuple[str, str, str]
    parameter_count: int

    def tensors(self) -> dict[str, Array]:
        """Every tensor by its stable name, in report order."""
        return {
            name: getattr(self, name)
            for name in (
                "input", "query_weight", "key_weight", "value_weight", "query", "key", "value",
                "upstream_query", "upstream_key", "upstream_value", "input_gradient",
                "query_weight_gradient", "key_weight_gradient", "value_weight_gradient",
            )
        }


class ShapeProbe(Record):
    """One input shape and the three output shapes it produced."""

    input: Shape
    outputs: tuple[Shape, Shape, Shape]
    gradient_shapes_ok: bool


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
        return all(
            p.gradient_shapes_ok and all(out == (*p.input[:2], self.d_head) for out in p.outputs)
            for p in probes
        )


class RejectedCase(Record):
    case: str
    rejected: bool
    message: str


class ErrorEvidence(Record):
    rank: RejectedCase
    width: RejectedCase
    model_mismatch: RejectedCase
    head_mismatch: RejectedCase
    duplicate_name: RejectedCase

    def cases(self) -> tuple[RejectedCase, ...]:
        return (self.rank, self.width, self.model_mismatch, self.head_mismatch,
                self.duplicate_name)

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

    @property
    def passed(self) -> bool:
        if not self.applicable:
            return True
        return self.query_changed and self.key_unchanged and self.value_unchanged


class HistoryEvidence(Record):
    earlier_left: str = "decoder-state"
    earlier_right: str = "encoder-annotations"
    transformer_source: str = "one-sequence"
    mapping: str = "retrospective"


class Check(Record):
    name: str
    passed: bool
    detail: str


class Evidence(Record):
    chapter: str
    seed: int
    config: Config
    primary: Primary
    shapes: ShapeEvidence
    errors: ErrorEvidence
    initialization: InitializationEvidence
    independence: IndependenceEvidence
    history: HistoryEvidence
    replay_bitwise: bool
    gradcheck: GradcheckResult
    checks: tuple[Check, ...]

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)


# --- computing each family ---------------------------------------------------------------


def _readonly(array: Any) -> Array:
    out = np.ascontiguousarray(array, dtype=np.float64)
    out.flags.writeable = False
    return out


def compute_primary(fixture: Fixture) -> Primary:
    """One forward and reverse pass over the fixture."""
    layer = fixture.layer
    outputs = layer.forward(fixture.input)
    grads = layer.backward(fixture.input, *fixture.upstream)
    return Primary(
        input=_readonly(fixture.input),
        query_weight=layer.weights[0],
        key_weight=layer.weights[1],
        value_weight=layer.weights[2],
        query=_readonly(outputs.query),
        key=_readonly(outputs.key),
        value=_readonly(outputs.value),
        upstream_query=_readonly(fixture.upstream[0]),
        upstream_key=_readonly(fixture.upstream[1]),
        upstream_value=_readonly(fixture.upstream[2]),
        loss=weighted_loss(outputs, fixture.upstream),
        input_gradient=_readonly(grads.grad_input),
        query_weight_gradient=_readonly(grads.grad_w_query),
        key_weight_gradient=_readonly(grads.grad_w_key),
        value_weight_gradient=_readonly(grads.grad_w_value),
        parameter_names=layer.names,
        parameter_count=layer.parameter_count,
    )


def _probe(layer: QkvProjections, x: Array) -> ShapeProbe:
    outputs = layer.forward(x)
    ones = tuple(np.ones(out.shape) for out in outputs)
    grads = layer.backward(x, *ones)
    gradient_ok = grads.grad_input.shape == x.shape and all(
        g.shape == (layer.d_model, layer.d_head) for g in grads[1:]
    )
    return ShapeProbe(
        input=tuple(x.shape),
        outputs=(outputs.query.shape, outputs.key.shape, outputs.value.shape),
        gradient_shapes_ok=gradient_ok,
    )


def compute_shapes(fixture: Fixture) -> ShapeEvidence:
    """The input, batch doubled, empty batch ``[0,T,d]``, empty tokens ``[2B,0,d]`` and ``[B,0,d]``."""
    layer = fixture.layer
    batch, tokens, d_model = fixture.input.shape
    return ShapeEvidence(
        rule=_probe(layer, fixture.input),
        batch=_probe(layer, np.concatenate([fixture.input, fixture.input], axis=0)),
        empty_batch=_probe(layer, np.zeros((0, tokens, d_model))),
        empty_tokens=_probe(layer, np.zeros((2 * batch, 0, d_model))),
        report_empty_tokens=_probe(layer, np.zeros((batch, 0, d_model))),
        d_head=layer.d_head,
    )


def _rejected(case: str, attempt: Any, expected: QkvError) -> RejectedCase:
    try:
        attempt()
    except QkvError as error:
        return RejectedCase(case, error == expected, str(error))
    return RejectedCase(case, False, "accepted")


def compute_errors(fixture: Fixture) -> ErrorEvidence:
    """The rejected boundaries, computed on the fixture's own sizes."""
    layer = fixture.layer
    batch, tokens, d = fixture.input.shape
    h = layer.d_head
    names = layer.names

    def zeros(rows: int, cols: int) -> Array:
        return np.zeros((rows, cols))

    return ErrorEvidence(
        rank=_rejected(
            "rank-two", lambda: layer.forward(np.broadcast_to(0.0, (tokens, d))), InputRank(2)
        ),
        width=_rejected(
            "input-width",
            lambda: layer.forward(np.broadcast_to(0.0, (batch, tokens, d + 1))),
            InputWidthMismatch(d, d + 1),
        ),
        model_mismatch=_rejected(
            "branch-mismatch",
            lambda: QkvProjections.from_arrays(zeros(d, h), zeros(d + 1, h), zeros(d, h), names),
            BranchInputWidthMismatch(d, d + 1, d),
        ),
        head_mismatch=_rejected(
            "head-mismatch",
            lambda: QkvProjections.from_arrays(zeros(d, h), zeros(d, h + 1), zeros(d, h), names),
            BranchOutputWidthMismatch(h, h + 1, h),
        ),
        duplicate_name=_rejected(
            "duplicate-name",
            lambda: QkvProjections.from_arrays(
                zeros(d, h), zeros(d, h), zeros(d, h), ("same", "same", names[2])
            ),
            DuplicateName("same", 0, 1),
        ),
    )


def compute_initialization(fixture: Fixture) -> InitializationEvidence:
    """Seeded construction: reproducible, independent branches, transactional on failure."""
    d_model, d_head, seed = fixture.d_model, fixture.d_head, fixture.seed
    first_rng, second_rng = SplitMix64(seed), SplitMix64(seed)
    first = QkvProjections.from_seed(d_model, d_head, first_rng, INIT_PREFIX)
    second = QkvProjections.from_seed(d_model, d_head, second_rng, INIT_PREFIX)
    reproducible = first_rng.state == second_rng.state and all(
        a.tobytes() == b.tobytes() for a, b in zip(first.weights, second.weights, strict=True)
    )
    w = first.weights
    independent = not (
        np.array_equal(w[0], w[1]) or np.array_equal(w[0], w[2]) or np.array_equal(w[1], w[2])
    )
    rejected_rng = SplitMix64(seed)
    before = rejected_rng.state
    rejection = "accepted"
    transactional = False
    try:
        QkvProjections.from_seed(d_model, 0, rejected_rng, INIT_PREFIX)
    except QkvError as error:
        rejection = str(error)
        transactional = (
            error == ProjectionError("query", ZeroOutputWidth()) and rejected_rng.state == before
        )
    return InitializationEvidence(seed, reproducible, independent, transactional, rejection)


def compute_independence(fixture: Fixture) -> IndependenceEvidence:
    """Change one W_Q entry by +1 at a row whose input column is not all zero."""
    x = fixture.input
    layer = fixture.layer
    live_rows = np.flatnonzero(np.any(x != 0.0, axis=(0, 1))) if x.size else np.array([])
    if live_rows.size == 0:
        return IndependenceEvidence(False, None, False, True, True)
    row = int(live_rows[0])
    changed_weight = np.array(layer.weights[0])
    changed_weight[row, 0] += 1.0
    changed = layer.with_weight("query", changed_weight)
    before = layer.forward(x)
    after = changed.forward(x)
    return IndependenceEvidence(
        applicable=True,
        row=row,
        query_changed=not np.array_equal(before.query, after.query),
        key_unchanged=before.key.tobytes() == after.key.tobytes(),
        value_unchanged=before.value.tobytes() == after.value.tobytes(),
    )


def same_primary_bits(left: Primary, right: Primary) -> bool:
    """Whether two runs agree bit for bit in every tensor, the loss, names and count."""
    tensors_equal = all(
        a.shape == b.shape and a.tobytes() == b.tobytes()
        for a, b in zip(left.tensors().values(), right.tensors().values(), strict=True)
    )
    return (
        tensors_equal
        and np.float64(left.loss).tobytes() == np.float64(right.loss).tobytes()
        and left.parameter_names == right.parameter_names
        and left.parameter_count == right.parameter_count
    )


def _all_finite(*arrays: Array) -> bool:
    return all(bool(np.isfinite(a).all()) for a in arrays)


def build_evidence(fixture: Fixture) -> Evidence:
    """Run every check of the chapter's evidence on ``fixture``."""
    primary = compute_primary(fixture)
    replay = compute_primary(fixture)
    shapes = compute_shapes(fixture)
    errors = compute_errors(fixture)
    initialization = compute_initialization(fixture)
    independence = compute_independence(fixture)
    gradcheck = gradcheck_layer(
        fixture.layer,
        fixture.input,
        fixture.upstream,
        (primary.input_gradient, primary.query_weight_gradient,
         primary.key_weight_gradient, primary.value_weight_gradient),
        fixture.step,
        fixture.tolerance,
        fixture.samples,
        mode=fixture.mode,
        directions=fixture.directions,
        seed=fixture.seed,
    )
    replay_bitwise = same_primary_bits(primary, replay)
    config = Config(
        fixture.batch, fixture.tokens, fixture.d_model, fixture.d_head, layout=fixture.layout
    )

    forward_ok = _all_finite(primary.query, primary.key, primary.value) and all(
        t.shape == (config.batch, config.tokens, config.d_head)
        for t in (primary.query, primary.key, primary.value)
    )
    reverse_ok = (
        _all_finite(primary.input_gradient, primary.query_weight_gradient,
                    primary.key_weight_gradient, primary.value_weight_gradient)
        and np.isfinite(primary.loss)
        and primary.input_gradient.shape == primary.input.shape
    )
    ind = independence
    checks: tuple[Check, ...] = (
        Check("forward", forward_ok,
              "three [batch,tokens,d_head] outputs, all finite" if forward_ok
              else "an output is not finite or has the wrong shape"),
        Check("reverse", bool(reverse_ok),
              "loss and all four gradients finite and shaped like their tensors" if reverse_ok
              else "the loss or a gradient is not finite"),
        Check("shapes", shapes.passed,
              "batch and token axes preserved, empty axes included" if shapes.passed
              else "a probe produced an unexpected shape"),
        Check("errors", errors.passed,
              f"{sum(c.rejected for c in errors.cases())} of 5 bad inputs rejected exactly"),
        Check("initialization", initialization.passed,
              f"seed {initialization.seed}: reproducible={_word(initialization.reproducible)} "
              f"independent={_word(initialization.independent)} "
              f"transactional={_word(initialization.transactional)}"),
        Check("independence", ind.passed,
              "not applicable: the input has no non-zero feature column" if not ind.applicable
              else f"W_Q[{ind.row},0]+1: query changed={_word(ind.query_changed)}, "
              f"key unchanged={_word(ind.key_unchanged)}, "
              f"value unchanged={_word(ind.value_unchanged)}"),
        Check("replay", replay_bitwise,
              "two runs agree bit for bit" if replay_bitwise else "two runs differ"),
        Check("gradcheck", gradcheck.passed, _gradcheck_detail(gradcheck)),
    )
    if fixture.expect is not None:
        # Only fixtures with an expect section get this check, so the chapter's is unchanged.
        from qkvcli.fixtures.expect import compare_expectations

        actual: dict[str, Array | float] = {**primary.tensors(), "loss": primary.loss}
        expected = compare_expectations(fixture.expect, actual)
        checks = (*checks, Check("expect", expected.passed, expected.detail))
    return Evidence(
        chapter=fixture.chapter,
        seed=fixture.seed,
        config=config,
        primary=primary,
        shapes=shapes,
        errors=errors,
        initialization=initialization,
        independence=independence,
        history=HistoryEvidence(),
        replay_bitwise=replay_bitwise,
        gradcheck=gradcheck,
        checks=checks,
    )


def _gradcheck_detail(result: GradcheckResult) -> str:
    failed = sum(not c.passed for t in result.tensors for c in t.checks)
    if result.summary == f"full: {result.count} coordinates":  # the chapter's wording
        head = f"{failed} of {result.count} coordinates failed" if failed else (
            f"{result.count} coordinates")
    else:  # another mode ran: name it and what it checked
        head = (f"{failed} of {result.count} checks failed ({result.summary})" if failed
                else result.summary)
    return f"{head}, step {result.step!r}, tolerance {result.tolerance!r}"


def _word(flag: bool) -> str:
    return "true" if flag else "false"
