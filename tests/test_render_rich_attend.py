"""``attend`` and ``variance`` as rich views: they take RichOptions and never cut a number."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest
from rich.console import Console, RenderableType

from qkvcli.attention.fixture import load_attend_fixture, parse_attend_fixture
from qkvcli.check.attend import AttendEvidence, build_attend_evidence
from qkvcli.learn.variance import dot_variance
from qkvcli.render.numbers import fmt_float
from qkvcli.render.rich.attend import attend_renderable
from qkvcli.render.rich.options import RichOptions
from qkvcli.render.rich.variance import variance_renderable


def render(renderable: RenderableType, width: int) -> str:
    console = Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None,
                      record=True)
    console.print(renderable)
    return console.export_text()


def seeded(batch: int, tokens: int, d_model: int, seed: int = 0) -> AttendEvidence:
    rng = np.random.default_rng(seed)
    doc: dict[str, Any] = {
        "input": rng.normal(size=(batch, tokens, d_model)).round(2).tolist(),
        "weights": {b: rng.normal(size=(d_model, d_model)).round(2).tolist()
                    for b in ("query", "key", "value")},
    }
    return build_attend_evidence(parse_attend_fixture(doc))


CASES = {
    "chapter": lambda: build_attend_evidence(load_attend_fixture(example="chapter")),
    "primer-causal": lambda: build_attend_evidence(load_attend_fixture(example="primer"), True),
    "six-tokens": lambda: seeded(2, 6, 4),
    "twelve-tokens-wide": lambda: seeded(1, 12, 40),
}


@pytest.mark.parametrize("make", CASES.values(), ids=CASES.keys())
def test_attend_never_cuts_a_number_at_80_columns(make: Any) -> None:
    evidence = make()
    text = render(attend_renderable(evidence), 80)
    assert all(len(line) <= 80 for line in text.splitlines())
    assert [word for word in text.split() if "…" in word and word not in ("…", "…,")] == []
    # Every weight shown is whole: each shown row's first key weight appears as printed.
    for row in evidence.rows[:2]:
        assert fmt_float(row.attention[0], 6) in text
        assert fmt_float(row.output[0], 6) in text


def _cut_numbers(text: str) -> list[str]:
    """Words that hold a digit and an ellipsis: a number rich cut short."""
    return [word for word in text.split() if "…" in word and any(ch.isdigit() for ch in word)]


@pytest.mark.parametrize("make", CASES.values(), ids=CASES.keys())
def test_attend_shows_the_scores_and_the_reverse_pass_whole_at_80_columns(make: Any) -> None:
    evidence = make()
    text = render(attend_renderable(evidence), 80)
    assert _cut_numbers(text) == []
    assert "scores S = Q K^T" in text and f"Z = S / sqrt({evidence.config.d_k})" in text
    scores = evidence.primary["scores"]
    if scores.size:
        assert f"{scores[0, 0, 0]:.6f}" in text
    assert f"L = <O,U> = {evidence.primary.loss:.6f}" in text
    for symbol in ("U = dO", "dA", "dZ", "dS", "dQ", "dK", "dV", "dX", "dW_Q", "dW_K", "dW_V"):
        assert f"  {symbol}  " in text
    gradient = evidence.primary["grad_input"]
    assert f"{float(np.abs(gradient).max()):.6f}" in text


def test_a_causal_head_shows_its_masked_scores() -> None:
    evidence = build_attend_evidence(load_attend_fixture(example="primer"), True)
    text = render(attend_renderable(evidence), 80)
    assert "Z = S / sqrt(2)" in text and "-inf: masked (causal)" in text
    assert "2.828427 -inf" in " ".join(text.split())


def test_the_layer_view_adds_the_reverse_summary_to_its_heat_maps() -> None:
    from qkvcli.check.attend import build_attend_evidence

    rng = np.random.default_rng(0)
    data = {"heads": 2, "input": rng.normal(size=(1, 3, 4)).tolist(),
            "weights": {**{b: rng.normal(size=(4, 4)).tolist() for b in ("query", "key", "value")},
                        "out_proj_weight": rng.normal(size=(4, 4)).tolist()}}
    fixture = parse_attend_fixture(data)
    assert fixture.function.heads == 2
    evidence = build_attend_evidence(fixture, causal=False)
    text = render(attend_renderable(evidence), 80)
    assert _cut_numbers(text) == []
    assert f"L = <O,U> = {evidence.primary.loss:.6f}" in text
    assert "  dH  " in text and "  dW_out  " in text
    assert "scores S = Q K^T" not in text  # a layer shows weights as heat maps per head


def test_attend_elides_keys_with_a_note_and_full_shows_them_all() -> None:
    evidence = seeded(1, 12, 4)
    narrow = render(attend_renderable(evidence), 80)
    assert "keys; --full shows every value" in narrow
    full = render(attend_renderable(evidence, RichOptions(precision=4, full=True)), 200)
    assert "k t6" in full and "--full shows every value" not in full


def test_attend_takes_precision_and_ascii_from_the_options() -> None:
    evidence = build_attend_evidence(load_attend_fixture(example="primer"))
    text = render(attend_renderable(evidence, RichOptions(precision=6, ascii=True)), 100)
    assert "0.944193" in text or "0.944192" in text
    assert "█" not in text and "#" in text


def test_attend_default_is_the_text_reports_six_decimals() -> None:
    evidence = build_attend_evidence(load_attend_fixture(example="primer"))
    text = render(attend_renderable(evidence), 100)
    assert "t0 0.944193 0.055807 1.000000" in " ".join(text.split())
    assert "[1.111614, 2.776771]" in text


@pytest.mark.parametrize("width", [80, 60], ids=["80", "60"])
def test_variance_never_cuts_a_number(width: int) -> None:
    result = dot_variance([4, 8, 16, 32, 64], samples=200, seed=1)
    text = render(variance_renderable(result, RichOptions(precision=4)), width)  # as the CLI
    assert "…" not in text
    for row in result.rows:
        assert f"{row.ratio:.4f}" in text and f"{row.std_error:.4f}" in text


def test_variance_bars_are_ascii_on_an_ascii_stream() -> None:
    result = dot_variance([4, 8], samples=50, seed=1)
    text = render(variance_renderable(result, RichOptions(ascii=True)), 100)
    assert "█" not in text and "·" not in text and "#" in text
