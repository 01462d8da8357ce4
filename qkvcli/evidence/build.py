"""Assemble the chapter's :class:`~qkvcli.evidence.records.Evidence` for one fixture (no I/O, no prose).

The forward and reverse evidence (one pass over the fixture, and whether it is finite and
shaped) is computed here; every other family by its own module; the declared check order is
:data:`~qkvcli.evidence.records.CHECK_ORDER`, with ``expect`` last when the fixture has an
``expect`` section. Renderers (``qkvcli.render``) word the result.
"""

from __future__ import annotations

import math

from qkvcli.core.arrays import Array, all_finite, readonly
from qkvcli.core.outputs import weighted_loss
from qkvcli.core.projections import QkvProjections
from qkvcli.evidence.behaviour import compute_independence, compute_initialization, same_primary_bits
from qkvcli.evidence.boundaries import compute_errors, compute_shapes, other_probes
from qkvcli.evidence.records import Config, Evidence, HistoryEvidence, Primary
from qkvcli.gradcheck.projections import gradcheck_projections
from qkvcli.reading.fixture import Fixture


def projections_of(fixture: Fixture) -> QkvProjections:
    """The engine's projections of ``fixture``'s weights and names: the one way to run a
    fixture. Each call builds them anew (validation again, then one packed copy of the
    weights), so a caller builds them once per run. Raises a
    :class:`~qkvcli.core.errors.QkvError` for weights no parse would have accepted."""
    return QkvProjections.from_arrays(*fixture.weights, names=fixture.names)


def frozen(fresh: Array) -> Array:
    """A read-only view of an array the engine just made (nothing else holds it: no copy)."""
    view: Array = fresh.view()
    view.flags.writeable = False
    return view


def compute_primary(fixture: Fixture, projections: QkvProjections) -> Primary:
    """One forward and reverse pass of ``projections`` (the fixture's) over
    ``fixture``; every tensor read-only.

    The fixture's tensors are copied (the evidence never aliases what the caller may
    change); the engine's fresh outputs and gradients are only made read-only, which at
    ``[8,512,1024,64]`` saves copying 44 MiB.
    """
    outputs = projections.forward(fixture.input)
    grads = projections.backward(fixture.input, *fixture.upstream)
    w_query, w_key, w_value = projections.weights
    return Primary(
        input=readonly(fixture.input),
        w_query=w_query,
        w_key=w_key,
        w_value=w_value,
        query=frozen(outputs.query),
        key=frozen(outputs.key),
        value=frozen(outputs.value),
        grad_query=readonly(fixture.upstream[0]),
        grad_key=readonly(fixture.upstream[1]),
        grad_value=readonly(fixture.upstream[2]),
        loss=weighted_loss(outputs, fixture.upstream),
        grad_input=frozen(grads.grad_input),
        grad_w_query=frozen(grads.grad_w_query),
        grad_w_key=frozen(grads.grad_w_key),
        grad_w_value=frozen(grads.grad_w_value),
        parameter_names=projections.names,
        parameter_count=projections.parameter_count,
    )


def forward_ok(primary: Primary, config: Config) -> bool:
    """Whether Q, K and V are all finite and shaped ``[batch, tokens, d_head]``."""
    expected = (config.batch, config.tokens, config.d_head)
    return all(all_finite(out) and out.shape == expected for out in primary.outputs)


def reverse_ok(primary: Primary) -> bool:
    """Whether the loss and the four gradients are finite and dX is shaped like X."""
    return (
        all(all_finite(grad) for grad in (primary.grad_input, *primary.weight_gradients))
        and math.isfinite(primary.loss)
        and primary.grad_input.shape == primary.input.shape
    )


def build_evidence(fixture: Fixture) -> Evidence:
    """Run every check of the chapter's evidence on ``fixture``.

    Takes a loaded fixture; gives its :class:`Evidence`. A failing check is a fact in the
    evidence, not an error; only invalid gradient-check settings raise (a
    :class:`~qkvcli.gradcheck.projections.GradcheckSettingError`).
    """
    # The doubled-batch probe first: its [2B,T,d] buffers then never coexist with the
    # primary pass's (peak memory at realistic sizes).
    projections = projections_of(fixture)
    probes = other_probes(fixture, projections)
    primary = compute_primary(fixture, projections)
    config = Config(
        fixture.batch, fixture.tokens, fixture.d_model, fixture.d_head, layout=fixture.layout
    )
    gradcheck = gradcheck_projections(
        projections,
        fixture.input,
        fixture.upstream,
        (primary.grad_input, *primary.weight_gradients),
        fixture.step,
        fixture.tolerance,
        fixture.samples,
        mode=fixture.mode,
        directions=fixture.directions,
        seed=fixture.seed,
    )
    expect = None
    if fixture.expect is not None:
        # Only fixtures with an expect section get this check, so the chapter's is unchanged.
        from qkvcli.evidence.expect import compare_expectations
        from qkvcli.reading.expect import EXPECT_FIELDS

        fields = primary.tensors()
        actual: dict[str, Array | float] = {key: fields[field] for key, field in EXPECT_FIELDS.items()}
        actual["loss"] = primary.loss
        expect = compare_expectations(fixture.expect, actual)
    # The replay pass runs last and is dropped at once, so its buffers never coexist with
    # the gradient check's or the shape probes'.
    replay_bitwise = same_primary_bits(primary, compute_primary(fixture, projections))
    return Evidence(
        chapter=fixture.chapter,
        seed=fixture.seed,
        config=config,
        primary=primary,
        forward_ok=forward_ok(primary, config),
        reverse_ok=reverse_ok(primary),
        shapes=compute_shapes(fixture, projections, primary, probes),
        errors=compute_errors(fixture, projections),
        initialization=compute_initialization(fixture),
        independence=compute_independence(fixture, projections, primary),
        history=HistoryEvidence(),
        replay_bitwise=replay_bitwise,
        gradcheck=gradcheck,
        expect=expect,
    )
