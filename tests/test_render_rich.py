"""The rich figure: golden text at two widths, the three borders, ASCII fallback, numbers, elision.

Every test renders into an injected ``Console(file=StringIO(), width=..., force_terminal=True,
color_system=None, record=True)`` and compares ``export_text()``. Set ``QKV_UPDATE_GOLDEN=1``
to rewrite the golden files, then read the diff before committing it.
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console, RenderableType

from qkvcli.check.chapter26 import build_evidence
from qkvcli.check.chapter26_evidence import Evidence
from qkvcli.reading.fixture import Fixture
from qkvcli.reading.load import load_fixture
from qkvcli.render.numbers import fmt_float
from qkvcli.render.report import published_tensors
from qkvcli.render.rich.boxes import INPUT, KEY, QUERY, VALUE
from qkvcli.render.rich.options import RichOptions
from qkvcli.render.rich.view import render_rich

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("QKV_UPDATE_GOLDEN") == "1"


class AsciiStream(io.StringIO):
    """A stream that, like a ``PYTHONIOENCODING=ascii`` stdout, cannot encode Unicode."""

    encoding = "ascii"


def render(renderable: RenderableType, width: int, file: io.StringIO | None = None) -> str:
    console = Console(file=file or io.StringIO(), width=width, force_terminal=True,
                      color_system=None, record=True)
    console.print(renderable)
    return console.export_text()


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def chapter() -> Evidence:
    return build_evidence(load_fixture(None))


def custom_evidence(batch: int, tokens: int, d_model: int, d_head: int) -> Evidence:
    """Evidence for a small-integer fixture of the given sizes (exact values, no randomness)."""
    rows = np.arange(batch * tokens * d_model, dtype=np.float64) % 7 - 3
    x = rows.reshape(batch, tokens, d_model)
    weights = tuple(
        (np.arange(d_model * d_head, dtype=np.float64) % (5 + branch) - 2).reshape(d_model, d_head)
        for branch in range(3)
    )
    upstream = tuple(np.ones((batch, tokens, d_head)) for _ in range(3))
    fixture = Fixture(
        input=x,
        weights=weights,  # type: ignore[arg-type]
        names=("a.query.weight", "a.key.weight", "a.value.weight"),
        upstream=upstream,  # type: ignore[arg-type]
        samples=2,
        chapter="custom",
    )
    return build_evidence(fixture)


@pytest.mark.parametrize(
    ("width", "golden"),
    [(80, "rich_narrow.txt"), (160, "rich_wide.txt")],
    ids=["narrow-stacked", "wide-side-by-side"],
)
def test_figure_matches_golden(chapter: Evidence, width: int, golden: str) -> None:
    check_golden(golden, render(render_rich(chapter), width))


def _branch_title_lines(text: str) -> list[int]:
    titles = ("Query projection (solid)", "Key projection (dashed)", "Value projection (double)")
    return [next(i for i, line in enumerate(text.splitlines()) if title in line)
            for title in titles]


def test_branches_stack_when_narrow_and_sit_side_by_side_when_wide(chapter: Evidence) -> None:
    narrow = _branch_title_lines(render(render_rich(chapter), 80))
    wide = _branch_title_lines(render(render_rich(chapter), 160))
    assert narrow[0] < narrow[1] < narrow[2]
    assert len(set(wide)) == 1


@pytest.mark.parametrize(
    ("role_box", "corner", "horizontal", "vertical"),
    [(QUERY, "┌", "─", "│"), (KEY, "┌", "┄", "┆"), (VALUE, "╔", "═", "║"), (INPUT, "┏", "━", "┃")],
    ids=["query-solid", "key-dashed", "value-double", "input-heavy"],
)
def test_each_role_draws_its_own_border(
    chapter: Evidence, role_box: object, corner: str, horizontal: str, vertical: str
) -> None:
    text = render(render_rich(chapter), 80)
    title = {QUERY: "Query projection", KEY: "Key projection", VALUE: "Value projection",
             INPUT: "Shared hidden-state input"}[role_box]  # type: ignore[index]
    line = next(line for line in text.splitlines() if title in line)
    assert line.startswith(corner + horizontal)
    assert line.endswith(horizontal + {"┌": "┐", "╔": "╗", "┏": "┓"}[corner])
    body = text.splitlines()[text.splitlines().index(line) + 1]
    assert body.startswith(vertical) and body.endswith(vertical)


def test_ascii_stream_gets_three_distinct_branch_borders(chapter: Evidence) -> None:
    text = render(render_rich(chapter, RichOptions(ascii=True)), 80, AsciiStream())
    text.encode("ascii")  # nothing a plain ASCII stream would choke on
    tops = {}
    for role in ("Query", "Key", "Value"):
        line = next(line for line in text.splitlines() if f"{role} projection" in line)
        tops[role] = (line[:2], line[-1])
    assert tops == {"Query": ("+-", "+"), "Key": ("+.", "+"), "Value": ("#=", "#")}
    assert len(set(tops.values())) == 3
    # The branch bodies keep the distinction too: | for query, : for key, H for value.
    for role, side in (("Query", "|"), ("Key", ":"), ("Value", "H")):
        sentence = next(line for line in text.splitlines() if line[2:].startswith(f"{role}:"))
        assert sentence[0] == side and sentence[-1] == side


def test_ascii_golden(chapter: Evidence) -> None:
    check_golden("rich_ascii.txt", render(render_rich(chapter, RichOptions(ascii=True)), 80,
                                          AsciiStream()))


def test_rich_without_ascii_flag_still_substitutes_role_boxes(chapter: Evidence) -> None:
    """Even if a caller forgets ``ascii``, an ASCII stream gets the role boxes, not rich's one."""
    text = render(render_rich(chapter), 80, AsciiStream())
    assert any(line.startswith("+. Key projection") for line in text.splitlines())
    assert any(line.startswith("#= Value projection") for line in text.splitlines())


