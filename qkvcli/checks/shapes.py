"""The shape evidence: batch and token axes survive the projections, empty axes included."""

from __future__ import annotations

import numpy as np

from qkvcli.checks.records import ShapeEvidence, ShapeProbe
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


def compute_shapes(fixture: Fixture) -> ShapeEvidence:
    """The input, batch doubled, empty batch ``[0,T,d]``, empty tokens ``[2B,0,d]`` and ``[B,0,d]``."""
    layer = fixture.layer
    batch, tokens, d_model = fixture.input.shape
    return ShapeEvidence(
        rule=probe(layer, fixture.input),
        batch=probe(layer, np.concatenate([fixture.input, fixture.input], axis=0)),
        empty_batch=probe(layer, np.zeros((0, tokens, d_model))),
        empty_tokens=probe(layer, np.zeros((2 * batch, 0, d_model))),
        report_empty_tokens=probe(layer, np.zeros((batch, 0, d_model))),
        d_head=layer.d_head,
    )
