"""Fuzzing the surfaces that came with multi-head attention: attend layer fixtures
(heads, out_proj, c_attn, upstream.output) and .safetensors headers. No input ends in
exit 70, a traceback, a Python warning or a raw escape character."""

from __future__ import annotations

import copy
import json
import struct
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qkvcli.cli import main
from tests.hostile_helpers import json_paths

FUZZ = settings(max_examples=40, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])

LAYER: dict[str, Any] = {
    "heads": 2,
    "input": [[[1, 2, -1, 0], [0, 1, 2, 1]]],
    "weights": {
        "c_attn_weight": [[(i * 5 + j) % 7 - 3 for j in range(12)] for i in range(4)],
        "c_attn_bias": [0.5] * 12,
        "c_proj_weight": [[1, 0, 0, 1], [0, 1, 1, 0], [1, 1, 0, 0], [0, 0, 1, 1]],
        "c_proj_bias": [0, 0, 0, 1],
    },
    "upstream": {"output": [[[1, 0, -1, 2], [0.5, 0, 0, 1]]]},
    "gradcheck": {"samples": 2},
}

LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 5), st.integers(),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e308, -0.0, 0.5, 4096]),
    st.text(max_size=5), st.sampled_from(["out_proj_weight", "heads", "\x1b[2J", "\ud800"]),
)
VALUES = st.recursive(LEAVES, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(
        ["values", "shape", "npy", "safetensors", "tensor", "generate", "seed"]), inner,
        max_size=3)), max_leaves=10)


LAYER_PATHS = json_paths(LAYER)[1:]


def harmless(result: Any) -> None:
    assert result.exit_code in (0, 1, 2), (result.exit_code, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    for text in ("Traceback", "internal error", "Warning:", "\x1b"):
        assert text not in result.output, (text, result.output)
    if result.exit_code == 2:
        assert any(line.startswith("Error: ") for line in result.stderr.splitlines())


@FUZZ
@given(swaps=st.lists(st.tuples(st.sampled_from(LAYER_PATHS), VALUES), max_size=3),
       drop=st.lists(st.sampled_from(LAYER_PATHS), max_size=1),
       heads=st.none() | st.integers(-1, 10**20).map(str))
def test_attend_layer_fixtures_are_harmless(tmp_path: Path, swaps: list[Any], drop: list[Any],
                                            heads: str | None) -> None:
    data = copy.deepcopy(LAYER)
    for path, value in swaps:
        parent: Any = data
        try:
            for key in path[:-1]:
                parent = parent[key]
            parent[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            pass
    for path in drop:
        parent = data
        try:
            for key in path[:-1]:
                parent = parent[key]
            del parent[path[-1]]
        except (KeyError, IndexError, TypeError):
            pass
    fixture = tmp_path / "f.json"
    fixture.write_bytes(json.dumps(data).encode("utf-8", "surrogatepass"))
    extra = [] if heads is None else ["--heads", heads]
    for args in (["attend", *extra], ["attend", "--causal", "-f", "json", *extra]):
        harmless(CliRunner().invoke(main, [*args, str(fixture)]))


safetensors = pytest.importorskip("safetensors")

SIZES = {"F32": 4, "F64": 8, "F16": 2, "BF16": 2, "I32": 4, "BOOL": 1}


@st.composite
def entries(draw: Any) -> dict[str, Any]:
    """A consistent entry (dtype, shape, offsets that fit), sometimes with one field
    replaced by anything: the library accepts many, so qkv's own checks run too."""
    dtype = draw(st.sampled_from(sorted(SIZES)))
    shape = draw(st.sampled_from([[2, 1], [1, 2], [2], [0, 1], [4, 2], [], [3, 1]]))
    count = 1
    for dim in shape:
        count *= dim
    entry: dict[str, Any] = {"dtype": dtype, "shape": shape,
                             "data_offsets": [0, count * SIZES[dtype]]}
    field = draw(st.sampled_from([None] * 6 + ["dtype", "shape", "data_offsets"]))
    if field is not None:
        entry[field] = draw(st.one_of(LEAVES, st.lists(st.integers(), max_size=3),
                                      st.text(max_size=4)))
    return entry


HEADERS = st.one_of(
    st.fixed_dictionaries({"t": entries()}),
    st.dictionaries(st.sampled_from(["t", "__metadata__", "x\x1by", "\u202e"]),
                    st.one_of(entries(), VALUES), max_size=3),
)


def _end(header: Any) -> int:
    """The largest end offset the header names (the data length a valid file has)."""
    ends = [entry["data_offsets"][-1] for entry in header.values()
            if isinstance(entry, dict) and isinstance(entry.get("data_offsets"), list)
            and entry["data_offsets"] and isinstance(entry["data_offsets"][-1], int)]
    return max([0, *ends]) if max([0, *ends]) < 4096 else 0


@FUZZ
@given(header=HEADERS, slack=st.sampled_from([0, 0, 0, -1, 1, 2**63]),
       fit=st.sampled_from([True, True, True, False]),
       data=st.one_of(st.binary(max_size=48), st.sampled_from([
           b"\0\0\x80\x3f", b"\0\0\xc0\x7f", b"\xff", b"\x01\x02\x03"])))
def test_safetensors_headers_are_harmless(tmp_path: Path, header: Any, slack: int, fit: bool,
                                          data: bytes) -> None:
    if fit:  # as long as the header says: the library's own checks pass more often
        data = (data or b"\0") * (_end(header) // len(data or b"\0") + 1)
        data = data[:_end(header)]
    encoded = json.dumps(header).encode()
    stated = (len(encoded) + slack) % 2**64
    (tmp_path / "c.safetensors").write_bytes(struct.pack("<Q", stated) + encoded + data)
    fixture = tmp_path / "f.json"
    fixture.write_text(json.dumps({
        "input": [[[1, 2]]],
        "weights": {"query": {"safetensors": "c.safetensors", "tensor": "t"},
                    "key": [[1], [0]], "value": [[1], [0]]},
    }))
    harmless(CliRunner().invoke(main, ["inspect", str(tmp_path / "c.safetensors")]))
    harmless(CliRunner().invoke(main, ["attend", str(fixture)]))
    harmless(CliRunner().invoke(main, ["validate", str(fixture)]))
