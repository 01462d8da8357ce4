"""The per-head heat maps of ``qkv attend -f rich`` for a multi-head layer."""

from __future__ import annotations

import io
import re

import numpy as np
from rich.console import Console

from qkvcli.attention.fixture import parse_attend_fixture
from qkvcli.attention.layer_evidence import build_layer_evidence
from qkvcli.render.rich.attend import attend_renderable
from qkvcli.render.rich.heatmap import level
from qkvcli.render.rich.options import RichOptions


def render(width: int, precision: int = 4) -> str:
    rng = np.random.default_rng(0)
    data = {"heads": 2, "input": rng.normal(size=(1, 3, 4)).tolist(),
            "weights": {b: rng.normal(size=(4, 4)).tolist() for b in ("query", "key", "value")}}
    fixture = parse_attend_fixture(data)
    assert fixture.layer is not None
    evidence = build_layer_evidence(fixture, fixture.layer, causal=True)
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
        numbers = re.findall(r"[ ░▒▓█](\d\.\d+)", text.split("weights:")[0].split("╰")[-1])
        assert numbers and all(len(n) == 5 for n in numbers), width
        assert "█1.000" in text  # the first query sees only itself (causal)
        assert "░  (0,0.25]" in text  # the legend
