"""Assemble the chapter's :class:`~qkvcli.evidence.records.Evidence` for one fixture (no I/O, no prose).

Each family is computed by its own module; the declared check order is
:data:`~qkvcli.evidence.records.CHECK_ORDER`, with ``expect`` last when the fixture has an
``expect`` section. Renderers (``qkvcli.render``) word the result.
"""

from __future__ import annotations

from qkvcli.core.arrays import Array
from qkvcli.evidence.behaviour import compute_independence, compute_initialization, same_primary_bits
from qkvcli.evidence.boundaries import compute_errors, compute_shapes, other_probes
from qkvcli.evidence.primary import compute_primary, forward_ok, reverse_ok
from qkvcli.evidence.records import Config, Evidence, HistoryEvidence
from qkvcli.gradcheck.layer import gradcheck_layer
from qkvcli.reading.fixture import Fixture


def build_evidence(fixture: Fixture) -> Evidence:
    """Run every check of the chapter's evidence on ``fixture``.

    Takes a loaded fixture; gives its :class:`Evidence`. A failing check is a fact in the
    evidence, not an error; only invalid gradient-check settings raise (a
    :class:`~qkvcli.gradcheck.layer.GradcheckSettingError`).
    """
    # The doubled-batch probe first: its [2B,T,d] buffers then never coexist with the
    # primary pass's (peak memory at realistic sizes).
    probes = other_probes(fixture)
    primary = compute_primary(fixture)
    config = Config(
        fixture.batch, fixture.tokens, fixture.d_model, fixture.d_head, layout=fixture.layout
    )
    gradcheck = gradcheck_layer(
        fixture.layer,
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
        from qkvcli.reading.expect import EXPECT_FIELDS, compare_expectations

        fields = primary.tensors()
        actual: dict[str, Array | float] = {key: fields[field] for key, field in EXPECT_FIELDS.items()}
        actual["loss"] = primary.loss
        expect = compare_expectations(fixture.expect, actual)
    # The replay pass runs last and is dropped at once, so its buffers never coexist with
    # the gradient check's or the shape probes'.
    replay_bitwise = same_primary_bits(primary, compute_primary(fixture))
    return Evidence(
        chapter=fixture.chapter,
        seed=fixture.seed,
        config=config,
        primary=primary,
        forward_ok=forward_ok(primary, config),
        reverse_ok=reverse_ok(primary),
        shapes=compute_shapes(fixture, primary, probes),
        errors=compute_errors(fixture),
        initialization=compute_initialization(fixture),
        independence=compute_independence(fixture, primary),
        history=HistoryEvidence(),
        replay_bitwise=replay_bitwise,
        gradcheck=gradcheck,
        expect=expect,
    )
