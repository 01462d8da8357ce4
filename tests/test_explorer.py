"""The evidence explorer's page without a browser: self-contained, the ``data-*`` contract,
derivations that add up to the engine's numbers, ``--html``'s output rules, the size budget."""

from __future__ import annotations

import json
import math
import os
import re
from html import escape
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from qkvcli.attention.fixture import load_attend_fixture
from qkvcli.attention.records import AttendEvidence
from qkvcli.check.attend import build_attend_evidence
from qkvcli.check.chapter26 import build_evidence
from qkvcli.check.result import CheckResult
from qkvcli.cli import main
from qkvcli.cli.io import load
from qkvcli.core.names import CHAPTER_IDS
from qkvcli.render.attend import facts as attend_facts
from qkvcli.render.attend import published_name
from qkvcli.render.check import check_json
from qkvcli.render.explorer.attend import derivations
from qkvcli.render.explorer.check import replay_lines
from qkvcli.render.explorer.document import tensors_of
from qkvcli.render.explorer.page import PAGE_CELLS
from qkvcli.render.numbers import fmt_float
from qkvcli.stages.terms import (
    MAX_TERMS,
    attention_weight,
    input_paths,
    projection,
    weight_gradient,
)
from tests.explorer_helpers import (
    CH37_LONG,
    EXAMPLES,
    MIB,
    PAGES,
    ch37_fixture,
    gpt2_page,
    numbers_of,
    page_data,
    page_of,
    unexplained,
    write_page,
)


def index_of(text: str) -> tuple[int, ...]:
    return tuple(int(i) for i in text.split(",")) if text else ()


def layer_fixture(folder: Path, **extra: Any) -> Path:
    """A small two-head layer: torch-layout weights with biases, an out_proj, batch 2."""
    rng = np.random.default_rng(5)
    document = {
        "heads": 2,
        "input": rng.normal(size=(2, 3, 4)).tolist(),
        "weights": {branch: {"values": rng.normal(size=(4, 4)).tolist(), "layout": "torch",
                             "bias": rng.normal(size=4).tolist()}
                    for branch in ("query", "key", "value")},
        **extra,
    }
    document["weights"]["out_proj_weight"] = rng.normal(size=(5, 4)).tolist()
    document["weights"]["out_proj_bias"] = rng.normal(size=5).tolist()
    path = folder / "layer.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def attend_evidence(path: Path | None, causal: bool) -> AttendEvidence:
    fixture = load_attend_fixture(path, "chapter", 1 << 20, None, causal)
    return build_attend_evidence(fixture, causal=causal)


# --- the page is self-contained ----------------------------------------------------------


@pytest.mark.parametrize("args", [["run"], ["attend", "--causal"]], ids=["run", "attend"])
def test_the_page_is_self_contained(tmp_path: Path, args: list[str]) -> None:
    html = write_page(tmp_path, *args)
    assert html.startswith("<!DOCTYPE html>") and html.endswith("</html>\n")
    assert "http://" not in html and "https://" not in html
    assert " src=" not in html  # no script, image or frame is loaded from anywhere
    assert html.count("<style>") == 1 and html.count("<script") == 2
    assert html.count(" href=") == 1 and ' href="data:,"' in html  # the empty favicon
    assert "default-src 'none'" in html  # the browser refuses any request the page makes


def test_every_value_of_the_chapter_is_a_number_with_its_coordinate(tmp_path: Path) -> None:
    html = write_page(tmp_path, "run")
    report = json.loads(CliRunner().invoke(main, ["report", "-f", "json"]).output)
    shown: dict[tuple[str, str], str] = {}
    for number in numbers_of(html):
        if not number.get("data-field"):
            shown[(number["data-tensor"], number["data-index"])] = number["text"]
    for name, tensor in report["tensors"].items():
        values = np.reshape(tensor["values"], tensor["shape"])
        for index in np.ndindex(*values.shape):
            where = ",".join(str(i) for i in index)
            assert shown[(name, where)] == fmt_float(float(values[index]), 6), (name, where)
    # and every number element carries both attributes
    assert all("data-index" in number for number in numbers_of(html))


def test_precision_sets_every_number_of_the_page(tmp_path: Path) -> None:
    html = write_page(tmp_path, "run", "--precision", "3")
    cell = next(n for n in numbers_of(html)
                if n["data-tensor"] == "input_gradient" and n["data-index"] == "0,0,0")
    assert cell["text"] == "3.000"
    assert page_data(html)["derivations"]["input_gradient|0,0,0"]["v"] == "3.000"


def test_attend_draws_the_other_mask_behind_a_toggle(tmp_path: Path) -> None:
    html = write_page(tmp_path, "attend", "--causal")
    assert 'id="qkv-causal"' in html
    assert '<div class="mask" data-causal="true">' in html
    assert '<div class="mask" data-causal="false">' in html
    other = [n for n in numbers_of(html) if n.get("data-variant") == "other-mask"]
    assert {n["data-index"] for n in other} == {"0,0,0", "0,0,1", "0,1,0", "0,1,1"}
    assert "weights|0,0,1|other-mask" in page_data(html)["derivations"]
    assert embedded_sums(html, 4) > 0


