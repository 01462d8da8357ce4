"""Bad input never hurts: exit 2, one line on stderr naming file and location, no output file.

The table below names each bad input and the exact line ``qkv run`` must print for it.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from qkvcli.cli import main

BASE: dict[str, Any] = {
    "input": [[[1, 2, -1], [0, 1, 2]]],
    "weights": {
        "query": [[1, 0], [0, 1], [1, -1]],
        "key": [[0, 1], [1, 0], [-1, 1]],
        "value": [[1, 1], [1, -1], [0, 2]],
    },
}
TOP = "chapter, seed, input, weights, upstream, gradcheck, expect, value_width"


def changed(path: str, value: Any) -> bytes:
    """BASE with the value at a dotted path replaced (``None`` value deletes the key)."""
    data = copy.deepcopy(BASE)
    *parents, last = path.split(".")
    node = data
    for key in parents:
        node = node.setdefault(key, {})
    if value is None:
        del node[last]
    else:
        node[last] = value
    return json.dumps(data).encode()


def text(raw: str) -> bytes:
    return raw.encode()


BAD_INPUTS: list[tuple[str, bytes, str]] = [
    ("malformed-json", b'{"input": [1,', "$.input: line 1 column 14: invalid JSON: expecting value"),
    ("empty-file", b"", "line 1 column 1: invalid JSON: expecting value"),
    ("trailing-garbage", b'{\n  "input": []\n} x', "line 3 column 3: invalid JSON: extra data"),
    ("duplicate-key", text('{"input": [], "input": []}'), '$: line 1 column 15: duplicate key "input"'),
    ("nan", text(json.dumps(BASE).replace("-1]", "NaN]", 1)),
     "$.input[0][0][2]: line 1 column 20: NaN is not a number JSON allows; write a finite number"),
    ("negative-infinity", text(json.dumps(BASE).replace("-1]", "-Infinity]", 1)),
     "$.input[0][0][2]: line 1 column 20: -Infinity is not a number JSON allows; write a finite "
     "number"),
    ("overflow-to-inf", text(json.dumps(BASE).replace("-1]", "1e400]", 1)),
     "$.input[0][0][2]: number is too large for binary64"),
    ("not-utf8", b'{"chapter": "caf\xe9"}', "not UTF-8 text (byte 16 is 0xe9)"),
    ("deep-nesting", b"[" * 100_000 + b"]" * 100_000, "invalid JSON: nested too deeply"),
    ("top-level-array", b"[]", "$: expected an object, got array"),
    ("unknown-top-key", changed("wieghts", 1),
     f'$: unknown key "wieghts" (did you mean "weights"?); expected one of {TOP}'),
    ("unknown-tensor-key", changed("weights.query", {"valeu": [[1, 0]]}),
     '$.weights.query: unknown key "valeu" (did you mean "values"?); '
     "expected one of shape, values, name"),
    ("missing-weights", changed("weights", None), '$: missing key "weights"'),
    ("missing-branch", changed("weights.value", None), '$.weights: missing key "value"'),
    ("weights-not-object", changed("weights", [1, 2]), "$.weights: expected an object, got array"),
    ("boolean-for-number", changed("input", [[[1, True, -1], [0, 1, 2]]]),
     "$.input[0][0][1]: expected a number, got boolean"),
    ("string-for-number", changed("weights.key", [[0, 1], ["1", 0], [-1, 1]]),
     "$.weights.key[1][0]: expected a number, got string"),
    ("null-for-number", changed("weights.key", [[0, 1], [1, None], [-1, 1]]),
     "$.weights.key[1][1]: expected a number, got null"),
    ("ragged-length", changed("input", [[[1, 2, -1], [0, 1]]]),
     "$.input[0][1]: ragged nesting: expected length 3, got 2"),
    ("ragged-depth", changed("input", [[[1, 2, -1], 5]]),
     "$.input[0][1]: ragged nesting: expected an array of length 3, got number"),
    ("tensor-is-number", changed("upstream", {"query": 1}),
     "$.upstream.query: expected a nested array or an object with values, got number"),
    ("negative-dimension", changed("input", {"shape": [-1, 2, 3], "values": []}),
     "$.input.shape[0]: expected a non-negative integer, got -1"),
    ("fractional-dimension", changed("input", {"shape": [1, 1.5, 3], "values": []}),
     "$.input.shape[1]: expected a non-negative integer, got 1.5"),
    ("boolean-dimension", changed("input", {"shape": [1, 2, True], "values": []}),
     "$.input.shape[2]: expected a non-negative integer, got boolean"),
    ("count-mismatch", changed("input", {"shape": [1, 2, 3], "values": [1, 2, 3, 4, 5]}),
     "$.input.values: shape [1,2,3] needs 6 values, got 5"),
    ("absurd-shape", changed("input", {"shape": [100000, 100000, 100000], "values": []}),
     "$.input.shape: shape [100000,100000,100000] has 1000000000000000 elements, "
     "more than the limit 134217728 (raise it with --max-elements)"),
    ("empty-axis-huge-others", changed("input", {"shape": [10**11, 0, 3], "values": []}),
     "$.input.shape: shape [100000000000,0,3] is empty, but its other axes span 300000000000 "
     "elements, more than the limit 134217728 (raise it with --max-elements)"),
    ("integer-too-many-digits", text('{"seed": ' + "9" * 5000 + "}"),
     "invalid JSON: an integer has too many digits"),
    ("integer-overflows-binary64", changed("input", {"shape": [1, 1, 3],
                                                     "values": [1, 2, 10**400]}),
     "$.input.values[2]: number is too large for binary64"),
    ("weight-rank", changed("weights.query", [1, 0, 1]),
     "$.weights.query: query projection: linear weight must have rank two, got rank 1"),
    ("zero-head-width", changed("weights.key", {"shape": [3, 0], "values": []}),
     "$.weights.key: key projection: linear output width must be greater than zero"),
    ("model-width-mismatch", changed("weights.key", [[0, 1], [1, 0], [-1, 1], [2, 2]]),
     "$.weights: Q/K/V model widths must match, got query 3, key 4, value 3"),
    ("head-width-mismatch", changed("weights.value", [[1], [1], [0]]),
     "$.weights: Q/K/V head widths must match, got query 2, key 2, value 1"),
    ("bad-name", changed("weights.query", {"name": "Query", "values": [[1, 0], [0, 1], [1, -1]]}),
     "$.weights.query.name: parameter name byte 0 must be lowercase ASCII, a digit, "
     "underscore, or dot; got 'Q' (0x51)"),
    ("duplicate-name", json.dumps({**BASE, "weights": {
        "query": {"name": "same", "values": BASE["weights"]["query"]},
        "key": {"name": "same", "values": BASE["weights"]["key"]},
        "value": BASE["weights"]["value"]}}).encode(),
     '$.weights.key.name: parameter name "same" first appears at index 0 '
     "and repeats at index 1"),
    ("input-rank", changed("input", [[1, 2, -1], [0, 1, 2]]),
     "$.input: Q/K/V input must have rank three [batch, tokens, model_width], got rank 2"),
    ("input-width", changed("input", [[[1, 2], [0, 1]]]),
     "$.input: Q/K/V input final width must equal model width 3, got 2"),
    ("upstream-shape", changed("upstream", {"key": [[[1, 2, 3], [4, 5, 6]]]}),
     "$.upstream.key: expected shape [1,2,2] (batch, tokens, d_head), got [1,2,3]"),
    ("step-zero", changed("gradcheck", {"step": 0}),
     "$.gradcheck.step: central-difference step 0.0 must be positive and finite"),
    ("samples-boolean", changed("gradcheck", {"samples": True}),
     "$.gradcheck.samples: expected an integer or null, got boolean"),
    ("seed-too-large", changed("seed", 2**64),
     "$.seed: seed must be between 0 and 18446744073709551615"),
    ("chapter-two-lines", changed("chapter", "a\nb"),
     "$.chapter: expected a non-empty single-line string"),
    ("expect-shape", changed("expect", {"query": [[1, 2], [3, 4]]}),
     "$.expect.query: expected shape [1,2,2] (batch, tokens, d_head), got [2,2]"),
    ("expect-unknown-key", changed("expect", {"loss": 1, "los": 1}),
     '$.expect: unknown key "los" (did you mean "loss"?); expected one of query, key, value, '
     "loss, input_gradient, query_weight_gradient, key_weight_gradient, "
     "value_weight_gradient, tolerance"),
    ("expect-negative-tolerance", changed("expect", {"tolerance": -1}),
     "$.expect.tolerance: tolerance must not be negative"),
]


def invoke(args: list[str], cwd: Path) -> Any:
    """Run qkv in ``cwd``; the runner keeps stdout and stderr apart (click 8.2+)."""
    old = os.getcwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(main, args)
    finally:
        os.chdir(old)


@pytest.mark.parametrize(
    ("content", "line"), [case[1:] for case in BAD_INPUTS], ids=[case[0] for case in BAD_INPUTS]
)
def test_bad_input_prints_one_exact_line_and_exits_2(
    tmp_path: Path, content: bytes, line: str
) -> None:
    (tmp_path / "f.json").write_bytes(content)
    result = invoke(["run", "f.json", "-o", "out.txt"], tmp_path)
    assert result.exit_code == 2
    assert result.stderr == f"Error: f.json: {line}\n"
    assert result.stdout == ""
    assert "Traceback" not in result.output
    # nothing half-written: no output file and no temporary file left behind
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.json"]


@pytest.mark.parametrize(
    ("content", "line"), [case[1:] for case in BAD_INPUTS], ids=[case[0] for case in BAD_INPUTS]
)
def test_validate_reports_the_same_first_line(tmp_path: Path, content: bytes, line: str) -> None:
    (tmp_path / "f.json").write_bytes(content)
    result = invoke(["validate", "f.json"], tmp_path)
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == f"Error: f.json: {line}"


def test_table_is_large_enough() -> None:
    assert len(BAD_INPUTS) >= 25
    assert len({case[0] for case in BAD_INPUTS}) == len(BAD_INPUTS)


def test_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "f.json").write_bytes(b"\xef\xbb\xbf" + json.dumps(BASE).encode())
    result = invoke(["run", "f.json"], tmp_path)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("chapter=f\n")


def test_huge_file_is_refused_before_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import qkvcli.reading.limits

    monkeypatch.setattr(qkvcli.reading.limits, "MAX_FILE_BYTES", 100)
    (tmp_path / "f.json").write_bytes(json.dumps(BASE).encode())
    size = (tmp_path / "f.json").stat().st_size
    read: list[int] = []
    real_fdopen = os.fdopen

    class Spy:
        def __init__(self, handle: Any) -> None:
            self.handle = handle

        def __getattr__(self, name: str) -> Any:
            return getattr(self.handle, name)

        def __enter__(self) -> Spy:
            return self

        def __exit__(self, *exc: object) -> None:
            self.handle.close()

        def read(self, size: int = -1) -> bytes:
            read.append(size)
            return bytes(self.handle.read(size))

    monkeypatch.setattr(os, "fdopen", lambda *a, **k: Spy(real_fdopen(*a, **k)))
    result = invoke(["run", "f.json"], tmp_path)
    assert result.exit_code == 2
    assert result.stderr == f"Error: f.json: file is {size} bytes; fixtures are limited to 100\n"
    assert read == []


def test_max_elements_refuses_before_allocating(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import numpy as np

    (tmp_path / "f.json").write_bytes(
        changed("input", {"shape": [1, 2, 3], "values": [0] * 6})
    )
    calls = []
    real = np.array
    monkeypatch.setattr(np, "array", lambda *a, **k: calls.append(1) or real(*a, **k))
    result = invoke(["run", "f.json", "--max-elements", "5"], tmp_path)
    assert result.exit_code == 2
    assert result.stderr == (
        "Error: f.json: $.weights.query: shape [3,2] has 6 elements, more than the limit 5 "
        "(raise it with --max-elements)\n"
    )
    assert calls == []


def test_max_elements_default_admits_the_largest_performance_size() -> None:
    from qkvcli.reading.limits import DEFAULT_MAX_ELEMENTS

    assert DEFAULT_MAX_ELEMENTS == 2**27


@pytest.mark.parametrize("command", ["run", "report", "gradcheck", "validate"])
def test_missing_path(tmp_path: Path, command: str) -> None:
    result = invoke([command, "nope.json"], tmp_path)
    assert result.exit_code == 2
    assert result.stderr == "Error: nope.json: no such file\n"


@pytest.mark.parametrize("command", ["report", "gradcheck"])
def test_directory_is_not_a_fixture_file(tmp_path: Path, command: str) -> None:
    (tmp_path / "d").mkdir()
    result = invoke([command, "d"], tmp_path)
    assert result.exit_code == 2
    assert result.stderr == "Error: d: is a directory, not a fixture file\n"


@pytest.mark.parametrize("command", ["run", "validate"])
def test_directory_without_fixtures(tmp_path: Path, command: str) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "notes.txt").write_text("not a fixture")
    result = invoke([command, "d"], tmp_path)
    assert result.exit_code == 2
    assert result.stderr == "Error: d: no *.json fixtures in this directory\n"


@pytest.mark.parametrize("command", ["run", "validate"])
def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    # chmod 000 does not stop root, so the refusal the OS would give is simulated.
    (tmp_path / "f.json").write_bytes(json.dumps(BASE).encode())

    real_open = os.open

    def refuse(path: Any, *args: Any, **kwargs: Any) -> int:
        if os.fspath(path).endswith("f.json"):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse)
    result = invoke([command, "f.json"], tmp_path)
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == "Error: f.json: permission denied"


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root reads files whatever their mode"
)
def test_unreadable_file_for_real(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    path.write_bytes(json.dumps(BASE).encode())
    path.chmod(0)
    try:
        result = invoke(["run", "f.json"], tmp_path)
    finally:
        path.chmod(0o600)
    assert result.exit_code == 2
    assert result.stderr == "Error: f.json: permission denied\n"


def test_other_read_failures_name_the_cause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "f.json").write_bytes(json.dumps(BASE).encode())

    real_fdopen = os.fdopen

    class Failing:
        def __init__(self, handle: Any) -> None:
            self.handle = handle

        def __getattr__(self, name: str) -> Any:
            return getattr(self.handle, name)

        def __enter__(self) -> Failing:
            return self

        def __exit__(self, *exc: object) -> None:
            self.handle.close()

        def read(self, size: int = -1) -> bytes:
            raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fdopen", lambda *a, **k: Failing(real_fdopen(*a, **k)))
    for command in ("run", "validate"):
        result = invoke([command, "f.json"], tmp_path)
        assert result.exit_code == 2
        assert result.stderr.splitlines()[0] == "Error: f.json: cannot read (Input/output error)"


def test_output_refuses_to_overwrite_the_fixture(tmp_path: Path) -> None:
    content = json.dumps(BASE).encode()
    (tmp_path / "f.json").write_bytes(content)
    result = invoke(["run", "f.json", "-o", "f.json"], tmp_path)
    assert result.exit_code == 2
    assert result.stderr == "Error: -o/--output f.json: refusing to overwrite a file this command reads\n"
    assert (tmp_path / "f.json").read_bytes() == content


def test_output_is_written_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "f.json").write_bytes(json.dumps(BASE).encode())
    (tmp_path / "out.txt").write_text("previous report\n")

    def crash(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", crash)
    result = invoke(["run", "f.json", "-o", "out.txt"], tmp_path)
    assert result.exit_code != 0
    # the old file is intact and no temporary file is left behind
    assert (tmp_path / "out.txt").read_text() == "previous report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.json", "out.txt"]
