"""Chapter 26's figure works one element of each stage from the one description of the stages.

The worked lines are :mod:`qkvcli.stages`' formula and element applied to an index, and the
terms :mod:`qkvcli.stages.terms` computes there: these tests read them off the figure and
check them against the stages and the engine's numbers, never against hand-written text.
"""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
from rich.console import Console

from qkvcli.check.chapter26 import build_evidence
from qkvcli.check.chapter26_evidence import Evidence
from qkvcli.check.expect import ExpectResult, Mismatch
from qkvcli.reading.fixture import Fixture
from qkvcli.reading.load import load_fixture
from qkvcli.render.numbers import fmt_float
from qkvcli.render.rich.options import RichOptions
from qkvcli.render.rich.view import render_rich
from qkvcli.stages.applied import element_at, fewer, formula_in, named
from qkvcli.stages.table import STAGES
from qkvcli.stages.terms import Derivation, Step, projection


def shown(evidence: Evidence, width: int = 200, **options: object) -> str:
    console = Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None,
                      record=True)
    console.print(render_rich(evidence, RichOptions(**options)))  # type: ignore[arg-type]
    return console.export_text()


def fixture(batch: int, tokens: int, d_model: int, d_head: int) -> Fixture:
    x = (np.arange(batch * tokens * d_model, dtype=np.float64) % 7 - 3).reshape(
        batch, tokens, d_model)
    weights = tuple((np.arange(d_model * d_head, dtype=np.float64) % (5 + b) - 2).reshape(
        d_model, d_head) for b in range(3))
    return Fixture(input=x, weights=weights,  # type: ignore[arg-type]
                   names=("a.query.weight", "a.key.weight", "a.value.weight"),
                   upstream=tuple(np.ones((batch, tokens, d_head)) for _ in range(3)),  # type: ignore[arg-type]
                   samples=2, chapter="custom")


def test_the_stage_descriptions_read_in_a_chapters_names() -> None:
    stage = STAGES["projection"]
    names = {"Y": "Q", "W": "W_Q", "b": "b_Q"}
    assert formula_in(stage, names, optional=False) == "Q = X W_Q"
    assert formula_in(stage, names) == "Q = X W_Q (+ b_Q)"
    assert element_at(stage, (0, 1, 2), names, optional=False) == \
        "Q[0,1,2] = \u03a3_i X[0,1,i] \u00d7 W_Q[i,2]"
    # a letter inside a word or after an underscore is not the tensor's
    assert named("\u03a3_b over the batch b", {"b": "B"}) == "\u03a3_b over the batch B"
    with pytest.raises(ValueError, match="3 index letters, got 2"):
        element_at(stage, (0, 1), names)


def test_fewer_terms_still_add_up_to_the_value() -> None:
    rows = tuple(Step(f"t{i}", float(v)) for i, v in enumerate([1.0, -5.0, 0.25, 3.0, 0.5]))
    whole = Derivation("f", (*rows, Step("fact", 9.0, "fact")), 0.0)
    cut = fewer(whole, 2)
    assert [row.label for row in cut.rows] == ["t1", "t3", "the other 3 together", "fact"]
    assert cut.term_sum() == whole.term_sum()
    again = fewer(cut._replace(rows=(*cut.rows[:2], *cut.rows[2:])), 1)
    assert again.rows[1].label == "the other 4 together"
    assert again.term_sum() == whole.term_sum()
    assert fewer(whole, 5) is whole


def test_each_branch_works_its_first_element_from_the_projection_stage() -> None:
    evidence = build_evidence(load_fixture(None))
    text = shown(evidence)
    p = evidence.primary
    for index, letter in enumerate("QKV"):
        names = {"Y": letter, "W": f"W_{letter}"}
        assert formula_in(STAGES["projection"], names, optional=False) in text
        assert element_at(STAGES["projection"], (0, 0, 0), names, optional=False) in text
        terms = projection(p.input, p.weights[index], None, (0, 0, 0),
                           float(p.outputs[index][0, 0, 0]), ("X", f"W_{letter}", ""))
        assert math.isclose(terms.term_sum(), terms.value, abs_tol=1e-12)
        for row in terms.rows:  # each term with the operand values it multiplies
            a, b = (fmt_float(v) for v in row.operands)
            assert f"{a} \u00d7 {b}" in text
    for stage in ("projection reverse (input)", "projection reverse (weight)"):
        assert formula_in(STAGES[stage], {}) in text
    assert element_at(STAGES["projection reverse (input)"], (0, 0, 0), {}, optional=False) in text
    assert element_at(STAGES["projection reverse (weight)"], (0, 0),
                      {"dW": "dW_V", "U": "U_V"}) in text


def test_the_worked_element_is_the_one_marked_against_expect() -> None:
    evidence = build_evidence(load_fixture(None))
    wrong = (0, 1, 1)
    marked = evidence._replace(expect=ExpectResult(("query",), 4, 1e-9, (
        Mismatch("query", wrong, 1.0, float(evidence.primary.query[wrong]), 1.0),)))
    text = shown(marked)
    assert element_at(STAGES["projection"], wrong, {"Y": "Q", "W": "W_Q"}, False) in text
    assert element_at(STAGES["projection"], (0, 0, 0), {"Y": "K", "W": "W_K"}, False) in text


def test_long_sums_are_cut_to_max_rows_and_still_add_up() -> None:
    evidence = build_evidence(fixture(1, 2, 12, 2))
    text = shown(evidence, max_rows=3)
    assert "the other 9 together" in text  # d_model 12: three terms shown
    full = shown(evidence, full=True)
    assert "together" not in full


def test_an_ascii_stream_gets_the_formulas_in_ascii() -> None:
    evidence = build_evidence(load_fixture(None))
    text = shown(evidence, 80, ascii=True)
    assert "dX = U_Q W_Q^T + U_K W_K^T + U_V W_V^T" in text
    assert "Q[0,0,0] = sum_i X[0,0,i] x W_Q[i,0]" in text


def test_an_empty_batch_works_no_element() -> None:
    text = shown(build_evidence(fixture(0, 2, 3, 2)))
    assert "Q[0,0,0]" not in text
