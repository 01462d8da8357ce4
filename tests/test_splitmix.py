"""SplitMix64 and Xavier-uniform initialization against the reference's own values."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from qkvcli.core.errors import ZeroInputWidth, ZeroOutputWidth
from qkvcli.core.projections import QkvProjections
from qkvcli.core.splitmix import INCREMENT, MASK64, SplitMix64, xavier_limit, xavier_uniform


def bits(value: float) -> int:
    return int(struct.unpack("<Q", struct.pack("<d", value))[0])


def test_seed_zero_matches_the_reference_sequence() -> None:
    rng = SplitMix64(0)
    assert [rng.next_u64() for _ in range(4)] == [
        0xE220A8397B1DCDAF,
        0x6E789E6AA1B965F4,
        0x06C45D188009454F,
        0xF88BB8A8724C81EC,
    ]


def test_vectorized_block_equals_one_draw_at_a_time() -> None:
    for seed in (0, 1, 26, MASK64, 0xDEADBEEF):
        scalar, block = SplitMix64(seed), SplitMix64(seed)
        expected = [scalar.next_u64() for _ in range(257)]
        assert block.next_u64_block(257).tolist() == expected
        assert block.state == scalar.state


def test_unit_floats_use_the_high_53_bits() -> None:
    scalar, block = SplitMix64(5), SplitMix64(5)
    expected = [scalar.next_unit_f64() for _ in range(100)]
    got = block.next_unit_block(100)
    assert [bits(v) for v in got.tolist()] == [bits(v) for v in expected]
    assert all(0.0 <= v < 1.0 for v in expected)


def test_state_advances_by_the_increment_per_draw() -> None:
    rng = SplitMix64(9)
    xavier_uniform(3, 5, rng)
    assert rng.state == (9 + INCREMENT * 15) & MASK64


def test_seed_seventeen_two_by_two_matches_the_reference_bits() -> None:
    # Reference test: NamedParameter::xavier_uniform("projection.weight", 2, 2, seed 17).
    values = xavier_uniform(2, 2, SplitMix64(17)).reshape(-1).tolist()
    assert [bits(v) for v in values] == [
        0x3F744760BBBFC4E2,
        0xBFD10508068942AD,
        0xBFDAE98B1D44F6AE,
        0xBFE5A45C1710F8D8,
    ]


def test_xavier_limit_formula() -> None:
    assert xavier_limit(2, 2) == math.sqrt(1.5)
    assert xavier_limit(4, 2) == 1.0


def test_xavier_values_lie_inside_the_bound() -> None:
    values = xavier_uniform(64, 32, SplitMix64(3))
    limit = xavier_limit(64, 32)
    assert values.shape == (64, 32)
    assert np.all(values >= -limit) and np.all(values < limit)


@pytest.mark.parametrize(
    ("fan_in", "fan_out", "error"),
    [(0, 2, ZeroInputWidth()), (2, 0, ZeroOutputWidth()), (0, 0, ZeroInputWidth())],
    ids=["zero-in", "zero-out", "both-zero-in-first"],
)
def test_zero_widths_fail_before_drawing(fan_in: int, fan_out: int, error: Exception) -> None:
    rng = SplitMix64(4)
    with pytest.raises(type(error)) as caught:
        xavier_uniform(fan_in, fan_out, rng)
    assert caught.value == error
    assert rng.state == 4


def test_seed_26_chapter_weights_begin_with_the_reference_values() -> None:
    layer = QkvProjections.from_seed(3, 2, SplitMix64(26))
    query, key, value = (w.reshape(-1) for w in layer.weights)
    # The reference's W_Q for seed 26 begins 0.579546784782379309, -0.101847748303888569.
    assert f"{query[0]:.18f}" == "0.579546784782379309"
    assert f"{query[1]:.18f}" == "-0.101847748303888569"
    # Key and value continue the same stream: draws 7..12 and 13..18 of seed 26.
    rng = SplitMix64(26)
    limit = xavier_limit(3, 2)
    draws = [limit * (2.0 * rng.next_unit_f64() - 1.0) for _ in range(18)]
    assert [bits(v) for v in query] == [bits(v) for v in draws[0:6]]
    assert [bits(v) for v in key] == [bits(v) for v in draws[6:12]]
    assert [bits(v) for v in value] == [bits(v) for v in draws[12:18]]
    # Pinned so a change to the generator or the draw order cannot pass unnoticed.
    assert [f"{v:.18f}" for v in key[:2]] == ["-0.888847582680393877", "-0.932080089931632272"]
    assert [f"{v:.18f}" for v in value[:2]] == ["0.662008370740714280", "-0.259785544615701247"]
