"""Chapter 30 (multi-head attention): the bundled fixture's report and trace byte for byte,
the chapter's probes and rejected inputs, and a user's layer of any heads and widths against
a reference written here (plain NumPy head by head, and torch's autograd where torch is
installed)."""

from __future__ import annotations

import io
import itertools
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rich.cells import cell_len

from qkvcli.attention.errors import EmptyLayerInput
from qkvcli.chapters import ch30
from qkvcli.reading.json_values import parse_json_text
from qkvcli.reading.load import bundled_fixture_text
from qkvcli.reading.problems import FixtureError
from qkvcli.render.chapters import ch30 as report
from qkvcli.render.numbers import fmt_float
from qkvcli.render.rich.options import RichOptions

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "ch30"


def bundled() -> ch30.MultiHeadEvidence:
    return ch30.build(ch30.parse(parse_json_text(bundled_fixture_text(ch30.FIXTURE))))


def test_the_bundled_fixture_is_shipped_twice_alike() -> None:
    assert (ROOT / "fixtures" / ch30.FIXTURE).read_bytes() == (
        ROOT / "qkvcli" / "data" / ch30.FIXTURE).read_bytes()


def test_text_is_the_anchor_byte_for_byte() -> None:
    assert report.text(bundled()) == (GOLDEN / "expected.txt").read_text(encoding="utf-8")


def test_trace_is_the_anchor_byte_for_byte() -> None:
    assert report.trace(bundled()) == (GOLDEN / "diagram-trace.txt").read_text(encoding="utf-8")


def test_every_check_of_the_bundled_fixture_passes() -> None:
    evidence = bundled()
    assert [c.name for c in evidence.checks] == [
        "causal", "prefix", "head_isolation", "split_merge", "common_offset", "shapes",
        "parameters", "errors", "gradcheck", "tape_finite", "replay"]
    assert evidence.passed
    assert evidence.gradcheck.count == 76


def test_the_rejected_inputs_are_the_chapters_in_its_order() -> None:
    errors = bundled().errors
    assert [e.case for e in errors] == [
        "zero_model_width", "zero_heads", "nondivisible", "odd_head_width", "input_rank",
        "input_width", "empty_tokens", "offset_overflow", "position_range", "released_input"]
    assert all(e.rejected for e in errors), errors
    assert errors[8].message == "rotary position interval [5, 7) exceeds capacity 6"


def test_the_input_rule_checks_in_order() -> None:
    spec = ch30.parse(parse_json_text(bundled_fixture_text(ch30.FIXTURE))).spec
    with pytest.raises(Exception, match="rank three"):
        ch30.forward_checked(spec, np.zeros(4), 2 ** 64)
    with pytest.raises(EmptyLayerInput):
        ch30.forward_checked(spec, np.zeros((1, 0, 4)), 2 ** 64)


# --- probes that must fail when the property does not hold -----------------------------------


def test_a_mask_that_lets_the_future_in_fails_the_causal_probe() -> None:
    evidence = bundled()
    leaky = evidence.primary.attention.copy()
    leaky[0, 1, 0, 2] = 1e-300
    fixture = evidence.fixture
    found = evidence.primary._replace(attention=leaky)
    assert not ch30.probes(fixture, found, ch30.judge_session(fixture)).future_zero


def test_a_wrong_gradient_fails_the_check() -> None:
    from qkvcli.attention.gradcheck import gradcheck_attention

    fixture = ch30.parse(parse_json_text(bundled_fixture_text(ch30.FIXTURE)))
    _, layer, _, grads = ch30.primary(ch30.judge_session(fixture))
    wrong = grads._replace(grad_w_key=grads.grad_w_key + 0.01)
    result = gradcheck_attention(layer, fixture.input, fixture.upstream, wrong, True,
                                 fixture.step, fixture.tolerance, mode="full")
    assert not result.passed
    assert [t.tensor for t in result.tensors if not t.passed] == ["w_key"]


# --- any fixture of the chapter's kind ------------------------------------------------------


