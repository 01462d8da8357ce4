"""``qkv attend --families``: the family table as people read it (issue 43)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from qkvcli.authoring.model_families import FAMILIES, REFUSED_MODELS
from qkvcli.cli import main


def test_families_lists_every_family_computed_and_refused() -> None:
    result = CliRunner().invoke(main, ["attend", "--families"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    listed = {line.split()[0] for line in lines if line.startswith("  ")}
    assert listed == set(FAMILIES) | set(REFUSED_MODELS)
    assert not set(FAMILIES) & set(REFUSED_MODELS)
    assert lines[0].startswith(f"qkv computes {len(FAMILIES)} model families")
    llama = next(line for line in lines if line.split()[:1] == ["llama"])
    assert "q_proj, k_proj, v_proj, o_proj; causal; RoPE (half)" in llama
    gpt_oss = next(line for line in lines if line.split()[:1] == ["gpt_oss"])
    assert "attention sinks" in gpt_oss


def test_families_name_the_piece_each_refused_family_lacks() -> None:
    """The families that need a piece a fixture cannot say yet are listed with that piece;
    the rows issue 43's third round added are listed with theirs."""
    result = CliRunner().invoke(main, ["attend", "--families"])
    lines = {line.split()[0]: line for line in result.output.splitlines()
             if line.startswith("  ")}
    for model_type, piece in (("hunyuan_v1_dense", "q/k RMSNorm over the head after RoPE"),
                              ("hunyuan_v1_moe", "q/k RMSNorm over the head after RoPE")):
        assert piece in lines[model_type], lines[model_type]
    assert ("ESM: query, key, value; output.dense; causal when is_decoder; RoPE (half, the "
            "checkpoint's own rotary_embeddings.inv_freq, with position_embedding_type "
            "rotary); biases: every projection") in lines["esm"], lines["esm"]
    assert ("MobileBERT: query, key, value; output.dense; bidirectional; query and key read "
            "the bottleneck (true_hidden_size), value the layer's input (value_input) with "
            "use_bottleneck and key_query_shared_bottleneck without use_bottleneck_attention; "
            "biases: every projection") in lines["mobilebert"], lines["mobilebert"]
    for model_type in ("modernbert", "ultrabert"):
        assert "bidirectional; RoPE (half, theta per layer type); a two-sided window" in (
            lines[model_type]), lines[model_type]
    assert "causal when causal" in lines["xlm"] and "causal when causal" in lines["flaubert"]
    assert "the last layer's dense_bias (output)" in lines["gpt_neox_japanese"]
    assert ("bidirectional; RoPE (half); q/k LayerNorm over the layer (no bias, eps 1e-5)"
            in lines["esmc"]), lines["esmc"]


def test_families_as_json_are_the_same_table_in_the_one_head(tmp_path: Path) -> None:
    # --format json: one document (report "families"), the listing's rows as data, to
    # stdout or to -o, and no fixture read.
    result = CliRunner().invoke(main, ["attend", "--families", "--format", "json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert (document["report"], document["schema_version"]) == ("families", 2)
    assert [row["model_type"] for row in document["computed"]] == sorted(FAMILIES)
    assert [row["model_type"] for row in document["refused"]] == sorted(REFUSED_MODELS)
    text = CliRunner().invoke(main, ["attend", "--families"]).output
    llama = next(row for row in document["computed"] if row["model_type"] == "llama")
    assert f"{llama['title']}: {llama['pieces']}" in text
    written = CliRunner().invoke(main, ["attend", "--families", "-f", "json", "-o",
                                        str(tmp_path / "families.json")])
    assert written.exit_code == 0, written.output
    assert json.loads((tmp_path / "families.json").read_text()) == document
