"""The rich gradient-check table: golden text, the worst mark, notes, failures kept in view."""

from __future__ import annotations

import io
import os
from pathlib import Path

from rich.console import Console

from qkvcli.check.chapter26 import build_evidence
from qkvcli.gradcheck.records import CoordinateCheck, GradcheckResult, TensorCheck
from qkvcli.reading.load import load_fixture
from qkvcli.render.rich.gradcheck import render_gradcheck_rich
from qkvcli.render.rich.options import RichOptions

GOLDEN = Path(__file__).resolve().parent / "golden" / "widths" / "gradcheck.txt"


def render(result: GradcheckResult, options: RichOptions | None = None, width: int = 80) -> str:
    console = Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None,
                      record=True)
    console.print(render_gradcheck_rich(result, options))
    return console.export_text()


def chapter_result() -> GradcheckResult:
    return build_evidence(load_fixture(None)).gradcheck


def test_chapter_gradcheck_matches_golden() -> None:
    text = render(chapter_result(), RichOptions(precision=9))  # the CLI's default here
    if os.environ.get("QKV_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(text, encoding="utf-8")
    assert text == GOLDEN.read_text(encoding="utf-8")


def test_ascii_worst_mark() -> None:
    text = render(chapter_result(), RichOptions(ascii=True, precision=9))
    assert "<- worst" in text and "◀" not in text


def _synthetic(count: int, failing: set[int], note_at: int | None = None) -> GradcheckResult:
    checks = []
    for i in range(count):
        failed = i in failing
        checks.append(CoordinateCheck(
            tensor="query_weight", flat_index=i, coordinate=(i // 4, i % 4),
            analytic=1.0, numerical=1.5 if failed else 1.0, scaled_error=0.5 if failed else 0.0,
            passed=not failed, note="perturbation rounds back to the point" if i == note_at else "",
        ))
    return GradcheckResult(1e-6, 2e-6, (TensorCheck("query_weight", (count // 4, 4), count,
                                                    tuple(checks)),))


def test_failures_in_the_elided_middle_stay_visible() -> None:
    result = _synthetic(100, failing={40, 57})
    text = render(result, RichOptions(precision=9), width=100)
    assert "│ [10,0]     │" in text and "│ [14,1]     │" in text
    assert text.count("FAIL") == 2 + 1 + 1  # two rows, the tensor summary, the verdict
    assert "verdict: FAIL (98 of 100 checks passed)" in text
    hidden = 100 - 12 - 2  # 12 head and tail rows, and the two failures between them
    assert f"{hidden} coordinates not shown; --full shows every coordinate" in text


def test_notes_are_printed_under_the_table() -> None:
    result = _synthetic(8, failing=set(), note_at=3)
    checks = list(result.tensors[0].checks)
    checks[3] = checks[3]._replace(passed=False, numerical=float("nan"),
                                   scaled_error=float("inf"))
    broken = result._replace(tensors=(result.tensors[0]._replace(checks=tuple(checks)),))
    text = render(broken, RichOptions(precision=9), width=100)
    assert "note: query_weight[0,3]: perturbation rounds back to the point" in text
    assert "│ 1.000000000 │         NaN │       inf │ FAIL │" in text


def test_a_direction_is_named_as_the_text_names_it() -> None:
    # fast mode checks directions, not coordinates: u3, as the text table says, not "[]"
    checks = tuple(CoordinateCheck("input", -1, (), 1.0, 1.0 + 0.1 * i, 0.1 * i / 1.3, i < 3,
                                   direction=i) for i in range(4))
    result = GradcheckResult(1e-6, 2e-6, (TensorCheck("input", (1, 2, 3), 4, checks, "fast"),))
    text = render(result, RichOptions(precision=9), width=100)
    assert "│ u3         │" in text and "[]" not in text
    assert "worst: input@u3 scaled error" in text


def test_a_tensor_with_no_coordinates_draws_no_rows_and_no_error() -> None:
    # An empty batch leaves the input nothing to check: its summary says 0 of 0, and the
    # table holds the weights' rows alone (this raised ValueError before).
    result = build_evidence(load_fixture(Path(__file__).resolve().parent.parent / "fixtures"
                                         / "examples" / "empty-batch.json")).gradcheck
    assert not result.tensors[0].checks
    text = render(result, RichOptions(precision=9))
    assert "input         shape [0,2,3], 0 of 0 checked" in text
    assert text.count("query_weight") == 6 + 1 + 1  # rows, summary, worst line
    assert "│ input" not in text
