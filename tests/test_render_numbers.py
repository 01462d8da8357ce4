"""render/numbers: the one place a float becomes text, one function per role."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qkvcli.render.numbers import (
    course_fixed,
    fmt_error,
    fmt_exact,
    fmt_float,
    fmt_general,
    fmt_signed,
    json_float,
    python_fixed,
)


@pytest.mark.parametrize(("value", "decimals", "said"), [
    (0.5, 6, "0.500000"), (-0.0, 6, "0.000000"), (1e-8, 6, "1e-08"), (-1e-8, 3, "-1e-08"),
    (math.nan, 6, "NaN"), (-math.inf, 2, "-inf"), (0.0301, 0, "0.03")],
    ids=["plain", "signed-zero", "small", "small-negative", "nan", "minus-inf", "no-decimals"])
def test_a_value_in_fixed_point_is_never_a_false_zero(value: float, decimals: int,
                                                       said: str) -> None:
    assert fmt_float(value, decimals) == said


def test_a_vector_value_rounds_to_an_unsigned_zero_and_chapter_37_keeps_its_sign() -> None:
    assert python_fixed(-1e-17, 6) == "0.000000" and course_fixed(-1e-17, 6) == "-0.000000"
    assert course_fixed(-0.0, 2) == "0.00" and python_fixed(math.inf, 2) == "inf"


def test_each_role_has_one_spelling() -> None:
    assert fmt_error(3.17e-10) == "3.170e-10" and fmt_error(math.inf) == "inf"
    assert fmt_general(0.50912) == "0.509" and fmt_general(2e-6) == "2e-06"
    assert fmt_signed(0.351) == "+0.35" and fmt_signed(-1.2) == "-1.20"
    assert fmt_exact(2e-06) == "2e-06" and fmt_exact(0.1) == "0.1" and fmt_exact(3) == "3"
    assert fmt_exact(np.float64(0.5)) == "0.5"
    assert json_float(-math.inf) == "-Infinity" and json_float(1.5) == 1.5
