"""Issue 14: what a newcomer trips over: verdicts, warnings, one-line successes, wording."""

from __future__ import annotations

import io
import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import numpy as np
import pytest
from click.testing import CliRunner

from qkvcli.cli import main
from tests.conftest import ROOT

TERMINAL_VARS = ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "TERM",
                 "COLUMNS", "LINES")


def invoke(args: list[str], stdin: str | None = None) -> tuple[int, str, str]:
    env: dict[str, str | None] = dict.fromkeys(TERMINAL_VARS)
    result = CliRunner().invoke(main, args, env=env, input=stdin)
    return result.exit_code, result.stdout, result.stderr


# --- plain output ---------------------------------------------------------------------------


def test_failing_text_report_ends_with_the_failed_check_and_no_verdict_line() -> None:
    code, out, err = invoke(["run", "--tolerance", "0", "-f", "text"])
    assert code == 1
    tail = out.splitlines()[-2:]
    assert tail[0] == "next=compare queries with keys and mix values"
    assert tail[1].startswith("failed=gradcheck ") and "coordinates failed" in tail[1]
    assert "verdict" not in out  # the course's format, passing or not (issue 33)
    assert err.startswith("qkv: FAILED: gradcheck\n")


@pytest.mark.parametrize("fmt", ["text", "trace"])
@pytest.mark.parametrize("command", ["run", "report"])
def test_the_course_formats_have_no_verdict_line_passing_or_not(command: str, fmt: str) -> None:
    for extra, status in (([], 0), (["--tolerance", "0"], 1)):
        code, out, _ = invoke([command, "-f", fmt, *extra])
        assert code == status and "verdict" not in out


@pytest.mark.parametrize(("args", "warning"), [
    (["--directions", "4"], "--directions is used only by --mode fast; ignored with mode auto"),
    (["--mode", "full", "--samples", "2"],
     "--samples is ignored by --mode full (every coordinate is checked)"),
])
@pytest.mark.parametrize("command", ["run", "gradcheck"])
def test_ignored_options_are_warned_about(command: str, args: list[str], warning: str) -> None:
    code, _, err = invoke([command, "-f", "text", *args])
    assert code == 0
    assert f"qkv: warning: {warning}\n" in err


def test_used_options_are_not_warned_about() -> None:
    _, _, err = invoke(["gradcheck", "--mode", "fast", "--directions", "2"])
    assert "warning" not in err


def test_dtype_is_reported() -> None:
    _, text, _ = invoke(["gradcheck", "--dtype", "float32"])
    assert text.endswith("dtype=float32 (analytic gradients; central differences in float64)\n")
    _, plain, _ = invoke(["gradcheck"])
    assert "dtype" not in plain  # the float64 table is unchanged
    for dtype in ("float32", "float64"):
        _, out, _ = invoke(["gradcheck", "-f", "json", "--dtype", dtype])
        assert json.loads(out)["dtype"] == dtype


