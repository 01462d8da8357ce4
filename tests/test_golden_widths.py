"""The rich views of ``run``, ``attend`` and ``gradcheck`` at 60, 80, 100, 160 and 220 columns.

Each view is printed the way the CLI prints it (``qkvcli.cli.console.print_fitted``: capped at
a readable width, widened rather than cut) into ``Console(file=StringIO(), width=W,
force_terminal=True, color_system=None, record=True)`` and compared with
``tests/golden/widths/<view>-<W>.txt`` (:func:`golden_path`: one file per distinct figure,
so a width whose figure is another's by design shares its file). ``QKV_UPDATE_GOLDEN=1``
rewrites them; read the diff (``git diff tests/golden``) before committing, never
regenerate to silence a failure.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console, RenderableType

from qkvcli.attention.fixture import load_attend_fixture
from qkvcli.check.attend import build_attend_evidence
from qkvcli.check.chapter26 import build_evidence
from qkvcli.cli.console import MAX_FIGURE_WIDTH, print_fitted
from qkvcli.cli.options import ATTEND_PRECISION, FIGURE_PRECISION, GRADCHECK_PRECISION
from qkvcli.reading.load import load_fixture
from qkvcli.render.rich.attend import attend_renderable
from qkvcli.render.rich.gradcheck import render_gradcheck_rich
from qkvcli.render.rich.options import RichOptions
from qkvcli.render.rich.view import render_rich
from tests.tolerant import text_differences

GOLDEN = Path(__file__).resolve().parent / "golden" / "widths"
REPO = Path(__file__).resolve().parent.parent
WIDTHS = (60, 80, 100, 160, 220)


def _run() -> RenderableType:
    return render_rich(build_evidence(load_fixture(None)), RichOptions(precision=FIGURE_PRECISION))


def _gradcheck() -> RenderableType:
    result = build_evidence(load_fixture(None)).gradcheck
    return render_gradcheck_rich(result, RichOptions(precision=GRADCHECK_PRECISION))


def _attend() -> RenderableType:
    fixture = load_attend_fixture(REPO / "fixtures" / "attend" / "attend-value-width.json")
    return attend_renderable(build_attend_evidence(fixture),
                             RichOptions(precision=ATTEND_PRECISION))


VIEWS: dict[str, Callable[[], RenderableType]] = {
    "run": _run, "attend": _attend, "gradcheck": _gradcheck,
}


def shown(renderable: RenderableType, width: int) -> str:
    console = Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None,
                      record=True)
    print_fitted(console, renderable, quiet=True)
    return console.export_text()


GRADCHECK_FIXED_FROM = 80
"""The gradient check's table needs 78 columns and does not grow: one figure from 80 on."""


def golden_path(view: str, width: int) -> Path:
    """The golden file of ``view`` at ``width``: a screen wider than the cap gets the capped
    figure (the cap's file), and the gradient check one figure from 80 columns on."""
    width = min(width, MAX_FIGURE_WIDTH)
    if view == "gradcheck" and width >= GRADCHECK_FIXED_FROM:
        return GOLDEN / "gradcheck.txt"
    return GOLDEN / f"{view}-{width}.txt"


def test_every_golden_file_is_used_and_distinct() -> None:
    used = {golden_path(view, width) for view in VIEWS for width in WIDTHS}
    assert used == set(GOLDEN.glob("*.txt"))
    contents = [path.read_bytes() for path in sorted(used)]
    assert len(set(contents)) == len(contents)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("view", VIEWS)
def test_view_matches_golden(view: str, width: int) -> None:
    text = shown(VIEWS[view](), width)
    path = golden_path(view, width)
    if os.environ.get("QKV_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    golden = path.read_text(encoding="utf-8")
    # bytes first; another machine's BLAS may print a zero gradient's rounding otherwise
    assert text == golden or text_differences(text, golden) == []


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("view", VIEWS)
def test_view_fits_and_is_capped(view: str, width: int) -> None:
    """Within the width and never wider than the cap (gradcheck's nine decimals need 78)."""
    lines = shown(VIEWS[view](), width).splitlines()
    least = 78 if view == "gradcheck" else 0
    assert max(len(line) for line in lines) <= max(least, min(width, MAX_FIGURE_WIDTH))


def test_no_word_or_shape_is_split_at_any_width() -> None:
    for width in WIDTHS:
        run = shown(_run(), width)
        assert "encoder-annotations" in run
        assert "[1,2,2],[1,2,2],[1,2,2]" in run
        lines = run.splitlines()
        legend = next(i for i, line in enumerate(lines) if line.startswith("Borders:"))
        # A border sample is never parted from its label.
        assert not any(line.rstrip().endswith(("══", "┄┄", "──", "━━"))
                       for line in lines[legend:legend + 2])


def test_gradcheck_worst_mark_is_on_the_worst_row() -> None:
    for width in WIDTHS:
        lines = shown(_gradcheck(), width).splitlines()
        marked = [line for line in lines if "◀" in line and "│" in line]
        assert len(marked) == 1 and "[0,0,2]" in marked[0]
