"""Class 1: every tensor path is confined to the fixture's directory, in every command."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from tests.hostile_helpers import BASE, fixture, invoke, refused, write

ESCAPES = [("/etc/passwd", "absolute path"), ("../x.npy", "'..' is refused"),
           ("a\u0000b.npy", "NUL byte")]


@pytest.mark.parametrize("raw,message", ESCAPES, ids=["absolute", "dotdot", "nul"])
@pytest.mark.parametrize("section", ["input", "expect", "upstream"])
def test_run_refuses_escaping_paths_in_every_section(tmp_path, raw, message, section):
    data = fixture()
    if section == "input":
        data["input"] = {"npy": raw}
    elif section == "expect":
        data["expect"] = {"query": {"npy": raw}}
    else:
        data["upstream"] = {"query": {"npy": raw}}
    path = write(tmp_path / "f.json", data)
    refused(invoke("run", str(path)), str(path), f"$.{section}", message)


@pytest.mark.parametrize("raw,message", ESCAPES, ids=["absolute", "dotdot", "nul"])
@pytest.mark.parametrize("section", ["input", "upstream"])
def test_attend_refuses_escaping_paths(tmp_path, raw, message, section):
    data = fixture(input={"npy": raw}) if section == "input" else fixture(
        upstream={"value": {"npy": raw}})
    path = write(tmp_path / "f.json", data)
    refused(invoke("attend", str(path)), f"$.{section}", message)


def test_symbolic_link_leading_out_is_refused(tmp_path):
    outside = tmp_path / "outside"
    inside = tmp_path / "inside"
    outside.mkdir()
    inside.mkdir()
    np.save(outside / "x.npy", np.array(BASE["input"], dtype=float))
    os.symlink(outside / "x.npy", inside / "x.npy")
    path = write(inside / "f.json", fixture(input={"npy": "x.npy"}))
    for command in ("run", "attend", "validate"):
        result = invoke(command, str(path))
        assert result.exit_code == 2
        assert "resolves outside the fixture's directory" in result.stderr


def test_init_npy_never_writes_through_a_link_leading_out(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "work").mkdir()
    os.symlink(outside, tmp_path / "work" / "link")
    out = tmp_path / "work" / "f.json"
    result = invoke("init", "--npy", "link", "-o", str(out))
    refused(result, "--npy", "leads outside")
    assert list(outside.iterdir()) == [] and not out.exists()


@pytest.mark.parametrize("directory", ["a\u0000b", "tensors/../../x", ".."])
def test_init_npy_refuses_what_run_would_refuse(tmp_path, directory):
    out = tmp_path / "f.json"
    result = invoke("init", "--npy", directory, "-o", str(out))
    assert result.exit_code == 2 and not out.exists()


def test_init_npy_writes_a_fixture_run_accepts(tmp_path):
    out = tmp_path / "f.json"
    assert invoke("init", "--npy", "./t/./u", "-o", str(out)).exit_code == 0
    assert invoke("run", str(out), "-f", "text").exit_code == 0


def test_init_refuses_projections_run_would_refuse(tmp_path: Path):
    out = tmp_path / "f.json"
    result = invoke("init", "--generate", "--tokens", "4096", "--d-head", "4096",
                    "--max-elements", str(1 << 20), "-o", str(out))
    refused(result, "upstream", "--max-elements")
    assert not out.exists()
