"""qkv attend through the command line, and the chapter commands with the new fixture keys."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from qkvcli.cli import main
from tests.conftest import shipped_fixtures

# The chapter's reference outputs, as the repository holds them (tests/golden/ch26).
ANCHORS = Path(__file__).resolve().parent / "golden" / "ch26"
ROOT = Path(__file__).resolve().parent.parent


def invoke(*args: str, **kwargs: Any) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False, **kwargs)


def write(tmp_path: Path, data: dict[str, Any], name: str = "f.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def with_bias() -> dict[str, Any]:
    data = json.loads((ROOT / "fixtures" / "ch26-qkv-projections.json").read_text())
    data["weights"]["value"]["bias"] = [0.5, -0.5]
    return data


@pytest.mark.parametrize(("fmt", "anchor"), [("text", "expected.txt"),
                                             ("trace", "diagram-trace.txt")])
def test_chapter_report_still_equals_the_anchors(fmt: str, anchor: str) -> None:
    result = invoke("report", "--format", fmt)
    assert result.exit_code == 0
    assert result.output == (ANCHORS / anchor).read_text(encoding="utf-8")


def test_attend_primer_text() -> None:
    result = invoke("attend", "--example", "primer")
    assert result.exit_code == 0
    lines = result.output.splitlines()
    token = "token=b0 t0 weights:[0.944193,0.055807] sum:1.000000 output:[1.111614,2.776771]"
    assert token in lines
    assert "layout=separate: three [d_model,d_out] weights (qkv layout, Y = X W)" in lines
    assert any(line.startswith("note=symmetric-matching") for line in lines)
    assert lines[-1] == "verdict: PASS (10 of 10 checks passed)"  # no prefix claim: not causal


def test_attend_defaults_to_the_chapter_fixture() -> None:
    result = invoke("attend")
    assert result.exit_code == 0
    assert result.output.startswith("attend=26-qkv-projections\n")


def test_attend_json() -> None:
    result = invoke("attend", "--example", "primer", "--causal", "-f", "json")
    assert result.exit_code == 0
    document = json.loads(result.output)
    assert document["report"] == "attend" and document["passed"] is True
    assert document["config"]["causal"] is True
    assert document["tensors"]["scaled_scores"]["values"][1] == "-Infinity"
    assert document["rows"][0]["weights"] == [1.0, 0.0]
    assert [c["name"] for c in document["checks"]][-1] == "gradcheck"


def test_attend_rich_renders_tables_without_markup_loss(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    result = invoke("attend", "--example", "primer", "-f", "rich")
    assert result.exit_code == 0
    assert "attend: primer-worked-example" in result.output
    assert "0.944193" in result.output and "[1.111614, 2.776771]" in result.output
    assert "[min_j v_j, max_j v_j]" in result.output  # not swallowed as rich markup
    assert "note: symmetric-matching" in result.output


def test_attend_judges_and_builds_the_layer_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fixture is read whole, then the engine judges it once as it builds the layer,
    and the run uses that layer: one build per run, not one to judge and one to run."""
    import qkvcli.attention.fixture
    import qkvcli.check.attend

    built = []
    layer_of = qkvcli.attention.fixture.layer_of

    def counted(fixture: Any) -> Any:
        built.append(fixture)
        return layer_of(fixture)

    monkeypatch.setattr(qkvcli.attention.fixture, "layer_of", counted)
    monkeypatch.setattr(qkvcli.check.attend, "layer_of", counted)
    result = invoke("attend", "--example", "primer", "-f", "json")
    assert result.exit_code == 0, result.output
    assert len(built) == 1


def test_attend_rich_module_is_pure() -> None:
    from rich.console import Console

    from qkvcli.attention.fixture import load_attend_fixture
    from qkvcli.check.attend import build_attend_evidence
    from qkvcli.render.rich.attend import attend_renderable

    evidence = build_attend_evidence(load_attend_fixture(example="primer"))
    texts = []
    for _ in range(2):
        console = Console(file=io.StringIO(), width=100, force_terminal=True, color_system=None,
                          record=True)
        console.print(attend_renderable(evidence))
        texts.append(console.export_text())
    assert texts[0] == texts[1]
    assert "t0 0.944193 0.055807 1.000000" in " ".join(texts[0].split())


def test_attend_output_file_is_written(tmp_path: Path) -> None:
    out = tmp_path / "report.txt"
    result = invoke("attend", "--example", "primer", "-f", "rich", "-o", str(out))
    assert result.exit_code == 0 and result.stdout == ""
    assert result.stderr == f"qkv: wrote {out}\n"  # the one -o habit of every command
    assert "verdict: PASS (10 of 10 checks passed)" in out.read_text(encoding="utf-8")


