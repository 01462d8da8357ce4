"""Class 3: limits on what an input makes qkv allocate or loop over, refused up front."""

from __future__ import annotations

import pytest

from tests.hostile_helpers import fixture, invoke, refused, write

# An input [1, 4096, 1] and weights [1, 4096] are small; their projections are not.
WIDE = fixture(
    input={"generate": {"seed": 1, "shape": [1, 4096, 1]}},
    weights={b: {"generate": {"seed": i, "shape": [1, 4096]}}
             for i, b in enumerate(("query", "key", "value"))},
)


@pytest.mark.parametrize("command", ["run", "report", "gradcheck", "validate"])
def test_projections_over_the_limit_are_refused(tmp_path, command):
    path = write(tmp_path / "f.json", WIDE)
    refused(invoke(command, str(path), "--max-elements", str(1 << 20)),
            "$.input", "projections [B,T,d_head]", "--max-elements")


def test_attention_scores_over_the_limit_are_refused(tmp_path):
    data = fixture(input={"generate": {"seed": 1, "shape": [1, 2048, 3]}})
    path = write(tmp_path / "f.json", data)
    refused(invoke("attend", str(path), "--max-elements", str(1 << 20)),
            "$.input", "attention scores [B,T,T]", "--max-elements")


@pytest.mark.parametrize("args,cause", [
    (["--mode", "fast", "--directions", str(10**9)], "--directions"),
    (["--mode", "full", "--max-evaluations", "10"], "every coordinate"),
    (["--samples", "6", "--max-evaluations", "10"], "--samples"),
])
def test_gradient_check_evaluations_are_limited(tmp_path, args, cause):
    path = write(tmp_path / "f.json", fixture())
    for command in ("run", "gradcheck"):
        refused(invoke(command, str(path), *args), str(path), cause, "--max-evaluations")


def test_attend_full_check_is_limited(tmp_path):
    path = write(tmp_path / "f.json", fixture())
    refused(invoke("attend", str(path), "--max-evaluations", "10"), "--max-evaluations")
    assert invoke("attend", str(path), "--samples", "1", "--max-evaluations", "10").exit_code == 0


@pytest.mark.parametrize("args", [["--width", "100000000"], ["--precision", "1000"]])
def test_rich_width_and_precision_are_limited(tmp_path, args):
    path = write(tmp_path / "f.json", fixture())
    result = invoke("run", str(path), "-f", "rich", *args)
    assert result.exit_code == 2 and args[0] in result.output


def test_a_huge_sample_count_is_clamped_not_allocated(tmp_path):
    path = write(tmp_path / "f.json", fixture())
    assert invoke("run", str(path), "--samples", str(10**12), "-f", "text").exit_code == 0


def test_huge_columns_is_capped(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100000000")
    path = write(tmp_path / "f.json", fixture())
    result = invoke("report", str(path), "-f", "rich", "--no-color")
    assert result.exit_code == 0
    assert max(len(line) for line in result.stdout.splitlines()) <= 1000


def _npy_claiming(path, shape: str) -> None:
    header = f"{{'descr': '<f8', 'fortran_order': False, 'shape': {shape}, }}".encode()
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header)


@pytest.mark.parametrize("shape", ["(1000000000000,)", "(1000000, 1000000)", "(0, 10**12)"],
                         ids=["flat", "square", "empty"])
@pytest.mark.parametrize("command", ["run", "attend", "validate", "gradcheck"])
def test_an_npy_header_claiming_10_12_values_names_the_json_path(tmp_path, command, shape):
    _npy_claiming(tmp_path / "w.npy", shape.replace("10**12", "1000000000000"))
    path = write(tmp_path / "f.json", fixture(weights={
        "query": {"npy": "w.npy"}, "key": [[1, 0], [0, 1], [1, 1]],
        "value": [[1, 0], [0, 1], [1, 1]]}))
    refused(invoke(command, str(path)), "f.json: $.weights.query.npy: shape [", "--max-elements")
