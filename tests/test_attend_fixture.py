"""Reading fixtures for qkv attend: order, locations, the seeded upstream, bundled examples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qkvcli.attention.fixture import layer_of, load_attend_fixture, parse_attend_fixture
from qkvcli.reading.attend import read_attend_fixture, seeded_upstream
from qkvcli.reading.load import load_fixture
from qkvcli.reading.problems import FixtureError


def good() -> dict[str, Any]:
    return {"input": [[[1, 2, -1], [0, 1, 2]]],
            "weights": {"query": [[1, 0], [0, 1], [1, -1]], "key": [[0, 1], [1, 0], [-1, 1]],
                        "value": [[1, 1], [1, -1], [0, 2]]}}


def test_chapter_example_matches_the_chapter_reader() -> None:
    attend = load_attend_fixture()
    chapter = load_fixture()
    assert attend.input.tobytes() == chapter.input.tobytes()
    for mine, theirs in zip(attend.parameters.weights, chapter.weights, strict=True):
        assert mine.tobytes() == theirs.tobytes()
    assert attend.parameters.names == chapter.names
    assert (attend.step, attend.tolerance, attend.seed, attend.chapter) == (
        chapter.step, chapter.tolerance, chapter.seed, chapter.chapter)


def test_upstream_is_seeded_and_deterministic() -> None:
    first = seeded_upstream((2, 3, 4), 26)
    assert first.tobytes() == seeded_upstream((2, 3, 4), 26).tobytes()
    assert first.tobytes() != seeded_upstream((2, 3, 4), 27).tobytes()
    assert (first >= -1).all() and (first < 1).all()
    assert len(np.unique(first)) == first.size


@pytest.mark.parametrize(
    ("mutate", "location", "message"),
    [
        (lambda d: d.update(extra=1), "$", 'unknown key "extra"; expected one of'),
        (lambda d: d.pop("weights"), "$", 'missing key "weights"'),
        (lambda d: d["weights"].update(key={"values": [[0, 1], [1, 0], [-1, 1]],
                                            "name": "Bad"}),
         "$.weights.key.name", "parameter name byte 0 must be lowercase ASCII, a digit, "
         "underscore, or dot; got 'B' (0x42)"),
        (lambda d: d.update(input=[[1, 2, 3]]), "$.input",
         "Q/K/V input must have rank three [batch, tokens, model_width], got rank 2"),
        (lambda d: d.update(input=[[[1, 2]]]), "$.input",
         "Q/K/V input final width must equal model width 3, got 2"),
        (lambda d: d.update(input=[]), "$.input",  # the chapter's reader, and its hint
         "Q/K/V input must have rank three [batch, tokens, model_width], got rank 1; an "
         "empty nested list cannot show its inner axes"),
        (lambda d: d.update(upstream={"value": [[[1, 2, 3]]]}), "$.upstream.value",
         "expected shape [1,2,2], got [1,1,3]"),
        (lambda d: d.update(gradcheck={"step": 0}), "$.gradcheck.step",
         "central-difference step 0.0 must be positive and finite"),
        (lambda d: d.update(seed=-1), "$.seed", "seed must be between 0 and"),
        (lambda d: d.update(chapter=""), "$.chapter", "expected a non-empty single-line string"),
        # the weights' model width is judged before the input is read against it: a bad
        # input does not hide weights that disagree
        (lambda d: (d.update(input=[1]), d["weights"]["value"].append([9, 9])), "$.weights",
         "Q/K/V model widths must match, got query 3, key 3, value 4"),
        # ... and a zero width is named as the engine names it, at its branch
        (lambda d: d["weights"].update(key={"shape": [0, 2], "values": []}), "$.weights.key",
         "key projection: linear input width must be greater than zero"),
    ],
    ids=["unknown", "missing", "name", "rank", "width", "empty", "upstream", "step", "seed",
         "chapter", "order", "zero-width"],
)
def test_errors(mutate: Any, location: str, message: str) -> None:
    data = good()
    mutate(data)
    with pytest.raises(FixtureError) as caught:
        parse_attend_fixture(data)
    assert caught.value.location == location
    assert caught.value.message.startswith(message)


def test_the_document_is_read_whole_before_the_engine_judges_it() -> None:
    """The declared order: reading/ reads every key (here the seed, last of all) into a
    plain record, and only then does the engine judge what it describes (here two
    branches of one name), as it builds the layer."""
    data = good()
    for branch in ("query", "key"):
        data["weights"][branch] = {"values": data["weights"][branch], "name": "w.a"}
    fixture = read_attend_fixture(data)  # plain arrays: nothing judged them yet
    assert fixture.parameters.names == ("w.a", "w.a", "decoder.block.0.attention.value.weight")
    with pytest.raises(FixtureError) as caught:
        layer_of(fixture)
    assert str(caught.value) == (
        '$.weights.key.name: parameter name "w.a" first appears at index 0 and repeats at '
        "index 1")
    data["seed"] = -1
    with pytest.raises(FixtureError) as caught:
        parse_attend_fixture(data)
    assert caught.value.location == "$.seed"


def test_a_step_is_read_against_every_value_before_the_seed() -> None:
    """reading/ refuses a step that overflows beside a value (every value it read is
    finite: each tensor source refuses one that is not), in its order: before the seed."""
    data = good()
    data["gradcheck"] = {"step": 1e307}
    data["weights"]["value"] = [[1.7e308, 1], [1, -1], [0, 2]]
    data["seed"] = -1
    with pytest.raises(FixtureError) as caught:
        read_attend_fixture(data)
    assert str(caught.value) == (
        "$.gradcheck.step: step 1e+307 overflows binary64 beside a value of magnitude "
        "1.7e+308 (x + 2*step is not finite); use a smaller step")


def test_value_upstream_may_take_the_value_width() -> None:
    data = good()
    data["value_width"] = "independent"
    data["weights"]["value"] = [[1, 0, 1], [0, 1, 0], [1, 1, 1]]
    data["upstream"] = {"value": [[[1, 2, 3], [4, 5, 6]]]}
    fixture = parse_attend_fixture(data)
    assert fixture.upstream.shape == (1, 2, 3)
    assert fixture.function.value_width == "independent"


def test_file_name_is_the_default_chapter(tmp_path: Path) -> None:
    import json

    path = tmp_path / "mine.json"
    path.write_text(json.dumps(good()), encoding="utf-8")
    assert load_attend_fixture(path).chapter == "mine"


# --- the function's numbers: never a traceback, never NaN everywhere -------------------------

def _layer_fixture(**changes: object) -> dict[str, object]:
    width = 128
    document: dict[str, object] = {
        "heads": 2, "causal": True,
        "input": {"generate": {"seed": 1, "shape": [1, 3, 4]}},
        "weights": {branch: {"generate": {"seed": i, "shape": [4, width]}}
                    for i, branch in enumerate(("query", "key", "value"))},
    }
    document.update(changes)
    return document


HUGE = int("1" + "0" * 400)


@pytest.mark.parametrize(("changes", "words"), [
    # the strict JSON reader refuses an integer no float64 can hold, before any key's rule
    ({"rope": {"theta": HUGE, "dims": 64}}, "$.rope.theta: number is too large for binary64"),
    ({"scale": HUGE}, "$.scale: number is too large for binary64"),
    ({"rope": {"theta": 5e-324, "dims": 64}}, "$.rope.theta: theta 5e-324 makes the rotation "
     "frequencies theta^(-2i/64) overflow float64"),
    ({"window": 0}, "$.window: must be at least 1, got 0"),
    ({"window": True}, "$.window: expected a positive integer, got boolean"),
    ({"qk_norm": {"span": "head", "eps": 1e-6, "after": "scores"}},
     "$.qk_norm.after: \"projection\" (the norm before RoPE) or \"rope\""),
    ({"qk_norm": {"span": "layer", "eps": 1e-6, "after": "rope"}},
     "$.qk_norm.after: a norm after RoPE normalises each rotated head alone"),
    ({"alibi": [0.5]}, "$.alibi: alibi must give one slope per head, 2, got 1"),
    ({"alibi": [0.5, HUGE]}, "$.alibi[1]: number is too large for binary64"),
    ({"alibi": "yes"}, "$.alibi: expected a list of 1 to 4096 slopes"),
], ids=["theta-401-digits", "scale-401-digits", "theta-subnormal", "window-0", "window-bool",
        "qk-norm-after-unknown", "qk-norm-after-rope-over-the-layer", "alibi-count",
        "alibi-huge", "alibi-string"])
def test_the_functions_numbers_are_refused_in_one_line(tmp_path, changes, words):
    from tests.hostile_helpers import invoke, refused, write

    path = write(tmp_path / "f.json", _layer_fixture(**changes))
    refused(invoke("attend", str(path)), words)
    refused(invoke("validate", "--attend", str(path)), words)


def test_a_window_is_the_fixtures_own_and_attend_computes_it(tmp_path):
    import json

    from tests.hostile_helpers import invoke, write

    path = write(tmp_path / "f.json", _layer_fixture(window=2, input={"generate": {
        "seed": 1, "shape": [1, 6, 4]}}))
    run = invoke("attend", str(path), "-f", "json")
    assert run.exit_code == 0, run.output
    evidence = json.loads(run.stdout)
    assert evidence["config"]["window"] == 2
    weights = np.asarray(evidence["tensors"]["weights"]["values"]).reshape(
        evidence["tensors"]["weights"]["shape"])
    far = np.tril(np.ones((6, 6), dtype=bool), -2)  # keys two or more positions back
    assert not weights[..., far].any() and (weights[..., ~far & np.tril(
        np.ones((6, 6), dtype=bool))] > 0).all()
    assert invoke("validate", "--attend", str(path)).exit_code == 0


def test_a_soft_capped_window_is_computed_and_its_gradients_checked(tmp_path):
    import json

    from tests.hostile_helpers import invoke, write

    path = write(tmp_path / "f.json", _layer_fixture(window=3, softcap=0.5, input={
        "generate": {"seed": 1, "shape": [1, 6, 4]}}, gradcheck={"samples": 8}))
    run = invoke("attend", str(path), "-f", "json")
    assert run.exit_code == 0, run.output
    evidence = json.loads(run.stdout)
    assert evidence["passed"] and evidence["config"]["softcap"] == 0.5
    z = np.asarray(evidence["tensors"]["scaled_scores"]["values"], dtype=float)
    assert np.all(np.abs(z[np.isfinite(z)]) < 0.5)  # every score inside the cap
    refused_run = invoke("attend", str(write(tmp_path / "g.json", _layer_fixture(softcap=-1))))
    assert refused_run.exit_code == 2 and "$.softcap" in refused_run.stderr


def _normed(**norm: object) -> dict[str, object]:
    weights = {"query": {"generate": {"seed": 4, "shape": [4, 8]}},
               "key": {"generate": {"seed": 5, "shape": [4, 8]}},
               "value": {"generate": {"seed": 6, "shape": [4, 8]}},
               "q_norm_weight": [0.5, -1.0, 2.0, 1.5], "k_norm_weight": [1.0, 0.25, -0.5, 3.0]}
    return _layer_fixture(weights=weights, qk_norm={"span": "head", "eps": 1e-6, **norm},
                          input={"generate": {"seed": 1, "shape": [1, 4, 4]}})


def test_a_q_k_norm_is_computed_and_its_weights_gradients_checked(tmp_path):
    import json

    from tests.hostile_helpers import invoke, write

    run = invoke("attend", str(write(tmp_path / "f.json", _normed(offset=1))), "-f", "json")
    assert run.exit_code == 0, run.output
    evidence = json.loads(run.stdout)
    assert evidence["passed"]
    assert evidence["config"]["qk_norm"] == {"span": "head", "eps": 1e-6, "offset": 1.0}
    assert evidence["tensors"]["q_norm_weight_gradient"]["shape"] == [4]
    checked = {row["tensor"] for row in evidence["gradcheck"]["tensors"]}
    assert {"q_norm_weight", "k_norm_weight"} <= checked
    text = invoke("attend", str(tmp_path / "f.json"))
    assert "qk_norm:span=head,eps=1e-06,offset=1.0" in text.stdout
    assert "formula=O = softmax(norm(Q) norm(K)^T / sqrt(d_k)) V" in text.stdout


@pytest.mark.parametrize(("document", "words"), [
    (_normed(span="heads"), "$.qk_norm.span: \"head\" (each head alone) or \"layer\""),
    (_normed(eps=0), "$.qk_norm.eps: must be a finite positive number, got 0"),
    (_normed(offset="1"), "$.qk_norm.offset: expected a finite number, got string"),
    (_normed(scale=1), "$.qk_norm: unknown key"),
    (_normed(span="layer"), "$.weights.q_norm_weight: qk_norm query weight must be [8] (a "
     "norm over the layer), got [4]"),
    ({**_normed(), "qk_norm": None}, "$.weights.q_norm_weight: a norm's weight needs "
     "\"qk_norm\""),
    (_layer_fixture(qk_norm={"span": "head", "eps": 1e-6}),
     "$.weights: missing key \"q_norm_weight\" (\"qk_norm\" needs it)"),
], ids=["span", "eps", "offset", "unknown", "layer-width", "weights-alone", "no-weights"])
def test_a_bad_q_k_norm_is_one_line_at_its_path(tmp_path, document, words):
    from tests.hostile_helpers import invoke, write

    run = invoke("attend", str(write(tmp_path / "f.json", document)))
    assert run.exit_code == 2 and words in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


def _value_input_fixture(**changes: object) -> dict[str, object]:
    """MobileBERT's wiring in small: query and key read ``input`` (3 wide), value reads
    ``value_input`` (5 wide), 2 heads of 2 and an output projection."""
    rng = np.random.default_rng(43)
    document: dict[str, object] = {
        "heads": 2,
        "input": rng.uniform(-1, 1, size=(2, 4, 3)).tolist(),
        "value_input": rng.uniform(-1, 1, size=(2, 4, 5)).tolist(),
        "weights": {"query": {"layout": "torch", "values": rng.normal(size=(4, 3)).tolist(),
                              "bias": rng.normal(size=4).tolist()},
                    "key": {"layout": "torch", "values": rng.normal(size=(4, 3)).tolist()},
                    "value": {"layout": "torch", "values": rng.normal(size=(4, 5)).tolist(),
                              "bias": rng.normal(size=4).tolist()},
                    "out_proj_weight": rng.normal(size=(6, 4)).tolist()}}
    document.update(changes)
    return document


def test_a_value_input_is_joined_after_the_input_and_read_by_the_value_weight() -> None:
    document = _value_input_fixture()
    fixture = parse_attend_fixture(document)
    given = np.asarray(document["input"]), np.asarray(document["value_input"])
    assert fixture.parameters.value_input
    assert fixture.input.shape == (2, 4, 8)
    assert np.array_equal(fixture.input, np.concatenate(given, axis=-1))
    assert [w.shape for w in fixture.parameters.weights] == [(3, 4), (3, 4), (5, 4)]
    assert "value reads value_input, the layer's input columns 3:" in (
        fixture.parameters.layout_description)
    layer = layer_of(fixture)
    f = layer.forward(fixture.input)
    weights = fixture.parameters.weights
    biases = fixture.parameters.biases
    assert biases[0] is not None and biases[2] is not None
    assert np.allclose(f.stacked["value"], np.swapaxes(
        (given[1] @ weights[2] + biases[2]).reshape(2, 4, 2, 2), 1, 2), rtol=0, atol=1e-14)
    assert np.allclose(f.stacked["query"], np.swapaxes(
        (given[0] @ weights[0] + biases[0]).reshape(2, 4, 2, 2), 1, 2), rtol=0, atol=1e-14)
    plain: dict[str, Any] = {key: value for key, value in document.items()
                             if key != "value_input"}
    value = np.asarray(plain["weights"]["value"]["values"])[:, :3]  # reading input's width
    plain["weights"] = {**plain["weights"], "value": {"layout": "torch",
                                                      "values": value.tolist()}}
    unjoined = parse_attend_fixture(plain)  # without the key: today's one input, as before
    assert not unjoined.parameters.value_input and unjoined.input.shape == (2, 4, 3)
    assert "value_input" not in unjoined.parameters.layout_description


def test_attend_reports_the_joined_input_and_checks_both_inputs_gradients(tmp_path):
    import json

    from tests.hostile_helpers import invoke, write

    path = write(tmp_path / "f.json", _value_input_fixture())
    run = invoke("attend", str(path), "-f", "json")
    assert run.exit_code == 0, run.output
    evidence = json.loads(run.stdout)
    assert evidence["passed"]
    assert evidence["config"]["d_model"] == 8
    assert evidence["tensors"]["input"]["shape"] == [2, 4, 8]
    assert evidence["tensors"]["input_gradient"]["shape"] == [2, 4, 8]
    assert evidence["tensors"]["value_weight_gradient"]["shape"] == [4, 5]
    assert evidence["tensors"]["query_weight_gradient"]["shape"] == [4, 3]
    assert "value reads value_input" in evidence["config"]["layout_description"]
    assert invoke("validate", str(path)).exit_code == 0
    assert invoke("attend", str(path), "--html", str(tmp_path / "page.html")).exit_code == 0


def test_a_value_input_of_zeros_keeps_the_heads_isolated(tmp_path):
    """Raising W_V's columns cannot move V when its own input sums to zero: head
    isolation judges V's move by the value input, not by the joined input."""
    from tests.hostile_helpers import invoke, write

    path = write(tmp_path / "f.json", _value_input_fixture(value_input={
        "shape": [2, 4, 5], "values": [0.0] * 40}))
    run = invoke("attend", str(path))
    assert run.exit_code == 0, run.output
    assert "check=head_isolation PASS" in run.stdout


