"""The rejected-input evidence: five bad inputs, each refused with exactly the expected error.

(Named for what it checks; the error classes themselves live in ``qkvcli.core.errors``.)
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from qkvcli.checks.records import ErrorEvidence, RejectedCase
from qkvcli.core.arrays import Array
from qkvcli.core.errors import (
    BranchInputWidthMismatch,
    BranchOutputWidthMismatch,
    DuplicateName,
    InputRank,
    InputWidthMismatch,
    QkvError,
)
from qkvcli.core.projections import QkvProjections
from qkvcli.fixtures.fixture import Fixture


def rejected(case: str, attempt: Callable[[], object], expected: QkvError) -> RejectedCase:
    """Run ``attempt``; whether it raised an error equal to ``expected``, and its message."""
    try:
        attempt()
    except QkvError as error:
        return RejectedCase(case, error == expected, str(error))
    return RejectedCase(case, False, "accepted")


def compute_errors(fixture: Fixture) -> ErrorEvidence:
    """The rejected boundaries, computed on the fixture's own sizes."""
    layer = fixture.layer
    batch, tokens, d = fixture.input.shape
    h = layer.d_head
    names = layer.names

    def zeros(rows: int, cols: int) -> Array:
        return np.zeros((rows, cols))

    return ErrorEvidence(
        rank=rejected(
            "rank-two", lambda: layer.forward(np.broadcast_to(0.0, (tokens, d))), InputRank(2)
        ),
        width=rejected(
            "input-width",
            lambda: layer.forward(np.broadcast_to(0.0, (batch, tokens, d + 1))),
            InputWidthMismatch(d, d + 1),
        ),
        model_mismatch=rejected(
            "branch-mismatch",
            lambda: QkvProjections.from_arrays(zeros(d, h), zeros(d + 1, h), zeros(d, h), names),
            BranchInputWidthMismatch(d, d + 1, d),
        ),
        head_mismatch=rejected(
            "head-mismatch",
            lambda: QkvProjections.from_arrays(zeros(d, h), zeros(d, h + 1), zeros(d, h), names),
            BranchOutputWidthMismatch(h, h + 1, h),
        ),
        duplicate_name=rejected(
            "duplicate-name",
            lambda: QkvProjections.from_arrays(
                zeros(d, h), zeros(d, h), zeros(d, h), ("same", "same", names[2])
            ),
            DuplicateName("same", 0, 1),
        ),
    )
