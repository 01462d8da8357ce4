"""GPT-2-shaped checkpoints through ``qkv inspect``, ``qkv init --from-safetensors`` and ``qkv attend``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from qkvcli.cli import main

safetensors_numpy = pytest.importorskip("safetensors.numpy")

D_MODEL, HEADS, TOKENS = 8, 2, 3


def invoke(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def gpt2_tensors(seed: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    f32 = np.float32
    return {  # GPT-2's names and Conv1D [in, out] layout, float32 as GPT-2 ships
        "h.0.attn.c_attn.weight": rng.normal(size=(D_MODEL, 3 * D_MODEL)).astype(f32),
        "h.0.attn.c_attn.bias": rng.normal(size=(3 * D_MODEL,)).astype(f32),
        "h.0.attn.c_proj.weight": rng.normal(size=(D_MODEL, D_MODEL)).astype(f32),
        "h.0.attn.c_proj.bias": rng.normal(size=(D_MODEL,)).astype(f32),
        "h.0.ln_1.weight": np.ones(D_MODEL, dtype=f32),
        "wte.weight": rng.normal(size=(11, D_MODEL)).astype(f32),
    }


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    path = tmp_path / "gpt2-tiny.safetensors"
    safetensors_numpy.save_file(gpt2_tensors(), str(path))
    return path


def test_inspect_lists_every_tensor_and_marks_the_projections(checkpoint: Path) -> None:
    result = invoke("inspect", str(checkpoint))
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert len(lines) == 8
    assert lines[0].split()[:3] == ["h.0.attn.c_attn.bias", "F32", "[24]"]
    assert "* GPT-2 c_attn weight" in lines[1]
    assert "*" not in lines[4]  # h.0.ln_1.weight
    assert lines[-2] == "# 6 tensors, 4 recognised attention projections (*)"
    assert lines[-1] == "# 1 attention layer, by --prefix: h.0.attn."


def test_a_model_folder_stands_for_its_checkpoint(checkpoint: Path, tmp_path: Path) -> None:
    # save_pretrained's folder, as from_pretrained takes it: model.safetensors inside
    folder = tmp_path / "model"
    folder.mkdir()
    checkpoint.rename(folder / "model.safetensors")
    listed = invoke("inspect", str(folder))
    assert listed.exit_code == 0 and listed.output.splitlines()[-1].endswith("h.0.attn.")
    made = invoke("init", "--from-safetensors", str(folder), "--prefix", "h.0.attn.",
                  "--heads", str(HEADS), "--causal", "--scale", "inverse-sqrt",
                  "--tokens", str(TOKENS), "-o", str(folder / "layer.json"))
    assert made.exit_code == 0, made.output
    refs = json.loads((folder / "layer.json").read_text())["weights"]
    assert refs["c_attn_weight"]["safetensors"] == "model.safetensors"
    empty = tmp_path / "empty"
    empty.mkdir()
    refused = invoke("inspect", str(empty))
    assert refused.exit_code == 2
    assert "is a folder without model.safetensors or model.safetensors.index.json" in (
        refused.output)


def test_checkpoint_layer_equals_the_same_layer_as_json(checkpoint: Path, tmp_path: Path) -> None:
    layer = tmp_path / "layer.json"
    result = invoke("init", "--from-safetensors", str(checkpoint), "--prefix", "h.0.attn.",
                    "--heads", str(HEADS), "--causal", "--scale", "inverse-sqrt",
                    "--tokens", str(TOKENS), "-o", str(layer))
    assert result.exit_code == 0, result.output
    document = json.loads(layer.read_text())
    assert document["heads"] == HEADS and document["causal"] is True
    assert document["weights"]["c_attn_weight"] == {
        "safetensors": "gpt2-tiny.safetensors", "tensor": "h.0.attn.c_attn.weight"}
    from_checkpoint = invoke("attend", str(layer), "-f", "json", "--causal")
    assert from_checkpoint.exit_code == 0, from_checkpoint.output

    tensors = gpt2_tensors()
    inline = dict(document)
    inline["weights"] = {
        key: tensors[ref["tensor"]].astype(np.float64).tolist()
        for key, ref in document["weights"].items()
    }
    inline_path = tmp_path / "inline" / "layer.json"
    inline_path.parent.mkdir()
    inline_path.write_text(json.dumps(inline))
    as_json = invoke("attend", str(inline_path), "-f", "json", "--causal")
    assert as_json.exit_code == 0, as_json.output
    a, b = json.loads(from_checkpoint.output), json.loads(as_json.output)
    assert a["tensors"] == b["tensors"]
    assert a["config"]["heads"] == HEADS and a["config"]["out_projection"] == "c_proj"
    assert a["tensors"]["weights"]["shape"] == [1, HEADS, TOKENS, TOKENS]
    assert a["tensors"]["c_attn_weight_gradient"]["shape"] == [D_MODEL, 3 * D_MODEL]
    assert a["tensors"]["c_proj_weight_gradient"]["shape"] == [D_MODEL, D_MODEL]
    assert len(a["heads"]) == HEADS and all(h["passed"] for h in a["heads"])


def test_a_checkpoint_outside_the_fixture_directory_is_refused(checkpoint: Path,
                                                              tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    fixture = tmp_path / "sub" / "layer.json"
    fixture.write_text(json.dumps({"input": [[[0.0] * D_MODEL]], "weights": {
        "c_attn_weight": {"safetensors": "../gpt2-tiny.safetensors",
                          "tensor": "h.0.attn.c_attn.weight"}}}))
    result = CliRunner().invoke(main, ["attend", str(fixture)])
    assert result.exit_code == 2
    assert "$.weights.c_attn_weight.safetensors" in result.output
    assert "'..' is refused" in result.output


def test_unknown_tensor_and_size_limit_from_the_header(checkpoint: Path, tmp_path: Path) -> None:
    fixture = tmp_path / "layer.json"
    ref = {"safetensors": checkpoint.name, "tensor": "h.0.attn.c_attn.weight"}
    fixture.write_text(json.dumps({"input": [[[0.0] * D_MODEL]], "heads": 2,
                                   "weights": {"c_attn_weight": ref}}))
    result = CliRunner().invoke(main, ["attend", str(fixture), "--max-elements", "100"])
    assert result.exit_code == 2
    assert "shape [8,24] has 192 elements, more than the limit 100" in result.output
    fixture.write_text(json.dumps({"input": [[[0.0] * D_MODEL]], "weights": {
        "c_attn_weight": {**ref, "tensor": "h.9.attn.c_attn.weight"}}}))
    result = CliRunner().invoke(main, ["attend", str(fixture)])
    assert result.exit_code == 2
    assert "has no tensor named h.9.attn.c_attn.weight" in result.output


def test_bfloat16_is_widened_exactly(tmp_path: Path) -> None:
    from qkvcli.reading.safetensors import load_safetensors

    ml_dtypes = pytest.importorskip("ml_dtypes")  # only to write the file
    values = np.array([[1.5, -2.0], [0.25, 3.0]], dtype=ml_dtypes.bfloat16)
    safetensors_numpy.save_file({"w": values}, str(tmp_path / "bf.safetensors"))
    loaded = load_safetensors({"safetensors": "bf.safetensors", "tensor": "w"}, "$.x", tmp_path,
                              100)
    assert loaded.dtype == np.float64 and loaded.tolist() == [[1.5, -2.0], [0.25, 3.0]]
