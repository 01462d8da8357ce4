"""Class 6: legal but unusual encodings give the same report as the plain form."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from tests.hostile_helpers import BASE, fixture, invoke, write

X = np.array(BASE["input"], dtype=np.float64)
ENCODINGS = {
    "big-endian": lambda: X.astype(">f8"),
    "fortran": lambda: np.asfortranarray(X),
    "fortran-big-endian": lambda: np.asfortranarray(X.astype(">f8")),
    "float32": lambda: X.astype("<f4"),
    "int16-big-endian": lambda: X.astype(">i2"),
}
FORMATS = [("report", "text"), ("report", "json"), ("report", "trace"), ("attend", "text"),
           ("attend", "json")]


def _output(tmp_path, data, command, fmt):
    path = write(tmp_path / "same.json", data)  # same name: same default chapter
    result = invoke(command, str(path), "-f", fmt)
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
@pytest.mark.parametrize("command,fmt", FORMATS)
def test_npy_encodings_match_the_plain_form(tmp_path, encoding, command, fmt):
    plain = _output(tmp_path, fixture(), command, fmt)
    np.save(tmp_path / "x.npy", ENCODINGS[encoding]())
    assert _output(tmp_path, fixture(input={"npy": "x.npy"}), command, fmt) == plain


@pytest.mark.parametrize("command,fmt", FORMATS)
def test_negative_zero_matches_zero(tmp_path, command, fmt):
    plain = _output(tmp_path, fixture(), command, fmt)
    data = copy.deepcopy(BASE)
    data["input"][0][1][0] = -0.0
    data["weights"]["query"][0][1] = -0.0
    assert _output(tmp_path, data, command, fmt) == plain
    np.save(tmp_path / "x.npy", np.array(data["input"]))
    assert _output(tmp_path, fixture(input={"npy": "x.npy"}), command, fmt) == plain
