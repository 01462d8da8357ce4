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
