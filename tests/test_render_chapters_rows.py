"""The chapters' shared row builders: each makes the parts a layout table would spell by hand."""

from __future__ import annotations

from typing import Any

import numpy as np

from qkvcli.core.results import Refusal
from qkvcli.render.chapters.rows import fields, gradcheck, opening, per, refused_facts, tensors
from qkvcli.render.facts import report, scalar, section, tensor, verdict
from qkvcli.render.numbers import fmt_vector

FACTS: dict[str, Any] = {
    "config": section(batch=2, tokens=3, scale=scalar(0.5), masked=verdict(False)),
    "tensors": section(**tensors(("batch", "token"), True, query=np.array([[1.0, -2.0]]))),
}


def test_fields_label_each_fact_of_a_section_as_a_hand_written_row_would() -> None:
    by_hand = (("batch", "config.batch"), ("width", "config.tokens"), ("scale", "config.scale"))
    assert report(FACTS, None, (("config", fields("config", "batch width=tokens scale")),)) == (
        report(FACTS, None, (("config", by_hand),)))
    assert report(FACTS, None, (("config", fields("config", "scale masked", scale=str)),)) == (
        "config=scale:0.5 masked:false\n")


def test_per_spells_each_index_and_its_items() -> None:
    table = per(lambda i: f"ROW{i[0]}", [(0, 1), (1, 0)], (
        ("query", 0), ("key", 1), ("values", "tensors.query", lambda value, i: fmt_vector(value[0])),
        ("sum", lambda e, i: e + sum(i))))
    assert report(FACTS, 10, table, trace=True) == (
        "ROW0|query=0|key=1|values=[1.000000,-2.000000]|sum=11\n"
        "ROW1|query=1|key=0|values=[1.000000,-2.000000]|sum=11\n")


class _Checked:
    tolerance, passed = 2e-6, False

    @staticmethod
    def checked(name: str) -> int:
        return {"query": 4, "key": 6}[name]


class _Evidence:
    gradcheck = _Checked()


def test_the_gradient_check_line_says_counts_tolerance_and_verdict() -> None:
    assert report({}, _Evidence(), (("gradcheck", gradcheck(("query", "key"))),)) == (
        "gradcheck=query_checks:4 key_checks:6 tolerance:0.000002 passed:false\n")
    assert report({}, _Evidence(), (("P", gradcheck(("key",), "gradient_tolerance", "ok")),),
                  trace=True) == "P|key_checks=6|gradient_tolerance=0.000002|ok=false\n"


def test_opening_names_the_chapter_and_its_prediction_when_it_has_one() -> None:
    assert report({}, None, opening("29-rope", "turns")) == "chapter=29-rope\nprediction=turns\n"
    assert report({}, None, opening("37-cache")) == "chapter=37-cache\n"


def test_a_refusal_publishes_its_fields_renamed_or_hidden() -> None:
    case = Refusal("c", "OperandRank", "OperandRank", "m", (("operand", "query"), ("rank", 2)), True)
    assert refused_facts(case) == {"operand": "query", "rank": 2}
    assert refused_facts(case, {"OperandRank.operand": "input"}) == {"input": "query", "rank": 2}
    assert refused_facts(case, {"OperandRank.rank": None, "Other.operand": None}) == {
        "operand": "query"}


def test_tensors_share_their_axes_and_origin() -> None:
    made = tensors(("a",), True, x=[1.0], y=[2.0])
    assert list(made) == ["x", "y"]
    assert all(fact == tensor(value, ("a",), given=True)
               for fact, value in zip(made.values(), ([1.0], [2.0]), strict=True))
