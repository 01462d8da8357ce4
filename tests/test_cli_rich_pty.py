"""``qkv run`` in a real pseudo-terminal: the rich figure on a terminal, text in a pipe."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

pty = pytest.importorskip("pty")
fcntl = pytest.importorskip("fcntl")
termios = pytest.importorskip("termios")

import struct  # noqa: E402 - only after the POSIX-only modules are known to exist

TERMINAL_VARS = ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "TERM",
                 "COLUMNS", "LINES", "COLORTERM")
SGR = re.compile(r"\x1b\[([0-9;]*)m")
QKV = [sys.executable, "-m", "qkvcli"]


def colour_codes(text: str) -> list[str]:
    found = []
    for params in SGR.findall(text):
        for part in (int(p) for p in params.split(";") if p):
            if part in (38, 48) or 30 <= part <= 37 or 40 <= part <= 47 or 90 <= part <= 107:
                found.append(params)
                break
    return found


def in_pty(argv: list[str], columns: int = 100, **env: str) -> tuple[int, str]:
    """Run ``argv`` with stdin, stdout and stderr on a fresh pty of ``columns`` columns."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    environment = {k: v for k, v in os.environ.items() if k not in TERMINAL_VARS}
    environment.update(TERM="xterm-256color", **env)
    process = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave,
                               env=environment, close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed its side
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    code = process.wait(timeout=60)
    # The terminal turns each newline into CR LF on the way out.
    return code, b"".join(chunks).decode("utf-8").replace("\r\n", "\n")


def text_report() -> str:
    done = subprocess.run([*QKV, "report", "-f", "text"], capture_output=True, text=True,
                          check=True, timeout=60)
    return done.stdout


def test_run_on_a_terminal_shows_the_figure_in_colour() -> None:
    """The control: on a terminal, without NO_COLOR, the figure is coloured."""
    code, out = in_pty([*QKV, "run"])
    assert code == 0
    assert colour_codes(out)
    assert "Query projection (solid)" in SGR.sub("", out)


def test_no_color_run_on_a_terminal_prints_no_colour_codes() -> None:
    code, out = in_pty([*QKV, "run"], NO_COLOR="1")
    assert code == 0
    assert colour_codes(out) == []
    words = SGR.sub("", out)
    for title in ("Query projection (solid)", "Key projection (dashed)",
                  "Value projection (double)", "verdict: PASS (8 of 8 checks passed)"):
        assert title in words


@pytest.mark.parametrize("columns", [80, 160], ids=["80-columns", "160-columns"])
def test_run_follows_the_terminal_width(columns: int) -> None:
    _, out = in_pty([*QKV, "run"], columns=columns, NO_COLOR="1")
    lines = SGR.sub("", out).splitlines()
    assert max(len(line) for line in lines) == columns
    titles = [i for i, line in enumerate(lines) if "projection (" in line]
    # Stacked at 80 columns, side by side (one line) at 160.
    assert len(set(titles)) == (3 if columns == 80 else 1)


def test_run_piped_through_cat_prints_the_plain_text_report() -> None:
    code, out = in_pty(["sh", "-c", shlex.join([*QKV, "run"]) + " | cat"])
    assert code == 0
    assert out == text_report()
    assert "\x1b" not in out
