"""The one table builder of the rich views: a column lays out by what it holds."""

from __future__ import annotations

import io

import pytest
from rich import box
from rich.console import Console, RenderableType

from qkvcli.render.rich.tables import Column, table


def shown(renderable: RenderableType, width: int) -> str:
    console = Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None,
                      record=True)
    console.print(renderable)
    return console.export_text()


NUMBERS = ["-123456.789012", "0.000001", "98765.432100"]


@pytest.mark.parametrize("width", [12, 20, 40, 80])
def test_a_number_column_never_loses_a_digit(width: int) -> None:
    made = table([Column("name", "word"), Column("value", "number")],
                 [(f"n{i}", n) for i, n in enumerate(NUMBERS)], box=box.SIMPLE)
    text = "".join(shown(made, width).split())
    for number in NUMBERS:  # folded onto the next line when squeezed, never cropped to …
        assert number in text
    assert "…" not in shown(made, width)


def test_a_line_column_asks_for_its_widest_line_and_a_text_column_for_its_longest_word() -> None:
    made = table([Column(kind="line"), Column()], [("1.000000 x -2.000000", "wraps at spaces")])
    assert made.columns[0].min_width == len("1.000000 x -2.000000")
    assert made.columns[1].min_width == len("spaces")
    assert made.columns[0].no_wrap and not made.columns[1].no_wrap


def test_rows_may_be_sections_and_styled() -> None:
    made = table([Column("a", "word")], [("x",), None, ("y",)], {2: "bold"}, box=box.ASCII)
    text = shown(made, 20)
    assert text.index("x") < text.index("y") and text.count("|-") + text.count("+-") >= 2
    assert made.rows[1].style == "bold" and made.rows[0].end_section
