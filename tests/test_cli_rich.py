"""The rich view through the CLI: format choice, environment, options, exports, progress, pty."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from qkvcli.cli import main
from qkvcli.cli.console import GradcheckProgress, gradcheck_progress
from qkvcli.cli.options import ViewSettings

GOLDEN = Path(__file__).resolve().parent / "golden"
NARROW = (GOLDEN / "rich_narrow.txt").read_text(encoding="utf-8")
WIDE = (GOLDEN / "rich_wide.txt").read_text(encoding="utf-8")
# Variables that change how rich looks at the terminal; each test sets what it needs.
TERMINAL_VARS = ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "TERM",
                 "COLUMNS", "LINES", "COLORTERM")
SGR = re.compile(r"\x1b\[([0-9;]*)m")


def colour_codes(text: str) -> list[str]:
    """The SGR sequences in ``text`` that set a foreground or background colour."""
    found = []
    for params in SGR.findall(text):
        for part in (int(p) for p in params.split(";") if p):
            if part in (38, 48) or 30 <= part <= 37 or 40 <= part <= 47 or 90 <= part <= 107:
                found.append(params)
                break
    return found


def invoke(args: list[str], **env: str) -> tuple[int, str, str]:
    clean: dict[str, str | None] = dict.fromkeys(TERMINAL_VARS)
    clean.update(env)
    result = CliRunner().invoke(main, args, env=clean)
    return result.exit_code, result.stdout, result.stderr


def plain_text_report() -> str:
    code, out, _ = invoke(["report", "-f", "text"])
    assert code == 0
    return out


# --- choosing the format -------------------------------------------------------------------


def test_run_defaults_to_the_text_report_when_stdout_is_not_a_terminal() -> None:
    code, out, err = invoke(["run"])
    assert (code, err) == (0, "")
    assert out == plain_text_report()
    assert out.startswith("chapter=26-qkv-projections\n")


def test_run_auto_with_output_file_writes_text(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    code, _, _ = invoke(["run", "-o", str(target)], FORCE_COLOR="1")
    assert code == 0
    assert target.read_text(encoding="utf-8") == plain_text_report()


@pytest.mark.parametrize(
    ("args", "env", "golden"),
    [
        (["report", "-f", "rich", "--width", "80"], {}, NARROW),
        (["run", "-f", "rich", "--width", "160"], {}, WIDE),
        (["report", "-f", "rich"], {"COLUMNS": "80"}, NARROW),
        (["report", "-f", "rich", "--width", "160"], {"COLUMNS": "80"}, WIDE),
        # rich alone would fall back to 80 columns on a dumb terminal and ignore COLUMNS.
        (["report", "-f", "rich"], {"TERM": "dumb", "FORCE_COLOR": "1", "COLUMNS": "160"}, WIDE),
    ],
    ids=["width-80", "width-160", "columns-80", "width-beats-columns", "dumb-terminal-columns"],
)
def test_rich_view_through_the_cli_equals_the_golden_figure(
    args: list[str], env: dict[str, str], golden: str
) -> None:
    code, out, err = invoke(args, **env)
    assert (code, err) == (0, "")
    assert out == golden


def test_rich_output_file_has_no_escape_codes_even_when_colour_is_forced(tmp_path: Path) -> None:
    target = tmp_path / "figure.txt"
    code, out, _ = invoke(["report", "-f", "rich", "--width", "80", "-o", str(target)],
                          FORCE_COLOR="1")
    assert (code, out) == (0, "")
    assert target.read_text(encoding="utf-8") == NARROW


# --- colour --------------------------------------------------------------------------------


def test_forced_colour_really_colours_the_view() -> None:
    """The control for the tests below: without NO_COLOR the same run has colour codes."""
    _, out, _ = invoke(["report", "-f", "rich", "--width", "100"], FORCE_COLOR="1")
    assert colour_codes(out)


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["report", "-f", "rich", "--width", "100"], {"FORCE_COLOR": "1", "NO_COLOR": "1"}),
        (["report", "-f", "rich", "--width", "100", "--no-color"], {"FORCE_COLOR": "1"}),
        (["report", "-f", "rich", "--width", "100"], {"FORCE_COLOR": "1", "TERM": "dumb"}),
    ],
    ids=["NO_COLOR", "--no-color", "TERM=dumb"],
)
def test_no_colour_when_asked(args: list[str], env: dict[str, str]) -> None:
    code, out, _ = invoke(args, **env)
    assert code == 0
    assert colour_codes(out) == []
    # Borders and words carry the meaning, so they are all still there.
    words = SGR.sub("", out)
    assert "┄ Key projection (dashed)" in words and "verdict: PASS" in words


# --- numbers and elision -------------------------------------------------------------------


def test_precision_option() -> None:
    code, out, _ = invoke(["report", "-f", "rich", "--width", "160", "--precision", "3"])
    assert code == 0
    assert "-1.000" in out and "-5.000" in out and "1.000000" not in out


def test_huge_tensor_is_elided_and_full_shows_it(tmp_path: Path) -> None:
    fixture = tmp_path / "big.json"
    tokens, d_model, d_head = 30, 10, 4
    fixture.write_text(json.dumps({
        "input": [[[(t * d_model + f) % 5 - 2 for f in range(d_model)] for t in range(tokens)]],
        "weights": {role: [[(r + c + i) % 3 - 1 for c in range(d_head)] for r in range(d_model)]
                    for i, role in enumerate(("query", "key", "value"))},
        "gradcheck": {"samples": 2},
    }), encoding="utf-8")
    _, elided, _ = invoke(["report", str(fixture), "-f", "rich", "--width", "120"])
    assert "showing 7 of 30 tokens, 5 of 10 features; --full shows every value" in elided
    assert "t29" in elided and "t15" not in elided
    _, full, _ = invoke(["report", str(fixture), "-f", "rich", "--width", "200", "--full"])
    assert "--full shows every value" not in full
    assert all(f"t{t} " in full for t in range(tokens))


def test_too_narrow_a_screen_shows_wrapped_text_rather_than_broken_boxes(
        tmp_path: Path) -> None:
    code, out, err = invoke(["run", "-f", "rich", "--width", "20"])
    assert code == 0
    found = re.fullmatch(r"qkv: the rich view needs (\d+) columns, the screen has 20; showing "
                         r"text wrapped to 20 \(--width \1 shows the view\)",
                         " ".join(err.split()))
    assert found is not None, err
    text = invoke(["report", "-f", "text"])[1]
    assert "".join(out.split()) == "".join(text.split())  # the same report, wrapped
    assert not any(glyph in out for glyph in "┃│┆║")
    # a file has no screen: the figure is laid out as wide as it needs, without a word
    saved = tmp_path / "figure.txt"
    code, _, err = invoke(["run", "-f", "rich", "--width", "20", "-o", str(saved)])
    need = int(found.group(1))
    assert code == 0 and err == f"qkv: wrote {saved}\n"
    assert max(len(line) for line in saved.read_text().splitlines()) == need
    for value in ("-1.000000", "-5.000000", "3.500000", "-3.000000"):
        assert value in saved.read_text()


# --- exports -------------------------------------------------------------------------------


def test_export_svg_and_html_of_the_rich_view(tmp_path: Path) -> None:
    svg, html = tmp_path / "figure.svg", tmp_path / "figure.html"
    code, out, _ = invoke(["run", "-f", "rich", "--width", "100", "--export-svg", str(svg),
                           "--export-html", str(html)])
    assert code == 0 and "Query projection" in out
    svg_text = svg.read_text(encoding="utf-8")
    # SVG text keeps spaces as no-break spaces.
    assert svg_text.startswith("<svg") and "qkv&#160;run" in svg_text
    assert "Query&#160;projection&#160;(solid)" in svg_text
    html_text = html.read_text(encoding="utf-8")
    assert "<!DOCTYPE html>" in html_text and "Value projection (double)" in html_text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["figure.html", "figure.svg"]


def test_export_of_the_rich_view_while_stdout_gets_text(tmp_path: Path) -> None:
    svg = tmp_path / "figure.svg"
    code, out, _ = invoke(["report", "-f", "text", "--export-svg", str(svg)])
    assert code == 0 and out == plain_text_report()
    assert "Key&#160;projection&#160;(dashed)" in svg.read_text(encoding="utf-8")


def test_gradcheck_export_html(tmp_path: Path) -> None:
    html = tmp_path / "g.html"
    code, out, _ = invoke(["gradcheck", "--export-html", str(html)])
    assert code == 0 and out.startswith("tensor")
    assert "worst" in html.read_text(encoding="utf-8")


def test_export_into_a_missing_directory_is_refused_before_any_output(tmp_path: Path) -> None:
    target = tmp_path / "missing" / "figure.svg"
    code, out, err = invoke(["run", "-f", "rich", "--export-svg", str(target)])
    assert (code, out) == (2, "")
    assert err == f"Error: --export-svg {target}: no such directory {target.parent}\n"


def test_export_onto_a_directory_is_a_usage_error(tmp_path: Path) -> None:
    code, out, err = invoke(["run", "-f", "rich", "--export-html", str(tmp_path)])
    assert (code, out) == (2, "")
    assert "is a directory" in err


def test_export_never_overwrites_the_fixture(tmp_path: Path) -> None:
    fixture = tmp_path / "f.json"
    original = json.dumps({"input": [[[1, 2]]], "weights": {
        "query": [[1], [0]], "key": [[0], [1]], "value": [[1], [1]]}})
    fixture.write_text(original, encoding="utf-8")
    code, _, err = invoke(["run", str(fixture), "--export-html", str(fixture)])
    assert code == 2 and "refusing to overwrite a file this command reads" in err
    assert fixture.read_text(encoding="utf-8") == original


# --- gradcheck -----------------------------------------------------------------------------


def test_gradcheck_rich_marks_the_worst_coordinate() -> None:
    code, out, err = invoke(["gradcheck", "-f", "rich", "--width", "80"])
    assert (code, err) == (0, "")  # the table fits 80 columns: no widening note
    lines = out.splitlines()
    marks = [i for i, line in enumerate(lines) if "◀" in line and "│" in line]
    assert len(marks) == 1
    # The mark sits on the worst row itself, never on a row of its own.
    assert re.fullmatch(r"│ input ◀\s+│ \[0,0,2\]\s+│\s+1\.500000000 │\s+1\.500000000 │"
                        r"\s+2\.536e-10 │ PASS │", lines[marks[0]])
    assert "◀ worst: input[0,0,2] scaled error 2.536e-10" in out
    assert out.rstrip().endswith("verdict: PASS (24 of 24 checks passed)")
    assert max(len(line) for line in lines) <= 80


def test_gradcheck_rich_failure_exits_one_and_says_fail() -> None:
    code, out, _ = invoke(["gradcheck", "-f", "rich", "--width", "100", "--tolerance", "0"])
    assert code == 1
    assert "verdict: FAIL" in out and re.search(r"│ FAIL │", out)


def test_run_rich_failure_exits_one_with_the_verdict() -> None:
    code, out, err = invoke(["run", "-f", "rich", "--width", "100", "--tolerance", "0"])
    assert code == 1
    assert "verdict: FAIL (7 of 8 checks passed)" in out
    assert re.search(r"FAIL +gradcheck", out)  # the Checks card names the failed check
    assert err.splitlines()[0] == "qkv: FAILED: gradcheck"
    assert err.splitlines()[1].startswith("  gradcheck: ")
    assert " of 24 coordinates failed, step 1e-06, tolerance 0.0" in err


def test_gradcheck_rich_elides_long_tables_but_keeps_failures_and_worst(tmp_path: Path) -> None:
    fixture = tmp_path / "wide.json"
    d_model, d_head = 8, 5
    fixture.write_text(json.dumps({
        "input": [[[1.5 * (f + 1) for f in range(d_model)]]],
        "weights": {role: [[0.25 * (r - c) + i for c in range(d_head)] for r in range(d_model)]
                    for i, role in enumerate(("query", "key", "value"))},
    }), encoding="utf-8")
    code, out, _ = invoke(["gradcheck", str(fixture), "-f", "rich", "--width", "120"])
    assert code == 0
    # 40 coordinates per weight, 12 shown: the gap says how many are hidden and how to see
    # them; the worst coordinate (key_weight[1,1]) is kept even inside the gap.
    assert re.search(r"│ …\s+│ 28 more\s+│\s+… │", out)
    lines = out.splitlines()
    mark = next(i for i, line in enumerate(lines) if "◀" in line and "│" in line)
    assert lines[mark].startswith("│ key_weight ◀ │ [1,1] ")
    assert re.search(r"│ …\s+│ 27 more\s+│", out)
    assert "… 83 coordinates not shown; --full shows every coordinate" in out
    _, full, _ = invoke(["gradcheck", str(fixture), "-f", "rich", "--width", "120", "--full"])
    assert "more" not in full and "not shown" not in full
    assert sum(1 for line in full.splitlines() if "query_weight │" in line) == d_model * d_head


def test_no_progress_bar_off_a_terminal_or_outside_rich() -> None:
    assert gradcheck_progress("rich", ViewSettings()) is None  # pytest's stderr is no terminal
    assert gradcheck_progress("json", ViewSettings()) is None
    code, out, err = invoke(["gradcheck", "-f", "json"], FORCE_COLOR="1")
    assert code == 0 and err == "" and json.loads(out)["passed"] is True


def test_progress_bar_draws_after_the_delay_and_goes_away() -> None:
    stream = io.StringIO()
    console = Console(file=stream, force_terminal=True, width=60, color_system=None)
    with GradcheckProgress(console, delay=0.0) as progress:
        for done in range(1, 11):
            progress(done, 10)
    assert "gradcheck" in stream.getvalue() and "10/10" in stream.getvalue()


def test_progress_bar_stays_hidden_for_a_quick_check() -> None:
    stream = io.StringIO()
    console = Console(file=stream, force_terminal=True, width=60)
    with GradcheckProgress(console, delay=3600.0) as progress:
        progress(1, 2)
        progress(2, 2)
    assert stream.getvalue() == ""


# --- start-up: the text path never imports rich ---------------------------------------------


@pytest.mark.parametrize(
    "args",
    [["report", "-f", "text"], ["report", "-f", "trace"], ["run"], ["gradcheck"]],
    ids=["report-text", "report-trace", "run-piped", "gradcheck-text"],
)
def test_text_paths_do_not_import_rich(args: list[str]) -> None:
    code = (
        "import sys\n"
        "from qkvcli.cli import main\n"
        f"try:\n    main({args!r})\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "sys.stderr.write(repr(sorted(m for m in sys.modules if m.split('.')[0] == 'rich')))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in TERMINAL_VARS}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "[]"
