"""The multi-head layer through fixtures and ``qkv attend``: H = 1 is today's head, layouts agree."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from qkvcli.cli import main


def attend_json(path: Path, *args: str) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["attend", str(path), "-f", "json", *args],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(result.output)
    return document


def layer(tmp_path: Path, name: str, weights: dict[str, Any], **extra: Any) -> Path:
    rng = np.random.default_rng(1)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"input": rng.normal(size=(2, 3, 4)).tolist(), "weights": weights,
                                **extra}))
    return path


def separate(rng: np.random.Generator) -> dict[str, Any]:
    return {branch: rng.normal(size=(4, 4)).tolist() for branch in ("query", "key", "value")}


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_one_head_is_todays_head_bit_for_bit(tmp_path: Path, causal: bool) -> None:
    weights = separate(np.random.default_rng(2))
    flags = ["--causal"] if causal else []
    today = attend_json(layer(tmp_path, "today", weights), *flags)
    one = attend_json(layer(tmp_path, "one", weights, heads=1), *flags)
    cli_one = attend_json(layer(tmp_path, "today", weights), "--heads", "1", *flags)
    assert one["tensors"] == cli_one["tensors"]
    assert "heads" not in today["config"] and one["config"]["heads"] == 1
    for name, value in today["tensors"].items():
        if name in ("scores", "scaled_scores", "weights", "weights_gradient",
                    "scaled_scores_gradient", "scores_gradient"):
            assert one["tensors"][name]["shape"] == [2, 1, 3, 3]
            assert one["tensors"][name]["values"] == value["values"], name
        else:
            assert one["tensors"][name] == value, name
    assert one["loss"] == today["loss"]


def test_in_proj_c_attn_and_separate_layouts_give_the_same_layer(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    w = [rng.normal(size=(4, 4)) for _ in range(3)]  # ours, [in, out]
    b = [rng.normal(size=4) for _ in range(3)]
    out_w, out_b = rng.normal(size=(4, 5)), rng.normal(size=5)
    in_proj = attend_json(layer(tmp_path, "in_proj", {
        "in_proj_weight": np.concatenate([x.T for x in w]).tolist(),
        "in_proj_bias": np.concatenate(b).tolist(),
        "out_proj_weight": out_w.T.tolist(), "out_proj_bias": out_b.tolist()}, heads=2))
    c_attn = attend_json(layer(tmp_path, "c_attn", {
        "c_attn_weight": np.concatenate(w, axis=1).tolist(),
        "c_attn_bias": np.concatenate(b).tolist(),
        "c_proj_weight": out_w.tolist(), "c_proj_bias": out_b.tolist()}, heads=2))
    t = in_proj["tensors"]
    u = c_attn["tensors"]
    for name in ("output", "weights", "input_gradient"):
        np.testing.assert_allclose(t[name]["values"], u[name]["values"], rtol=0, atol=1e-12)
    # the packed bias (the same layout in both) states the split biases' numbers once; the
    # split views are digests only
    np.testing.assert_allclose(t["in_proj_bias_gradient"]["values"],
                               u["c_attn_bias_gradient"]["values"], rtol=0, atol=1e-12)
    for name in ("query_weight", "query_bias_gradient", "value_weight_gradient"):
        assert set(t[name]) == {"shape", "count", "sha256"}, name
        assert set(u[name]) == {"shape", "count", "sha256"}, name
    # each weight's gradient in its own layout: in_proj is torch [3W, d_model], c_attn Conv1D
    np.testing.assert_allclose(np.reshape(t["in_proj_weight_gradient"]["values"], (12, 4)),
                               np.reshape(u["c_attn_weight_gradient"]["values"], (4, 12)).T,
                               rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.reshape(t["out_proj_weight_gradient"]["values"], (5, 4)),
                               np.reshape(u["c_proj_weight_gradient"]["values"], (4, 5)).T,
                               rtol=0, atol=1e-12)
    assert in_proj["passed"] and c_attn["passed"]


def test_upstream_output_is_u(tmp_path: Path) -> None:
    weights = separate(np.random.default_rng(4))
    upstream = np.full((2, 3, 4), 0.5).tolist()
    result = attend_json(layer(tmp_path, "u", weights, heads=2, upstream={"output": upstream}))
    assert result["tensors"]["upstream_output"]["values"] == [0.5] * 24


@pytest.mark.parametrize(("extra", "message"), [
    ({"heads": 3}, "$.heads: heads must be at least 1 and divide the query/key width 4 and the "
                   "value width 4, got 3"),
    ({"heads": 0}, "$.heads: heads must be between 1 and 4096"),
    ({"heads": 2, "upstream": {"output": [[[1.0]]]}},
     "$.upstream.output: expected shape [2,3,4] (the final output's [batch,tokens,E_out]), "
     "got [1,1,1]"),
], ids=["indivisible", "zero", "upstream-shape"])
def test_layer_errors_name_their_location(tmp_path: Path, extra: dict[str, Any],
                                          message: str) -> None:
    path = layer(tmp_path, "bad", separate(np.random.default_rng(5)), **extra)
    result = CliRunner().invoke(main, ["attend", str(path)])
    assert result.exit_code == 2
    assert message in result.output
