"""The initialization evidence: seeded construction is reproducible, independent and transactional."""

from __future__ import annotations

import numpy as np

from qkvcli.checks.records import InitializationEvidence
from qkvcli.core.errors import ProjectionError, QkvError, ZeroOutputWidth
from qkvcli.core.projections import QkvProjections
from qkvcli.core.splitmix import SplitMix64
from qkvcli.fixtures.fixture import Fixture

INIT_PREFIX = "decoder.block.0.attention"
"""The parameter-name prefix the seeded layers are built with."""


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
