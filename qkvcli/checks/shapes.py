"""The shape evidence: batch and token axes survive the projections, empty axes included."""

from __future__ import annotations

import numpy as np

from qkvcli.checks.records import Primary, ShapeEvidence, ShapeProbe
from qkvcli.core.arrays import Array
from qkvcli.core.projections import QkvProjections
from qkvcli.fixtures.fixture import Fixture


def probe(layer: QkvProjections, x: Array) -> ShapeProbe:
    """Project ``x`` forward and back with unit upstream gradients; record every shape."""
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


def primary_probe(primary: Primary, layer: QkvProjections) -> ShapeProbe:
    """The shapes the primary pass itself gave (the same forward and reverse products)."""
    gradient_ok = primary.grad_input.shape == primary.input.shape and all(
        g.shape == (layer.d_model, layer.d_head) for g in primary.weight_gradients
    )
    return ShapeProbe(
        input=tuple(primary.input.shape),
        outputs=tuple(out.shape for out in primary.outputs),  # type: ignore[arg-type]
        gradient_shapes_ok=gradient_ok,
    )


def compute_shapes(fixture: Fixture, primary: Primary | None = None) -> ShapeEvidence:
    """The input, batch doubled, empty batch ``[0,T,d]``, empty tokens ``[2B,0,d]`` and ``[B,0,d]``.

    Given the fixture's ``primary`` pass, the input's own shapes are read from it instead
    of projecting the input a second time.
    """
    layer = fixture.layer
    batch, tokens, d_model = fixture.input.shape
    return ShapeEvidence(
        rule=probe(layer, fixture.input) if primary is None else primary_probe(primary, layer),
        batch=probe(layer, np.concatenate([fixture.input, fixture.input], axis=0)),
        empty_batch=probe(layer, np.zeros((0, tokens, d_model))),
        empty_tokens=probe(layer, np.zeros((2 * batch, 0, d_model))),
        report_empty_tokens=probe(layer, np.zeros((batch, 0, d_model))),
        d_head=layer.d_head,
    )
