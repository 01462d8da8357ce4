"""The behaviour families: seeded initialization, branch independence, bitwise replay.

The initialization evidence: seeded construction is reproducible, independent and transactional.

The independence evidence: changing one W_Q entry changes Q and leaves K and V bitwise alone.

The replay evidence: two runs of the same fixture agree bit for bit.
"""

from __future__ import annotations

import numpy as np

from qkvcli.core.errors import ProjectionError, QkvError, ZeroOutputWidth
from qkvcli.core.invariants import replayed
from qkvcli.core.outputs import QkvForward
from qkvcli.core.projections import QkvProjections
from qkvcli.core.splitmix import SplitMix64
from qkvcli.evidence.records import IndependenceEvidence, InitializationEvidence, Primary
from qkvcli.reading.fixture import Fixture


def compute_initialization(fixture: Fixture) -> InitializationEvidence:
    """Seeded construction: reproducible, independent branches, transactional on failure."""
    d_model, d_head, seed = fixture.d_model, fixture.d_head, fixture.seed
    first_rng, second_rng = SplitMix64(seed), SplitMix64(seed)
    first = QkvProjections.from_seed(d_model, d_head, first_rng)
    second = QkvProjections.from_seed(d_model, d_head, second_rng)
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
        QkvProjections.from_seed(d_model, 0, rejected_rng)
    except QkvError as error:
        rejection = str(error)
        transactional = (
            error == ProjectionError("query", ZeroOutputWidth()) and rejected_rng.state == before
        )
    return InitializationEvidence(seed, reproducible, independent, transactional, rejection)


def compute_independence(
    fixture: Fixture, projections: QkvProjections, primary: Primary | None = None
) -> IndependenceEvidence:
    """Change one W_Q entry of ``projections`` (the fixture's) by +1 at a row whose
    input column is not all zero.

    The changed projections' forward pass always runs in full (Q, K and V recomputed). The
    unchanged projections' outputs are the ``primary`` pass's when given (the very same
    ``projections.forward(x)``, whose replay the evidence checks bit for bit), else a forward
    pass of their own.
    """
    x = fixture.input
    live_rows = np.flatnonzero(np.any(x != 0.0, axis=(0, 1))) if x.size else np.array([])
    if live_rows.size == 0:
        return IndependenceEvidence(False, None, False, True, True)
    row = int(live_rows[0])
    changed_weight = np.array(projections.weights[0])
    changed_weight[row, 0] += 1.0
    changed = projections.with_weight("query", changed_weight)
    after = changed.forward(x)
    before = projections.forward(x) if primary is None else QkvForward(*primary.outputs)
    return IndependenceEvidence(
        applicable=True,
        row=row,
        query_changed=not np.array_equal(before.query, after.query),
        key_unchanged=before.key.tobytes() == after.key.tobytes(),
        value_unchanged=before.value.tobytes() == after.value.tobytes(),
    )


def same_primary_bits(left: Primary, right: Primary) -> bool:
    """Whether two runs agree bit for bit in every tensor, the loss, names and count."""
    return (
        replayed((*left.tensors().values(), left.loss), (*right.tensors().values(), right.loss))
        and left.parameter_names == right.parameter_names
        and left.parameter_count == right.parameter_count
    )
