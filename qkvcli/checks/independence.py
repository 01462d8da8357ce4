"""The independence evidence: changing one W_Q entry changes Q and leaves K and V bitwise alone."""

from __future__ import annotations

import numpy as np

from qkvcli.checks.records import IndependenceEvidence, Primary
from qkvcli.core.outputs import QkvForward
from qkvcli.fixtures.fixture import Fixture


def compute_independence(fixture: Fixture, primary: Primary | None = None) -> IndependenceEvidence:
    """Change one W_Q entry by +1 at a row whose input column is not all zero.

    The changed layer's forward pass always runs in full (Q, K and V recomputed). The
    unchanged layer's outputs are the ``primary`` pass's when given (the very same
    ``layer.forward(x)``, whose replay the evidence checks bit for bit), else a forward
    pass of their own.
    """
    x = fixture.input
    layer = fixture.layer
    live_rows = np.flatnonzero(np.any(x != 0.0, axis=(0, 1))) if x.size else np.array([])
    if live_rows.size == 0:
        return IndependenceEvidence(False, None, False, True, True)
    row = int(live_rows[0])
    changed_weight = np.array(layer.weights[0])
    changed_weight[row, 0] += 1.0
    changed = layer.with_weight("query", changed_weight)
    after = changed.forward(x)
    before = layer.forward(x) if primary is None else QkvForward(*primary.outputs)
    return IndependenceEvidence(
        applicable=True,
        row=row,
        query_changed=not np.array_equal(before.query, after.query),
        key_unchanged=before.key.tobytes() == after.key.tobytes(),
        value_unchanged=before.value.tobytes() == after.value.tobytes(),
    )
