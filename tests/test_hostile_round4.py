"""Hostile input, round 4: outputs never replace inputs, signals end every process qkv
started, one snapshot of each input, closed standard streams, unforgeable purity,
batches that keep going, long output names, safetensors offsets, located errors."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from .hostile_helpers import BASE, fixture, invoke, refused, write

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "implementations"
WRONG = str(EXAMPLES / "wrong_no_value_path.py")
CHAPTER = Path(__file__).resolve().parent.parent / "qkvcli" / "data" / "ch26-qkv-projections.json"


# --- 1. nothing a user owns is overwritten unless named as an output ---------------------


def test_save_failures_never_replaces_the_fixture_it_checks(tmp_path):
    folder = tmp_path / "sf"
    folder.mkdir()
    given = folder / "01-chapter.json"
    shutil.copy(CHAPTER, given)
    before = given.read_bytes()
    result = invoke("check", WRONG, str(given), "--random", "0", "-f", "text",
                    "--save-failures", str(folder))
    refused(result, str(given), "refusing to overwrite a file this command reads")
    assert given.read_bytes() == before
    assert sorted(p.name for p in folder.iterdir()) == ["01-chapter.json"]


def test_save_failures_never_replaces_the_implementation_through_a_link(tmp_path):
    folder = tmp_path / "sf"
    folder.mkdir()
    impl = tmp_path / "impl.py"
    shutil.copy(WRONG, impl)
    before = impl.read_bytes()
    (folder / "01-chapter.requests.jsonl").symlink_to(impl)
    result = invoke("check", str(impl), "--random", "0", "-f", "text",
                    "--save-failures", str(folder))
    refused(result, "01-chapter.requests.jsonl", "refusing to overwrite a file this command reads")
    assert impl.read_bytes() == before


@pytest.mark.parametrize("kind", ["fifo", "symlink"])
def test_save_failures_replaces_only_regular_files(tmp_path, kind):
    folder = tmp_path / "sf"
    folder.mkdir()
    place = folder / "01-chapter.json"
    elsewhere = tmp_path / "notes.txt"
    elsewhere.write_text("mine\n")
    if kind == "fifo":
        os.mkfifo(place)
    else:
        place.symlink_to(elsewhere)
    result = invoke("check", WRONG, "--random", "0", "-f", "text", "--save-failures", str(folder))
    refused(result, str(place), "qkv replaces only a regular file there")
    assert elsewhere.read_text() == "mine\n"
    assert place.is_fifo() if kind == "fifo" else place.is_symlink()


def test_an_output_never_replaces_a_tensor_file_the_fixture_read(tmp_path):
    np.save(tmp_path / "x.npy", np.array(BASE["input"], dtype=np.float64))
    path = write(tmp_path / "f.json", fixture(input={"npy": "x.npy"}))
    before = (tmp_path / "x.npy").read_bytes()
    result = invoke("run", str(path), "-f", "text", "-o", str(tmp_path / "x.npy"))
    refused(result, "x.npy", "refusing to overwrite a file this command reads")
    assert (tmp_path / "x.npy").read_bytes() == before
    assert invoke("run", str(path), "-f", "text", "-o", str(tmp_path / "out.txt")).exit_code == 0


# --- 7. temporary names fit wherever the output's name fits -------------------------------


@pytest.mark.parametrize("name", ["o" * 253 + ".t", "é" * 126 + "x"], ids=["ascii", "utf8"])
def test_an_output_name_at_the_limit_is_written(tmp_path, name):
    target = tmp_path / name
    assert len(os.fsencode(name)) <= 255
    result = invoke("run", "-f", "text", "-o", str(target))
    assert result.exit_code == 0, result.output
    assert target.read_text().startswith("chapter=")
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]
