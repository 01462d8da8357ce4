"""render/facts: the one JSON walk over a facts value, and the text's spelling of each kind."""

from __future__ import annotations

import math

import numpy as np

from qkvcli.render.facts import (
    entries,
    json_of,
    layout,
    report,
    said,
    scalar,
    section,
    shape,
    tensor,
    values,
    verdict,
)


def test_the_walk_gives_each_kind_its_one_json_form() -> None:
    facts = {
        "config": section(tokens=3, base=scalar(10000.0), layout="adjacent"),
        "tensors": section(query=tensor(np.arange(4.0).reshape(2, 2), ("token", "feature"),
                                        given=True)),
        "norms": values(np.array([1.0, -0.0])),
        "loss": scalar(math.inf),
        "probes": entries([{"case": "empty", "output": shape(None), "valid": verdict(True)},
                           {"case": "rank3", "output": shape((2, 3, 4)), "valid": verdict(False)}]),
        "published": {"already": [1, 2]},
    }
    assert json_of(facts) == {
        "config": {"tokens": 3, "base": 10000.0, "layout": "adjacent"},
        "tensors": {"query": {"shape": [2, 2], "values": [0.0, 1.0, 2.0, 3.0]}},
        "norms": [1.0, -0.0],
        "loss": "Infinity",
        "probes": [{"case": "empty", "output": None, "valid": True},
                   {"case": "rank3", "output": [2, 3, 4], "valid": False}],
        "published": {"already": [1, 2]},
    }
    assert isinstance(json_of(facts)["config"]["tokens"], int)  # an int stays an int


def test_a_fact_knows_its_axes_and_whether_the_fixture_gave_it() -> None:
    fact = tensor(np.zeros((2, 2, 3)), ("query", "key", "feature"))
    assert fact.axes == ("query", "key", "feature") and not fact.given
    assert tensor(np.zeros(1), ("token",), given=True).given


def test_the_text_spells_each_kind_once() -> None:
    assert said(tensor(np.array([[-0.0, 1.5]]), ("a", "b"))) == (
        "shape:[1,2] values:[0.000000,1.500000]")
    assert said(values([0.25])) == "[0.250000]"
    assert said(shape(None)) == "rejected" and said(shape((1, 2))) == "[1,2]"
    assert said(verdict(False)) == "false"
    assert said(scalar(0.5)) == "0.500000" and said(scalar(7)) == "7"
    assert said(values([0.25]), {"values": lambda v: "mine"}) == "mine"


def test_a_layout_table_lays_out_the_same_facts_as_text_and_as_trace() -> None:
    facts = {"norms": section(input=values([1.0]), preserved=verdict(True)), "n": scalar(2)}
    table = (("norms", (("", "norms.*"),)), ("count", "n"), ("note", lambda e: e))
    assert layout(facts, "hi", table, " ", ":", "=") == [
        "norms=input:[1.000000] preserved:true", "count=2", "note=hi"]
    assert layout(facts, "hi", table[:1], "|", "=", "|") == [
        "norms|input=[1.000000]|preserved=true"]


def test_a_report_is_the_table_laid_out_as_text_or_as_trace_a_line_each() -> None:
    facts = {"probe": section(rows=values([0.5, -0.0]), held=verdict(True)), "n": scalar(3)}
    table = (("probe", (("", "probe.*"),)), ("count", (("n", "n"), ("twice", lambda e: 2 * e))))
    assert report(facts, 4, table) == "probe=rows:[0.500000,0.000000] held:true\ncount=n:3 twice:8\n"
    assert report(facts, 4, table, True, {"values": lambda v: "V"}) == (
        "probe|rows=V|held=true\ncount|n=3|twice=8\n")
    assert report(facts, 4, ()) == ""
