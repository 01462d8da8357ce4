"""Multi-head attend, init's writing rules and every path option: the leftovers of the
first hostile-input pass (scores [B,H,T,T], the layer's step and evaluation limits,
``--npy /x``, ``--max-elements`` above run's default, NUL in any path option)."""

from __future__ import annotations

import json

import pytest

from qkvcli.reading import limits
from tests.hostile_helpers import BASE, invoke, refused, write


def layer(heads: object = 2, tokens: int = 3, **extra: object) -> dict[str, object]:
    return {
        "heads": heads,
        "input": {"generate": {"seed": 1, "shape": [1, tokens, 4]}},
        "weights": {
            "query": {"generate": {"seed": 2, "shape": [4, 4]}},
            "key": {"generate": {"seed": 3, "shape": [4, 4]}},
            "value": {"generate": {"seed": 4, "shape": [4, 4]}},
            **extra,
        },
    }


def test_scores_are_budgeted_with_the_head_count(tmp_path):
    # One head's [1,20,20] fits 1599 elements; four heads' [1,4,20,20] do not.
    path = write(tmp_path / "f.json", layer(heads=4, tokens=20))
    refused(invoke("attend", str(path), "--max-elements", "1599"),
            "[B,H,T,T]", "[1,4,20,20]", "--max-elements")
    single = write(tmp_path / "one.json", {k: v for k, v in layer(tokens=20).items()
                                           if k != "heads"})
    assert invoke("attend", str(single), "--max-elements", "1599",
                  "--samples", "2").exit_code in (0, 1)


def test_the_layer_path_checks_the_evaluation_limit(tmp_path):
    path = write(tmp_path / "f.json", layer())
    refused(invoke("attend", str(path), "--max-evaluations", "3"), "--max-evaluations")


def test_a_step_overflowing_beside_out_proj_is_refused(tmp_path):
    big = [[1.7e308 if i == j else 0.0 for j in range(4)] for i in range(4)]
    path = write(tmp_path / "f.json", layer(out_proj_weight=big))
    refused(invoke("attend", str(path), "--step", "1e307"), "--step", "overflows")
    data = layer(out_proj_weight=big)
    data["gradcheck"] = {"step": 1e307}
    refused(invoke("attend", str(write(tmp_path / "g.json", data))), "$.gradcheck.step",
            "overflows")


@pytest.mark.parametrize(("heads", "words"), [
    (3, "divide the query/key width 4"), (True, "expected an integer"),
    (10**30, "between 1 and 4096"), (0, "between 1 and 4096"), (1.5, "expected an integer"),
], ids=["not-dividing", "bool", "huge", "zero", "float"])
def test_bad_heads_are_refused_clearly(tmp_path, heads, words):
    refused(invoke("attend", str(write(tmp_path / "f.json", layer(heads=heads)))),
            "$.heads", words)


@pytest.mark.parametrize(("npy", "words"), [
    ("/x", "absolute path /x refused"), ("a/../b", "'..' is refused"),
    ("", "non-empty relative path"), ("..", "'..' is refused"),
], ids=["absolute", "dotdot", "empty", "parent"])
def test_init_npy_takes_the_reading_rule(tmp_path, npy, words):
    out = tmp_path / "f.json"
    refused(invoke("init", "--npy", npy, "-o", str(out)), "--npy", words)
    assert not out.exists()


def test_init_npy_with_a_trailing_slash_runs(tmp_path):
    out = tmp_path / "f.json"
    assert invoke("init", "--npy", "tensors/", "-o", str(out)).exit_code == 0
    assert json.loads(out.read_text())["input"] == {"npy": "tensors/input.npy"}
    assert invoke("run", str(out)).exit_code == 0


def test_init_warns_when_run_will_need_max_elements(tmp_path):
    out = tmp_path / "f.json"
    result = invoke("init", "--generate", "--tokens", "20000", "--d-model", "10000",
                    "--max-elements", "300000000", "-o", str(out))
    assert result.exit_code == 0
    assert ("qkv: warning: the input has 200000000 elements, over the default limit "
            f"{limits.DEFAULT_MAX_ELEMENTS}; run the fixture with --max-elements 200000000"
            in result.stderr)
    quiet = invoke("init", "--generate", "--tokens", "20", "-o", str(tmp_path / "g.json"))
    assert "warning" not in quiet.stderr


def test_init_refuses_a_fixture_over_the_byte_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "MAX_FILE_BYTES", 2000)
    out = tmp_path / "f.json"
    refused(invoke("init", "--tokens", "40", "-o", str(out)), "limit of a fixture file",
            "--generate")
    refused(invoke("init", "--tokens", "400", "-o", str(out)), "limit of a fixture file")
    assert not out.exists()


PATH_OPTIONS = [
    ["run", "{p}"], ["run", "--expect", "{p}", "-"], ["run", "-o", "{p}"],
    ["run", "--junit", "{p}", "-"], ["report", "--export-svg", "{p}"], ["attend", "{p}"],
    ["quiz", "--answers", "{p}"], ["validate", "{p}"], ["inspect", "{p}"],
    ["init", "-o", "{p}"], ["init", "--from-safetensors", "{p}"], ["check", "{p}"],
    ["check", "--junit", "{p}", "x.py"], ["gradcheck", "{p}"],
]


@pytest.mark.parametrize("args", PATH_OPTIONS, ids=[" ".join(a) for a in PATH_OPTIONS])
@pytest.mark.parametrize("bad", ["a\0b", "n" * 300], ids=["nul", "long-name"])
def test_every_path_option_refuses_what_no_system_can_open(args, bad):
    result = invoke(*[bad if arg == "{p}" else arg for arg in args],
                    stdin=json.dumps(BASE).encode())
    line = refused(result)
    assert "NUL byte" in line or "longer than this system's limit" in line
    assert "internal error" not in result.output


def test_the_evaluation_limit_hint_names_only_attends_own_options(tmp_path):
    path = write(tmp_path / "f.json", layer())
    result = invoke("attend", str(path), "--max-evaluations", "3")
    # attend takes run's modes now, and counts evaluations by their cost
    refused(result, "--max-evaluations", "check less with --samples or --mode fast)",
            "evaluation units")
