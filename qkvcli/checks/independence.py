"""The independence evidence: changing one W_Q entry changes Q and leaves K and V bitwise alone."""

from __future__ import annotations

import numpy as np

from qkvcli.checks.records import IndependenceEvidence
from qkvcli.fixtures.fixture import Fixture


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