@pytest.mark.parametrize(("changes", "words"), [
    ({"value_input": None}, "$.weights: Q/K/V model widths must match, got query 3, key 3, "
     "value 5; a value projected from an input of its own needs \"value_input\""),
    ({"value_input": [[1.0, 2.0]]}, "$.value_input: value_input must have rank three "
     "[batch,tokens,d_v_in], got rank 2"),
    ({"value_input": {"generate": {"seed": 1, "shape": [2, 3, 5]}}},
     "$.value_input: value_input must be [2,4,5] (the input's batch and tokens, the value "
     "weight's input width), got [2,3,5]"),
    ({"value_input": {"generate": {"seed": 1, "shape": [2, 4, 3]}}},
     "$.value_input: value_input must be [2,4,5]"),
    ({"value_input": "x"}, "$.value_input: expected a nested array or an object with values"),
    ({"value_input": {"shape": [2, 4, 5], "values": [HUGE] * 40}},
     "$.value_input.values[0]: number is too large for binary64"),
    ({"weights": {"query": [[1.0, 0.0]] * 3, "key": [[1.0, 0.0]] * 4,
                  "value": [[1.0, 0.0]] * 5}},
     "$.weights: with value_input, the query and key weights read input: their model "
     "widths must match, got query 3, key 4"),
], ids=["missing", "rank", "tokens", "width", "string", "huge", "query-key-widths"])
def test_a_bad_value_input_is_one_line_at_its_path(tmp_path, changes, words):
    from tests.hostile_helpers import invoke, refused, write

    document = _value_input_fixture(**changes)
    if document.get("value_input") is None:
        document.pop("value_input", None)
    path = write(tmp_path / "f.json", document)
    refused(invoke("attend", str(path)), words)
    refused(invoke("validate", "--attend", str(path)), words)


