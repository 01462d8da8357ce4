"""A report's facts drawn in the rich views: cells by kind, the config line, the one verdicts
list, and the Checks cards naming each check as the JSON does."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console, RenderableType

from qkvcli.attention.fixture import load_attend_fixture
from qkvcli.check.attend import build_attend_evidence
from qkvcli.check.chapter26 import build_evidence
from qkvcli.reading.load import load_fixture
from qkvcli.render import attend as attend_report
from qkvcli.render import report as run_report
from qkvcli.render.facts import scalar, section, shape, tensor, verdict
from qkvcli.render.rich.attend import attend_renderable
from qkvcli.render.rich.boxes import QUERY
from qkvcli.render.rich.drawn import cell_of, checks_card, config_row, listed, tensor_tables
from qkvcli.render.rich.layout import Row
from qkvcli.render.rich.options import RichOptions
from qkvcli.render.rich.view import render_rich

REPO = Path(__file__).resolve().parent.parent


def shown(renderable: RenderableType, width: int = 100) -> str:
    console = Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None,
                      record=True)
    console.print(renderable)
    return console.export_text()


@pytest.mark.parametrize(("fact", "cell"), [
    (verdict(True), "true"), (verdict(False), "false"), (shape((2, 0, 3)), "[2,0,3]"),
    (shape(None), "rejected"), (tensor(np.zeros((1, 2, 3))), "[1,2,3]"),
    (scalar(0.125), "0.1250"), (scalar(1e-7), "1e-07"), (7, "7"), ("separate", "separate"),
], ids=["true", "false", "shape", "refused", "tensor", "float", "tiny", "int", "word"])
def test_a_fact_is_a_cell_by_its_kind(fact: object, cell: str) -> None:
    assert cell_of(fact, RichOptions(precision=4)) == cell


def test_the_config_line_keeps_each_name_with_its_value() -> None:
    config = section(batch=2, tokens=5, d_model=8, bias=verdict(False)).value
    row = config_row(config, ("batch", "tokens", "d_model", "bias"), RichOptions())
    assert shown(row) == "batch 2  tokens 5  d_model 8  bias false\n"
    # narrow, it wraps between items, never between a name and its value
    narrow = shown(row, 20).splitlines()
    assert len(narrow) > 1 and all(len(line.split()) % 2 == 0 for line in narrow), narrow


def test_the_verdicts_list_says_each_word_first() -> None:
    items = [{"case": "rank-two", "rejected": verdict(True)},
             {"case": "input-width", "rejected": verdict(False)}]
    text = shown(listed(items, lambda i: i["case"], lambda i: "why", "rejected"))
    assert text.splitlines() == ["PASS  rank-two     why", "FAIL  input-width  why"]


def test_a_checks_card_passes_only_when_every_check_did() -> None:
    checks = [{"name": "forward", "passed": True, "detail": "finite"},
              {"name": "rejected-inputs", "passed": False, "detail": "1 of 5 accepted"}]
    text = shown(Row([checks_card(checks, RichOptions())]))
    assert "Checks  FAIL" in text
    assert "PASS  forward          finite" in text
    assert "FAIL  rejected-inputs  1 of 5 accepted" in text


def test_a_tensor_is_one_table_per_batch_item_or_one_for_a_weight() -> None:
    options = RichOptions()
    batched = tensor_tables(tensor(np.arange(12.0).reshape(2, 2, 3)), "X", QUERY, options)
    assert [shown(t).splitlines()[1].split()[1:3] for t in batched] == [["X", "b=0"],
                                                                        ["X", "b=1"]]
    (weight,) = tensor_tables(tensor(np.eye(3)), "W_Q", QUERY, options)
    assert "W_Q" in shown(weight) and "b=" not in shown(weight)


def test_every_check_is_named_in_the_terminal_as_the_json_names_it() -> None:
    evidence = build_evidence(load_fixture(None))
    figure = shown(render_rich(evidence), 160)
    for check in run_report.facts(evidence)["checks"]:
        assert f"PASS  {check['name']}" in figure
    head = build_attend_evidence(
        load_attend_fixture(REPO / "fixtures" / "attend" / "attend-value-width.json"))
    view = shown(attend_renderable(head), 160)
    for check in attend_report.facts(head)["checks"]:
        assert f"PASS  {check['name']}" in view
