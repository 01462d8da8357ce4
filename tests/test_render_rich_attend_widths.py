"""``qkv attend``'s rich view at the widths of a terminal: every key shown where it fits, and
otherwise exactly which keys are hidden and how to see them; no number cut at any width;
the notes of tables side by side never share a line."""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from rich.console import Console, RenderableType

from qkvcli.attention.fixture import load_attend_fixture
from qkvcli.check.attend import AttendEvidence, build_attend_evidence
from qkvcli.cli import main
from qkvcli.render.numbers import fmt_float
from qkvcli.render.rich.attend import attend_renderable

WIDTHS = (80, 100, 120, 140)


def render(renderable: RenderableType, width: int) -> str:
    console = Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None,
                      record=True)
    console.print(renderable)
    return console.export_text()


@pytest.fixture(scope="module")
def eight_tokens(tmp_path_factory: pytest.TempPathFactory) -> AttendEvidence:
    """``qkv init --tokens 8``: the starter fixture a learner writes, eight positions."""
    path = tmp_path_factory.mktemp("init") / "t8.json"
    result = CliRunner().invoke(main, ["init", "--tokens", "8", "-o", str(path)])
    assert result.exit_code == 0, result.output
    return build_attend_evidence(load_attend_fixture(Path(path)))


@pytest.fixture(scope="module")
def wide_values(tmp_path_factory: pytest.TempPathFactory) -> AttendEvidence:
    """Eight tokens, two batch items and four features, scores as wide as ``-10.761769``."""
    path = tmp_path_factory.mktemp("init") / "t8b.json"
    result = CliRunner().invoke(main, ["init", "--tokens", "8", "--batch", "2", "--d-model",
                                       "8", "--d-head", "4", "-o", str(path)])
    assert result.exit_code == 0, result.output
    return build_attend_evidence(load_attend_fixture(Path(path)))


def cut_numbers(text: str) -> list[str]:
    """Words holding a digit and an ellipsis: a number rich cut short."""
    return [word for word in text.split() if "…" in word and any(ch.isdigit() for ch in word)]


def key_headers(text: str, title: str) -> list[str]:
    """The key columns (``k t0`` ..) of the first table titled ``title``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if title in line)
    header = next(line for line in lines[start + 1:] if "query" in line)
    return re.findall(r"k t\d+", header.split("batch")[0])


@pytest.mark.parametrize("width", WIDTHS)
def test_every_key_of_eight_is_shown_from_100_columns(eight_tokens: AttendEvidence,
                                                      width: int) -> None:
    text = render(attend_renderable(eight_tokens), width)
    every = [f"k t{j}" for j in range(8)]
    for title in ("scores S = Q K^T", "Z = S / sqrt(2)", "weights A"):
        keys = key_headers(text, title)
        if width >= 100:
            assert keys == every, (width, title, keys)
        else:
            assert set(keys) < set(every)
    if width >= 100:
        assert "hidden" not in text
    # every weight of the first query, whole, in its row
    row = eight_tokens.primary["attention"][0, 0]
    shown = [fmt_float(float(v), 6) for v in row]
    line = next(line for line in text.splitlines() if line.lstrip().startswith("t0")
                and fmt_float(float(row[0]), 6) in line)
    assert all(value in line for value in shown) == (width >= 100)


@pytest.mark.parametrize("width", WIDTHS)
def test_elided_keys_are_named_exactly_with_the_way_to_see_them(wide_values: AttendEvidence,
                                                                width: int) -> None:
    text = render(attend_renderable(wide_values), width)
    for title in ("scores S = Q K^T", "weights A"):
        keys = key_headers(text, f"batch 0: {title}")
        if len(keys) == 8:
            continue
        missing = [j for j in range(8) if f"k t{j}" not in keys]
        span = (f"t{missing[0]}" if len(missing) == 1
                else f"t{missing[0]}..t{missing[-1]}")
        assert missing == list(range(missing[0], missing[-1] + 1))
        assert (f"showing {len(keys)} of 8 keys; --full shows every value "
                f"(hidden: keys {span})") in text, (width, title)


@pytest.mark.parametrize("width", range(80, 201, 10))
def test_no_number_is_cut_at_any_width(eight_tokens: AttendEvidence,
                                       wide_values: AttendEvidence, width: int) -> None:
    for evidence in (eight_tokens, wide_values):
        text = render(attend_renderable(evidence), width)
        assert cut_numbers(text) == [], width
        assert max(len(line) for line in text.splitlines()) <= width
        outputs = evidence.primary["output"]
        for t in range(min(8, outputs.shape[1])):
            vector = ", ".join(fmt_float(float(v), 6) for v in outputs[0, t])
            assert f"[{vector}]" in text, (width, t)


@pytest.mark.parametrize("width", WIDTHS)
def test_notes_never_share_a_line(width: int) -> None:
    # Twelve keys and twelve features: both the weights and the output are elided.
    rng = np.random.default_rng(4)
    from qkvcli.attention.fixture import parse_attend_fixture

    doc = {"input": rng.normal(size=(1, 12, 12)).round(2).tolist(),
           "weights": {b: rng.normal(size=(12, 12)).round(2).tolist()
                       for b in ("query", "key", "value")}}
    text = render(attend_renderable(build_attend_evidence(parse_attend_fixture(doc))), width)
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if "showing" in line]
    assert len(starts) >= 2, width  # the weights' and the output's
    for i in starts:
        # a note starts its own line, and runs on (wrapped) alone until its last words
        assert lines[i].startswith("showing") and lines[i].count("showing") == 1, lines[i]
        note = lines[i]
        while not note.rstrip().endswith(")"):
            i += 1
            assert lines[i].strip() and "showing" not in lines[i]
            note += " " + lines[i].strip()
        assert re.fullmatch(r"showing .*; --full shows every value \(hidden: .*\)",
                            " ".join(note.split())), note
