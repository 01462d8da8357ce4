"""The per-head heat maps of ``qkv attend -f rich`` for a multi-head layer."""

from __future__ import annotations

import io
import re

import numpy as np
from rich.console import Console

from qkvcli.attention.fixture import parse_attend_fixture
from qkvcli.check.attend import build_attend_evidence
from qkvcli.render.rich.attend import attend_renderable
from qkvcli.render.rich.heatmap import level
from qkvcli.render.rich.options import RichOptions


def render(width: int, precision: int = 4) -> str:
    rng = np.random.default_rng(0)
    data = {"heads": 2, "input": rng.normal(size=(1, 3, 4)).tolist(),
            "weights": {b: rng.normal(size=(4, 4)).tolist() for b in ("query", "key", "value")}}
    fixture = parse_attend_fixture(data)
    assert fixture.function.heads == 2
    evidence = build_attend_evidence(fixture, causal=True)
    console = Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None,
                      record=True)
    console.print(attend_renderable(evidence, RichOptions(precision=precision)))
    return console.export_text()


def test_levels_cover_zero_and_quarters() -> None:
    assert [level(w) for w in (0.0, 0.1, 0.25, 0.26, 0.5, 0.75, 0.76, 1.0)] == [
        0, 1, 1, 2, 2, 3, 4, 4]


def test_heads_side_by_side_when_wide_and_stacked_when_narrow() -> None:
    wide = render(120)
    assert re.search(r"batch 0, head 0 +batch 0, head 1", wide)
    narrow = render(40)
    assert "batch 0, head 0" in narrow and "batch 0, head 1" in narrow
    assert not re.search(r"head 0 +batch", narrow)


def test_numbers_at_the_precision_are_never_cut_and_shading_reads_without_colour() -> None:
    for width in (40, 60, 120):
        text = render(width, precision=3)
        numbers = re.findall(r"[ ░▒▓█](\d\.\d+)", text.split("weights, against")[0].split("╰")[-1])
        assert numbers and all(len(n) == 5 for n in numbers), width
        assert "█1.000" in text  # the first query sees only itself (causal)
        assert "░  (0,0.25]" in text  # the legend


def render_layer(tokens: int, width: int, causal: bool = False) -> str:
    rng = np.random.default_rng(1)
    data = {"heads": 2, "input": rng.normal(size=(1, tokens, 4)).tolist(),
            "weights": {b: (3 * rng.normal(size=(4, 4))).tolist()
                        for b in ("query", "key", "value")}}
    fixture = parse_attend_fixture(data)
    assert fixture.function.heads == 2
    evidence = build_attend_evidence(fixture, causal=causal)
    console = Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None,
                      record=True)
    console.print(attend_renderable(evidence, RichOptions(precision=4)))
    return console.export_text()


def test_levels_are_relative_to_the_row() -> None:
    assert [level(w, 0.01) for w in (0.0, 0.001, 0.003, 0.006, 0.01)] == [0, 1, 2, 3, 4]
    assert level(0.004, 0.004) == 4  # a long row's peak is always darkest


def test_a_small_layer_shows_every_key_when_it_fits() -> None:
    text = render_layer(4, 80)
    assert "showing" not in text.split("weights, against")[0]
    assert "layer: 2 heads of d_k 2, d_v 2; no output projection: e_out 4" in text


def test_a_long_layer_is_downsampled_by_the_stated_rule_and_never_elided() -> None:
    text = render_layer(300, 80, causal=True)
    assert "batch 0, head 0: 24x64 of 300x300" in text
    assert "each cell: the largest weight of its block" in text
    grid = [line for line in text.splitlines() if line.startswith(("  0 ", "287 "))]
    assert grid and all(len(line.rstrip()) <= 80 for line in grid)
    # causal: the first block row sees only the first keys; the last sees them all
    first = grid[0][4:68]
    assert first[0] != " " and first.rstrip() != first and "█" in first
    assert len(text.encode()) < 64 * 1024


def test_blocks_cover_every_token_once() -> None:
    from qkvcli.render.rich.heatmap import block_max, blocks

    assert blocks(10, 4) == [(0, 2), (2, 5), (5, 7), (7, 10)]
    assert blocks(3, 8) == [(0, 1), (1, 2), (2, 3)]
    a = np.arange(36, dtype=float).reshape(6, 6)
    grid, rows = block_max(a, 2, 3)
    assert rows == [(0, 3), (3, 6)] and grid.tolist() == [[13, 15, 17], [31, 33, 35]]