def test_init_output_says_one_line_on_stderr(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = invoke(["init", "-o", "mine.json"])
    assert (code, out, err) == (0, "", "qkv: wrote mine.json\n")


def test_missing_directory_is_worded_the_same_everywhere(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    _, _, init_err = invoke(["init", "-o", str(missing / "f.json")])
    _, _, export_err = invoke(["run", "-f", "text", "--export-html", str(missing / "f.html")])
    _, _, output_err = invoke(["report", "-o", str(missing / "r.txt")])
    assert init_err == f"Error: -o/--output {missing / 'f.json'}: no such directory {missing}\n"
    assert export_err == f"Error: --export-html {missing / 'f.html'}: no such directory {missing}\n"
    assert output_err == f"Error: -o/--output {missing / 'r.txt'}: no such directory {missing}\n"


def test_init_help_explains_every_size() -> None:
    _, out, _ = invoke(["init", "--help"])
    for option, words in (("--batch", "Sequences"), ("--tokens", "Positions"),
                          ("--d-model", "input vector"), ("--d-head", "projection")):
        assert option in out and words in out


def test_html_export_has_a_title(tmp_path: Path) -> None:
    page = tmp_path / "run.html"
    code, _, _ = invoke(["run", "-f", "text", "--export-html", str(page)])
    assert code == 0
    assert "<title>qkv run</title>" in page.read_text(encoding="utf-8")


# --- the terminal figure ----------------------------------------------------------------------


def test_auto_falls_back_to_text_on_a_narrow_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("qkvcli.cli.options.stdout_is_terminal", lambda: True)
    code, out, err = invoke(["run", "--width", "40"])
    assert code == 0
    assert "".join(out.split()) == "".join(invoke(["report", "-f", "text"])[1].split())
    assert " ".join(err.split()) == ("qkv: the rich view needs 57 columns, the screen has 40; "
                                     "showing text wrapped to 40 (--width 57 shows the view)")
    _, wide, wide_err = invoke(["run", "--width", "100"])
    assert "Borders:" in wide and wide_err == ""


def test_rich_figure_is_capped_at_a_readable_width() -> None:
    _, out, _ = invoke(["run", "-f", "rich", "--width", "220"])
    assert max(len(line) for line in out.splitlines()) == 160


# --- the quiz -----------------------------------------------------------------------------


def test_quiz_keeps_the_score_when_input_ends() -> None:
    code, out, _ = invoke(["quiz"], stdin="[4,7,2]\n")
    assert code == 1
    assert "Aborted!" not in out
    assert out.endswith("stopped at question 2 of 9; 1 right before it\nscore=1/9\n")


def test_quiz_keeps_the_score_on_ctrl_c(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = iter(["[4,7,2]"])

    def prompt(*args: object, **kwargs: object) -> str:
        try:
            return next(answers)
        except StopIteration:
            raise click.Abort() from None

    monkeypatch.setattr(click, "prompt", prompt)
    code, out, _ = invoke(["quiz"])
    assert code == 1 and out.endswith("score=1/9\n")


def test_quiz_warns_about_a_short_answers_file(tmp_path: Path) -> None:
    path = tmp_path / "answers.txt"
    path.write_text("[4,7,2]\nx\nyes\n", encoding="utf-8")
    code, _, err = invoke(["quiz", "--answers", str(path)])
    assert code == 1
    assert err == (f"qkv: warning: {path} answers 3 of 9 questions; "
                   "the others count as unanswered\n")


def test_quiz_wraps_questions_at_spaces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    runner = CliRunner()
    out = runner.invoke(main, ["quiz"], input="[4,7,2]\n").stdout
    lines = out.splitlines()
    assert all(len(line) <= 60 or " " not in line.strip() for line in lines)
    assert any("W_K=" in line for line in lines)  # never W / _K


def test_quiz_help_says_what_precision_counts() -> None:
    _, out, _ = invoke(["quiz", "--help"])
    assert "within 0.0005" in " ".join(out.split())


# --- the library ----------------------------------------------------------------------------


def test_library_loads_a_str_path_and_renders_every_format() -> None:
    import qkvcli
    from qkvcli.render import render

    chapter = Path(__file__).resolve().parent.parent / "fixtures" / "ch26-qkv-projections.json"
    evidence = qkvcli.build_evidence(qkvcli.load_fixture(str(chapter)))
    assert render(evidence) == invoke(["report", "-f", "text"])[1]
    assert render(evidence, "trace") == invoke(["report", "-f", "trace"])[1]
    assert json.loads(render(evidence, "json"))["passed"] is True
    with pytest.raises(ValueError, match="unknown format 'rich'"):
        render(evidence, "rich")


# --- issue 33: one verdict line -------------------------------------------------------------

WRONG = str(ROOT / "examples" / "implementations" / "wrong_no_value_path.py")
RIGHT = str(ROOT / "examples" / "implementations" / "numpy_qkv.py")


@pytest.mark.parametrize(("args", "status"), [
    (["attend", "-f", "text"], 0),
    (["attend", "-f", "text", "--tolerance", "0"], 1),
    (["gradcheck"], 0),
    (["gradcheck", "--tolerance", "0"], 1),
    (["check", RIGHT, "-f", "text"], 0),
    (["check", WRONG, "-f", "text"], 1),
    (["run", "-f", "rich", "--width", "100"], 0),
    (["run", "-f", "rich", "--width", "100", "--tolerance", "0"], 1),
    (["attend", "-f", "rich", "--width", "100", "--tolerance", "0"], 1),
], ids=lambda value: " ".join(value) if isinstance(value, list) else str(value))
def test_every_other_report_ends_with_one_verdict_line_passing_or_not(args: list[str],
                                                                       status: int) -> None:
    code, out, _ = invoke(args)
    assert code == status
    lines = [line.strip("│ ") for line in out.splitlines()]
    verdicts = [line for line in lines if line.startswith("verdict: ")]
    assert len(verdicts) == 1 and lines[-1] == verdicts[0]
    assert verdicts[0].startswith("verdict: PASS (" if status == 0 else "verdict: FAIL (")


def test_a_batch_counts_unreadable_fixtures_and_says_each_error_once(tmp_path: Path) -> None:
    chapter = json.loads((ROOT / "fixtures" / "ch26-qkv-projections.json").read_text())
    (tmp_path / "a.json").write_text(json.dumps(chapter))
    for name in ("b.json", "c.json"):
        (tmp_path / name).write_text('{"input": []}')
    code, out, err = invoke(["run", str(tmp_path)])
    assert code == 2
    assert out.splitlines()[-1] == ("verdict: FAIL (2 of 3 fixtures could not be read; "
                                    "8 of 8 checks passed)")
    # each in its row, and each once on stderr: an error that makes the status 2 (issue 44)
    assert out.count('missing key "weights"') == 2 and err.count('missing key "weights"') == 2
    saved = tmp_path / "out" / "summary.txt"
    saved.parent.mkdir()
    code, out, err = invoke(["run", str(tmp_path), "-o", str(saved)])
    assert code == 2 and out == ""
    # the table is in the file, so its errors are said on stderr, once each
    assert err.count('missing key "weights"') == 2 and len(err.splitlines()) == 3
    assert saved.read_text().count('missing key "weights"') == 2


def test_reading_the_report_documents_failed_and_verdict() -> None:
    guide = (ROOT / "docs" / "reading-the-report.md").read_text(encoding="utf-8")
    for needed in ("`failed=`", "`verdict:`", "could not be read", "exit status"):
        assert needed in guide, needed


# --- issue 33: bf16 with `pip install .` alone ----------------------------------------------


def test_every_bfloat16_bit_pattern_widens_to_the_float32_of_its_upper_half() -> None:
    import struct

    from qkvcli.reading.safetensors import as_float64

    patterns = np.arange(1 << 16, dtype="<u2")
    widened = as_float64(patterns.tobytes(), "BF16")
    # an independent reference: the float32 whose upper two little-endian bytes are the bf16's
    expected = np.array([struct.unpack("<f", b"\0\0" + int(p).to_bytes(2, "little"))[0]
                         for p in patterns.tolist()])
    same = (widened == expected) | (np.isnan(widened) & np.isnan(expected))
    assert same.all() and widened.dtype == np.float64
    assert as_float64(bytes.fromhex("c03f"), "BF16").tolist() == [1.5]
    assert as_float64(bytes.fromhex("0080"), "BF16").tolist() == [-0.0]


def test_the_bfloat16_widening_agrees_with_ml_dtypes() -> None:
    from qkvcli.reading.safetensors import as_float64

    ml_dtypes = pytest.importorskip("ml_dtypes")
    patterns = np.arange(1 << 16, dtype="<u2")
    with np.errstate(invalid="ignore"):
        reference = patterns.view(ml_dtypes.bfloat16).astype(np.float64)
    widened = as_float64(patterns.tobytes(), "BF16")
    assert ((widened == reference) | (np.isnan(widened) & np.isnan(reference))).all()


def _without_extras(tmp_path: Path) -> dict[str, str]:
    """An environment in which ``safetensors`` and ``ml_dtypes`` cannot be imported, as in
    the README's venv (``pip install .``)."""
    blocked = tmp_path / "blocked"
    for name in ("safetensors", "ml_dtypes"):
        (blocked / name).mkdir(parents=True)
        (blocked / name / "__init__.py").write_text(
            f"raise ImportError('{name} is not installed by pip install .')\n")
    environment = {k: v for k, v in os.environ.items() if k not in TERMINAL_VARS}
    environment["PYTHONPATH"] = os.pathsep.join([str(blocked), str(ROOT)])
    environment["PYTHONDONTWRITEBYTECODE"] = "1"
    return environment


def test_the_offline_real_model_walk_runs_without_safetensors_or_ml_dtypes(
        tmp_path: Path) -> None:
    environment = _without_extras(tmp_path)
    work = tmp_path / "work"
    work.mkdir()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, *args], cwd=work, env=environment,
                              capture_output=True, text=True, timeout=300, check=False)

    blocked = run("-c", "import safetensors")
    assert blocked.returncode == 1 and "not installed by pip install ." in blocked.stderr
    made = run(str(ROOT / "examples" / "checkpoints" / "tiny_gpt2.py"), "--bf16")
    assert made.returncode == 0, made.stderr
    listed = run("-m", "qkvcli", "inspect", "model.safetensors")
    assert listed.returncode == 0 and "BF16" in listed.stdout, listed.stderr
    written = run("-m", "qkvcli", "init", "--from-safetensors", "model.safetensors",
                  "--prefix", "transformer.h.0.attn.", "-o", "layer.json")
    assert written.returncode == 0, written.stderr
    attended = run("-m", "qkvcli", "attend", "layer.json", "--format", "text")
    assert attended.returncode == 0, attended.stdout + attended.stderr
    assert "verdict: PASS" in attended.stdout


def test_no_install_advice_names_an_extra_or_an_index_package() -> None:
    advice = re.compile(r"pip install [^\n`]*(\[checkpoints\]|'qkv)")
    found = [f"{path.relative_to(ROOT)}:{number}" for path in
             [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
              *sorted((ROOT / "qkvcli").rglob("*.py"))]
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if advice.search(line)]
    assert found == []
    assert "checkpoints" not in tomllib_extras()


def tomllib_extras() -> dict[str, list[str]]:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomli = pytest.importorskip("tomli")
        return dict(tomli.loads(text)["project"]["optional-dependencies"])
    return dict(tomllib.loads(text)["project"]["optional-dependencies"])


# --- issue 33: every fence of the documentation closes ------------------------------------

FENCE_LINE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


def unclosed_fences(text: str) -> list[str]:
    """Each fenced block of the Markdown ``text`` that does not close as written: a line
    inside it that looks like its closing fence but has text after it (CommonMark reads it
    as code, so the block runs on and swallows what follows), or a block still open at the
    end. ``"line N: ..."`` strings, empty when every fence closes."""
    problems = []
    opening: tuple[int, str] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        found = FENCE_LINE.match(line)
        if found is None:
            continue
        fence, rest = found.group(1), found.group(2)
        if opening is None:
            opening = (number, fence)
            continue
        start, opened = opening
        if fence[0] != opened[0] or len(fence) < len(opened):
            continue  # a shorter or other fence is the block's content
        if rest.strip():
            problems.append(f"line {number}: text after the fence closing line {start}'s block")
            continue
        opening = None
    if opening is not None:
        problems.append(f"line {opening[0]}: a fence never closed")
    return problems


@pytest.mark.parametrize("path", [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))],
                         ids=lambda path: path.name)
