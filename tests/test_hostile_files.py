"""Class 2: regular files only, a byte limit that trusts no reported size, ``-`` for stdin."""

from __future__ import annotations

import json
import os
import threading

import numpy as np
import pytest

from qkvcli.reading import limits
from tests.hostile_helpers import BASE, fixture, invoke, refused, write


@pytest.mark.parametrize("option", ["fixture", "npy", "golden", "answers"])
def test_a_fifo_is_refused_without_hanging(tmp_path, option):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    plain = write(tmp_path / "f.json", fixture())
    args = {
        "fixture": ["run", str(fifo)],
        "npy": ["run", str(write(tmp_path / "n.json", fixture(input={"npy": "pipe"})))],
        "golden": ["run", str(plain), "--expect", str(fifo)],
        "answers": ["quiz", str(plain), "--answers", str(fifo)],
    }[option]
    outcome: list[object] = []
    thread = threading.Thread(target=lambda: outcome.append(invoke(*args)), daemon=True)
    thread.start()
    thread.join(20)
    assert outcome, "the command blocked on a FIFO"
    refused(outcome[0], "FIFO")


@pytest.mark.parametrize("args", [["run", "/dev/zero"], ["quiz", "--answers", "/dev/zero"],
                                  ["run", "--expect", "/dev/zero"], ["attend", "/dev/null"]])
def test_devices_are_refused(args):
    refused(invoke(*args), "character device")


def test_a_directory_as_npy_is_refused(tmp_path):
    (tmp_path / "d.npy").mkdir()
    path = write(tmp_path / "f.json", fixture(input={"npy": "d.npy"}))
    refused(invoke("run", str(path)), "$.input.npy", "directory")


def test_stdin_runs_a_fixture_like_a_file(tmp_path):
    path = write(tmp_path / "f.json", BASE)
    from_file = invoke("report", str(path))
    from_stdin = invoke("report", "-", stdin=json.dumps(BASE).encode())
    assert from_stdin.exit_code == 0
    assert from_stdin.stdout.splitlines()[1:] == from_file.stdout.splitlines()[1:]
    assert from_stdin.stdout.splitlines()[0] == "chapter=stdin"
    assert invoke("attend", "-", stdin=json.dumps(BASE).encode()).exit_code == 0
    assert invoke("validate", "-", stdin=json.dumps(BASE).encode()).exit_code == 0


def test_stdin_is_read_under_the_limit(monkeypatch):
    monkeypatch.setattr(limits, "MAX_FILE_BYTES", 100)
    refused(invoke("run", "-", stdin=b" " * 101 + json.dumps(BASE).encode()),
            "<stdin>", "limited to 100")


def test_stdin_errors_name_stdin():
    refused(invoke("run", "-", stdin=b'{"input": 1}'), "<stdin>", "$")


def test_npy_over_the_element_limit_is_refused_from_its_header(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((1, 4, 3)))
    path = write(tmp_path / "f.json", fixture(input={"npy": "x.npy"}))
    refused(invoke("run", str(path), "--max-elements", "8"), "$.input.npy", "--max-elements")