def test_the_chapter_commands_refuse_a_value_input_naming_attend(tmp_path):
    from tests.hostile_helpers import invoke, refused, write

    document = {**good(), "value_input": [[[1.0, 2.0]]]}
    path = write(tmp_path / "f.json", document)
    for command in ("run", "report", "gradcheck"):
        refused(invoke(command, str(path)), "$.value_input", "run it with qkv attend")


def _rotated_fixture(**rope: object) -> dict[str, object]:
    return _layer_fixture(causal=False, rope={"dims": 4, **rope}, input={"generate": {
        "seed": 1, "shape": [1, 5, 4]}}, weights={
            branch: {"generate": {"seed": i, "shape": [4, 8]}}
            for i, branch in enumerate(("query", "key", "value"))})


def test_a_table_of_frequencies_is_the_theta_it_was_made_from_bit_for_bit(tmp_path):
    """``rope.frequencies`` turns pair i by t * f_i: given theta's own table, every tensor
    of the report is the theta fixture's, bit for bit; the report says the table."""
    import json

    from tests.hostile_helpers import invoke, write

    table = [float(v) for v in 1.0 / (100.0 ** (np.arange(0, 4, 2) / 4))]
    runs = []
    for name, rope in (("theta", {"theta": 100.0}), ("table", {"frequencies": table})):
        run = invoke("attend", str(write(tmp_path / f"{name}.json", _rotated_fixture(**rope))),
                     "-f", "json")
        assert run.exit_code == 0, run.output
        runs.append(json.loads(run.stdout))
    assert runs[0]["passed"] and runs[1]["passed"]
    assert runs[0]["tensors"] == runs[1]["tensors"]
    assert runs[1]["config"]["rope"] == {"frequencies": table, "dims": 4, "layout": "half"}
    text = invoke("attend", str(tmp_path / "table.json"))
    assert "function=rope:frequencies=[1.0,0.1],dims=4,layout=half" in text.stdout