def test_attend_accepts_bias_and_independent_value_width(tmp_path: Path) -> None:
    data = with_bias()
    data["value_width"] = "independent"
    data["weights"]["value"] = {"values": [[1, 0, 2], [0, 1, 0], [1, 1, 1]], "bias": [1, 2, 3]}
    del data["upstream"]
    result = invoke("attend", str(write(tmp_path, data)), "--causal")
    assert result.exit_code == 0, result.output
    assert "d_v:3" in result.output and "bias:query=false,key=false,value=true" in result.output


def test_attend_reads_packed_weights(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    w = rng.normal(size=(9, 3))
    data = {"input": rng.normal(size=(1, 4, 3)).tolist(),
            "weights": {"in_proj_weight": w.tolist(), "in_proj_bias": rng.normal(size=9).tolist()}}
    result = invoke("attend", str(write(tmp_path, data)), "-f", "json")
    assert result.exit_code == 0
    document = json.loads(result.output)
    assert document["config"]["layout"] == "packed"
    assert document["tensors"]["key_weight"]["values"] == w[3:6].T.reshape(-1).tolist()


def test_attend_with_a_failing_check_exits_one() -> None:
    result = CliRunner().invoke(main, ["attend", "--tolerance", "0", "--step", "0.001"])
    assert result.exit_code == 1
    assert "qkv: FAILED: gradcheck" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["attend", "--example", "primer", "FIXTURE"], "give FIXTURE or --example, not both"),
        (["attend", "missing.json"], "Error: missing.json: no such file"),
    ],
    ids=["both", "missing"],
)
def test_attend_usage_errors(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert message in result.stderr


def test_attend_bad_fixture_is_one_line(tmp_path: Path) -> None:
    data = with_bias()
    data["weights"]["value"]["bias"] = [1, 2, 3]
    path = write(tmp_path, data)
    result = CliRunner().invoke(main, ["attend", str(path)])
    assert result.exit_code == 2
    assert result.stderr == (f"Error: {path}: $.weights.value.bias: value bias must have shape "
                             "[2] (the branch's output width), got [3]\n")


@pytest.mark.parametrize("command", ["run", "report", "gradcheck"])
def test_chapter_commands_refuse_bias_with_a_pointer(tmp_path: Path, command: str) -> None:
    path = write(tmp_path, with_bias())
    result = CliRunner().invoke(main, [command, str(path)])
    assert result.exit_code == 2
    assert result.stderr == (
        f"Error: {path}: $.weights.value.bias: projection biases are outside the chapter's "
        "bias-free evidence; run `qkv attend` on this fixture\n")


def test_chapter_head_width_error_without_the_opt_in(tmp_path: Path) -> None:
    data = json.loads((ROOT / "fixtures" / "ch26-qkv-projections.json").read_text())
    data["weights"]["key"]["values"] = [[0, 1, 0], [1, 0, 0], [-1, 1, 0]]
    path = write(tmp_path, data)
    for command in ("run", "attend"):
        result = CliRunner().invoke(main, [command, str(path)])
        assert result.exit_code == 2
        assert result.stderr == (f"Error: {path}: $.weights: Q/K/V head widths must match, "
                                 "got query 2, key 3, value 2\n")


def test_chapter_report_reads_torch_layout_identically(tmp_path: Path) -> None:
    data = json.loads((ROOT / "fixtures" / "ch26-qkv-projections.json").read_text())
    for branch in ("query", "key", "value"):
        entry = data["weights"][branch]
        entry["values"] = np.array(entry["values"]).T.tolist()
        entry["layout"] = "torch"
    path = write(tmp_path, data, "ch26-qkv-projections.json")
    plain = invoke("report", "-f", "text")
    torch = invoke("report", str(path), "-f", "text")
    assert torch.exit_code == 0 and torch.output == plain.output


@pytest.mark.parametrize("path", shipped_fixtures(), ids=lambda p: p.stem)
@pytest.mark.parametrize("causal", [[], ["--causal"]], ids=["full", "causal"])
def test_every_shipped_fixture_passes_attend(path: Path, causal: list[str]) -> None:
    result = invoke("attend", str(path), *causal)
    assert result.exit_code == 0, result.output
    checks = 11 if causal else 10  # the prefix claim only under the causal mask
    assert result.output.endswith(f"verdict: PASS ({checks} of {checks} checks passed)\n")


def test_value_width_example_is_refused_by_run_and_packed_example_is_not() -> None:
    refused = CliRunner().invoke(main, ["run", str(ROOT / "fixtures" / "attend" / "attend-value-width.json")])
    assert refused.exit_code == 2 and "run `qkv attend` on this fixture" in refused.stderr
    packed = invoke("run", str(ROOT / "fixtures" / "attend" / "attend-packed-in-proj.json"))
    assert packed.exit_code == 0


@pytest.mark.parametrize("fmt", ["text", "json", "rich"])
def test_an_overflowing_head_fails_cleanly(tmp_path: Path, fmt: str) -> None:
    big = [[1e200, 0], [0, 1e200], [1e200, 0]]
    data = {"input": [[[1, 2, -1], [0, 1, 2]]],
            "weights": {"query": big, "key": {"values": big, "name": "a.key"},
                        "value": [[1, 1], [1, -1], [0, 2]]}}
    result = CliRunner().invoke(main, ["attend", str(write(tmp_path, data)), "-f", fmt])
    assert result.exit_code == 1, result.output
    # rich may first say it widened the layout to keep every number whole
    assert result.stderr.splitlines()[-1].startswith("qkv: FAILED: forward")
    if fmt == "json":
        assert json.loads(result.stdout)["passed"] is False


def newcomer(tmp_path: Path, tokens: int = 128, d_model: int = 64, d_head: int = 16) -> Path:
    path = tmp_path / "layer.json"
    result = invoke("init", "--generate", "--batch", "2", "--tokens", str(tokens), "--d-model",
                    str(d_model), "--d-head", str(d_head), "-o", str(path))
    assert result.exit_code == 0, result.output
    return path


def test_attend_takes_runs_modes_and_says_which_evaluation_it_used(tmp_path: Path) -> None:
    path = newcomer(tmp_path)
    result = invoke("attend", str(path), "-f", "text")
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("gradcheck=")]
    assert lines[0] == ("gradcheck=input mode:sampled checked:6 requested:6 "
                        "recomputes:perturbed_batch_item PASS")
    assert any("recomputes:perturbed_head " in line for line in lines)
    assert any("recomputes:perturbed_K/V_group " in line for line in lines)
    fast = json.loads(invoke("attend", str(path), "-f", "json", "--mode", "fast",
                             "--directions", "2").output)
    assert {t["mode"] for t in fast["gradcheck"]["tensors"]} == {"fast"}
    assert fast["gradcheck"]["count"] == 8 and fast["passed"]