def test_every_fence_of_the_docs_closes_on_a_bare_line(path: Path) -> None:
    assert unclosed_fences(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(("text", "problems"), [
    ("```\ncode\n``` text after\n### Heading\n```json\n{}\n```\n",
     ["line 3: text after the fence closing line 1's block",
      "line 5: text after the fence closing line 1's block"]),
    ("```sh\nqkv run\n", ["line 1: a fence never closed"]),
    ("````\n```sh qkv-run\nnot run\n```\n````\n", []),
    ("~~~\n```\n~~~\n", []),
])
def test_the_fence_check_finds_what_it_should(text: str, problems: list[str]) -> None:
    assert unclosed_fences(text) == problems


# --- issue 33: help at 80 columns -------------------------------------------------------------


def _help(args: list[str], columns: int) -> str:
    result = CliRunner().invoke(main, args, env={**dict.fromkeys(TERMINAL_VARS),
                                                 "COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.stdout


def _commands() -> list[str]:
    return main.list_commands(click.Context(main))


@pytest.mark.parametrize("columns", [40, 80, 200])
def test_the_overview_fits_the_terminal_and_lists_each_command_once(columns: int) -> None:
    shown = _help(["--help"], columns)
    assert max(len(line) for line in shown.splitlines()) <= columns
    listed = [line.split()[1] for line in shown.splitlines() if line.startswith("  qkv ")]
    assert sorted(listed) == _commands()  # each command once, none missing
    for usage in ("[ARGS]...", "[FIXTURE]...", "FIXTURE..."):  # nothing cut off with ...
        shown = shown.replace(usage, "")
    assert "..." not in shown
    assert shown.count("\nCommands:\n") == 1


@pytest.mark.parametrize("command", [
    "run", "report", "gradcheck", "init", "validate", "schema", "attend", "variance", "quiz",
    "check", "inspect"])
def test_every_command_help_fits_80_columns(command: str) -> None:
    assert command in _commands()
    shown = _help([command, "--help"], 80)
    too_long = [line for line in shown.splitlines() if len(line) > 80]
    assert too_long == []


# --- issue 33: narrow terminals -----------------------------------------------------------

NUMBER = re.compile(r"-?\d+\.\d+(?:e[-+]?\d+)?")
BOX_GLYPHS = "┃│┆║|+"


def _on_a_terminal(monkeypatch: pytest.MonkeyPatch, args: list[str],
                   columns: int) -> tuple[int, str, str]:
    monkeypatch.setattr("qkvcli.cli.options.stdout_is_terminal", lambda: True)
    environment: dict[str, str | None] = {**dict.fromkeys(TERMINAL_VARS),
                                          "COLUMNS": str(columns)}
    result = CliRunner().invoke(main, args, env=environment)
    return result.exit_code, result.stdout, result.stderr


def _numbers(text: str) -> list[str]:
    return sorted(NUMBER.findall(text))


def _unbreakable(line: str) -> bool:
    """A line the wrapper may leave long: one word with no place to break."""
    word = line.strip()
    return " " not in word and not any(mark in word[:-1] for mark in ",|;")


WALK = [
    ["run"], ["run", "--tolerance", "0"], ["attend"], ["attend", "--tolerance", "0"],
    ["check", RIGHT], ["check", WRONG],
]


@pytest.mark.parametrize("columns", [40, 80, 200])
@pytest.mark.parametrize("args", WALK, ids=" ".join)
def test_a_newcomers_walk_shows_no_wrapped_number_and_no_broken_box(
        monkeypatch: pytest.MonkeyPatch, args: list[str], columns: int) -> None:
    code, out, err = _on_a_terminal(monkeypatch, args, columns)
    assert code in (0, 1), err
    lines = out.splitlines()
    boxed = any(glyph in out for glyph in "┃│┆║")
    if boxed:  # the rich view: it fits, so the terminal breaks no box
        assert max(cell_width(line) for line in lines) <= min(columns, 160)
        wide = _on_a_terminal(monkeypatch, [*args, "-f", "rich", "--width", "200"], 200)[1]
        if args[0] == "check":  # no tables: the same numbers at any width
            assert _numbers(out) == _numbers(wide)
    else:  # text wrapped at word boundaries: every number of the plain report, whole
        plain = invoke([*args, "-f", "text"])[1]
        assert "".join(out.split()) == "".join(plain.split())
        assert _numbers(out) == _numbers(plain)
        assert all(len(line) <= columns or _unbreakable(line) for line in lines)
    assert all(len(line) <= columns for line in err.splitlines())


def cell_width(line: str) -> int:
    from rich.cells import cell_len

    return cell_len(line)


def test_check_shows_its_cards_at_40_columns_passing_or_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for implementation in (RIGHT, WRONG):
        _, out, err = _on_a_terminal(monkeypatch, ["check", implementation], 40)
        assert "╭─ forward" in out and "rich view needs" not in err


@pytest.mark.parametrize("width", ["40", "20"])
def test_rich_at_a_given_width_never_lays_out_wider(width: str) -> None:
    code, out, err = invoke(["run", "-f", "rich", "--width", width, "--precision", "0"])
    assert code == 0
    if "┃" in out:
        assert max(cell_width(line) for line in out.splitlines()) <= int(width)
    else:
        assert f"the screen has {width}; showing text wrapped to {width}" in " ".join(err.split())


def test_failure_lines_and_batch_errors_wrap_to_the_screen(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    code, _, err = _on_a_terminal(monkeypatch, ["run", "--tolerance", "0", "-f", "text"], 40)
    assert code == 1 and max(len(line) for line in err.splitlines()) <= 40
    assert "".join(err.split()).startswith("qkv:FAILED:gradcheckgradcheck:23of24")
    (tmp_path / "a.json").write_text((ROOT / "fixtures" / "ch26-qkv-projections.json")
                                     .read_text())
    (tmp_path / "b.json").write_text(json.dumps(
        {"input": [[[1.0, 2.0]]], "weights": {"query": [[1.0]], "key": [[1.0]],
                                              "value": [[1.0]]}}))
    code, out, _ = _on_a_terminal(monkeypatch, ["run", str(tmp_path)], 60)
    assert code == 2
    rows = out.splitlines()
    error_rows = [line for line in rows if "ERROR:" in line or line.startswith("      ")]
    assert len(error_rows) >= 2 and all(len(line) <= 60 for line in error_rows)
    assert "input final width must equal model width 1, got 2" in " ".join(out.split())
    plain = invoke(["run", str(tmp_path)])[1]
    assert "".join(out.split()) == "".join(plain.split())  # the same table, wrapped


# --- issue 33: numbers that mislead ------------------------------------------------------


def _rich(args: list[str], width: int = 120) -> str:
    code, out, err = invoke([*args, "-f", "rich", "--width", str(width)])
    assert code in (0, 1), err
    return out


def _reverse_row(out: str, symbol: str) -> list[str]:
    found = [line.strip("│ ").split() for line in out.splitlines()
             if line.strip("│ ").split()[:1] == [symbol]]
    assert found, symbol
    return found[0]


def test_attends_gradient_table_is_at_the_reports_precision() -> None:
    from qkvcli.attention.fixture import load_attend_fixture
    from qkvcli.check.attend import build_attend_evidence
    from qkvcli.render.numbers import fmt_float

    evidence = build_attend_evidence(load_attend_fixture(example="chapter"))
    gradient = np.asarray(evidence.primary.tensors["grad_w_query"])
    largest = float(np.abs(gradient).max())
    row = _reverse_row(_rich(["attend"]), "dW_Q")
    assert row[2] == fmt_float(largest, 6)  # the text's six decimals, not four
    assert _reverse_row(_rich(["attend", "--precision", "3"]), "dW_Q")[2] == fmt_float(largest, 3)
    text = invoke(["attend", "-f", "text"])[1]
    assert len(text.split("weights:[")[1].split(",")[0].split(".")[1]) == 6


def test_no_value_is_printed_as_minus_zero(tmp_path: Path) -> None:
    from qkvcli.render.numbers import fmt_float, fmt_vector

    assert fmt_float(-0.0) == "0.000000" and fmt_float(-1e-17) == "-1e-17"
    assert fmt_vector(np.array([-1e-17, -0.0, -4e-7, 6e-7, -1.0])) == (
        "[0.000000,0.000000,0.000000,0.000001,-1.000000]")
    assert fmt_vector(np.full(100, -1e-17)) == "[" + ",".join(["0.000000"] * 100) + "]"
    fixture = tmp_path / "tiny.json"
    fixture.write_text(json.dumps({
        "input": [[[1e-9, 1.0], [-1e-9, 2.0]]],
        "weights": {"query": [[-1e-8, 1.0], [0.0, 1.0]], "key": [[1e-8, 0.5], [0.0, -1.0]],
                    "value": [[-1e-8, 1.0], [1.0, 0.0]]}}))
    for args in (["run", str(fixture), "-f", "text", "--tensors", "full"],
                 ["run", str(fixture), "-f", "trace"],
                 ["attend", str(fixture), "-f", "text", "--tensors", "full"]):
        code, out, _ = invoke(args)
        assert code == 0 and "-0.000000" not in out and "0.000000" in out


def _heat_rows(out: str) -> dict[str, list[str]]:
    """Each head's first row of cells: glyph and number words."""
    rows: dict[str, list[str]] = {}
    head = ""
    for line in out.splitlines():
        if line.startswith("batch 0, head "):
            head = line.split()[-1]
        elif head and line.split()[:1] == ["0"] and head not in rows:
            rows[head] = line.split()[1:]
    return rows


def test_heat_maps_shade_absolutely_by_default_and_by_row_on_request() -> None:
    layer = ["attend", "fixtures/attend/attend-packed-in-proj.json", "--heads", "3"]
    absolute = _heat_rows(_rich(layer))
    uniform = absolute["0"]  # head 0's first query weighs its three keys equally
    assert [cell[1:] for cell in uniform] == ["0.333333"] * 3
    assert all(cell[0] == "▒" for cell in uniform)  # a third: the second level, not the darkest
    row = _heat_rows(_rich([*layer, "--shading", "row"]))["0"]
    assert all(cell[0] == "█" for cell in row)  # against the row's largest: all at the top
    assert "against 1 (--shading row" in _rich(layer)
    assert "against the largest of their row" in _rich([*layer, "--shading", "row"])


# --- issue 33: the figure shows what a learner recomputes by hand -------------------------


def _chapter() -> dict[str, object]:
    loaded: dict[str, object] = json.loads(
        (ROOT / "fixtures" / "ch26-qkv-projections.json").read_text())
    return loaded


def _table_rows(out: str, corner: str) -> list[list[str]]:
    """The value rows under the table whose corner cell is ``corner`` (``U_Q b=0``)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if f" {corner} " in line)
    column = lines[start].index(f" {corner} ")

    def words(line: str) -> list[str]:
        return [w for w in re.split(r"[│┆║┃ ]+", line[column:]) if w]

    header = words(lines[start])[len(corner.split()):]
    count = len(list(itertools.takewhile(str.isdigit, header)))
    rows = []
    for line in lines[start + 2:]:
        found = words(line)
        if not found or not re.fullmatch(r"t\d+|\d+", found[0]):
            break
        cells: list[str] = []
        for word in found[1:]:
            if word != "◀" and sum(w != "◀" for w in cells) == count:
                break
            cells.append(word)
        rows.append(cells)
    return rows


def test_runs_figure_shows_the_upstream_gradients() -> None:
    from qkvcli.check.chapter26 import build_evidence
    from qkvcli.reading.load import load_fixture
    from qkvcli.render.numbers import fmt_float

    primary = build_evidence(load_fixture(None)).primary
    out = _rich(["run"], 160)
    assert "Upstream gradients" in out
    for letter, upstream in zip("QKV", (primary.grad_query, primary.grad_key, primary.grad_value),
                                strict=True):
        expected = [[fmt_float(float(v)) for v in row] for row in upstream[0]]
        assert _table_rows(out, f"U_{letter} b=0") == expected


def test_attend_shows_small_gradients_whole() -> None:
    from qkvcli.attention.fixture import load_attend_fixture
    from qkvcli.check.attend import build_attend_evidence
    from qkvcli.render.numbers import fmt_float

    evidence = build_attend_evidence(load_attend_fixture(example="primer"))
    out = " ".join(_rich(["attend", "--example", "primer"], 120).split())
    for name in ("grad_query", "grad_key", "grad_value"):
        values = np.asarray(evidence.primary.tensors[name]).reshape(-1)
        assert values.size == 4
        shown = "[" + ", ".join(fmt_float(float(v)) for v in values) + "]"
        assert shown in out, name


def test_a_failing_expect_value_is_marked_in_the_figure(tmp_path: Path) -> None:
    fixture = tmp_path / "f.json"
    fixture.write_text(json.dumps({**_chapter(), "expect": {
        "query": [[[0.0, 3.0], [2.0, 1.0]]], "loss": 99.0}}))  # Q[0,1,1] is -1.0
    code, out, _ = invoke(["run", str(fixture), "-f", "rich", "--width", "160"])
    assert code == 1
    rows = _table_rows(out, "Q b=0")
    assert rows[1][-2:] == ["-1.000000", "◀"] and "◀" not in " ".join(rows[0])
    assert out.count("◀ differs from the") == 2  # the Q table, the loss
    passing = invoke(["run", "-f", "rich", "--width", "160"])[1]
    assert "differs from the fixture's expect" not in passing


def test_attend_speaks_runs_visual_language() -> None:
    out = _rich(["attend"], 100)
    assert "╭─ Checks  PASS" in out and "╭─ Reverse pass  PASS" in out
    assert not any(line.strip() == "checks" for line in out.splitlines())
    failing = _rich(["attend", "--tolerance", "0"], 100)
    assert "╭─ Checks  FAIL" in failing


# --- issue 33: housekeeping ----------------------------------------------------------------


def test_the_classifiers_state_the_platforms_qkv_check_needs() -> None:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    client = (ROOT / "qkvcli" / "protocol" / "client.py").read_text(encoding="utf-8")
    assert "select.poll" in client and "os.killpg" in client  # POSIX only
    assert "OS Independent" not in text and '"Operating System :: POSIX"' in text
    assert "POSIX" in (ROOT / "docs" / "check.md").read_text(encoding="utf-8")


def test_a_test_run_keeps_hypothesis_and_cargo_out_of_the_checkout() -> None:
    from tests.conftest import HYPOTHESIS_DATABASE, HYPOTHESIS_HOME

    hypothesis = pytest.importorskip("hypothesis")
    database = hypothesis.settings().database
    assert getattr(database, "path", None) is not None
    assert ROOT not in Path(database.path).resolve().parents
    assert ROOT not in HYPOTHESIS_DATABASE.resolve().parents
    from hypothesis.configuration import storage_directory

    assert Path(storage_directory(intent_to_write=False).path).resolve() == HYPOTHESIS_HOME.resolve()
    source = (ROOT / "tests" / "test_examples_languages.py").read_text(encoding="utf-8")
    assert 'EXAMPLES / "rust" / "Cargo.toml"' not in source  # built from a copy


def test_no_test_asserts_wall_time() -> None:
    timed = re.compile(r"assert[^\n]*(monotonic|perf_counter|time\.time)\(\)")
    found = [f"{path.name}:{number}" for path in sorted((ROOT / "tests").glob("test_*.py"))
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if timed.search(line)]
    assert found == []


# --- issue 33: rich --full at most 3x text --full -----------------------------------------


@pytest.mark.parametrize("box_name", ["INPUT", "query", "key", "value", "PLAIN"])
@pytest.mark.parametrize("ascii_only", [False, True], ids=["unicode", "ascii"])
@pytest.mark.parametrize("colour", [None, "truecolor"], ids=["plain", "colour"])
def test_the_large_table_grid_draws_what_richs_table_draws(
        monkeypatch: pytest.MonkeyPatch, box_name: str, ascii_only: bool,
        colour: str | None) -> None:
    from rich.console import Console

    from qkvcli.render.rich import boxes, tables
    from qkvcli.render.rich.grid import NumberGrid
    from qkvcli.render.rich.options import RichOptions

    box = (getattr(boxes, box_name) if box_name.isupper()
           else boxes.ROLE_BOXES[box_name])
    rng = np.random.default_rng(3)
    matrix = rng.normal(size=(20, 24)) * 10.0 ** rng.integers(-20, 4, size=(20, 24))
    matrix[0, 0], matrix[1, 1] = -0.0, -1e-17
    options = RichOptions(ascii=ascii_only)
    marks = {(2, 3), (19, 0)}

    def shown(limit: int, edge: bool) -> tuple[str, bool]:
        monkeypatch.setattr(tables, "GRID_FROM_CELLS", limit)
        table = tables.matrix_table(matrix, "W b=0", "t", box, options, border_style="cyan",
                                    edge=edge, marks=marks)
        console = Console(file=AsciiIO() if ascii_only else io.StringIO(), width=400,
                          color_system=colour, force_terminal=colour is not None, record=True,
                          legacy_windows=False)
        console.print(table)
        used = any(isinstance(part, NumberGrid) for part in getattr(table, "renderables", []))
        return console.export_text(), used

    for edge in (True, False):
        grid, used_grid = shown(0, edge)
        table, used_table = shown(10**9, edge)
        assert used_grid and not used_table
        assert grid == table


class AsciiIO(io.StringIO):
    """A stream that says it cannot encode Unicode (rich then swaps every box)."""

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "ascii"


def test_the_benchmark_has_the_rich_full_row() -> None:
    source = (ROOT / "benchmarks" / "bench.py").read_text(encoding="utf-8")
    assert "def bench_rich_full(" in source and '"rich-full"' in source
    assert "RICH_FULL_SHAPE = (2, 64, 128" in source


def test_a_command_missing_from_the_listing_is_still_listed_once() -> None:
    from qkvcli.cli import COMMANDS, LISTING

    trimmed = tuple(entry for entry in LISTING if not entry[0].startswith("variance"))
    main.listing = trimmed  # type: ignore[attr-defined]
    try:
        shown = _help(["--help"], 80)
    finally:
        main.listing = LISTING  # type: ignore[attr-defined]
    listed = [line.split()[1] for line in shown.splitlines() if line.startswith("  qkv ")]
    assert sorted(listed) == sorted(COMMANDS) and listed[-1] == "variance"
    assert "Why scores are divided by sqrt(d_k)" in shown
