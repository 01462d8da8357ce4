"""The boundary families: shape probes (empty axes too) and rejected inputs.

The shape evidence: batch and token axes survive the projections, empty axes included.

The rejected-input evidence: five bad inputs, each refused with exactly the expected error.

(Named for what it checks; the error classes themselves live in ``qkvcli.core.errors``.)
"""

from __future__ import annotations

import numpy as np

from qkvcli.core.arrays import Array
from qkvcli.core.errors import (
    BranchInputWidthMismatch,
    BranchOutputWidthMismatch,
    DuplicateName,
    InputRank,
    InputWidthMismatch,
)
from qkvcli.core.projections import QkvProjections
from qkvcli.core.results import refused
from qkvcli.evidence.records import ErrorEvidence, Primary, ShapeEvidence, ShapeProbe
from qkvcli.reading.fixture import Fixture


def probe(projections: QkvProjections, x: Array) -> ShapeProbe:
    """Project ``x`` forward and back with unit upstream gradients; record every shape."""
    shapes = tuple(tuple(out.shape) for out in projections.forward(x))  # the outputs go at once
    # Unit upstream as read-only broadcasts: the engine reads them like any array.
    ones = tuple(np.broadcast_to(1.0, shape) for shape in shapes)
    grads = projections.backward(x, *ones)
    grad_input, *grad_weights = grads
    gradient_ok = grad_input.shape == x.shape and all(
        g.shape == (projections.d_model, projections.d_head) for g in grad_weights
    )
    return ShapeProbe(
        input=tuple(x.shape),
        outputs=(shapes[0], shapes[1], shapes[2]),
        gradient_shapes_ok=gradient_ok,
    )


def primary_probe(primary: Primary, projections: QkvProjections) -> ShapeProbe:
    """The shapes the primary pass itself gave (the same forward and reverse products)."""
    gradient_ok = primary.grad_input.shape == primary.input.shape and all(
        g.shape == (projections.d_model, projections.d_head) for g in primary.weight_gradients
    )
    return ShapeProbe(
        input=tuple(primary.input.shape),
        outputs=tuple(out.shape for out in primary.outputs),  # type: ignore[arg-type]
        gradient_shapes_ok=gradient_ok,
    )


def other_probes(
    fixture: Fixture, projections: QkvProjections
) -> tuple[ShapeProbe, ShapeProbe, ShapeProbe, ShapeProbe]:
    """Batch doubled (the input twice, concatenated), ``[0,T,d]``, ``[2B,0,d]``, ``[B,0,d]``,
    through ``projections`` (the fixture's).

    The doubled batch is the largest pass of the evidence (a ``[2B,T,d]`` input and input
    gradient); :func:`~qkvcli.evidence.build.build_evidence` runs it first, while only
    the fixture is held, so its buffers never add to the primary pass's.
    """
    batch, tokens, d_model = fixture.input.shape
    return (
        probe(projections, np.concatenate([fixture.input, fixture.input], axis=0)),
        probe(projections, np.zeros((0, tokens, d_model))),
        probe(projections, np.zeros((2 * batch, 0, d_model))),
        probe(projections, np.zeros((batch, 0, d_model))),
    )


def compute_shapes(
    fixture: Fixture,
    projections: QkvProjections,
    primary: Primary | None = None,
    others: tuple[ShapeProbe, ShapeProbe, ShapeProbe, ShapeProbe] | None = None,
) -> ShapeEvidence:
    """The input, batch doubled, empty batch ``[0,T,d]``, empty tokens ``[2B,0,d]`` and ``[B,0,d]``.

    Given the fixture's ``primary`` pass, the input's own shapes are read from it instead
    of projecting the input a second time; given ``others`` (:func:`other_probes`, run
    earlier), the remaining probes are not run again.
    """
    batch, empty_batch, empty_tokens, report_empty_tokens = (
        other_probes(fixture, projections) if others is None else others
    )
    return ShapeEvidence(
        rule=probe(projections, fixture.input) if primary is None else primary_probe(primary, projections),
        batch=batch,
        empty_batch=empty_batch,
        empty_tokens=empty_tokens,
        report_empty_tokens=report_empty_tokens,
        d_head=projections.d_head,
    )


def compute_errors(fixture: Fixture, projections: QkvProjections) -> ErrorEvidence:
    """The rejected boundaries, computed on the fixture's own sizes through its
    ``projections``."""
    batch, tokens, d = fixture.input.shape
    h = projections.d_head
    names = projections.names

    def zeros(rows: int, cols: int) -> Array:
        return np.zeros((rows, cols))

    return ErrorEvidence(
        rank=refused(
            "rank-two", InputRank(2), lambda: projections.forward(np.broadcast_to(0.0, (tokens, d)))),
        width=refused(
            "input-width", InputWidthMismatch(d, d + 1),
            lambda: projections.forward(np.broadcast_to(0.0, (batch, tokens, d + 1)))),
        model_mismatch=refused(
            "branch-mismatch", BranchInputWidthMismatch(d, d + 1, d),
            lambda: QkvProjections.from_arrays(zeros(d, h), zeros(d + 1, h), zeros(d, h), names)),
        head_mismatch=refused(
            "head-mismatch", BranchOutputWidthMismatch(h, h + 1, h),
            lambda: QkvProjections.from_arrays(zeros(d, h), zeros(d, h + 1), zeros(d, h), names)),
        duplicate_name=refused(
            "duplicate-name", DuplicateName("same", 0, 1),
            lambda: QkvProjections.from_arrays(
                zeros(d, h), zeros(d, h), zeros(d, h), ("same", "same", names[2]))),
    )
