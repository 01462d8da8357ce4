"""``qkv report/run/validate --chapter N`` for every chapter this build has, against its golden copy.

A chapter is tested when ``tests/golden/chNN/`` exists and (for 27 to 30) its module
imports, so chapters that land later are covered by the same tests; the others skip.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from qkvcli.cli import main
from qkvcli.core.names import CHAPTER_IDS as NAMES

from .conftest import GOLDEN, ROOT

NUMBERS = (26, 27, 28, 29, 30, 37)
EXAMPLES = ROOT / "examples" / "implementations"


def chapter_ready(number: int) -> str:
    """Why chapter ``number`` cannot be tested here, or ``""``."""
    if not (GOLDEN / f"ch{number}").is_dir():
        return f"no tests/golden/ch{number}"
    if number == 26:
        return ""
    from qkvcli.chapters.registry import available

    if number not in available():
        return f"chapter {number} is not in this build"
    return ""


def chapters() -> list[object]:
    return [pytest.param(n, marks=pytest.mark.skipif(bool(chapter_ready(n)),
                                                     reason=chapter_ready(n) or "ready"),
                         id=f"ch{n}") for n in NUMBERS]


def golden(number: int, name: str) -> str:
    return (GOLDEN / f"ch{number}" / name).read_text(encoding="utf-8")


def bundled(number: int) -> Path:
    if number == 26:
        return ROOT / "fixtures" / "ch26-qkv-projections.json"
    from qkvcli.chapters.registry import chapter_of

    return ROOT / "fixtures" / chapter_of(number).fixture


@pytest.mark.parametrize("number", chapters())
@pytest.mark.parametrize(("fmt", "name"), [("text", "expected.txt"),
                                           ("trace", "diagram-trace.txt")], ids=["text", "trace"])
def test_report_is_the_golden_copy(number: int, fmt: str, name: str) -> None:
    result = CliRunner().invoke(main, ["report", "--chapter", str(number), "--format", fmt])
    assert result.exit_code == 0, result.output
    assert result.stdout == golden(number, name)


@pytest.mark.parametrize("number", chapters())
def test_run_prints_the_report_and_passes(number: int) -> None:
    result = CliRunner().invoke(main, ["run", "--chapter", str(number), "--format", "text"])
    assert result.exit_code == 0, result.output
    assert result.stdout == golden(number, "expected.txt")


@pytest.mark.parametrize("number", chapters())
def test_run_without_a_terminal_shows_the_text_report(number: int) -> None:
    result = CliRunner().invoke(main, ["run", "--chapter", str(number)])
    assert result.exit_code == 0, result.output
    assert result.stdout == golden(number, "expected.txt")


@pytest.mark.parametrize("number", chapters())
def test_the_bundled_fixture_file_gives_the_report(number: int, tmp_path: Path) -> None:
    """The fixture users see, copied elsewhere, is recognised by its ``chapter`` key."""
    copy = tmp_path / "mine.json"
    shutil.copyfile(bundled(number), copy)
    installed = ROOT / "qkvcli" / "data" / bundled(number).name
    assert installed.read_bytes() == bundled(number).read_bytes()
    result = CliRunner().invoke(main, ["report", str(copy), "--format", "text"])
    assert result.exit_code == 0, result.output
    assert result.stdout == golden(number, "expected.txt")
    explicit = CliRunner().invoke(main, ["report", "--chapter", str(number), str(copy), "-f",
                                         "trace"])
    assert explicit.stdout == golden(number, "diagram-trace.txt")


@pytest.mark.parametrize("number", chapters())
def test_validate_accepts_the_bundled_fixture(number: int) -> None:
    result = CliRunner().invoke(main, ["validate", str(bundled(number))])
    assert result.exit_code == 0, result.output
    note = "" if number == 26 else f" ({json.loads(bundled(number).read_text())['chapter']} fixture)"
    assert result.stdout == f"{bundled(number)}: ok{note}\n"


@pytest.mark.parametrize("number", chapters())
def test_json_report_carries_the_version_and_the_verdict(number: int) -> None:
    result = CliRunner().invoke(main, ["report", "--chapter", str(number), "-f", "json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert "qkv_version" in document
    assert document.get("passed", True) is True


@pytest.mark.parametrize("number", [25, 31, -1, 0])
def test_an_unknown_chapter_is_one_line_and_exit_2(number: int) -> None:
    result = CliRunner().invoke(main, ["report", "--chapter", str(number)])
    assert result.exit_code == 2
    assert result.stderr == f"Error: --chapter {number}: no chapter {number}; qkv shows " \
                            "chapters 26 to 30 and 37\n"


def test_chapter_26_is_the_default(tmp_path: Path) -> None:
    default = CliRunner().invoke(main, ["report", "-f", "text"])
    explicit = CliRunner().invoke(main, ["report", "--chapter", "26", "-f", "text"])
    assert default.exit_code == explicit.exit_code == 0
    assert explicit.stdout == default.stdout == golden(26, "expected.txt")


@pytest.mark.skipif(bool(chapter_ready(27)), reason="chapter 27 is not in this build")
def test_a_fixture_of_another_chapter_is_refused_by_name(tmp_path: Path) -> None:
    wrong = CliRunner().invoke(main, ["report", "--chapter", "26", str(bundled(27))])
    assert wrong.exit_code == 2
    assert "$.chapter: a chapter 27 fixture (27-self-attention); --chapter 26" in wrong.stderr
    other = CliRunner().invoke(main, ["report", "--chapter", "27", str(bundled(26))])
    assert other.exit_code == 2
    assert other.stderr.count("\n") == 1
    assert '$.chapter: expected "27-self-attention"' in other.stderr


@pytest.mark.skipif(bool(chapter_ready(27)), reason="chapter 27 is not in this build")
def test_a_bad_chapter_fixture_is_one_line_naming_the_path(tmp_path: Path) -> None:
    data = json.loads(bundled(27).read_text())
    data["key"] = [[[3, 0, 1], [-1, 2, 1]]]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    for command in ("report", "validate"):
        result = CliRunner().invoke(main, [command, str(path)])
        assert result.exit_code == 2, command
        assert result.stderr == (f"Error: {path}: $.key: self-attention query and key widths "
                                 "must match, got query 2, key 3\n")


@pytest.mark.skipif(bool(chapter_ready(27)), reason="chapter 27 is not in this build")
def test_the_gradient_check_options_reach_a_chapter_fixture() -> None:
    result = CliRunner().invoke(main, ["report", "--chapter", "27", "--tolerance", "1e-3",
                                       "--mode", "full", "-f", "text"])
    assert result.exit_code == 0
    assert "tolerance:0.001000 passed:true" in result.stdout
    assert "qkv: warning: --mode does not apply to chapter 27-self-attention; ignored" \
        in result.stderr


@pytest.mark.parametrize("number", chapters())
@pytest.mark.parametrize("width", [60, 100, 160])
def test_the_rich_figure_renders_at_any_width(number: int, width: int, tmp_path: Path) -> None:
    svg = tmp_path / "figure.svg"
    result = CliRunner().invoke(main, ["report", "--chapter", str(number), "-f", "rich",
                                       "--width", str(width), "--no-color",
                                       "--export-svg", str(svg)])
    assert result.exit_code == 0, result.output
    assert "verdict: PASS" in result.stdout
    assert svg.read_text(encoding="utf-8").startswith("<svg")


@pytest.mark.skipif(bool(chapter_ready(28)), reason="chapter 28 is not in this build")
def test_the_chapter_28_figure_shows_the_trace_records() -> None:
    """The picture shows what the trace lists: each masked key, the perturbation, the cases."""
    figure = CliRunner().invoke(main, ["report", "--chapter", "28", "-f", "rich", "--width",
                                       "120", "--no-color"]).stdout
    trace = golden(28, "diagram-trace.txt")
    assert figure.count("blocked") == trace.count("blocked") == 3
    for case in ("attention-empty-tokens", "softmax-rank", "softmax-shape", "query-rank",
                 "token-mismatch", "released-score"):
        assert f"ERROR|case={case}|" in trace and case in figure
    for value in ("0.445808", "0.108383", "0.554192", "-1.676343", "[-2.000000,4.000000]"):
        assert value in trace and value in figure


@pytest.mark.parametrize("number", chapters())
def test_a_failing_family_exits_1_and_is_named(number: int) -> None:
    """A tolerance of 0 fails every gradient check: the text report is followed by the
    failed family and the verdict, and the command exits 1."""
    if number == 26:
        pytest.skip("chapter 26's failure lines are tested with its own report")
    if number == 37:
        pytest.skip("chapter 37 has no gradient check (its failing families: test_chapter37)")
    result = CliRunner().invoke(main, ["report", "--chapter", str(number), "--tolerance", "0",
                                       "-f", "text"])
    assert result.exit_code == 1, result.output
    assert "failed: gradcheck\nverdict: FAIL (" in result.stdout
    run = CliRunner().invoke(main, ["run", "--chapter", str(number), "--tolerance", "0",
                                    "-f", "text"])
    assert run.exit_code == 1
    assert run.stderr.startswith("qkv: FAILED: gradcheck")


@pytest.mark.skipif(bool(chapter_ready(28)), reason="chapter 28 is not in this build")
def test_a_perturbation_that_changes_nothing_is_refused(tmp_path: Path) -> None:
    data = json.loads(bundled(28).read_text())
    data["suffix_perturbation"] = {"key": [2, 1], "value": [-2, 4]}
    path = tmp_path / "same.json"
    path.write_text(json.dumps(data))
    result = CliRunner().invoke(main, ["report", str(path)])
    assert result.exit_code == 2
    assert result.stderr == (f"Error: {path}: $.suffix_perturbation: changes nothing: give the "
                             "last token a new key or a new value\n")


@pytest.mark.parametrize("number", [n for n in NUMBERS if n != 26])
def test_chapter_26s_other_commands_point_a_later_chapter_fixture_to_report(
        number: int, tmp_path: Path) -> None:
    path = tmp_path / "later.json"
    path.write_text(json.dumps({"chapter": NAMES[number], "heads": 2, "rope": {}}))
    # qkv check reads them as cases of their kinds (tests/test_check_chapter_fixtures.py)
    for command in (["quiz", str(path)],):
        result = CliRunner().invoke(main, command, input="")
        assert result.exit_code == 2
        assert result.stderr.startswith(f"Error: {path}: $.chapter: a chapter {number} fixture (")
        assert result.stderr.endswith(f"this command reads chapter 26's (qkv report {path} "
                                      "shows it)\n")


@pytest.mark.parametrize("number", [n for n in NUMBERS if n not in (26, 37)])
def test_gradcheck_takes_a_later_chapter_fixture_and_gives_its_chapters_check(number: int) -> None:
    """The same coordinates as the chapter's report, in gradcheck's table and JSON."""
    fixture = str(ROOT / "fixtures" / f"ch{number}-{NAMES[number].split('-', 1)[1]}.json")
    checked = CliRunner().invoke(main, ["gradcheck", fixture, "-f", "json"])
    report = CliRunner().invoke(main, ["run", fixture, "-f", "json"])
    assert checked.exit_code == 0, checked.output
    ours, theirs = json.loads(checked.stdout), json.loads(report.stdout)["gradcheck"]
    assert [(t["tensor"], [c["coordinate"] for c in t["checks"]]) for t in ours["tensors"]] == [
        (t["tensor"], [c["coordinate"] for c in t["checks"]]) for t in theirs["tensors"]]
    assert ours["passed"] and ours["tolerance"] == theirs["tolerance"]


@pytest.mark.skipif(bool(chapter_ready(27)), reason="chapter 27 is not in this build")
def test_the_chapter_27_figure_shows_the_trace_records() -> None:
    figure = CliRunner().invoke(main, ["report", "--chapter", "27", "-f", "rich", "--width",
                                       "120", "--no-color"]).stdout
    trace = golden(27, "diagram-trace.txt")
    for case in ("query-rank", "batch-mismatch", "token-mismatch", "empty-tokens",
                 "query-key-width"):
        assert f"ERROR|case={case}|" in trace and case in figure
    for value in ("4.242641", "0.014166", "0.985834", "1.028332", "-2.994908", "0.079000",
                  "0.062847", "[2,2,2]", "additive-encoder-decoder-alignment"):
        assert value in trace and value in figure, value
    assert "o0 = 0.014166 [3.000000,-3.000000] + 0.985834 [1.000000,3.000000] = " \
           "[1.028332,2.915004]" in figure


@pytest.mark.parametrize("number", chapters())
def test_run_compares_a_chapter_with_its_golden_copy(number: int) -> None:
    same = CliRunner().invoke(main, ["run", "--chapter", str(number), "--expect",
                                     str(GOLDEN / f"ch{number}" / "diagram-trace.txt"), "-f",
                                     "trace"])
    assert same.exit_code == 0, same.output
    assert same.stderr.startswith("qkv: the report matches")
    other = 27 if number != 27 else 26
    differs = CliRunner().invoke(main, ["run", "--chapter", str(number), "--expect",
                                        str(GOLDEN / f"ch{other}" / "expected.txt")])
    assert differs.exit_code == 1
    assert differs.stdout.startswith(f"--- {GOLDEN / f'ch{other}' / 'expected.txt'}")


def _figure(number: int, *options: str) -> str:
    result = CliRunner().invoke(main, ["report", "--chapter", str(number), "-f", "rich",
                                       "--width", "160", "--no-color", *options])
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("number", [27, 28, 29, 30, 37])
def test_a_chapter_figure_draws_on_an_ascii_stream(number: int) -> None:
    """The stages' formulas (``Kᵀ``, ``θ``, ``Σ``, ``∞``) are spelled in ASCII when the
    stream cannot encode them, so the figure prints instead of failing."""
    import io

    from rich.console import Console

    from qkvcli.chapters.registry import chapter_of
    from qkvcli.reading.json_values import parse_json_text
    from qkvcli.render.chapters.dispatch import figure
    from qkvcli.render.rich.options import RichOptions

    chapter = chapter_of(number)
    evidence = chapter.build(chapter.parse(parse_json_text(bundled(number).read_text())))
    class Ascii(io.StringIO):  # a stream that, as PYTHONIOENCODING=ascii, cannot encode Unicode
        encoding = "ascii"

    console = Console(file=Ascii(), width=160, color_system=None)
    console.print(figure(evidence, RichOptions(ascii=True)))
    console.file.getvalue().encode("ascii")


@pytest.mark.parametrize("number", [27, 28, 29, 30, 37])
def test_a_chapter_figure_says_its_stages_as_the_stage_table_does(number: int) -> None:
    """The figure's formulas are the stage table's, and its numbers follow --precision."""
    from qkvcli.stages.table import STAGES

    shown = _figure(number)
    names = {27: ("scores", "scale", "softmax", "mixture", "loss"),
             28: ("scores", "scale", "mask", "softmax", "mixture", "loss"),
             29: ("rope frequency", "scores", "loss", "rope reverse"),
             30: ("head split", "scores", "softmax", "mixture", "head merge", "output projection"),
             37: ("cache append", "scores", "softmax", "mixture")}[number]
    for name in names:
        assert STAGES[name].formula in shown or STAGES[name].element.split(" ")[0] in shown, name
    import re

    six, three = (re.compile(rf"(?<![\d.])-?\d+\.\d{{{n}}}(?![\d])") for n in (6, 3))
    assert six.search(shown) and not three.search(shown)
    shown = _figure(number, "--precision", "3")  # every computed number; settings keep theirs
    assert three.search(shown) and not six.search(shown)
