"""One wording across the views: the verdict line, numbers that are never falsely zero, and
``qkv_version`` in every JSON document."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from qkvcli import __version__
from qkvcli.cli import main
from qkvcli.render.numbers import fmt_float
from qkvcli.render.wording import verdict

ROOT = Path(__file__).resolve().parent.parent
NUMPY_QKV = str(ROOT / "examples" / "implementations" / "numpy_qkv.py")
WRONG = str(ROOT / "examples" / "implementations" / "wrong_accepts_rank2.py")
VERDICT = re.compile(r"^verdict: (PASS|FAIL) \((\d+) of (\d+) checks passed\)$")


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, result.stdout


@pytest.mark.parametrize(
    ("value", "precision", "expected"),
    [
        (1e-8, 6, "1e-08"), (-1e-9, 6, "-1e-09"), (2.5e-7, 6, "2.5e-07"),
        (1e-5, 4, "1e-05"), (0.0, 6, "0.000000"), (-0.0, 6, "0.000000"),
        (6e-7, 6, "0.000001"), (5e-7, 6, "5e-07"), (0.5, 6, "0.500000"), (0.3, 0, "0.3"), (2.0, 0, "2"),
        (float("nan"), 6, "NaN"), (float("-inf"), 6, "-inf"),
    ],
    ids=["tiny", "tiny-negative", "tiny-digits", "tiny-at-4", "zero", "negative-zero",
         "rounds-up", "rounds-to-zero", "plain", "no-decimals-tiny", "no-decimals", "nan", "-inf"],
)
def test_a_number_is_never_printed_as_zero_when_it_is_not(
    value: float, precision: int, expected: str
) -> None:
    assert fmt_float(value, precision) == expected


@pytest.mark.parametrize("fmt", ["text", "trace"])
def test_a_tiny_tolerance_is_shown_in_the_report(fmt: str) -> None:
    _, out = invoke("report", "--format", fmt, "--tolerance", "1e-8")
    assert ("tolerance:1e-08" if fmt == "text" else "tolerance=1e-08") in out
    assert "0.000000 passed" not in out and "tolerance=0.000000" not in out


def test_the_verdict_wording() -> None:
    assert verdict(True, 8, 8) == "verdict: PASS (8 of 8 checks passed)"
    assert verdict(False, 7, 8) == "verdict: FAIL (7 of 8 checks passed)"


@pytest.mark.parametrize(
    ("args", "passed", "count", "total"),
    [
        (("attend",), True, 10, 10),
        (("attend", "--tolerance", "1e-30"), False, 9, 10),
        (("gradcheck",), True, 24, 24),
        (("gradcheck", "--tolerance", "0"), False, None, 24),
        (("check", NUMPY_QKV), True, 8, 8),
        (("check", WRONG), False, 7, 8),
        (("report", "--tolerance", "0", "-f", "rich", "--width", "100"), False, 7, 8),
    ],
    ids=["attend", "attend-fail", "gradcheck", "gradcheck-fail", "check", "check-fail",
         "report-rich-fail"],
)
def test_every_view_ends_with_the_one_verdict_wording(
    args: tuple[str, ...], passed: bool, count: int | None, total: int
) -> None:
    code, out = invoke(*args)
    match = VERDICT.match(out.splitlines()[-1])
    assert match is not None, out.splitlines()[-1]
    assert (match.group(1) == "PASS") is passed and (code == 0) is passed
    assert int(match.group(3)) == total
    if count is not None:
        assert int(match.group(2)) == count
    else:
        assert int(match.group(2)) < total


def test_the_passing_chapter_report_keeps_the_anchor_bytes_without_a_verdict() -> None:
    _, out = invoke("report", "--format", "text")
    assert "verdict" not in out


@pytest.mark.parametrize(
    "args",
    [("report", "--format", "json"), ("attend", "-f", "json"), ("variance", "-f", "json"),
     ("gradcheck", "--format", "json"), ("check", NUMPY_QKV, "--format", "json"),
     ("check", "--command", f"{sys.executable} {ROOT / 'tests' / 'programs' / 'fake_qkv.py'}",
      "--format", "json")],
    ids=["report", "attend", "variance", "gradcheck", "check", "check-command"],
)
def test_every_json_output_carries_the_version(args: tuple[str, ...]) -> None:
    _, out = invoke(*args)
    document = json.loads(out)
    assert document["qkv_version"] == __version__
    assert next(iter(document)) == "qkv_version"


def test_attend_text_takes_its_precision() -> None:
    from qkvcli.attention.fixture import load_attend_fixture
    from qkvcli.check.attend import build_attend_evidence
    from qkvcli.render.attend import PRECISION, render_attend_text

    evidence = build_attend_evidence(load_attend_fixture(example="primer"))
    assert PRECISION == 6
    default = render_attend_text(evidence)
    assert default == render_attend_text(evidence, precision=6)
    four = render_attend_text(evidence, precision=4).splitlines()
    loss = evidence.primary.loss
    assert f"loss={loss:.4f}" in four and f"loss={loss:.6f}" in default.splitlines()
    token = next(line for line in four if line.startswith("token=b0 t0 "))
    first = evidence.rows[0]
    assert token.startswith(f"token=b0 t0 weights:[{first.attention[0]:.4f},")
    assert f"sum:{first.attention_sum:.4f} " in token


def test_variance_text_and_rich_take_their_precision() -> None:
    import io

    from rich.console import Console

    from qkvcli.learn.variance import dot_variance
    from qkvcli.render.rich.options import RichOptions
    from qkvcli.render.rich.variance import variance_renderable
    from qkvcli.render.variance import PRECISION, render_variance_text

    result = dot_variance((4, 8), 64, 26)
    row = result.rows[0]
    assert PRECISION == 4 and render_variance_text(result) == render_variance_text(result, 4)
    six = render_variance_text(result, precision=6)
    assert f"{row.scaled_variance:.6f}" in six and f"{row.std_error:.6f}" in six
    assert f"{row.z:+.2f}" in six

    def rich(precision: int) -> str:
        console = Console(file=io.StringIO(), width=120, color_system=None)
        console.print(variance_renderable(result, RichOptions(precision=precision)))
        return console.file.getvalue()  # type: ignore[attr-defined]

    assert f"{row.scaled_variance:.6f}" in rich(6)
    assert f"{row.scaled_variance:.6f}" not in rich(4) and f"{row.scaled_variance:.4f}" in rich(4)


# --- the one wording table keyed by family ---------------------------------------------------

FIXTURES = ROOT / "fixtures"


def _chapter(number: int) -> Any:
    """Chapter ``number``'s evidence on its bundled fixture."""
    from importlib import import_module

    from qkvcli.chapters.head import CAUSAL_MASKING, SELF_ATTENTION

    module = {27: SELF_ATTENTION, 28: CAUSAL_MASKING}.get(number) or import_module(
        f"qkvcli.chapters.ch{number}")
    path = next(FIXTURES.glob(f"ch{number}-*.json"))
    return module.build(module.parse(json.loads(path.read_text(encoding="utf-8"))))


