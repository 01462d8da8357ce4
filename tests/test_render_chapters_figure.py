"""The chapters' figure kit: worked lines are a stage's terms at one index, and add up."""

from __future__ import annotations

import numpy as np
import pytest

from qkvcli.render.chapters.figure import mixture_line, notation, worked
from qkvcli.render.rich.options import RichOptions
from qkvcli.stages.table import STAGES
from qkvcli.stages.terms import scaled, scores


def _added(line: str, times: str = "\u00d7") -> tuple[float, float]:
    """The sum of a worked line's shown parts, and the value it ends with."""
    body, value = line.split(" = ")[1:]
    total = 0.0
    for part in body.split(" + "):
        part = part.removesuffix(" (the rest)")
        factors = [float(f.strip("()")) for f in part.split(times)]
        total += float(np.prod(factors))
    return total, float(value)


@pytest.mark.parametrize("width", [3, 20, 40], ids=["cut", "whole", "past-sixteen"])
def test_a_worked_dot_product_is_its_terms_and_adds_up(width: int) -> None:
    rng = np.random.default_rng(width)
    q, k = rng.normal(size=(1, 2, width)), rng.normal(size=(1, 2, width))
    value = float(q[0, 1] @ k[0, 0])
    line = worked("S[0,1,0]", scores(q, k, (0, 1, 0), value), RichOptions(max_columns=6)).plain
    total, shown = _added(line)
    assert shown == pytest.approx(value, abs=1e-6)
    assert total == pytest.approx(value, abs=1e-5 * width)  # each part rounded to 6 decimals
    assert ("(the rest)" in line) == (width > 6)


def test_a_worked_fact_says_its_formula_and_facts() -> None:
    line = worked("Z[0,1,0]", scaled(6.0, 0.5, 3.0), RichOptions()).plain
    assert line == "Z[0,1,0] = S \u00d7 scale with S = 6.000000, scale = 0.500000 = 3.000000"
    ascii_line = worked("Z[0,1,0]", scaled(6.0, 0.5, 3.0), RichOptions(ascii=True)).plain
    assert ascii_line == "Z[0,1,0] = S * scale with S = 6.000000, scale = 0.500000 = 3.000000"


def test_a_mixture_line_is_each_key_s_weight_times_its_value_row() -> None:
    weights = np.array([[[0.25, 0.75], [1.0, 0.0]]])
    values = np.array([[[2.0, -4.0], [4.0, 8.0]]])
    output = weights[0, 0] @ values[0]
    line = mixture_line("o0", weights, values, (0, 0), output, RichOptions(precision=2)).plain
    assert line == "o0 = 0.25 [2.00,-4.00] + 0.75 [4.00,8.00] = [3.50,5.00]"
    cut = mixture_line("o0", weights, values, (0, 0), output,
                       RichOptions(precision=2, max_columns=1)).plain
    assert cut == "o0 = 0.25 [2.00,-4.00] + [3.00,6.00] (the rest) = [3.50,5.00]"


def test_every_stage_formula_has_an_ascii_spelling() -> None:
    for stage in STAGES.values():
        for text in (stage.formula, stage.element):
            notation(text, RichOptions(ascii=True)).encode("ascii")
