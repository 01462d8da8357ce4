"""The replay evidence: two runs of the same fixture agree bit for bit."""

from __future__ import annotations

import numpy as np

from qkvcli.checks.records import Primary


def same_primary_bits(left: Primary, right: Primary) -> bool:
    """Whether two runs agree bit for bit in every tensor, the loss, names and count."""
    tensors_equal = all(
        a.shape == b.shape and a.tobytes() == b.tobytes()
        for a, b in zip(left.tensors().values(), right.tensors().values(), strict=True)
    )
    return (
        tensors_equal
        and np.float64(left.loss).tobytes() == np.float64(right.loss).tobytes()
        and left.parameter_names == right.parameter_names
        and left.parameter_count == right.parameter_count
    )