def test_one_family_s_words_come_from_the_one_table_in_run_a_chapter_and_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from qkvcli.check.chapter26 import build_evidence
    from qkvcli.core.results import FamilyCheck
    from qkvcli.reading.load import load_fixture
    from qkvcli.render import wording
    from qkvcli.render.chapters.entries import chapter_checks
    from qkvcli.render.check import family_detail
    from qkvcli.render.names import CH27, CHECK, RUN

    monkeypatch.setitem(wording.WORDS, "replay", {
        CHECK: lambda c, v: f"{v.nouns.forward} replayed on {c.fixtures}",
        wording.ENGINE: ("replayed here", "broken here")})
    run = build_evidence(load_fixture(FIXTURES / "ch26-qkv-projections.json"))
    assert {c.name: c.detail for c in wording.check_rows(run)}["replay"] == "replayed here"
    chapter = {c["name"]: c["detail"] for c in chapter_checks(CH27, _chapter(27))}
    assert chapter["replay"] == "replayed here"
    judged = FamilyCheck("head-replay", True, "passed", fixtures=2)
    assert family_detail(judged) == "head_forward replayed on 2"
    assert wording.said(RUN, run, FamilyCheck("replay", False, "failed")) == "broken here"


def test_every_published_check_of_every_report_has_its_words() -> None:
    from qkvcli.render.names import ATTEND, CHECK, PUBLISHED, RUN
    from qkvcli.render.wording import CHAPTERS, ENGINE, WORDS

    for report, checks in PUBLISHED.items():
        for check, found in checks.items():
            words = WORDS.get(found.family, {})
            if report == CHECK:
                assert CHECK in words, check
            elif report in (RUN, ATTEND):
                assert report in words or ENGINE in words, (report, check)
            else:  # a chapter: its words here, or the claim its figure uses
                assert (found.claim != "") != any(key in words for key in (
                    report, CHAPTERS, ENGINE)), (report, check)


def test_chapter_37_s_own_words_are_the_table_s() -> None:
    from qkvcli.core.results import FamilyCheck
    from qkvcli.render.chapters.ch37 import facts
    from qkvcli.render.names import CH37
    from qkvcli.render.wording import said

    evidence = _chapter(37)
    published = {c["name"]: c["detail"] for c in facts(evidence)["checks"]}
    table = {c.name: said(CH37, evidence, c) for c in evidence.checks}
    assert list(published.values()) == list(table.values())
    assert said(CH37, evidence, FamilyCheck("replay", False, "failed")) == (
        "the replay after a reset differs")


LAYER = {
    "heads": 4, "kv_heads": 2, "causal": True, "rope": {"theta": 10000, "dims": 8},
    "input": {"generate": {"seed": 1, "shape": [2, 6, 16]}},
    "weights": {"query": {"generate": {"seed": 2, "shape": [16, 32]}},
                "key": {"generate": {"seed": 3, "shape": [16, 16]}},
                "value": {"generate": {"seed": 4, "shape": [16, 16]}},
                "out_proj_weight": {"generate": {"seed": 5, "shape": [16, 32]}}},
}


@pytest.mark.parametrize(
    ("source", "causal", "decode"),
    [("chapter", None, None), ("primer", None, None), ("attend-value-width", True, None),
     ("attend-packed-in-proj", False, None), ("layer", None, 1e-9)],
    ids=["chapter", "primer", "value-width-causal", "packed", "rope-layer-decode"],
)
def test_attend_s_words_are_the_table_s(source: str, causal: bool | None,
                                        decode: float | None) -> None:
    """attend reads its words from the one table by one line (``said(ATTEND, evidence,
    v)``): the table says every check as attend's views do."""
    from qkvcli.attention.fixture import load_attend_fixture, parse_attend_fixture
    from qkvcli.check.attend import build_attend_evidence
    from qkvcli.render.attend import attend_checks
    from qkvcli.render.names import ATTEND
    from qkvcli.render.wording import said

    if source == "layer":
        fixture = parse_attend_fixture(LAYER)
    elif source in ("chapter", "primer"):
        fixture = load_attend_fixture(example=source)
    else:
        fixture = load_attend_fixture(FIXTURES / "attend" / f"{source}.json")
    evidence = build_attend_evidence(fixture, causal, decode=decode)
    shown = [check.detail for check in attend_checks(evidence)]
    assert shown == [said(ATTEND, evidence, check) for check in evidence.checks]
