"""qkv variance: seeded, deterministic samples whose variance tracks d_k."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qkvcli.core.splitmix import SplitMix64
from qkvcli.learn.variance import (
    TooFewSamples,
    WidthRange,
    dot_variance,
    standard_normals,
    widths,
)

SAMPLES = 2000
RESULT = dot_variance(widths(4, 512), SAMPLES, seed=26)


def test_widths_double() -> None:
    assert widths() == [4, 8, 16, 32, 64, 128, 256, 512]
    assert widths(3, 20) == [3, 6, 12]
    with pytest.raises(WidthRange) as caught:
        widths(8, 4)
    assert caught.value == WidthRange(8, 4)
    assert str(caught.value) == "need 1 <= min <= max, got min 8, max 4"


def test_normals_are_deterministic_and_standard() -> None:
    first = standard_normals(SplitMix64(1), 200_001)
    assert first.tobytes() == standard_normals(SplitMix64(1), 200_001).tobytes()
    assert first.size == 200_001 and np.isfinite(first).all()
    # mean 0 (standard error 1/sqrt(n)) and variance 1 (standard error sqrt(2/n)), 5 SE each
    assert abs(float(first.mean())) < 5 / math.sqrt(first.size)
    assert abs(float(first.var()) - 1.0) < 5 * math.sqrt(2 / first.size)


@pytest.mark.parametrize("row", RESULT.rows, ids=lambda r: f"d{r.d_k}")
def test_variance_tracks_d_k_within_five_standard_errors(row: object) -> None:
    from qkvcli.learn.variance import VarianceRow

    assert isinstance(row, VarianceRow)
    # std_error = sqrt((2 + 6/d)/n): the spread of the estimated ratio for Gaussian q, k
    assert row.std_error == pytest.approx(math.sqrt((2 + 6 / row.d_k) / SAMPLES))
    assert abs(row.ratio - 1.0) < 5 * row.std_error
    assert abs(row.scaled_variance - 1.0) < 5 * row.std_error
    assert row.variance == pytest.approx(row.ratio * row.d_k)


def test_unscaled_variance_grows_while_scaled_stays() -> None:
    variances = [r.variance for r in RESULT.rows]
    assert variances[-1] > 50 * variances[0]  # 512 / 4 = 128 in expectation
    assert max(r.scaled_variance for r in RESULT.rows) < 1.5


def test_same_seed_same_table_other_seed_other_table() -> None:
    again = dot_variance([4, 8], SAMPLES, seed=26)
    assert again.rows == RESULT.rows[:2]
    assert dot_variance([4, 8], SAMPLES, seed=27).rows != again.rows


def test_too_few_samples() -> None:
    with pytest.raises(TooFewSamples) as caught:
        dot_variance([4], 1)
    assert caught.value == TooFewSamples(1)
    assert str(caught.value) == "need at least 2 samples, got 1"


def test_z_is_the_ratio_in_standard_errors_from_one() -> None:
    for row in RESULT.rows:
        assert row.z == (row.ratio - 1.0) / row.std_error
        assert abs(row.z) < 5  # the sample agrees with var(q.k/sqrt(d_k)) = 1
