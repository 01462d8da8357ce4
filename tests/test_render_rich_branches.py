"""Each branch keeps its own colour and its own border, Unicode and ASCII alike.

The values are pinned here, not read from ``ROLE_STYLES``: swapping the query and key
colours (or boxes), in the table or where a view uses it, must fail a test.
"""

from __future__ import annotations

import io

import pytest
from rich.console import Console, RenderableType
from rich.segment import Segment

from qkvcli.check.chapter26 import build_evidence
from qkvcli.check.chapter26_evidence import Evidence
from qkvcli.gradcheck.records import GradcheckResult
from qkvcli.reading.load import load_fixture
from qkvcli.render.rich.gradcheck import render_gradcheck_rich
from qkvcli.render.rich.options import RichOptions
from qkvcli.render.rich.view import render_rich

COLOURS = {"input": "blue", "query": "cyan", "key": "magenta", "value": "yellow"}
SIDES = {  # each branch's vertical border: Unicode, then its own ASCII fallback
    False: {"query": "│", "key": "┆", "value": "║"},
    True: {"query": "|", "key": ":", "value": "H"},
}
LEGEND = {  # the legend's sample of each border (a top edge, drawn twice)
    False: {"input": "━━", "query": "──", "key": "┄┄", "value": "══"},
    True: {"input": "~~", "query": "--", "key": "..", "value": "=="},
}
SENTENCES = {"query": "Query: what should", "key": "Key: how can", "value": "Value: what content"}


class AsciiStream(io.StringIO):
    """A stream that, like a ``PYTHONIOENCODING=ascii`` stdout, cannot encode Unicode."""

    encoding = "ascii"


@pytest.fixture(scope="module")
def chapter() -> Evidence:
    return build_evidence(load_fixture(None))


def rendered_lines(renderable: RenderableType, ascii_only: bool) -> list[list[Segment]]:
    console = Console(file=AsciiStream() if ascii_only else io.StringIO(), width=200,
                      force_terminal=True, color_system="standard")
    return console.render_lines(renderable, console.options, pad=False)


def colour(segment: Segment) -> str | None:
    style = segment.style
    return None if style is None or style.color is None else style.color.name


def first_line_with(lines: list[list[Segment]], text: str) -> list[Segment]:
    return next(line for line in lines if text in "".join(s.text for s in line))


@pytest.mark.parametrize("ascii_only", [False, True], ids=["unicode", "ascii"])
def test_each_branch_panel_has_its_own_border_and_colour(chapter: Evidence,
                                                         ascii_only: bool) -> None:
    lines = rendered_lines(render_rich(chapter, RichOptions(ascii=ascii_only)), ascii_only)
    # at 200 columns the three branches sit side by side: one line holds all three sentences
    line = first_line_with(lines, SENTENCES["query"])
    borders = [(s.text, colour(s)) for s in line if s.text in SIDES[ascii_only].values()]
    expected = [(SIDES[ascii_only][role], COLOURS[role])
                for role in ("query", "key", "value") for _ in range(2)]
    assert borders == expected
    for role, sentence in SENTENCES.items():
        words = next(s for s in line if s.text.startswith(sentence))
        assert colour(words) == COLOURS[role], role


@pytest.mark.parametrize("ascii_only", [False, True], ids=["unicode", "ascii"])
def test_the_legend_draws_each_border_in_its_branch_colour(chapter: Evidence,
                                                           ascii_only: bool) -> None:
    lines = rendered_lines(render_rich(chapter, RichOptions(ascii=ascii_only)), ascii_only)
    legend = [s for line in lines if "Borders:" in "".join(s.text for s in line)
              for s in line]
    samples = {s.text[:2]: (s.text[3:].split(" ")[0], colour(s)) for s in legend
               if s.text[:2] in LEGEND[ascii_only].values()}
    assert samples == {LEGEND[ascii_only][role]: (role, COLOURS[role]) for role in COLOURS}


def test_the_gradient_check_names_each_tensor_in_its_branch_colour(chapter: Evidence) -> None:
    result: GradcheckResult = chapter.gradcheck
    lines = rendered_lines(render_gradcheck_rich(result, RichOptions()), False)
    coloured = {s.text.strip(): colour(s) for line in lines for s in line
                if s.text.strip() in ("input", "query_weight", "key_weight", "value_weight")}
    assert coloured == {"input": COLOURS["input"], "query_weight": COLOURS["query"],
                        "key_weight": COLOURS["key"], "value_weight": COLOURS["value"]}