def test_every_value_appears_at_the_chosen_precision(chapter: Evidence) -> None:
    for precision in (6, 2):
        text = render(render_rich(chapter, RichOptions(precision=precision)), 160)
        p = chapter.primary
        for name in ("input", "query_weight", "key_weight", "value_weight", "query", "key",
                     "value", "input_gradient", "query_weight_gradient", "key_weight_gradient",
                     "value_weight_gradient"):
            for value in published_tensors(p)[name].reshape(-1):
                assert fmt_float(float(value), precision) in text, (name, value)
        # Every printed number has exactly `precision` decimals.
        numbers = re.findall(r"(?<![\w.])-?\d+\.\d+(?![\w.])", text)
        assert numbers and all(len(n.split(".")[1]) == precision for n in numbers)


def test_number_columns_are_right_aligned(chapter: Evidence) -> None:
    text = render(render_rich(chapter), 80)
    rows = [line for line in text.splitlines() if line.startswith("┃ ┃ t")]
    assert len(rows) == 2
    # X's rows are [1, 2, -1] and [0, 1, 2]: numbers of different widths end in one column.
    ends = {tuple(m.end() for m in re.finditer(r"\d ┃", row)) for row in rows}
    assert len(ends) == 1 and len(next(iter(ends))) == 3
    assert "┃ 1.000000 ┃ 2.000000 ┃ -1.000000 ┃" in rows[0]
    assert "┃ 0.000000 ┃ 1.000000 ┃  2.000000 ┃" in rows[1]


def test_large_tensors_are_elided_with_a_note_never_silently(tmp_path: Path) -> None:
    evidence = custom_evidence(batch=5, tokens=20, d_model=12, d_head=9)
    text = render(render_rich(evidence), 160)
    assert "…" in text
    assert "showing 7 of 20 tokens, 5 of 12 features; --full shows every value" in text
    assert "showing 7 of 12 d_model rows, 5 of 9 d_head columns; --full shows every value" in text
    assert "… 3 more batch items; --full shows every value" in text
    # The first and last batch items are shown, the middle ones are not.
    assert "X b=0" in text and "X b=4" in text and "X b=2" not in text



def test_notes_of_tables_side_by_side_have_lines_of_their_own() -> None:
    # W_Q beside Q, three dW side by side: each note once, alone on its line, saying which
    # indices it hides.
    text = render(render_rich(custom_evidence(batch=1, tokens=12, d_model=12, d_head=9)), 160)
    notes = [line.strip(" ┃│┆║") for line in text.splitlines() if "showing" in line]
    assert all(note.count("showing") == 1 and note.startswith("showing") for note in notes)
    assert ("showing 7 of 12 d_model rows, 5 of 9 d_head columns; --full shows every value "
            "(hidden: d_model rows 4..8, d_head columns 3..6)") in notes
    # W_Q and Q side by side: both notes under the pair, one after the other
    query = text.split("Query projection")[1].split("Key projection")[0].splitlines()
    assert any("W_Q" in line and "Q b=0" in line for line in query)
    shown = [line.strip(" │") for line in query if "showing" in line]
    assert [line[:29] for line in shown] == ["showing 7 of 12 d_model rows,",
                                             "showing 7 of 12 tokens, 5 of "]


def test_full_shows_every_value(tmp_path: Path) -> None:
    evidence = custom_evidence(batch=3, tokens=10, d_model=8, d_head=7)
    text = render(render_rich(evidence, RichOptions(full=True)), 250)
    assert "--full" not in text and "…" not in text
    for b in range(3):
        assert f"X b={b}" in text
    # Every token row of every batch item of X is there.
    assert sum(1 for line in text.splitlines() if re.search(r"┃ t9 ", line)) == 3


def test_empty_axes_render_without_tables() -> None:
    evidence = custom_evidence(batch=0, tokens=2, d_model=3, d_head=2)
    text = render(render_rich(evidence), 80)
    assert "X: no values (shape [0,2,3])" in text
    assert "Q: no values (shape [0,2,2])" in text


def test_failing_check_shows_fail_and_the_verdict(chapter: Evidence) -> None:
    broken = chapter._replace(replay_bitwise=False)
    text = render(render_rich(broken), 100)
    assert "verdict: FAIL (7 of 8 checks passed)" in text
    assert re.search(r"FAIL\s+replay\s+two runs differ", text)
    assert re.search(r"FAIL\s+replay\s+mismatch", text)
    assert "Numerical checks  FAIL" in text


def test_pass_and_fail_words_carry_the_colour_not_replace_it(chapter: Evidence) -> None:
    console = Console(file=io.StringIO(), width=100, force_terminal=True,
                      color_system="standard", record=True)
    console.print(render_rich(chapter))
    styled = console.export_text(styles=True, clear=False)
    assert "\x1b[1;32mPASS\x1b[0m" in styled
    assert "\x1b[1;32m" not in console.export_text()


def test_markup_in_data_is_shown_literally(chapter: Evidence) -> None:
    """Check details contain ``[batch,tokens,d_head]``: rich must not read it as markup."""
    text = render(render_rich(chapter), 160)
    assert "three [batch,tokens,d_head] outputs, all finite" in text
