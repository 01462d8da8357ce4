"""Class 5: control characters from inputs are shown escaped; quoted user text is capped."""

from __future__ import annotations

import json

import pytest

from qkvcli.core.text import printable
from tests.hostile_helpers import fixture, invoke, refused, write

ESC = "\x1b[31mred\x1b[0m"


def test_printable_escapes_and_caps():
    assert printable("a\x1bb\x7f\x9c\u202e\ud800") == "a\\x1bb\\x7f\\x9c\\u202e\\ud800"
    assert printable("x" * 10, 5) == "xxxx…"
    assert printable("plain text, ünïcode") == "plain text, ünïcode"


@pytest.mark.parametrize("args", [["report"], ["report", "-f", "trace"], ["attend"],
                                  ["report", "-f", "rich", "--no-color", "--width", "100"],
                                  ["attend", "-f", "rich", "--no-color", "--width", "100"]])
def test_chapter_is_escaped_in_reports(tmp_path, args):
    path = write(tmp_path / "f.json", fixture(chapter=ESC))
    result = invoke(args[0], str(path), *args[1:])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.stdout
    if args[-1] != "trace":
        assert "\\x1b[31mred" in result.stdout


def test_unknown_key_is_escaped_and_capped(tmp_path):
    path = write(tmp_path / "f.json", fixture(**{ESC * 50: 1}))
    line = refused(invoke("run", str(path)), "unknown key", "\\x1b[31m", "…")
    assert len(line) < 400


def test_file_name_is_escaped(tmp_path):
    path = tmp_path / "bad\x1b[2J.json"
    path.write_text("{", encoding="utf-8")
    refused(invoke("run", str(path)), "bad\\x1b[2J.json")


def test_quiz_answers_are_escaped(tmp_path):
    plain = write(tmp_path / "f.json", fixture())
    answers = write(tmp_path / "a.json", json.dumps([ESC] * 9))
    result = invoke("quiz", str(plain), "--answers", str(answers))
    assert result.exit_code == 1 and "\x1b" not in result.output
    assert "your answer: \\x1b[31mred" in result.output
    keyed = write(tmp_path / "k.json", json.dumps({ESC * 40: "a"}))
    line = refused(invoke("quiz", str(plain), "--answers", str(keyed)), "\\x1b", "…")
    assert len(line) < 400


def test_validate_lines_are_escaped(tmp_path):
    path = write(tmp_path / "f.json", fixture(**{ESC: 1}))
    result = invoke("validate", str(path))
    assert result.exit_code == 2 and "\x1b" not in result.output
