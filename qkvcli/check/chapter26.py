"""Chapter 26's evidence (``qkv run``): the projections' families run on qkv's engine.

The fixture is one :class:`~qkvcli.check.cases.Case`, and qkv's engine
(:mod:`qkvcli.check.engine`) the implementation, called through a :class:`Session` as
``qkv check`` calls a learner's: the forward and reverse pass, the shape probes, the bad
requests, independence and replay are the families of :mod:`qkvcli.check.boundaries`
and :mod:`qkvcli.check.behaviour`, the same definitions that judge a learner's
projections. What only the engine offers is judged here: its refusals are typed (each
request's error, field for field, and a duplicate parameter name), and its seeded
initialization. The result is the chapter's :class:`~qkvcli.check.chapter26_evidence.Evidence`
record, which the renderers read.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from qkvcli.check.behaviour import check_independence, check_replay
from qkvcli.check.boundaries import answers, expected_shapes, probed
from qkvcli.check.cases import Case, fixture_case
from qkvcli.check.chapter26_evidence import (
    Config,
    ErrorEvidence,
    Evidence,
    HistoryEvidence,
    IndependenceEvidence,
    InitializationEvidence,
    Primary,
    ShapeEvidence,
)
from qkvcli.check.engine import engine_implementation
from qkvcli.check.kinds import PROJECTIONS, Probe
from qkvcli.check.session import Session
from qkvcli.check.values import finite_and_shaped
from qkvcli.core.arrays import Array, readonly
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
from qkvcli.core.outputs import QkvForward, weighted_loss
from qkvcli.core.projections import QkvProjections
from qkvcli.core.results import Refusal, ShapeProbe, refused
from qkvcli.core.splitmix import SplitMix64
from qkvcli.gradcheck.projections import gradcheck_projections
from qkvcli.protocol.errors import CallFailed, Rejected
from qkvcli.reading.fixture import Fixture

KIND = PROJECTIONS

TYPED: dict[str, tuple[str, Callable[[int, int], QkvError]]] = {
    "rank-2": ("rank-two", lambda d, h: InputRank(2)),
    "input-width": ("input-width", lambda d, h: InputWidthMismatch(d, d + 1)),
    "model-widths": ("branch-mismatch", lambda d, h: BranchInputWidthMismatch(d, d + 1, d)),
    "head-widths": ("head-mismatch", lambda d, h: BranchOutputWidthMismatch(h, h + 1, h)),
}
"""The engine's typed refusal of each forward request of the errors family, by the
request's code: the chapter's name for the case and the error, given ``d_model`` and
``d_head``."""


def _sizes(case: Case) -> tuple[int, int]:
    """``d_model`` and ``d_head`` as the errors family's requests use them."""
    _, _, d_model, d_head = (max(size, 1) for size in case.shape)
    return d_model, d_head


def _typed(request: tuple[str, tuple[str, ...]], refusal: CallFailed | None,
           d_model: int, d_head: int) -> Refusal:
    """One request's refusal judged field for field against the engine's typed error."""
    name, make = TYPED[request[0]]
    expected = make(d_model, d_head)
    raised = refusal.raised if isinstance(refusal, Rejected) else None

    def again() -> None:
        if raised is not None:
            raise raised

    if raised is not None and not isinstance(raised, QkvError):
        return Refusal(name, type(expected).__name__, type(raised).__name__, str(raised),
                       tuple((key, value) for key, value in vars(expected).items()
                             if key != "file"))
    return refused(name, expected, again)


def _errors(session: Session, case: Case, names: tuple[str, str, str]) -> ErrorEvidence:
    """The errors family's forward requests, each refused with the engine's typed error,
    then a duplicate parameter name (names are the engine's alone)."""
    label = case.label
    requests = [(request, lambda operation=operation, args=args: session.invoke(
        KIND.family("purity"), label, operation, args))
        for request, operation, args in KIND.requests(case, False)]
    found, _ = answers(requests)
    d_model, d_head = _sizes(case)
    typed = [_typed(request, refusal, d_model, d_head) for request, refusal in found]
    zeros = np.zeros((d_model, d_head))
    duplicate = refused("duplicate-name", DuplicateName("same", 0, 1),
                        lambda: QkvProjections.from_arrays(zeros, zeros, zeros,
                                                           ("same", "same", names[2])))
    rank, width, model, head = typed
    return ErrorEvidence(rank, width, model, head, duplicate)