def random_document(seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(100 + seed)
    heads = int(rng.integers(1, 4))
    d_h = int(rng.choice([2, 4]))
    d_model = int(rng.integers(2, 7))
    e_out = int(rng.integers(1, 6))
    batch = int(rng.integers(1, 3))
    tokens = int(rng.integers(1, 5))
    offset, shift = int(rng.integers(0, 9)), int(rng.integers(0, 9))
    width = heads * d_h
    return {
        "heads": heads,
        "rope": {"positions": offset + shift + tokens + int(rng.integers(0, 3)),
                 "base": float(rng.uniform(2.0, 20000.0)),
                 "layout": "adjacent" if seed % 2 else "half", "offset": offset, "shift": shift},
        "input": rng.normal(size=(batch, tokens, d_model)).tolist(),
        "weights": {"query": rng.normal(size=(d_model, width)).tolist(),
                    "key": rng.normal(size=(d_model, width)).tolist(),
                    "value": rng.normal(size=(d_model, width)).tolist(),
                    "output": rng.normal(size=(width, e_out)).tolist()},
        "upstream": rng.normal(size=(batch, tokens, e_out)).tolist(),
        "gradcheck": {"step": 1e-6, "tolerance": 1e-5},
    }


def turn(x: np.ndarray, positions: np.ndarray, base: float, layout: str) -> np.ndarray:
    """Pair by pair, from the chapter's definition, for ``x [T, d]``."""
    tokens, width = x.shape
    out = np.array(x)
    for t in range(tokens):
        for i in range(width // 2):
            a, b = (2 * i, 2 * i + 1) if layout == "adjacent" else (i, i + width // 2)
            angle = positions[t] * base ** (-2.0 * i / width)
            c, s = math.cos(angle), math.sin(angle)
            out[t, a], out[t, b] = x[t, a] * c - x[t, b] * s, x[t, b] * c + x[t, a] * s
    return out


def reference_forward(document: dict[str, Any], offset: int) -> tuple[np.ndarray, np.ndarray]:
    """The layer head by head and row by row: weights ``[B,H,T,T]`` and ``Y``."""
    x = np.array(document["input"])
    w = {k: np.array(v) for k, v in document["weights"].items()}
    heads, rope = document["heads"], document["rope"]
    batch, tokens, _ = x.shape
    d_h = w["query"].shape[1] // heads
    positions = np.arange(offset, offset + tokens, dtype=np.float64)
    weights = np.zeros((batch, heads, tokens, tokens))
    merged = np.zeros((batch, tokens, heads * d_h))
    for b in range(batch):
        for h in range(heads):
            cols = slice(h * d_h, (h + 1) * d_h)
            q = turn(x[b] @ w["query"][:, cols], positions, rope["base"], rope["layout"])
            k = turn(x[b] @ w["key"][:, cols], positions, rope["base"], rope["layout"])
            v = x[b] @ w["value"][:, cols]
            for i in range(tokens):
                scores = np.array([q[i] @ k[j] / math.sqrt(d_h) for j in range(i + 1)])
                e = np.exp(scores - scores.max())
                weights[b, h, i, : i + 1] = e / e.sum()
                merged[b, i, cols] = weights[b, h, i] @ v
    return weights, merged @ w["output"]


@pytest.mark.parametrize("seed", range(10))
def test_a_random_layer_agrees_with_the_reference(seed: int) -> None:
    document = random_document(seed)
    evidence = ch30.build(ch30.parse(parse_json_text(json.dumps(document))))
    offset = document["rope"]["offset"]
    weights, output = reference_forward(document, offset)
    p = evidence.primary
    np.testing.assert_allclose(p.attention, weights, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(p.output, output, rtol=1e-10, atol=1e-12)
    upstream = np.array(document["upstream"])
    assert p.loss == pytest.approx(float(np.sum(output * upstream)), rel=1e-10, abs=1e-12)
    shifted, _ = reference_forward(document, offset + document["rope"]["shift"])
    np.testing.assert_allclose(weights, shifted, atol=1e-9)
    assert evidence.passed, [c for c in evidence.checks if not c.passed]
    tokens = p.input.shape[1]
    assert f"position_{tokens - 1}_changed:true" in report.text(evidence)
    assert report.trace(evidence).count("\nPARTITION|") == document["heads"]


@pytest.mark.parametrize("seed", range(6))
def test_the_gradients_agree_with_torch_autograd(seed: int) -> None:
    torch = pytest.importorskip("torch")
    document = random_document(seed)
    evidence = ch30.build(ch30.parse(parse_json_text(json.dumps(document))))
    heads, rope = document["heads"], document["rope"]
    t = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True)
         for k, v in document["weights"].items()}
    x = torch.tensor(document["input"], dtype=torch.float64, requires_grad=True)
    batch, tokens, _ = x.shape
    d_h = t["query"].shape[1] // heads
    positions = torch.arange(rope["offset"], rope["offset"] + tokens, dtype=torch.float64)
    inverse = rope["base"] ** (-2.0 * torch.arange(d_h // 2, dtype=torch.float64) / d_h)
    angles = positions[:, None] * inverse[None, :]
    cos, sin = torch.cos(angles), torch.sin(angles)

    def split(y: Any) -> Any:  # [B,T,H*d] -> [B,H,T,d]
        return y.view(batch, tokens, heads, d_h).transpose(1, 2)

    def rotary(y: Any) -> Any:
        if rope["layout"] == "adjacent":
            a, b = y[..., 0::2], y[..., 1::2]
            return torch.stack((a * cos - b * sin, b * cos + a * sin), dim=-1).flatten(-2)
        a, b = y[..., : d_h // 2], y[..., d_h // 2:]
        return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)

    q, k = rotary(split(x @ t["query"])), rotary(split(x @ t["key"]))
    v = split(x @ t["value"])
    mask = torch.ones(tokens, tokens, dtype=torch.bool).triu(1)
    scores = (q @ k.transpose(-1, -2) / math.sqrt(d_h)).masked_fill(mask, float("-inf"))
    merged = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(batch, tokens, -1)
    y = merged @ t["output"]
    (y * torch.tensor(document["upstream"], dtype=torch.float64)).sum().backward()
    p = evidence.primary
    np.testing.assert_allclose(p.output, y.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(p.grad_input, x.grad.numpy(), rtol=1e-9, atol=1e-11)
    for ours, name in ((p.grad_w_query, "query"), (p.grad_w_key, "key"),
                       (p.grad_w_value, "value"), (p.grad_w_out, "output")):
        np.testing.assert_allclose(ours, t[name].grad.numpy(), rtol=1e-9, atol=1e-11)


def test_more_than_one_batch_item_is_named_in_the_trace() -> None:
    document = random_document(0)
    document["input"] = (np.array(document["input"])[:1].repeat(2, axis=0)).tolist()
    document["upstream"] = (np.array(document["upstream"])[:1].repeat(2, axis=0)).tolist()
    trace = report.trace(ch30.build(ch30.parse(document)))
    assert "\nWEIGHT|batch=1|head=0|query=0|" in trace


# --- bad fixtures: one problem, named by its $.path -----------------------------------------


def bad(change: Any) -> str:
    document = json.loads(bundled_fixture_text(ch30.FIXTURE))
    change(document)
    with pytest.raises(FixtureError) as raised:
        ch30.parse(document)
    return str(raised.value)


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d.pop("weights"), '$: missing key "weights"'),
    (lambda d: d.update(heads=3),
     "$.heads: heads must be at least 1 and divide the query/key width 4 and the value width 4, "
     "got 3"),
    (lambda d: d.update(heads=4),
     "$.heads: rotary feature width must be even, got 1 (the head width is RoPE's feature width)"),
    (lambda d: d["weights"].update(output=[[1, 0], [0, 1]]),
     "$.weights.output: out_proj weight must be [4,E_out] (H*d_v rows), got [2,2]"),
    (lambda d: d.update(input=[[1, 2, 3, 4]]),
     "$.input: Q/K/V input must have rank three [batch, tokens, model_width], got rank 2"),
    (lambda d: d.update(input={"shape": [1, 0, 4], "values": []}),
     "$.input: multi-head attention needs at least one token, got an empty token axis"),
    (lambda d: d.update(input={"shape": [0, 3, 4], "values": []}),
     "$.input: the chapter's probes need at least one batch item, got an empty batch axis"),
    (lambda d: d["rope"].update(offset=2, shift=2),
     "$.rope.shift: rotary position interval [4, 7) exceeds capacity 6"),
    (lambda d: d.update(suffix=[1, 2]), "$.suffix: expected shape [4] (d_model), got [2]"),
    (lambda d: d.update(upstream=[[[1, 2, 3, 4]]]),
     "$.upstream: expected shape [1,3,4] (batch, tokens, output width), got [1,1,4]"),
], ids=["missing weights", "heads do not divide", "odd head width", "output shape", "input rank",
        "no tokens", "no batch item", "shift past the table", "suffix", "upstream"])
def test_a_bad_fixture_names_the_path(change: Any, message: str) -> None:
    assert bad(change) == message


# --- JSON and figure ------------------------------------------------------------------------


def test_the_json_document_has_its_declared_keys() -> None:
    evidence = bundled()
    document = report.json_document(evidence)
    assert list(document) == list(report.JSON_KEYS)
    again = json.loads(json.dumps(document, allow_nan=False))
    assert again["chapter"] == ch30.NAME and again["passed"] is True
    assert again["tensors"]["attention_weights"]["shape"] == [1, 2, 3, 3]
    assert again["tensors"]["output"]["values"] == evidence.primary.output.reshape(-1).tolist()
    assert again["gradcheck"]["count"] == 76
    assert [e["case"] for e in again["errors"]] == [e.case for e in evidence.errors]


@pytest.mark.parametrize("width", [80, 120])
def test_the_figure_renders(width: int) -> None:
    rich_console = pytest.importorskip("rich.console")
    console = rich_console.Console(file=io.StringIO(), width=width, force_terminal=True,
                                   color_system=None, record=True)
    console.print(report.figure(bundled(), width))
    shown = console.export_text()
    assert "head 1: weights" in shown and "0.786191" in shown
    assert max(cell_len(line) for line in shown.splitlines()) <= width  # cells, as drawn


def drawn(width: int, evidence: ch30.MultiHeadEvidence | None = None) -> str:
    """A figure (the bundled fixture's unless ``evidence`` is given) printed as the CLI
    prints it: drawn for the width."""
    rich_console = pytest.importorskip("rich.console")
    console = rich_console.Console(file=io.StringIO(), width=width, force_terminal=True,
                                   color_system=None)
    console.print(report.figure(bundled() if evidence is None else evidence, width))
    return console.file.getvalue()  # type: ignore[no-any-return]


@pytest.mark.parametrize("width", [40, 60, 80, 120])
def test_the_figure_lays_out_for_its_width(width: int) -> None:
    """No line wider than the screen, no number cut (``…``) or wrapped (each weight,
    merged value, output and W_O entry shows whole), the verdict at the end; and the
    CLI's width check (measured as the narrowest layout) asks for no more."""
    from rich.measure import Measurement

    shown = drawn(width)
    assert max(cell_len(line) for line in shown.splitlines()) <= width  # cells, as drawn
    assert "…" not in shown
    assert shown.rstrip().splitlines()[-1] == "verdict: PASS (11 of 11 checks passed)"
    p = bundled().primary
    causal = p.attention[0][np.tril(np.ones(p.attention.shape[-2:], dtype=bool))[None]
                            .repeat(p.attention.shape[1], axis=0)]
    for values in (causal, p.rotated_query[0], p.head_outputs[0], p.merged[0], p.output[0],
                   p.output_weight):
        for value in np.asarray(values).reshape(-1):
            assert fmt_float(float(value), RichOptions().precision) in shown
    rich_console = pytest.importorskip("rich.console")
    console = rich_console.Console(file=io.StringIO(), width=width, color_system=None)
    wide = console.options.update_width(10_000)
    assert Measurement.get(console, wide, report.figure(bundled(), 10_000)).minimum <= 40


@pytest.mark.parametrize("seed", range(6))
def test_a_random_figure_fits_every_width_it_asks_for(seed: int) -> None:
    """From the width the CLI's check measures (the narrowest layout) up, a random
    fixture's figure draws within the width and cuts no number."""
    from rich.measure import Measurement

    evidence = ch30.build(ch30.parse(parse_json_text(json.dumps(random_document(seed)))))
    rich_console = pytest.importorskip("rich.console")
    console = rich_console.Console(file=io.StringIO(), width=200, color_system=None)
    need = Measurement.get(console, console.options.update_width(10_000),
                           report.figure(evidence, 10_000)).minimum
    for width in sorted({need, need + 7, max(need, 60), max(need, 100), max(need, 160)}):
        shown = drawn(width, evidence)
        assert max(cell_len(line) for line in shown.splitlines()) <= width  # cells, as drawn
        assert "…" not in shown and "verdict: PASS" in shown


def test_the_figure_keeps_its_wide_layout_where_there_is_room() -> None:
    """A head's Q, K and V stand side by side where they fit (160 columns at six
    decimals), stacked below."""
    def side_by_side(shown: str) -> bool:
        return any("head 0 Q" in line and "head 0 V" in line for line in shown.splitlines())

    assert side_by_side(drawn(160)) and not side_by_side(drawn(100))


def test_the_guide_explains_every_key_of_the_report_and_trace() -> None:
    from tests.test_docs import GUIDE, definitions, explanation, text_keys, trace_keys

    defined = definitions(GUIDE.read_text(encoding="utf-8"))
    evidence = bundled()
    missing = []
    for keys, joiner, suffix in ((text_keys(report.text(evidence)), "=", ":"),
                                 (trace_keys(report.trace(evidence)), "|", "=")):
        for key, subs in sorted(keys.items()):
            found = explanation(defined, key + joiner)
            if found is None:
                missing.append(key + joiner)
                continue
            missing += [f"{key}{joiner} {sub}{suffix}" for sub in sorted(subs)
                        if f"`{sub}{suffix}`" not in found.body]
    assert missing == []


def test_the_chapter_is_found_by_its_number() -> None:
    import importlib

    chapter = importlib.import_module("qkvcli.chapters.ch30")
    shown = importlib.import_module("qkvcli.render.chapters.ch30")
    assert chapter.NAME.startswith("30-") and chapter.FIXTURE == f"ch{chapter.NAME}.json"
    assert (ROOT / "qkvcli" / "data" / chapter.FIXTURE).is_file()
    for name in ("parse", "build"):
        assert callable(getattr(chapter, name))
    for name in ("text", "trace", "json_document", "figure"):
        assert callable(getattr(shown, name))


def _leaking(monkeypatch: pytest.MonkeyPatch, leak: Any) -> ch30.MultiHeadEvidence:
    """Chapter 30's evidence with the layer's pass changed by ``leak`` (its output record
    in, a changed one out), everywhere the chapter runs it."""
    original = ch30.forward_checked

    def leaking(*args: Any, **kwargs: Any) -> Any:
        layer, x, done = original(*args, **kwargs)
        return layer, x, leak(done)

    monkeypatch.setattr(ch30, "forward_checked", leaking)
    return bundled()


def test_prefix_is_check_s_family_and_fails_when_an_earlier_output_sees_the_last(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Every output reads the last token's output a little: the prefix family (check's,
    # on the chapter's layer) finds the first earlier position that moved.
    evidence = _leaking(monkeypatch, lambda done: done._replace(
        output=done.output + 1e-3 * done.output[:, -1:, :]))
    assert not all(evidence.probes.prefix_unchanged)
    assert [c.name for c in evidence.checks if not c.passed] == ["prefix"]


def test_head_isolation_is_check_s_family_and_fails_when_heads_mix(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Head 0's merged columns read head 1's: changing the last head's W_V columns moves
    # head 0's part of the merged heads, before W_O.
    def mix(done: Any) -> Any:
        merged = done.concat.copy()
        width = merged.shape[-1] // 2
        merged[..., :width] += 1e-3 * done.concat[..., width:]
        return done._replace(concat=merged)

    evidence = _leaking(monkeypatch, mix)
    assert not evidence.probes.head_isolation
    assert "head_isolation" in [c.name for c in evidence.checks if not c.passed]


def test_replay_is_check_s_family_and_fails_when_the_reverse_drifts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Each backward pass moves the input's gradient a little further: a second mha_backward
    # differs from the first, which check's replay family, run on the chapter's layer, finds.
    from qkvcli.attention.multihead import MultiHeadLayer

    original = MultiHeadLayer.backward
    calls = itertools.count()

    def drifting(self: Any, *args: Any, **kwargs: Any) -> Any:
        grads = original(self, *args, **kwargs)
        return grads._replace(grad_input=grads.grad_input + next(calls) * 1e-12)

    monkeypatch.setattr(MultiHeadLayer, "backward", drifting)
    assert [c.name for c in bundled().checks if not c.passed] == ["replay"]
    monkeypatch.undo()
    assert bundled().passed
