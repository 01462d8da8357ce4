"""``qkv init`` and ``qkv validate`` through the command line."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from qkvcli.cli import main
from qkvcli.core.projections import QkvProjections
from qkvcli.core.splitmix import SplitMix64
from qkvcli.reading.load import bundled_fixture_text, load_fixture

ROOT = Path(__file__).resolve().parent.parent


def invoke(args: list[str], cwd: Path) -> Any:
    old = os.getcwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(main, args)
    finally:
        os.chdir(old)


INIT_7 = ["init", "--seed", "7", "--batch", "2", "--tokens", "3", "--d-model", "5",
          "--d-head", "4", "-o", "f.json"]


def test_init_then_run_passes(tmp_path: Path) -> None:
    result = invoke(INIT_7, tmp_path)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    run = invoke(["run", "f.json"], tmp_path)
    assert run.exit_code == 0, run.stderr
    assert "config=batch:2 tokens:3 d_model:5 d_head:4 bias:false\n" in run.stdout
    assert "initialization=seed:7 " in run.stdout


def test_init_weights_equal_the_seeded_initialization(tmp_path: Path) -> None:
    invoke(INIT_7, tmp_path)
    fixture = load_fixture(tmp_path / "f.json")
    reference = QkvProjections.from_seed(5, 4, SplitMix64(7))
    for got, want in zip(fixture.weights, reference.weights, strict=True):
        assert got.tobytes() == want.tobytes()
    assert json.loads((tmp_path / "f.json").read_text())["seed"] == 7


def test_init_never_overwrites_without_force(tmp_path: Path) -> None:
    (tmp_path / "f.json").write_text("mine\n")
    result = invoke(INIT_7, tmp_path)
    assert result.exit_code == 2
    assert result.stderr == "Error: -o/--output f.json: already exists (use --force to overwrite it)\n"
    assert (tmp_path / "f.json").read_text() == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.json"]
    forced = invoke([*INIT_7, "--force"], tmp_path)
    assert forced.exit_code == 0
    assert json.loads((tmp_path / "f.json").read_text())["seed"] == 7


def test_init_refuses_when_the_file_appears_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The existence check passes, then someone creates the file before the link.
    real_link = os.link

    def racing_link(src: str, dst: str) -> None:
        Path(dst).write_text("theirs\n")
        real_link(src, dst)

    monkeypatch.setattr(os, "link", racing_link)
    result = invoke(INIT_7, tmp_path)
    assert result.exit_code == 2
    assert (tmp_path / "f.json").read_text() == "theirs\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.json"]


def test_init_from_chapter_writes_the_chapter_fixture(tmp_path: Path) -> None:
    result = invoke(["init", "--from-chapter", "-o", "ch.json"], tmp_path)
    assert result.exit_code == 0
    assert (tmp_path / "ch.json").read_text() == bundled_fixture_text()
    assert invoke(["report", "ch.json"], tmp_path).stdout == invoke(["report"], tmp_path).stdout


def test_init_from_chapter_refuses_size_options(tmp_path: Path) -> None:
    result = invoke(["init", "--from-chapter", "--seed", "3"], tmp_path)
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1] == (
        "Error: --from-chapter writes the chapter's fixture; drop --seed"
    )


def test_init_prints_to_stdout_without_output(tmp_path: Path) -> None:
    result = invoke(["init", "--seed", "1"], tmp_path)
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["seed"] == 1
    assert np.array(data["input"]).shape == (1, 2, 3)
    assert list(tmp_path.iterdir()) == []


def test_init_same_seed_same_bytes(tmp_path: Path) -> None:
    first = invoke(["init", "--seed", "9", "--batch", "3"], tmp_path).stdout
    second = invoke(["init", "--seed", "9", "--batch", "3"], tmp_path).stdout
    assert first == second
    other = invoke(["init", "--seed", "10", "--batch", "3"], tmp_path).stdout
    assert first != other


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--d-head", "0"], "Invalid value for '--d-head': 0 is not in the range x>=1."),
        (["--batch", "-1"], "Invalid value for '--batch': -1 is not in the range x>=0."),
        (["--seed", str(2**64)], "Invalid value for '--seed': 18446744073709551616 is not in "
                                 "the range 0<=x<=18446744073709551615."),
        (["--tokens", "1.5"], "Invalid value for '--tokens': '1.5' is not a valid integer range."),
    ],
    ids=["zero-head", "negative-batch", "seed-too-large", "fractional-tokens"],
)
def test_init_refuses_bad_sizes(tmp_path: Path, args: list[str], message: str) -> None:
    result = invoke(["init", *args], tmp_path)
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1] == f"Error: {message}"


def test_init_refuses_too_many_elements(tmp_path: Path) -> None:
    result = invoke(["init", "--batch", "10", "--tokens", "10", "--d-model", "10",
                     "--max-elements", "999", "-o", "f.json"], tmp_path)
    assert result.exit_code == 2
    assert result.stderr == (
        "Error: the input would have 1000 elements, more than the limit 999 "
        "(raise it with --max-elements)\n"
    )
    assert list(tmp_path.iterdir()) == []


# --- validate ----------------------------------------------------------------------------


def test_validate_bundled_and_example_fixtures_pass(tmp_path: Path) -> None:
    result = invoke(["validate", str(ROOT / "fixtures"), str(ROOT / "fixtures" / "examples"),
                     str(ROOT / "qkvcli" / "data" / "ch26-qkv-projections.json")], tmp_path)
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    # a chapter 27-30 fixture is named by its chapter: "FILE: ok (27-self-attention fixture)"
    assert len(lines) >= 6 and all(line.endswith(": ok") or line.endswith(" fixture)")
                                   for line in lines)


MANY_PROBLEMS = {
    "chapter": "",
    "input": [[1, 2]],
    "weights": {
        "query": {"valeu": [[1]]},
        "key": [[0, 1], [1, True]],
        "value": [[1, 1], [1, -1]],
        "bias": [1],
    },
    "upstream": {"query": "ones"},
    "gradcheck": {"step": -1, "tolerance": "small", "samples": 0},
    "seed": -5,
    "expect": {"loss": [1], "tolerence": 0},
}


def test_validate_reports_every_problem_with_its_location(tmp_path: Path) -> None:
    (tmp_path / "f.json").write_text(json.dumps(MANY_PROBLEMS))
    result = invoke(["validate", "f.json"], tmp_path)
    assert result.exit_code == 2
    assert result.stdout == ""
    expected = [
        '$.weights: unknown key "bias"; expected one of query, key, value',
        '$.weights.query: unknown key "valeu" (did you mean "values"?); '
        "expected one of shape, values, name",
        "$.weights.key[1][1]: expected a number, got boolean",
        # no width comparison: query and key failed to parse
        "$.input: Q/K/V input must have rank three [batch, tokens, model_width], got rank 2",
        "$.upstream.query: expected a nested array or an object with values, got string",
        "$.gradcheck.step: central-difference step -1.0 must be positive and finite",
        "$.gradcheck.tolerance: expected a number, got string",
        "$.gradcheck.samples: gradient check needs at least one sample per tensor",
        "$.seed: seed must be between 0 and 18446744073709551615",
        "$.chapter: expected a non-empty single-line string",
        '$.expect: unknown key "tolerence" (did you mean "tolerance"?); expected one of query, '
        "key, value, loss, input_gradient, query_weight_gradient, key_weight_gradient, "
        "value_weight_gradient, tolerance",
        "$.expect.loss: expected a number, got array",
    ]
    assert result.stderr.splitlines() == [f"Error: f.json: {line}" for line in expected]


def test_validate_checks_shapes_once_the_parts_they_need_are_valid(tmp_path: Path) -> None:
    data = {
        "input": [[[1, 2, -1], [0, 1, 2]]],
        "weights": {"query": [[1, 0], [0, 1], [1, -1]], "key": [[0, 1], [1, 0], [-1, 1]],
                    "value": [[1, 1], [1, -1], [0, 2]]},
        "upstream": {"query": [[[1, 0, 0]]], "value": [[[1, 2], [3, 4]]], "key": [[[1]]]},
        "expect": {"key_weight_gradient": [[1, 2]], "input_gradient": [[[0, 0]]]},
    }
    (tmp_path / "f.json").write_text(json.dumps(data))
    result = invoke(["validate", "f.json"], tmp_path)
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "Error: f.json: $.upstream.query: expected shape [1,2,2] (batch, tokens, d_head), "
        "got [1,1,3]",
        "Error: f.json: $.upstream.key: expected shape [1,2,2] (batch, tokens, d_head), "
        "got [1,1,1]",
        "Error: f.json: $.expect.input_gradient: expected shape [1,2,3] "
        "(batch, tokens, d_model), got [1,1,2]",
        "Error: f.json: $.expect.key_weight_gradient: expected shape [3,2] (d_model, d_head), "
        "got [1,2]",
    ]


def test_validate_several_files_reports_each_and_counts(tmp_path: Path) -> None:
    (tmp_path / "good.json").write_text(bundled_fixture_text())
    (tmp_path / "bad.json").write_text('{"input": []}')
    (tmp_path / "broken.json").write_text("{")
    result = invoke(["validate", "good.json", "bad.json", "broken.json", "gone.json"], tmp_path)
    assert result.exit_code == 2
    assert result.stdout == "good.json: ok\n"
    assert result.stderr.splitlines() == [
        'Error: bad.json: $: missing key "weights"',
        "Error: bad.json: $.input: Q/K/V input must have rank three "
        "[batch, tokens, model_width], got rank 1; an empty nested list cannot show its inner "
        'axes, so write an empty input as {"shape": [0, tokens, d_model], "values": []}',
        "Error: broken.json: line 1 column 2: invalid JSON: "
        "expecting property name enclosed in double quotes",
        "Error: gone.json: no such file",
        "qkv: 4 problems in 3 of 4 fixtures",
    ]


def test_validate_stops_after_many_problems(tmp_path: Path) -> None:
    data = {"input": [], "weights": {}, **{f"k{i}": i for i in range(150)}}
    (tmp_path / "f.json").write_text(json.dumps(data))
    result = invoke(["validate", "f.json"], tmp_path)
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 101
    assert lines[-1] == "Error: f.json: stopped after 100 problems"


def test_validate_needs_a_fixture(tmp_path: Path) -> None:
    result = invoke(["validate"], tmp_path)
    assert result.exit_code == 2
    assert "Missing argument 'FIXTURES...'" in result.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("command", ["validate", "run", "attend"])
def test_a_fifo_is_refused_without_hanging(tmp_path: Path, command: str) -> None:
    import threading

    os.mkfifo(tmp_path / "pipe.json")
    results: list[Any] = []
    thread = threading.Thread(
        target=lambda: results.append(invoke([command, "pipe.json"], tmp_path)), daemon=True
    )
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), f"qkv {command} blocked on a FIFO"
    assert results[0].exit_code == 2
    assert results[0].stderr == "Error: pipe.json: is a FIFO, not a fixture file\n"