def test_a_table_of_frequencies_turns_each_pair_by_its_own(tmp_path):
    """Frequencies no theta makes (ESM's stored float16 table is one): Q's pairs turned by
    t * f_i, against the rotation written out here."""
    from qkvcli.attention.maths import rotate

    table = [0.75, 0.0625]  # exact in float16, and 0.0625 is not 0.75^2
    fixture = parse_attend_fixture(_rotated_fixture(frequencies=table))
    rope = fixture.function.rope
    assert rope is not None and rope.theta is None and rope.frequencies == (0.75, 0.0625)
    q = np.random.default_rng(2).normal(size=(1, 2, 5, 4))
    t = np.arange(5.0)[:, None] * np.array(table)
    cos, sin = np.cos(t), np.sin(t)
    expected = np.concatenate([q[..., :2] * cos - q[..., 2:] * sin,
                               q[..., 2:] * cos + q[..., :2] * sin], axis=-1)
    assert np.array_equal(rotate(q, rope), expected)
    layer = layer_of(fixture)
    f = layer.forward(fixture.input)
    assert np.array_equal(f.stacked["rotated_query"], rotate(f.stacked["query"], rope))


@pytest.mark.parametrize(("rope", "words"), [
    ({"theta": 100.0, "frequencies": [1.0, 0.5]},
     '$.rope: give "theta" (the frequencies theta^(-2i/dims)) or "frequencies" (a table '
     "of them, one per pair), not both"),
    ({}, '$.rope: give "theta" (the frequencies theta^(-2i/dims)) or "frequencies"'),
    ({"frequencies": [1.0, 0.5, 0.25]}, "$.rope.frequencies: expected [2] (one frequency "
     "per pair of the 4 rotated coordinates), got [3]"),
    ({"frequencies": [[1.0, 0.5]]}, "$.rope.frequencies: expected [2]"),
    ({"frequencies": [1.0, 0.0]}, "$.rope.frequencies: each frequency must be finite and "
     "positive, got 0.0 at pair 1"),
    ({"frequencies": [1.0, -0.5]}, "$.rope.frequencies: each frequency must be finite and "
     "positive, got -0.5 at pair 1"),
    ({"frequencies": "x"}, "$.rope.frequencies: expected a nested array"),
    ({"frequencies": [1.0, 0.5], "scaling": {"type": "linear", "factor": 2.0}},
     '$.rope.scaling: a scaling changes the frequencies of a theta: it needs "theta"'),
], ids=["both", "neither", "too-many", "rank-two", "zero", "negative", "string", "scaling"])
def test_a_bad_table_of_frequencies_is_one_line_at_its_path(tmp_path, rope, words):
    from tests.hostile_helpers import invoke, refused, write

    path = write(tmp_path / "f.json", _rotated_fixture(**rope))
    refused(invoke("attend", str(path)), words)
    refused(invoke("validate", "--attend", str(path)), words)


def test_the_joined_input_counts_against_the_element_limit(tmp_path):
    """Each input fits the limit, the two joined do not: refused before the join."""
    from tests.hostile_helpers import invoke, refused, write

    path = write(tmp_path / "f.json", _value_input_fixture())
    refused(invoke("attend", str(path), "--max-elements", "60"), "$.value_input: the layer "
            "input [B,T,d_model + d_v_in] (input and value_input joined) would be [2,4,8], "
            "64 elements, more than the limit 60")