def test_numbered_maps_over_the_page_cells_drop_the_toggle_and_the_rows_exponentials(
        tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    path = tmp_path / "eight.json"  # 8 heads x 16 x 16 = 2048 numbered cells > PAGE_CELLS
    path.write_text(json.dumps({
        "heads": 8, "causal": True, "input": rng.normal(size=(1, 16, 8)).tolist(),
        "weights": {b: rng.normal(size=(8, 8)).tolist() for b in ("query", "key", "value")},
    }), encoding="utf-8")
    html = write_page(tmp_path, "attend", str(path))
    assert 'id="qkv-causal"' not in html and 'id="qkv-head"' in html
    cells = [n for n in numbers_of(html) if n["data-tensor"] == "weights"]
    assert len(cells) == 8 * 16 * 16 > PAGE_CELLS
    data = page_data(html)
    labels = [data["labels"][row[0]] for row in data["derivations"]["weights|0,3,15,2"]["r"]]
    assert "sum of the row's exponentials" in labels
    assert not any(label.startswith("key ") for label in labels)
    small = page_data(write_page(tmp_path, "attend", "--causal", name="small.html"))
    labels = [small["labels"][row[0]] for row in small["derivations"]["weights|0,1,0"]["r"]]
    assert "key 1: exp(z \u2212 max)" in labels


def test_a_batch_of_two_has_a_batch_switch_and_a_slice_per_item(tmp_path: Path) -> None:
    html = write_page(tmp_path, "attend", str(layer_fixture(tmp_path)))
    assert 'id="qkv-batch"' in html and 'id="qkv-head"' in html
    assert 'data-batch="1" data-head="1"' in html  # the heat map of batch item 1, head 1
    weights = {n["data-index"] for n in numbers_of(html)
               if n["data-tensor"] == "weights" and not n.get("data-variant")}
    assert weights == {f"{b},{h},{q},{k}" for b in range(2) for h in range(2)
                       for q in range(3) for k in range(3)}


# --- derivations ----------------------------------------------------------------------------


def embedded_sums(html: str, precision: int) -> int:
    """Check every embedded derivation that is a sum: its term rows, as shown, add up to
    its value, as shown (to the rounding of the shown digits). Returns how many."""
    data = page_data(html)
    numbers = {"|".join(filter(None, (n["data-tensor"], n["data-index"], n.get("data-variant")))):
               n["text"] for n in numbers_of(html) if not n.get("data-field")}
    checked = 0
    for key, derivation in data["derivations"].items():
        if key in numbers:
            assert numbers[key] == derivation["v"], key
        if derivation.get("s") == 0:
            continue
        terms = [float(row[1]) for row in derivation["r"] if (row[2:] or ["t"])[0] in "tr"]
        slack = (len(terms) + 1) * 0.5 * 10.0 ** -precision
        assert abs(math.fsum(terms) - float(derivation["v"])) <= slack, key
        checked += 1
    return checked


def test_the_embedded_terms_add_up_to_the_shown_values(tmp_path: Path) -> None:
    assert embedded_sums(write_page(tmp_path, "run"), 6) == 4 + 4 + 4 + 6 + 6 + 6 + 6
    assert embedded_sums(write_page(tmp_path, "attend", "--causal", name="a.html"), 4) > 20
    layer = write_page(tmp_path, "attend", str(layer_fixture(tmp_path)), "--precision", "8",
                       name="l.html")
    assert embedded_sums(layer, 8) > 100


def test_every_derivation_of_the_chapter_is_the_engines_number() -> None:
    evidence = build_evidence(load(None, 1 << 20))
    p = evidence.primary
    for branch, (weight, output) in enumerate(zip(p.weights, p.outputs, strict=True)):
        for index in np.ndindex(*output.shape):
            derived = projection(p.input, weight, None, index, float(output[index]),
                                 ("X", "W", "b"))
            assert derived.term_sum() == pytest.approx(output[index], abs=1e-12)
            assert len(derived.rows) == p.input.shape[-1]  # one term per input coordinate
        gradient = p.weight_gradients[branch]
        upstream = (p.grad_query, p.grad_key, p.grad_value)[branch]
        for i, j in np.ndindex(*gradient.shape):
            derived = weight_gradient(p.input, upstream, (i, j), float(gradient[i, j]), "Q")
            assert derived.term_sum() == pytest.approx(gradient[i, j], abs=1e-12)
            assert len(derived.rows) == p.input.shape[0] * p.input.shape[1]
    for index in np.ndindex(*p.grad_input.shape):
        derived = input_paths((p.grad_query, p.grad_key, p.grad_value), p.weights, index,
                              float(p.grad_input[index]))
        assert [row.label.split(")")[0] for row in derived.rows if row.part == "term"] == [
            "(U_Q W_Q\u1d40", "(U_K W_K\u1d40", "(U_V W_V\u1d40"]
        for letter in "QKV":  # each path's products, which add up to its term
            path = next(r for r in derived.rows if r.label.startswith(f"(U_{letter}"))
            own = [float(r.value) for r in derived.rows if f"{letter} path:" in r.label]
            assert len(own) == p.grad_query.shape[-1]
            assert math.fsum(own) == pytest.approx(float(path.value), abs=1e-15)
        assert derived.term_sum() == pytest.approx(p.grad_input[index], abs=1e-12)


@pytest.mark.parametrize("kind", ["head", "head-causal", "layer", "layer-causal"])
def test_every_derivation_of_attend_is_the_engines_number(tmp_path: Path, kind: str) -> None:
    causal = kind.endswith("causal")
    path = layer_fixture(tmp_path) if kind.startswith("layer") else None
    evidence = attend_evidence(path, causal)
    c = evidence.config
    arrays = {published_name(name, c): value for name, value in evidence.primary.tensors.items()}
    derivers = derivations(tensors_of(attend_facts(evidence), digests=True), c)
    given = {published_name(n, c) for n in evidence.primary.tensors
             if n in ("input", "grad_output") or n[:2] in ("w_", "b_")}
    assert set(derivers) == set(arrays) - given - {"weights"}  # the maps' own deriver
    for name, derive in derivers.items():
        for index in np.ndindex(*arrays[name].shape):
            derived = derive(index)
            assert derived is not None and derived.value == float(arrays[name][index])
            if derived.terms_total == "sum":
                assert derived.term_sum() == pytest.approx(derived.value, abs=1e-12), (
                    name, index)
            elif derived.stage in ("scale", "scale reverse") and math.isfinite(derived.value):
                product = math.prod(float(r.value) for r in derived.rows if r.part == "fact")
                assert product == pytest.approx(derived.value, abs=1e-15), (name, index)
    attention, scaled = arrays["weights"], arrays["scaled_scores"]
    for index in np.ndindex(*attention.shape):
        derived = attention_weight(arrays["scores"], scaled, scaled, attention, index,
                                   evidence.config.scale)
        facts = {row.label: row.value for row in derived.rows}
        own = float(facts["exp(z \u2212 max) of this key"])
        total = float(facts["sum of the row's exponentials"])
        assert own / total == pytest.approx(attention[index], abs=1e-15)
        masked = next(value for label, value in facts.items() if label.startswith("masked"))
        assert masked == ("yes" if math.isinf(scaled[index]) else "no")
        row = [r for r in derived.rows if r.label.startswith("key ")]
        assert math.fsum(float(r.value) for r in row) == pytest.approx(total)


def test_a_long_sum_lists_its_largest_terms_and_the_rest_in_one_row() -> None:
    rng = np.random.default_rng(3)
    x, w = rng.normal(size=(1, 2, 100)), rng.normal(size=(100, 3))
    y = x @ w
    derived = projection(x, w, None, (0, 1, 2), float(y[0, 1, 2]), ("X", "W", "b"))
    assert len(derived.rows) == MAX_TERMS + 1
    assert derived.rows[-1].part == "rest" and derived.rows[-1].label == "the other 84 together"
    shown = sorted(abs(float(r.value)) for r in derived.rows[:-1])
    products = np.sort(np.abs(x[0, 1] * w[:, 2]))
    assert shown == pytest.approx(products[-MAX_TERMS:].tolist())
    assert derived.term_sum() == pytest.approx(y[0, 1, 2], abs=1e-12)


# --- qkv check --------------------------------------------------------------------------


def test_a_failed_check_shows_expected_actual_the_slip_and_its_replay(tmp_path: Path) -> None:
    saved = tmp_path / "failures"
    html = write_page(tmp_path, "check", str(EXAMPLES / "wrong_no_value_path.py"),
                      "--save-failures", str(saved))
    data = page_data(html)
    first = data["derivations"]["failures|0"]
    labels = data["labels"]
    rows = {labels[row[0]]: row[1] for row in first["r"]}
    assert rows["actual (the implementation)"] == "0.000000"
    assert rows["expected (qkv's engine)"] == "3.000000"
    assert rows["the slip"] == "grad_input misses the value path"
    replay = [row[1] for row in first["r"] if labels[row[0]] in ("replay", "")]
    assert replay[1].endswith("DIR/01-chapter.json")
    assert (saved / "01-chapter.json").is_file()  # the name the page gives is the file written
    fields = {n["data-field"] for n in numbers_of(html) if n["data-tensor"] == "failures"}
    assert {"actual", "expected"} <= fields
    assert '<ul class="failing">' in html and "6 passing checks" in html


def _rows(html: str, key: str) -> tuple[dict[str, Any], list[tuple[str, str, str]]]:
    """A derivation of the page and its rows as (label, value, part)."""
    data = page_data(html)
    derivation = data["derivations"][key]
    return derivation, [(data["labels"][row[0]], row[1], row[2] if len(row) > 2 else "")
                        for row in derivation["r"]]


def test_a_failed_checks_expected_value_opens_the_engines_terms(tmp_path: Path) -> None:
    """The no-key-path slip: the expected dX opens its three paths, the engine's, and the
    difference from the implementation's value is the key path's term."""
    html = write_page(tmp_path, "check", str(EXAMPLES / "wrong_head_no_key_path.py"))
    expected = [n for n in numbers_of(html) if n["data-tensor"] == "failures"
                and n.get("data-field") == "expected"]
    assert expected and all(n.get("data-variant") == "expected" for n in expected)
    derivation, rows = _rows(html, f"failures|{expected[0]['data-index']}|expected")
    paths = {label: float(value) for label, value, part in rows if part == ""}
    assert sorted(paths) == ["(dK W_K\u1d40)[0,0,0]", "(dQ W_Q\u1d40)[0,0,0]",
                             "(dV W_V\u1d40)[0,0,0]"]
    facts = {label: value for label, value, _ in rows}
    engine, actual = float(facts["expected (qkv's engine)"]), float(
        facts["actual (the implementation)"])
    assert math.fsum(paths.values()) == pytest.approx(engine, abs=5e-6)  # 6 decimals shown
    assert actual - engine == pytest.approx(-paths["(dK W_K\u1d40)[0,0,0]"], abs=5e-6)
    assert "the slip" in facts and derivation["h"].endswith("the expected value")
    assert unexplained(html) == []


@pytest.mark.parametrize("slip", ["wrong_head_unscaled", "wrong_rope_from_one",
                                  "wrong_mha_no_key_path", "wrong_mha_rope_query_only"])
def test_every_expected_value_of_a_value_finding_opens_terms_that_make_it(
        tmp_path: Path, slip: str) -> None:
    """A head's scaled scores, RoPE's turn, a layer's dX and its weights: each finding's
    expected number opens the engine's terms, and they add up to the number shown."""
    html = write_page(tmp_path, "check", str(EXAMPLES / f"{slip}.py"))
    expected = [n for n in numbers_of(html) if n["data-tensor"] == "failures"
                and n.get("data-field") == "expected"]
    assert expected and all(n.get("data-variant") == "expected" for n in expected)
    for number in expected:
        derivation, rows = _rows(html, f"failures|{number['data-index']}|expected")
        assert derivation["v"] == number["text"]
        assert any(label.startswith("the slip") or label == "replay" for label, _, _ in rows)
        if derivation.get("s") != 0:  # a sum: its terms make the value (6 decimals shown)
            terms = [float(value) for _, value, part in rows if part in ("", "r")]
            assert math.fsum(terms) == pytest.approx(float(number["text"]), abs=1e-5)
        else:
            assert "g" in derivation  # facts of a stage: its description is named


def test_a_failing_cache_pages_numbers_open_their_comparison_and_the_engines_terms(
        tmp_path: Path) -> None:
    """A KV cache whose RoPE counts positions from 1: the cached key's actual and
    expected values are numbers; the expected one opens the turn of the pass's key."""
    implementation = EXAMPLES / "wrong_cache_positions_from_one.py"
    html = write_page(tmp_path, "check", str(implementation))
    shown = [n for n in numbers_of(html) if n["data-tensor"] == "failures"]
    assert {n["data-field"] for n in shown} == {"actual", "expected"}
    assert unexplained(html) == []
    first = next(n for n in shown if n["data-field"] == "expected" and n.get("data-variant"))
    _, compared = _rows(html, f"failures|{first['data-index']}")
    facts = {label: value for label, value, _ in compared}
    assert {"actual (the implementation)", "tolerance", "actual \u2212 expected"} <= set(facts)
    assert facts["expected (qkv's engine: the causal pass over the prefix)"] == first["text"]
    _, rows = _rows(html, f"failures|{first['data-index']}|expected")
    turned = [float(value) for label, value, part in rows if part == ""]
    assert len(turned) == 2 and any("cos\u03b8" in label for label, _, _ in rows)
    assert math.fsum(turned) == pytest.approx(float(first["text"]), abs=5e-6)


def test_a_command_programs_replay_feeds_it_the_saved_requests() -> None:
    document = check_json(CheckResult("./my_qkv", ("chapter", "random-1[2,3,5->3]"), (), (),
                                      command=True))
    failure = {"fixture": "random-1[2,3,5->3]"}
    lines = replay_lines(failure, document, {"random-1[2,3,5->3]": "03-random-1-2-3-5-3"},
                         "--command './my_qkv --fast'")
    assert lines == [
        "qkv check --command './my_qkv --fast' --save-failures DIR   "
        "(writes DIR/03-random-1-2-3-5-3.json)",
        "qkv check --command './my_qkv --fast' DIR/03-random-1-2-3-5-3.json",
        "./my_qkv --fast < DIR/03-random-1-2-3-5-3.requests.jsonl   (the requests alone)"]
    # a head's run of a fixture ("chapter causal") replays that fixture; no file, no lines
    assert replay_lines({"fixture": "chapter causal"}, document,
                        {"chapter": "01-chapter"}, "x")[1] == "qkv check x DIR/01-chapter.json"
    assert replay_lines({"fixture": None}, document, {}, "x") == []


def test_a_passing_check_folds_every_family(tmp_path: Path) -> None:
    html = write_page(tmp_path, "check", str(EXAMPLES / "numpy_qkv.py"))
    assert '<ul class="failing">' not in html and "Findings" not in html
    assert "passing checks</summary>" in html


def test_a_passing_gradient_checks_worst_coordinate_opens_its_values(tmp_path: Path) -> None:
    html = write_page(tmp_path, "check", str(EXAMPLES / "numpy_qkv.py"))
    document = json.loads(CliRunner().invoke(
        main, ["check", str(EXAMPLES / "numpy_qkv.py"), "-f", "json"]).output)
    at = next(i for i, c in enumerate(document["checks"]) if c["name"] == "gradcheck")
    shown = [n for n in numbers_of(html) if n["data-tensor"] == "checks"]
    assert {(n["data-index"], n["data-field"]) for n in shown} == {
        (str(at), "analytic"), (str(at), "numerical")}
    derivation = page_data(html)["derivations"][f"checks|{at}"]
    labels = page_data(html)["labels"]
    steps = {labels[row[0]] for row in derivation["r"]}
    assert {"analytic (the implementation's backward)", "tolerance"} <= steps
    # the numbers are the JSON report's own worst point, as its detail words them
    assert "analytic " + repr(float(derivation["v"])) in document["checks"][at]["detail"]


# --- --html follows the output rules -------------------------------------------------------


def test_html_never_replaces_an_input_or_another_output(tmp_path: Path) -> None:
    fixture = tmp_path / "f.json"
    fixture.write_text(Path(__file__).resolve().parent.parent.joinpath(
        "fixtures", "ch26-qkv-projections.json").read_text(encoding="utf-8"), encoding="utf-8")
    before = fixture.read_bytes()
    result = CliRunner().invoke(main, ["run", str(fixture), "--html", str(fixture)])
    assert result.exit_code == 2 and "refusing to overwrite a file this command reads" in (
        result.output)
    assert fixture.read_bytes() == before
    page = tmp_path / "p.html"
    result = CliRunner().invoke(main, ["report", "-o", str(page), "--html", str(page)])
    assert result.exit_code == 2 and "named twice as an output" in result.output
    result = CliRunner().invoke(main, ["run", str(fixture), str(fixture), "--html", str(page)])
    assert result.exit_code == 2 and "--html take a single fixture file" in result.output
    assert not page.exists()


def test_html_is_written_beside_a_golden_comparison(tmp_path: Path) -> None:
    golden = Path(__file__).resolve().parent / "golden" / "ch26" / "expected.txt"
    page = tmp_path / "p.html"
    result = CliRunner().invoke(main, ["run", "--expect", str(golden), "--html", str(page)])
    assert result.exit_code == 0 and "the report matches" in result.output
    assert 'data-tensor="input_gradient" data-index="0,0,0"' in page.read_text(encoding="utf-8")


def test_html_writes_through_a_device(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["run", "-f", "json", "--html", os.devnull])
    assert result.exit_code == 0 and f"qkv: wrote {os.devnull}" in result.output


def test_help_tells_the_explorer_from_the_exported_figure() -> None:
    for command in ("run", "report", "attend", "check"):
        text = " ".join(CliRunner().invoke(main, [command, "--help"]).output.split())
        assert "--html FILE Also write the evidence explorer" in text, command
        assert "(a copy of the terminal; --html, where offered, is the explorer)" in text


def test_precision_with_html_draws_no_warning(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["run", "-f", "text", "--precision", "3", "--html",
                                       str(tmp_path / "p.html")])
    assert result.exit_code == 0 and "warning" not in result.output


# --- a GPT-2-small layer at T=1024 ------------------------------------------------------------


def test_a_gpt2_small_layer_page_stays_within_one_mebibyte(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    html = gpt2_page(tmp_path_factory).read_text(encoding="utf-8")
    assert len(html.encode("utf-8")) <= MIB
    numbers = numbers_of(html)
    cells = [n for n in numbers if n["data-tensor"] == "weights"]
    assert 12 * 64 <= len(cells) <= PAGE_CELLS  # every head drawn, downsampled
    assert {index_of(n["data-index"])[1] for n in cells} == set(range(12))
    assert "blocks of 1024\u00d71024" in html
    # large tensors are summarised with the digest the text view gives
    assert html.count("<dt>sha256</dt>") >= 20
    assert embedded_sums(html, 4) > 40


# --- every report opens as a page ----------------------------------------------------------

EVERY_REPORT = [
    ["run", "--chapter", "27"], ["run", "--chapter", "28"], ["run", "--chapter", "29"],
    ["report", "--chapter", "30"], ["gradcheck"],
    ["check", str(EXAMPLES / "wrong_mha_strided_heads.py")],
]


@pytest.mark.parametrize("args", EVERY_REPORT, ids=["ch27", "ch28", "ch29", "ch30", "gradcheck",
                                                     "check-multi-head-slip"])
def test_every_report_opens_as_a_page_with_the_same_exit_code(tmp_path: Path,
                                                              args: list[str]) -> None:
    """The page is self-contained, every number carries its place in the JSON report, and
    the command exits as it does without ``--html``."""
    plain = CliRunner().invoke(main, [*args, "-f", "json"])
    html = write_page(tmp_path, *args)
    page = CliRunner().invoke(main, [*args, "--html", str(tmp_path / "again.html"), "-f", "json"])
    assert page.exit_code == plain.exit_code
    assert html.startswith("<!DOCTYPE html>") and "default-src 'none'" in html
    numbers = numbers_of(html)
    assert numbers and all("data-tensor" in n and "data-index" in n for n in numbers)
    report = json.loads(plain.stdout)
    tensors = report.get("tensors")
    if isinstance(tensors, dict):  # a chapter's: every value of every tensor, at its place
        shown = {(n["data-tensor"], n["data-index"]): n["text"] for n in numbers
                 if not n.get("data-field") and not n.get("data-stat")}
        for name, tensor in tensors.items():
            values = np.reshape(tensor["values"], tensor["shape"])
            for index in np.ndindex(*values.shape):
                at = (name, ",".join(str(i) for i in index))
                assert float(shown[at]) == pytest.approx(float(values[index]), rel=1e-5,
                                                         abs=5e-7), at
    gradcheck = report.get("gradcheck", report)
    if isinstance(gradcheck, dict) and isinstance(gradcheck.get("tensors"), list):
        for entry in gradcheck["tensors"]:
            for point in entry["checks"][:4]:
                where = ",".join(str(i) for i in point["coordinate"])
                assert any(n["data-tensor"] == f"gradcheck.{entry['tensor']}"
                           and n["data-index"] == where and n.get("data-field") == "analytic"
                           for n in numbers), (entry["tensor"], where)


def test_a_chapter_page_explains_each_weight_by_its_scores_softmax(tmp_path: Path) -> None:
    html = write_page(tmp_path, "run", "--chapter", "28")
    derivations = page_data(html)["derivations"]
    weight = derivations["probabilities|0,2,1"]
    assert weight["v"] == "0.108383"
    masked = derivations["probabilities|0,0,2"]
    labels = page_data(html)["labels"]
    assert labels[masked["f"]].startswith("0: the key is after the query")
    assert "output|0,2,0" in derivations  # the mixture of the value rows


def test_a_page_of_gradients_past_the_largest_float_is_drawn(tmp_path: Path) -> None:
    # Upstream gradients of 1e308: a gradient's paths sum past the largest float. The
    # page says inf where the float sum does, never an internal error (exit 70).
    from qkvcli.cli import main

    ones = [[[1e308, 1e308], [1e308, 1e308]]]
    doc = {"input": [[[1, 2, -1], [0, 1, 2]]],
           "weights": {"query": [[1, 0], [0, 1], [1, -1]], "key": [[0, 1], [1, 0], [-1, 1]],
                       "value": [[1, 1], [1, -1], [0, 2]]},
           "upstream": {"query": ones, "key": ones, "value": ones}}
    (tmp_path / "f.json").write_text(json.dumps(doc))
    page = tmp_path / "page.html"
    result = CliRunner().invoke(main, ["run", str(tmp_path / "f.json"), "--html", str(page)])
    assert result.exit_code == 1, result.output  # reverse and gradcheck fail: not finite
    assert "internal error" not in result.output and page.stat().st_size > 0


# --- every number explains itself ------------------------------------------------------------


@pytest.mark.parametrize("name", list(PAGES))
def test_every_number_of_every_page_opens_its_terms_or_says_it_was_given(
        tmp_path_factory: pytest.TempPathFactory, name: str) -> None:
    html = page_of(name, tmp_path_factory).read_text(encoding="utf-8")
    assert unexplained(html) == []
    title = html[html.index("<title>") + 7:html.index("</title>")]
    assert title.startswith("qkv " + PAGES[name][0]), title
    if PAGES[name][0] in ("run", "report"):
        chapter = PAGES[name][2] if "--chapter" in PAGES[name] else "37"  # CH37: random
        assert f": {chapter}-" in title, title  # the chapter's id


TITLES = {
    **{f"{command}-ch{n}": f"qkv {command}: {CHAPTER_IDS[n]}" for n in CHAPTER_IDS
       for command in ("run", "report")},
    "run-ch37-random": "qkv run: 37-incremental-attention",
    "run-ch37-long": "qkv run: 37-incremental-attention",
    "attend-head": "qkv attend: 26-qkv-projections",  # attend's bundled fixture's chapter
    "attend-head-causal": "qkv attend: 26-qkv-projections",
    "attend-layer-causal": "qkv attend: layer",  # a fixture of its own: its label
    "check-projections": "qkv check: {}numpy_qkv.py (chapter 26)",
    "check-head": "qkv check: {}numpy_head.py (chapters 26 to 28)",
    "check-rope-mha": "qkv check: {}numpy_rope_mha.py (chapters 29 to 30)",
    "check-failing": "qkv check: {}wrong_mha_strided_heads.py (chapters 29 to 30)",
    "check-not-run": "qkv check: {}wrong_float32.py (chapter 26)",
    "check-failing-cache": "qkv check: {}wrong_cache_rope_at_zero.py (chapter 37)",
    "gradcheck": "qkv gradcheck: 26-qkv-projections",
    "gradcheck-ch30": "qkv gradcheck: 30-multi-head-attention",
}
"""Each page's title: its report, then the chapter (attend: its fixture's; check: the
implementation as given and the chapters of the operations it offers)."""


@pytest.mark.parametrize("name", list(PAGES))
def test_every_pages_title_names_its_report_and_chapter(
        tmp_path_factory: pytest.TempPathFactory, name: str) -> None:
    html = page_of(name, tmp_path_factory).read_text(encoding="utf-8")
    title = html[html.index("<title>") + 7:html.index("</title>")]
    assert title == escape(TITLES[name].format(f"{EXAMPLES}/"))
    assert f"<h1>{title}</h1>" in html


def test_the_gradcheck_page_names_its_chapter_and_the_exported_figure_does_not(
        tmp_path: Path) -> None:
    """The rich export's title is the command's own (``qkv gradcheck``), the explorer's
    names the chapter too: two titles, one per page."""
    page, export = tmp_path / "page.html", tmp_path / "export.html"
    result = CliRunner().invoke(main, ["gradcheck", "--html", str(page), "--export-html",
                                       str(export)])
    assert result.exit_code == 0, result.output
    assert "<title>qkv gradcheck</title>" in export.read_text(encoding="utf-8")
    assert "<title>qkv gradcheck: 26-qkv-projections</title>" in page.read_text(encoding="utf-8")


def test_a_masked_weight_and_its_scaled_score_agree(tmp_path: Path) -> None:
    """Chapter 28 publishes finite scaled scores and the masked ones apart: a masked
    weight's panel gives the finite scaled score and says the mask made it -inf."""
    html = write_page(tmp_path, "run", "--chapter", "28")
    data = page_data(html)
    rows = {data["labels"][r[0]]: r[1] for r in data["derivations"]["probabilities|0,0,2"]["r"]}
    scaled = next(n["text"] for n in numbers_of(html)
                  if n["data-tensor"] == "scaled_scores" and n["data-index"] == "0,0,2")
    assert rows["scaled score S \u00d7 scale"] == scaled != "-inf"
    assert next(v for label, v in rows.items() if label.startswith("masked")) == "yes"


def test_chapter_30_strikes_its_masked_weights_through(tmp_path: Path) -> None:
    html = write_page(tmp_path, "run", "--chapter", "30")
    struck = {n["data-index"] for n in numbers_of(html)
              if n["data-tensor"] == "attention_weights" and " m" in n.get("class", "")}
    assert struck == {f"0,{h},{q},{k}" for h in range(2) for q in range(3) for k in range(3)
                      if k > q}


def test_mixture_terms_are_split_by_query_not_batch(tmp_path: Path) -> None:
    html = write_page(tmp_path, "run", "--chapter", "27")
    block = html[html.index('data-name="mixture_terms"'):]
    block = block[:block.index("</section>")]
    assert "query 0" in block and "query 1" in block and "batch" not in block


def test_attend_names_the_branch_gradients_dq_dk_dv(tmp_path: Path) -> None:
    data = page_data(write_page(tmp_path, "attend"))
    labels = " ".join(data["labels"])
    assert "(dQ W_Q\u1d40)" in labels and "U_Q" not in labels


def test_a_passing_gradient_check_shows_the_tolerance_it_was_judged_by(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    html = page_of("check-projections", tmp_path_factory).read_text(encoding="utf-8")
    data = page_data(html)
    derivation = next(d for key, d in data["derivations"].items() if key.startswith("checks|"))
    rows = {data["labels"][r[0]]: r[1] for r in derivation["r"]}
    assert float(rows["tolerance"]) == 2e-06  # the chapter fixture's, the default


def test_a_family_that_did_not_run_is_dimmed_apart_from_the_failures(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    html = page_of("check-not-run", tmp_path_factory).read_text(encoding="utf-8")
    failing = html[html.index('<ul class="failing">'):]
    failing = failing[:failing.index("</ul>")]
    assert "gradcheck" not in failing
    assert '<li class="check skip"><span class="word">\u2013 SKIP</span> <strong>gradcheck' in html


def test_a_table_with_a_value_fixed_point_would_hide_is_written_in_one_format(
        tmp_path: Path) -> None:
    html = write_page(tmp_path, "gradcheck")
    errors = [n["text"] for n in numbers_of(html) if n.get("data-field") == "scaled_error"]
    assert errors and all("e" in text for text in errors)
    for name in {n["data-tensor"] for n in numbers_of(html)}:
        for field in ("analytic", "numerical", "scaled_error"):
            texts = [n["text"] for n in numbers_of(html)
                     if n["data-tensor"] == name and n.get("data-field") == field]
            assert len({"e" in text for text in texts}) <= 1, (name, field)


# --- chapter 37: the cache's steps, work, reset, refusals and history ----------------------


CH37_TENSORS = ("input", "output", "full_prefix_last_row", "appended_key", "appended_value",
                "cached_keys", "cached_values", "weights")
CH37_COUNTS = ("work.full_rows_per_projection", "work.incremental_rows_per_projection",
               "work.reused_rows_per_kv_projection", "work.avoided_rows_across_kv",
               "reset.before", "reset.after", "history.complete_prefix_rows_per_projection",
               "history.incremental_rows_per_projection", "history.reused_key_rows",
               "history.reused_value_rows")


def _ch37(tmp_path: Path, fixture: str, precision: int = 6) -> tuple[str, dict[str, Any]]:
    """The chapter-37 page of ``fixture`` (``""``: the bundled one) and its JSON report."""
    args = ["run", *([fixture] if fixture else ["--chapter", "37"]), "--format", "json",
            "--precision", str(precision)]
    html = write_page(tmp_path, *args)
    return html, json.loads((tmp_path / "page.html.txt").read_text(encoding="utf-8"))


@pytest.mark.parametrize("which", ["bundled", "random", "random-3-heads"])
def test_chapter_37_shows_every_published_number_and_explains_it(tmp_path: Path,
                                                                 which: str) -> None:
    """Every value of every step, the work, the reset and the history is on the page at
    its JSON key and coordinate with the report's value; none lacks terms or "given"; the
    terms add up to the shown values; the eight refusals are listed with their messages."""
    fixture = {"bundled": "", "random": str(ch37_fixture(tmp_path)),
               "random-3-heads": str(ch37_fixture(tmp_path, 9, (3, 2, 3, 2, 2, 2, 50.5)))}
    html, document = _ch37(tmp_path, fixture[which])
    shown = {(n["data-tensor"], n["data-index"]): n["text"] for n in numbers_of(html)}
    expected: dict[tuple[str, str], str] = {}
    for t, step in enumerate(document["steps"]):
        for name in CH37_TENSORS:
            values = np.array(step[name]["values"]).reshape(step[name]["shape"])
            for at in np.ndindex(*values.shape):
                expected[(f"steps.{t}.{name}", ",".join(map(str, at)))] = fmt_float(
                    float(values[at]), 6)
        for name in ("position", "cache_before", "cache_after"):
            expected[(f"steps.{t}.{name}", "")] = str(step[name])
        for name, count in step["work"].items():
            expected[(f"steps.{t}.work.{name}", "")] = str(count)
        for name in ("cache_shape", "storage_shape"):
            for i, size in enumerate(step[name]):
                expected[(f"steps.{t}.{name}", str(i))] = str(size)
        expected[(f"steps.{t}.max_abs_difference", "")] = fmt_float(
            step["max_abs_difference"], 6)
    for key in CH37_COUNTS:
        section, name = key.split(".")
        expected[(key, "")] = str(document[section][name])
    for i, rows in enumerate(document["history"]["newest_query_key_rows"]):
        expected[("history.newest_query_key_rows", str(i))] = str(rows)
    assert {key: shown.get(key) for key in expected} == expected
    assert unexplained(html) == []
    assert embedded_sums(html, 6) >= len([k for k in expected if "steps" in k[0]
                                          and k[0].split(".")[2] in ("output", "weights")]) // 2
    assert len(document["errors"]) == 8
    for refusal in document["errors"]:
        assert f">{escape(refusal['message'])}<" in html
    assert html.count("; the cache unchanged<br>") == 8


def test_chapter_37_terms_are_the_engines_numbers(tmp_path: Path) -> None:
    """At 12 decimals a random fixture's terms still add up to their values: each output
    is its step's merged heads times W_O, each value X times W_V, each key its turned pair;
    a weight's raw score is its listed q·k products, and the weight exp(z - max) / sum."""
    html, document = _ch37(tmp_path, str(ch37_fixture(tmp_path)), 12)
    assert embedded_sums(html, 12) > 300
    data = page_data(html)
    labels = data["labels"]
    weights = [(key, d) for key, d in data["derivations"].items() if ".weights|" in key]
    assert weights
    for key, derivation in weights:
        rows = {labels[r[0]]: r for r in derivation["r"]}
        products = [float(r[1]) for label, r in rows.items() if label.startswith("  RQ[")]
        assert len(products) == document["config"]["head_width"]
        raw = float(rows["raw score S = q\u00b7k"][1])
        assert math.fsum(products) == pytest.approx(raw, abs=1e-10)
        scaled = float(rows["scaled score S \u00d7 scale"][1])
        assert scaled == pytest.approx(raw / math.sqrt(document["config"]["head_width"]),
                                       abs=1e-11)
        ratio = float(rows["exp(z \u2212 max) of this key"][1]) / float(
            rows["sum of the row's exponentials"][1])
        assert ratio == pytest.approx(float(derivation["v"]), abs=1e-11), key
    for t, step in enumerate(document["steps"]):  # a cached key: turned at its own position
        for j in range(step["cache_after"]):
            derivation = data["derivations"][f"steps.{t}.cached_keys|0,0,{j},0"]
            assert labels[derivation["f"]].startswith(f"written by step {j},")
            assert any(f"position {j})" in labels[r[0]] for r in derivation["r"])
            if j < t:  # kept since: the number its own step appended
                source = f"steps.{j}.appended_key|0,0,0,0"
                assert derivation["v"] == data["derivations"][source]["v"]


def test_chapter_37_summarises_the_earlier_caches_of_a_long_run(tmp_path: Path) -> None:
    """Past 4096 cached values over every step, the caches before the last step are
    summarised (the last holds every row they hold) and still explained."""
    from qkvcli.render.explorer.incremental import CACHE_VALUES

    shape = (1, 12, 2, 16, 12, 12, 10000.0)  # 2 * 32 * (1 + ... + 12) = 4992 cached values
    html, document = _ch37(tmp_path, str(ch37_fixture(tmp_path, 3, shape)))
    assert sum(2 * 32 * (t + 1) for t in range(12)) > CACHE_VALUES
    assert unexplained(html) == []
    summaries = [part.split('"', 1)[0] for part in html.split('data-name="steps.')[1:]
                 if '<dl class="summary">' in part.split("</section>", 1)[0]]
    drawn = sorted({int(n["data-tensor"].split(".")[1]) for n in numbers_of(html)
                    if n["data-tensor"].startswith("steps.")})
    assert drawn[0] == 0 and drawn[-1] == 11  # the page's budget may leave steps out
    assert summaries == [f"{t}.{name}" for t in drawn[:-1]
                         for name in ("cached_keys", "cached_values")]
    last = document["steps"][-1]["cached_values"]
    shown = {n["data-index"] for n in numbers_of(html) if n["data-tensor"]
             == "steps.11.cached_values"}
    assert len(shown) == math.prod(last["shape"])
    assert "the steps&#x27; caches hold more than 4096 values" in html


def test_a_long_chapter_37_run_keeps_the_page_budget_and_names_the_steps_it_leaves_out(
        tmp_path: Path) -> None:
    """32 tokens of width 64 (four heads of 16): the page stays within the mebibyte
    attend's GPT-2 page keeps; every number on it is explained; each step is drawn at its
    JSON keys or named in a note that says where its numbers are and how to draw it."""
    from qkvcli.render.explorer.page import PAGE_BYTES

    html, document = _ch37(tmp_path, str(ch37_fixture(tmp_path, 11, CH37_LONG)))
    assert PAGE_BYTES == MIB and len(html.encode("utf-8")) <= PAGE_BYTES
    assert unexplained(html) == []
    shown = {(n["data-tensor"], n["data-index"]) for n in numbers_of(html)}
    drawn = [t for t in range(32) if (f"steps.{t}.output", "0,0") in shown]
    assert drawn[:2] == [0, 1] and len(drawn) < 32  # the first steps, then the budget
    notes = [(int(a), int(b or a)) for a, b in re.findall(
        r"<h2>Steps? (\d+)(?: to (\d+))?: not drawn</h2>", html)]
    left = sorted(t for first, end in notes for t in range(first, end + 1))
    assert sorted(drawn + left) == list(range(32))
    for t in drawn:  # a drawn step: every value of its output at its key
        values = np.array(document["steps"][t]["output"]["values"]).reshape(-1)
        assert all((f"steps.{t}.output", f"0,{j}") in shown for j in range(values.size))
    assert not any(key[0].startswith(tuple(f"steps.{t}." for t in left)) for key in shown)
    first, end = notes[0]
    assert f"<code>steps[{first}]</code> to <code>steps[{end}]</code>" in html
    assert "qkv run FIXTURE -f json" in html and "first t + 1 of its 32 tokens" in html


def test_every_page_is_one_entry_of_the_views_table_and_a_record_without_one_is_refused(
) -> None:
    """``explorer_page`` looks the page up in ``views.PAGES`` as the other formats look
    up theirs: every entry names a function that exists, every view but variance's has
    one, and a variance result (which has no page) is a TypeError naming its view."""
    import importlib

    from qkvcli.learn.variance import VarianceResult
    from qkvcli.render.explorer import explorer_page
    from qkvcli.render.views import PAGES, VIEWS

    assert set(PAGES) == set(VIEWS.values()) - {"variance"}
    for view, where in PAGES.items():
        module, function = where.split(":")
        assert callable(getattr(importlib.import_module(module), function)), view
    variance = VarianceResult.__new__(VarianceResult)
    with pytest.raises(TypeError, match="the explorer draws no page of variance"):
        explorer_page(variance, precision=6, title="qkv variance")
