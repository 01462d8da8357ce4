"""The CLI with gradient-check modes, float32 gradients, and .npy / generated fixtures."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from qkvcli.authoring.starter import generated_fixture_document
from qkvcli.cli import main

# The chapter's reference outputs, as the repository holds them (tests/golden/ch26).
ANCHORS = Path(__file__).resolve().parent / "golden" / "ch26"


def _invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_gradcheck_fast_mode_lists_directions():
    result = _invoke("gradcheck", "--mode", "fast", "--directions", "2")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["tensor", "coordinate", "analytic", "numerical",
                                "scaled_error", "pass"]
    assert [line.split()[:2] for line in lines[1:9]] == [
        [tensor, f"u{k}"] for tensor in ("input", "query_weight", "key_weight", "value_weight")
        for k in range(2)
    ]
    assert lines[-3] == "mode=fast (fast: 8 directions)"
    assert lines[-2].startswith("gradcheck=checks:8 input:2 query_weight:2")
    assert lines[-1] == "verdict: PASS (8 of 8 checks passed)"


def test_gradcheck_json_names_the_mode():
    result = _invoke("gradcheck", "--mode", "sampled", "--samples", "2", "-f", "json")
    document = json.loads(result.stdout)
    assert document["mode"] == "sampled"
    assert [t["mode"] for t in document["tensors"]] == ["sampled"] * 4
    assert document["count"] == 8
    fast = json.loads(_invoke("gradcheck", "--mode", "fast", "-f", "json").stdout)
    first = fast["tensors"][0]["checks"][0]
    assert first["direction"] == 0 and "flat_index" not in first


@pytest.mark.parametrize("mode", ["auto", "full"])
def test_report_text_is_unchanged_by_the_full_modes(mode):
    result = _invoke("report", "--format", "text", "--mode", mode)
    assert result.stdout == (ANCHORS / "expected.txt").read_text(encoding="utf-8")


def test_report_json_detail_notes_the_mode():
    checks = json.loads(_invoke("report", "-f", "json", "--mode", "fast").stdout)["checks"]
    detail = {c["name"]: c["detail"] for c in checks}["gradcheck"]
    assert detail == "fast: 12 directions, step 1e-06, tolerance 2e-06"
    checks = json.loads(_invoke("report", "-f", "json").stdout)["checks"]
    detail = {c["name"]: c["detail"] for c in checks}["gradcheck"]
    assert detail == "24 coordinates, step 1e-06, tolerance 2e-06"


def test_gradcheck_float32_gradients():
    result = _invoke("gradcheck", "--dtype", "float32")
    assert result.exit_code == 0  # the chapter's small integers are exact in float32 too
    result = _invoke("gradcheck", "--dtype", "float16")
    assert result.exit_code == 2


def test_generated_fixture_runs(tmp_path):
    path = tmp_path / "gen.json"
    path.write_text(json.dumps(generated_fixture_document(3, 2, 8, 16, 4)), encoding="utf-8")
    result = _invoke("run", str(path), "--mode", "fast")
    assert result.exit_code == 0, result.output
    assert "config=batch:2 tokens:8 d_model:16 d_head:4 bias:false" in result.stdout


def test_npy_fixture_runs_from_another_directory(tmp_path, monkeypatch):
    data = tmp_path / "fixture"
    data.mkdir()
    np.save(data / "x.npy", np.array([[[1.0, 2.0, -1.0], [0.0, 1.0, 2.0]]]))
    chapter = json.loads(_invoke("report", "-f", "json").stdout)
    document = {
        "chapter": "26-qkv-projections",
        "input": {"npy": "x.npy"},
        "weights": {b: [[1, 0], [0, 1], [1, -1]] for b in ("query",)}
        | {"key": [[0, 1], [1, 0], [-1, 1]], "value": [[1, 1], [1, -1], [0, 2]]},
        "upstream": {"query": [[[1, 0], [-1, 2]]], "key": [[[0.5, -1], [1, 0]]],
                     "value": [[[2, 1], [0, -0.5]]]},
    }
    (data / "f.json").write_text(json.dumps(document), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    result = _invoke("report", "-f", "json", "fixture/f.json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["tensors"] == chapter["tensors"]


def test_missing_npy_is_one_line_and_exit_two(tmp_path):
    path = tmp_path / "f.json"
    path.write_text(json.dumps({
        "input": {"npy": "gone.npy"},
        "weights": {b: [[1.0]] for b in ("query", "key", "value")},
    }), encoding="utf-8")
    result = _invoke("run", str(path))
    assert result.exit_code == 2
    assert result.stderr == f"Error: {path}: $.input.npy: no such file: gone.npy\n"
    assert result.stdout == ""


def test_npy_over_the_element_limit_is_refused(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((1, 10, 10)))
    path = tmp_path / "f.json"
    path.write_text(json.dumps({
        "input": {"npy": "x.npy"},
        "weights": {b: {"generate": {"seed": 1, "shape": [10, 2]}}
                    for b in ("query", "key", "value")},
    }), encoding="utf-8")
    result = _invoke("run", str(path), "--max-elements", "50")
    assert result.exit_code == 2
    assert result.stderr == (
        f"Error: {path}: $.input.npy: shape [1,10,10] has 100 elements, more than the limit "
        "50 (raise it with --max-elements)\n"
    )


def test_rich_view_summarises_a_large_tensor_with_the_text_forms_digest(tmp_path, monkeypatch):
    # X is [2,64,128] (16384 elements, above the threshold): the rich view adds the text
    # form's statistics and digest, whole even at 80 columns; --full shows values instead.
    fixture = tmp_path / "mid.json"
    assert _invoke("init", "--generate", "--seed", "5", "--batch", "2", "--tokens", "64",
                   "--d-model", "128", "--d-head", "32", "-o", str(fixture)).exit_code == 0
    # --mode fast: the view is what is tested; the full check of 28,672 coordinates cost
    # 10 s a run here (three runs: the suite's slowest test)
    text = _invoke("run", str(fixture), "-f", "text", "--mode", "fast").output
    digest = text.split("input=", 1)[1].split("sha256:", 1)[1][:64]
    monkeypatch.setenv("COLUMNS", "80")
    rich = _invoke("run", str(fixture), "-f", "rich", "--no-color", "--mode", "fast").output
    summary = rich[rich.index("X: shape [2,64,128] count 16384"):]
    assert digest in summary.replace("\n", "").replace("┃", "").replace(" ", "")[:600]
    assert "mean -0.001802" in summary
    monkeypatch.delenv("COLUMNS")  # no screen: the full figure is laid out as wide as it needs
    full = _invoke("run", str(fixture), "-f", "rich", "--no-color", "--full",
                   "--mode", "fast").output
    assert "X: shape [2,64,128] count" not in full
    assert "X b=1" in full and "t63" in full  # the figure, every value
