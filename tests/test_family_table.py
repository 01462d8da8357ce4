"""``qkv attend --families``: the family table as people read it (issue 43)."""

from __future__ import annotations

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