def _probes(session: Session, case: Case) -> list[ShapeProbe]:
    """The shapes family's probes of the projections (an empty batch, no tokens twice,
    the batch doubled), each measured and judged by the projections' rule."""
    run = KIND.run(case)
    return [probed(session, KIND, run, probe, True) for probe in KIND.probes(case)]


def _shapes(session: Session, case: Case, primary: Primary,
            probes: list[ShapeProbe]) -> ShapeEvidence:
    """The probes, and the fixture's own shapes from its primary pass, judged by the
    same rule."""
    own = Probe("the input", "the input", case.input, case.upstream)
    names = (*KIND.forward_names, *KIND.backward_names)
    found = (*primary.outputs, primary.grad_input, *primary.weight_gradients)
    rule = ShapeProbe(own.what, tuple(case.input.shape), tuple(
        (name, tuple(result.shape), wanted) for name, result, wanted in zip(
            names, found, expected_shapes(session, KIND, KIND.run(case), own, True),
            strict=True)))
    empty_batch, empty_tokens, report_empty_tokens, batch = probes
    return ShapeEvidence(rule, batch, empty_batch, empty_tokens, report_empty_tokens,
                         int(case.weights[0].shape[1]))


def _independence(session: Session, case: Case, primary: Primary) -> IndependenceEvidence:
    """The independence family; the record reads its first probe (``W_Q`` changed) bit
    for bit against the forward it was compared with, and keeps the family's finding on
    any other pair (one on ``W_Q``'s own pair the record's fields say already)."""
    seen: list[tuple[Array, ...]] = []
    _, failures = check_independence(session, KIND, seen)
    other = next((failure for failure in failures if not failure.not_run and not (
        failure.facts and str(failure.facts[0]).startswith("W_Q"))), None)
    live = np.flatnonzero(np.any(case.input != 0.0, axis=(0, 1)))
    if live.size == 0:
        return IndependenceEvidence(False, None, False, True, True, other)
    before = QkvForward(*seen[0]) if seen else QkvForward(*primary.outputs)
    after = QkvForward(*seen[1]) if len(seen) > 1 else before
    return IndependenceEvidence(
        applicable=True,
        row=int(live[0]),
        query_changed=not np.array_equal(before.query, after.query),
        key_unchanged=before.key.tobytes() == after.key.tobytes(),
        value_unchanged=before.value.tobytes() == after.value.tobytes(),
        other=other,
    )


def projections_of(fixture: Fixture) -> QkvProjections:
    """The engine's projections of ``fixture``'s weights and names: the one way to build
    the projections a fixture describes. Raises a :class:`~qkvcli.core.errors.QkvError`
    for weights no parse would have accepted."""
    return QkvProjections.from_arrays(*fixture.weights, names=fixture.names)


def compute_initialization(fixture: Fixture) -> InitializationEvidence:
    """Seeded construction (engine-only): reproducible, independent branches,
    transactional on failure."""
    d_model, d_head, seed = fixture.d_model, fixture.d_head, fixture.seed
    first_rng, second_rng = SplitMix64(seed), SplitMix64(seed)
    first = QkvProjections.from_seed(d_model, d_head, first_rng)
    second = QkvProjections.from_seed(d_model, d_head, second_rng)
    reproducible = first_rng.state == second_rng.state and all(
        a.tobytes() == b.tobytes() for a, b in zip(first.weights, second.weights, strict=True))
    w = first.weights
    independent = not (np.array_equal(w[0], w[1]) or np.array_equal(w[0], w[2])
                       or np.array_equal(w[1], w[2]))
    rejected_rng = SplitMix64(seed)
    before = rejected_rng.state
    rejection = "accepted"
    transactional = False
    try:
        QkvProjections.from_seed(d_model, 0, rejected_rng)
    except QkvError as error:
        rejection = str(error)
        transactional = (error == ProjectionError("query", ZeroOutputWidth())
                         and rejected_rng.state == before)
    return InitializationEvidence(seed, reproducible, independent, transactional, rejection)


