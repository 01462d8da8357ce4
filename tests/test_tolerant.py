"""The tolerant text comparison holds layout and rounding, and nothing else."""

from __future__ import annotations

import pytest

from tests.tolerant import text_differences


@pytest.mark.parametrize(("here", "there"), [
    ("db_K [2] 5.55112e-17 [-5.55112e-17, -4.16334e-17] │\n",
     "db_K [2] 2.77556e-16 [2.22045e-16,  │\n│  -2.77556e-16] │\n"),
    ("expected -0.2364646043553737 (error 0.311 > 1e-09)",
     "expected -0.23646460435537375 (error 0.311 > 1e-09)"),
    ("scaled error 3.17e-10", "scaled error 4.9e-10"),
], ids=["zero-rewrapped", "last-digit", "noise"])
def test_layout_and_rounding_are_the_same_text(here: str, there: str) -> None:
    assert text_differences(here, there) == []


@pytest.mark.parametrize(("here", "there"), [
    ("shape [1,4,3]", "shape [1,4,4]"),
    ("worst grad[4,2]", "worst grad[2,4]"),
    ("value 1.5", "value 1.6"),
    ("PASS forward", "FAIL forward"),
    ("a b c", "a b"),
    ("[-0.5]", "[0.5]"),
], ids=["shape", "coordinate", "value", "word", "length", "sign"])
def test_a_changed_fact_is_a_difference(here: str, there: str) -> None:
    assert text_differences(here, there) != []