def test_attend_refuses_a_check_over_its_budget_before_it_starts(tmp_path: Path) -> None:
    path = newcomer(tmp_path)
    result = CliRunner().invoke(main, ["attend", str(path), "--mode", "full",
                                       "--max-evaluations", "1000"])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and "Traceback" not in result.output
    assert "more than the limit 1000" in result.output and str(path) in result.output


def test_attend_summarises_large_tensors_and_tensors_full_shows_them(tmp_path: Path) -> None:
    path = newcomer(tmp_path)
    summary = json.loads(invoke("attend", str(path), "-f", "json").output)
    scores = summary["tensors"]["scores"]
    assert scores["shape"] == [2, 128, 128] and "values" not in scores
    assert len(scores["summary"]["sha256"]) == 64
    none = json.loads(invoke("attend", str(path), "-f", "json", "--tensors", "none").output)
    assert none["tensors"]["scores"]["sha256"] == scores["summary"]["sha256"]
    assert summary["rows"] == []  # per-token rows only while A is small
    text = invoke("attend", str(path), "-f", "text").output
    assert len(text) < 512 * 1024
    full = invoke("attend", str(path), "-f", "text", "--tensors", "full").output
    assert len(full) > len(text)


def test_the_reverse_comment_says_where_the_upstream_came_from(tmp_path: Path) -> None:
    """``U`` is the fixture's ``upstream.output`` when it gives one, else SplitMix64's draws."""
    data = json.loads((ROOT / "fixtures" / "ch26-qkv-projections.json").read_text())
    del data["upstream"]
    seeded = invoke("attend", str(write(tmp_path, data, "seeded.json")), "-f", "text")
    assert "# reverse: L = <O,U>, U from SplitMix64(seed 26) uniform [-1,1); " in seeded.stdout
    data["upstream"] = {"output": [[[1, 0], [0, 1]]]}
    given = invoke("attend", str(write(tmp_path, data, "given.json")), "-f", "text")
    assert "# reverse: L = <O,U>, U from the fixture's upstream.output; " in given.stdout
    assert "SplitMix64" not in given.stdout
    assert "upstream_output=shape:[1,2,2] values:[1.000000,0.000000,0.000000,1.000000]" \
        in given.stdout
    document = json.loads(invoke("attend", str(write(tmp_path, data, "given.json")), "-f",
                                 "json").stdout)
    assert document["config"]["upstream"] == "given"
