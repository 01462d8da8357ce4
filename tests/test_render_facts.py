"""render/facts: the one JSON walk over a facts value, and the text's spelling of each kind."""

from __future__ import annotations

import math

import numpy as np

from qkvcli.render.facts import (
    entries,
    json_of,
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
    assert report(facts, "hi", table).splitlines() == [
        "norms=input:[1.000000] preserved:true", "count=2", "note=hi"]
    assert report(facts, "hi", table[:1], True).splitlines() == [
        "norms|input=[1.000000]|preserved=true"]


def test_a_report_is_the_table_laid_out_as_text_or_as_trace_a_line_each() -> None:
    facts = {"probe": section(rows=values([0.5, -0.0]), held=verdict(True)), "n": scalar(3)}
    table = (("probe", (("", "probe.*"),)), ("count", (("n", "n"), ("twice", lambda e: 2 * e))))
    assert report(facts, 4, table) == "probe=rows:[0.500000,0.000000] held:true\ncount=n:3 twice:8\n"
    assert report(facts, 4, table, True, {"values": lambda v: "V"}) == (
        "probe|rows=V|held=true\ncount|n=3|twice=8\n")
    assert report(facts, 4, ()) == ""


def test_a_tensor_streams_through_the_text_per_the_tensors_policy() -> None:
    from qkvcli.render.facts import bare, pieces

    big = np.arange(5000.0)
    facts = {"t": tensor(big), "small": tensor(np.ones(2))}
    table = (("t", "t"), ("values", ("small", bare)))
    full = "".join(pieces(facts, None, table, tensors="full", precision=1))
    assert full.startswith("t=shape:[5000] values:[0.0,1.0,") and full.endswith("values=[1.0,1.0]\n")
    summary = "".join(pieces(facts, None, table, tensors="summary"))
    assert "sha256:" in summary.splitlines()[0] and summary.splitlines()[1] == (
        "values=[1.000000,1.000000]")


def test_the_streamed_json_is_the_dumped_json_byte_for_byte() -> None:
    from qkvcli.render.facts import dumps, json_pieces

    facts = {"t": tensor(np.array([[1.5, -np.inf]])), "n": scalar(2.0),
             "digest": tensor(np.ones(3), policy="none")}
    whole = dumps({"head": 1, **json_of(facts, "full")})
    assert "".join(json_pieces({"head": 1}, facts, "full")) == whole
    assert json_of(facts, "full")["digest"].keys() == {"shape", "count", "sha256"}


def test_a_record_is_read_by_the_text_and_published_only_for_the_json() -> None:
    from qkvcli.render.facts import record

    calls: list[int] = []
    facts = {"g": record(7, lambda v: calls.append(v) or {"seven": v})}
    assert report(facts, None, (("g", ("g", lambda v: v * 2)),)) == "g=14\n" and not calls
    assert json_of(facts) == {"g": {"seven": 7}} and calls == [7]


def test_columns_align_cells_left_or_right_without_trailing_spaces() -> None:
    from qkvcli.render.facts import columns

    assert columns([("a", "bb", "c"), ("ccc", "d", "")], {1}) == ["a    bb  c", "ccc   d"]