def _primary(session: Session, case: Case, projections: QkvProjections) -> Primary:
    """The engine's first forward and backward on the fixture (the session's, which
    every family shares), read-only."""
    run = KIND.run(case)
    outputs, grads = (session.answered(KIND, run, backward) for backward in (False, True))
    query, key, value = (readonly_view(out) for out in outputs)
    grad_input, grad_w_query, grad_w_key, grad_w_value = (readonly_view(g) for g in grads)
    w_query, w_key, w_value = projections.weights
    # The evidence holds copies of the fixture's tensors (never what its caller may
    # change), made once the probes are done (peak memory at realistic sizes).
    upstream = tuple(readonly(gradient) for gradient in case.upstream)
    return Primary(
        input=readonly(case.input), w_query=w_query, w_key=w_key, w_value=w_value,
        query=query, key=key, value=value,
        grad_query=upstream[0], grad_key=upstream[1], grad_value=upstream[2],
        loss=weighted_loss(QkvForward(query, key, value),
                           (case.upstream[0], case.upstream[1], case.upstream[2])),
        grad_input=grad_input, grad_w_query=grad_w_query, grad_w_key=grad_w_key,
        grad_w_value=grad_w_value,
        parameter_names=projections.names, parameter_count=projections.parameter_count)


def readonly_view(fresh: Array) -> Array:
    """A read-only view of an array only the evidence holds (no copy)."""
    view: Array = fresh.view()
    view.flags.writeable = False
    return view


def build_evidence(fixture: Fixture) -> Evidence:
    """Chapter 26's evidence on ``fixture``: its plan's families on qkv's engine.

    A failing check is a fact in the evidence, not an error; only invalid gradient-check
    settings raise (a :class:`~qkvcli.gradcheck.projections.GradcheckSettingError`).
    """
    projections = projections_of(fixture)
    case = fixture_case("fixture", fixture)._replace(
        input=readonly_view(fixture.input),
        upstream=tuple(readonly_view(u) for u in fixture.upstream))
    # The engine, called as any implementation is, on the read-only arrays themselves: no
    # copies (this plan has no purity family; a write would raise).
    session = Session(engine_implementation(), [case], 0.0, isolated=False)
    errors = _errors(session, case, projections.names)
    # The probes first: the doubled batch's [2B,T,d] buffers then never coexist with the
    # primary pass's (peak memory at realistic sizes).
    probes = _probes(session, case)
    primary = _primary(session, case, projections)
    shapes = _shapes(session, case, primary, probes)
    config = Config(fixture.batch, fixture.tokens, fixture.d_model, fixture.d_head,
                    layout=fixture.layout)
    gradcheck = gradcheck_projections(
        projections, fixture.input, fixture.upstream,
        (primary.grad_input, *primary.weight_gradients), fixture.step, fixture.tolerance,
        fixture.samples, mode=fixture.mode, directions=fixture.directions, seed=fixture.seed)
    expect = None
    if fixture.expect is not None:
        # Only fixtures with an expect section get this check, so the chapter's is unchanged.
        from qkvcli.check.expect import compare_expectations
        from qkvcli.reading.expect import EXPECT_FIELDS

        fields = primary.tensors()
        actual: dict[str, Array | float] = {key: fields[field]
                                            for key, field in EXPECT_FIELDS.items()}
        actual["loss"] = primary.loss
        expect = compare_expectations(fixture.expect, actual)
    independence = _independence(session, case, primary)
    replay, _ = check_replay(session, KIND)  # a second forward and backward, bit for bit
    return Evidence(
        chapter=fixture.chapter, seed=fixture.seed, config=config, primary=primary,
        forward_ok=finite_and_shaped(KIND, case.input, case.weights, primary.outputs),
        reverse_ok=finite_and_shaped(KIND, case.input, case.weights, (
            primary.grad_input, *primary.weight_gradients), backward=True)
        and math.isfinite(primary.loss),
        shapes=shapes, errors=errors, initialization=compute_initialization(fixture),
        independence=independence, history=HistoryEvidence(),
        replay_bitwise=replay.passed, gradcheck=gradcheck, expect=expect)
