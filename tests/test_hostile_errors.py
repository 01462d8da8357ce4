"""Class 4: every input error is exit 2 with the file and location; exit 70 is for bugs only."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.hostile_helpers import BASE, fixture, invoke, refused, write


def surrogate_text(data: dict, needle: str) -> str:
    """``data`` as JSON text with ``needle`` replaced by a lone-surrogate escape."""
    return json.dumps(data).replace(needle, "\\ud800")


@pytest.mark.parametrize("command", ["run", "attend", "validate"])
@pytest.mark.parametrize("where,location", [
    ("chapter", "$.chapter"), ("name", "$.weights.query.name"),
])
def test_lone_surrogates_are_input_errors(tmp_path, command, where, location):
    data = fixture(chapter="SURR")
    data["weights"] = dict(BASE["weights"], query={"name": "SURR", "values": [[1, 0], [0, 1], [1, -1]]})
    if where == "chapter":
        data["weights"]["query"]["name"] = "q.weight"
    else:
        data["chapter"] = "ok"
    path = write(tmp_path / "f.json", surrogate_text(data, "SURR"))
    refused(invoke(command, str(path)), str(path), location, "lone surrogate")


def test_lone_surrogate_in_answers(tmp_path):
    plain = write(tmp_path / "f.json", fixture())
    answers = write(tmp_path / "a.json", '["\\udc00"]')
    refused(invoke("quiz", str(plain), "--answers", str(answers)), str(answers), "$[0]")


def test_surrogate_pairs_are_fine(tmp_path):
    path = write(tmp_path / "f.json", json.dumps(fixture(chapter="x")).replace('"x"', '"\\ud83d\\ude00"'))
    assert invoke("report", str(path)).exit_code == 0


@pytest.mark.parametrize("args", [["run", "a" * 5000], ["run", "b" * 300 + ".json"],
                                  ["run", "a\u0000b.json"], ["attend", "a\u0000b"],
                                  ["validate", "a\u0000b"], ["quiz", "--answers", "a\u0000b"],
                                  ["run", "--expect", "x" * 5000]])
def test_impossible_paths_are_usage_errors(args):
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert "internal error" not in result.output
    assert len(max(result.output.splitlines(), key=len)) < 400  # the path is capped


@pytest.mark.parametrize("section,value,location", [
    ("gradcheck", {"samples": True}, "$.gradcheck.samples"),
    ("seed", True, "$.seed"),
    ("input", {"shape": [True, 2, 3], "values": [0] * 6}, "$.input.shape[0]"),
])
@pytest.mark.parametrize("command", ["run", "attend"])
def test_booleans_are_not_integers(tmp_path, section, value, location, command):
    path = write(tmp_path / "f.json", fixture(**{section: value}))
    refused(invoke(command, str(path)), location)


def _npy_with_header(path, header: str, data: bytes) -> None:
    raw = header.encode("latin1")
    raw += b" " * (63 - (10 + len(raw)) % 64) + b"\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + len(raw).to_bytes(2, "little") + raw + data)


@pytest.mark.parametrize("shape,message", [
    ("(True, 2, 3)", "not a non-negative integer"), ("(-1, 2, 3)", "not a non-negative integer"),
    ("(" + "9" * 5000 + ", 2, 3)", "unreadable .npy header"),
])
@pytest.mark.parametrize("command", ["run", "attend"])
def test_npy_header_shapes(tmp_path, shape, message, command):
    _npy_with_header(tmp_path / "x.npy",
                     f"{{'descr': '<f8', 'fortran_order': False, 'shape': {shape}, }}",
                     np.zeros(6).tobytes())
    path = write(tmp_path / "f.json", fixture(input={"npy": "x.npy"}))
    refused(invoke(command, str(path)), "$.input.npy", message)


@pytest.mark.parametrize("command", ["run", "attend"])
@pytest.mark.parametrize("text,location", [
    ('{"step": 1e400}', "$.gradcheck.step"), ('{"tolerance": 1e400}', "$.gradcheck.tolerance"),
    ('{"step": 1e308}', "$.gradcheck.step"),
])
def test_overflowing_steps_and_tolerances(tmp_path, command, text, location):
    body = json.dumps(fixture())[:-1] + f', "gradcheck": {text}}}'
    path = write(tmp_path / "f.json", body)
    refused(invoke(command, str(path)), str(path), location)


@pytest.mark.parametrize("command", ["run", "attend"])
def test_step_that_overflows_beside_a_weight(tmp_path, command):
    data = fixture(gradcheck={"step": 1e308})
    data["weights"] = dict(BASE["weights"], query=[[1.7e308, 0], [0, 1], [1, -1]])
    path = write(tmp_path / "f.json", data)
    refused(invoke(command, str(path)), "$.gradcheck.step")
    plain = write(tmp_path / "p.json", fixture(weights=data["weights"]))
    refused(invoke(command, str(plain), "--step", "1e307"), str(plain), "--step", "overflows")
    refused(invoke(command, str(plain), "--step", "1e308"), "--step")


def test_integer_too_long(tmp_path):
    path = write(tmp_path / "f.json", json.dumps(fixture())[:-1] + ', "seed": ' + "9" * 5000 + "}")
    for command in ("run", "attend"):
        refused(invoke(command, str(path)), "too many digits")


def test_generate_scale_that_overflows(tmp_path):
    data = fixture(input={"generate": {"seed": 1, "shape": [1, 2, 3], "distribution": "normal",
                                       "scale": 1e308}})
    path = write(tmp_path / "f.json", data)
    refused(invoke("run", str(path)), "$.input.generate.scale", "overflows")


def test_no_python_warning_reaches_stderr(tmp_path):
    data = fixture()
    data["weights"] = dict(BASE["weights"], query=[[1e300, 0], [0, 1], [1, -1]])
    path = write(tmp_path / "f.json", data)
    for args in (["gradcheck", "--dtype", "float32"], ["run"], ["attend"]):
        done = subprocess.run([sys.executable, "-m", "qkvcli", *args, str(path)],
                              capture_output=True, text=True, check=False)
        assert done.returncode == 1, done.stderr
        assert "Warning" not in done.stderr, done.stderr


def test_out_of_memory_names_the_file(tmp_path, monkeypatch):
    import qkvcli.cli.evidence as evidence  # where run calls it

    def exhausted(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(evidence, "build_evidence", exhausted)
    path = write(tmp_path / "f.json", fixture())
    refused(invoke("run", str(path)), str(path), "out of memory")
