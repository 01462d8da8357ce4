"""A checkpoint layer's parameters are published under their framework's names.

A weight or bias read from a checkpoint tensor (``{"safetensors": ..., "tensor": ...}``)
and its gradient are published by the tensor's last module and parameter name
(``q_proj.weight`` -> ``q_proj_weight``, ``q_proj_weight_gradient``); the numbers are the
same as the inline fixture's under today's names. When any such key is unusable or would
collide with another published name, every parameter keeps today's name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from qkvcli.attention.fixture import parse_attend_fixture
from qkvcli.attention.records import AttendConfig
from qkvcli.check.attend import build_attend_evidence, layer_parts, layer_tensors
from qkvcli.cli import main
from qkvcli.reading.attend import checkpoint_sources, relative_sources
from qkvcli.render.attend import (
    FORWARD,
    PARAMETERS,
    REVERSE,
    TEXT_KEYS,
    checked_name,
    default_name,
    framework_key,
    framework_names,
    published_name,
)

safetensors_numpy = pytest.importorskip("safetensors.numpy")

PREFIX = "model.layers.0.self_attn."
RENAMED = {f"{branch}_{part}": f"{short}_{part}"
           for branch, short in (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj"),
                                 ("out_proj", "o_proj"))
           for part in ("weight", "bias")}
"""Today's published name -> the LLaMA-style framework name of the same parameter."""


def invoke(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def llama_layer(tmp_path: Path, names: dict[str, str] | None = None) -> tuple[Path, Path]:
    """A two-head layer with q/k/v/o projections and biases, twice: its tensors in a
    checkpoint (``names``: short name -> tensor name, default LLaMA's) and inline."""
    rng = np.random.default_rng(23)
    short = ("q_proj", "k_proj", "v_proj", "o_proj")
    names = names or {s: f"{PREFIX}{s}" for s in short}
    tensors = {f"{names[s]}.{part}": rng.normal(size=(4, 4) if part == "weight" else 4)
               for s in short for part in ("weight", "bias")}
    safetensors_numpy.save_file(tensors, str(tmp_path / "m.safetensors"))
    common = {"chapter": "names", "heads": 2, "input": rng.normal(size=(1, 3, 4)).tolist()}

    def ref(name: str) -> dict[str, str]:
        return {"safetensors": "m.safetensors", "tensor": name}

    def inline(name: str) -> dict[str, Any]:
        return {"shape": list(tensors[name].shape), "values": tensors[name].reshape(-1).tolist()}

    documents = {}
    for kind, given_as in (("sourced", ref), ("inline", inline)):
        weights: dict[str, Any] = {
            branch: {"layout": "torch", **given_as(f"{names[s]}.weight"),
                     "bias": given_as(f"{names[s]}.bias")}
            for branch, s in zip(("query", "key", "value"), short, strict=False)}
        weights["out_proj_weight"] = given_as(f"{names['o_proj']}.weight")
        weights["out_proj_bias"] = given_as(f"{names['o_proj']}.bias")
        path = tmp_path / f"{kind}.json"
        path.write_text(json.dumps({**common, "weights": weights}))
        documents[kind] = path
    return documents["sourced"], documents["inline"]


def attend(path: Path, fmt: str) -> str:
    result = invoke("attend", str(path), "-f", fmt)
    assert result.exit_code == 0, result.output
    return str(result.stdout)


def renamed_text(text: str) -> str:
    """``text`` with each tensor line's key and each gradcheck row's name renamed."""
    lines = []
    for line in text.splitlines():
        key, sep, rest = line.partition("=")
        if key == "gradcheck":
            name, space, tail = rest.partition(" ")
            rest = RENAMED.get(name, name) + space + tail
        else:
            key = rename(key)
        lines.append(key + sep + rest)
    return "\n".join(lines) + "\n"


def rename(name: str) -> str:
    """Today's published tensor name as the LLaMA-style layer publishes it."""
    base = name.removesuffix("_gradient")
    return RENAMED[base] + name[len(base):] if base in RENAMED else name


def test_llama_parameters_are_published_by_their_own_names(tmp_path: Path) -> None:
    sourced, inline = llama_layer(tmp_path)
    text, today = attend(sourced, "text"), attend(inline, "text")
    assert "q_proj_weight_gradient=" in text and "query_weight" not in text
    assert "gradcheck=o_proj_bias mode:" in text
    # a rename only: every line is today's, the names aside; the unnamed branches are
    # named after their checkpoint tensors
    names = f"parameter_names=[{PREFIX}q_proj.weight,{PREFIX}k_proj.weight,{PREFIX}v_proj.weight]"
    assert names in text.splitlines()

    def unnamed(report: str) -> list[str]:
        return [x for x in report.splitlines() if not x.startswith("parameter_names=")]

    assert unnamed(text) == unnamed(renamed_text(today)) and text != today
    document, before = json.loads(attend(sourced, "json")), json.loads(attend(inline, "json"))
    assert document["tensors"] == {rename(n): v for n, v in before["tensors"].items()}
    assert [t["tensor"] for t in document["gradcheck"]["tensors"]] == [
        "input", "q_proj_weight", "k_proj_weight", "v_proj_weight", "q_proj_bias",
        "k_proj_bias", "v_proj_bias", "o_proj_weight", "o_proj_bias"]
    assert document["config"]["parameter_sources"] == {
        f"{s}_{part}": f"{s}.{part}" for part in ("weight", "bias")
        for s in ("q_proj", "k_proj", "v_proj")} | {"o_proj_weight": "o_proj.weight",
                                                   "o_proj_bias": "o_proj.bias"}
    assert "parameter_sources" not in before["config"]


def test_the_rich_view_shows_the_symbol_and_the_framework_name(tmp_path: Path) -> None:
    sourced, _ = llama_layer(tmp_path)
    result = invoke("attend", str(sourced), "-f", "rich", "--width", "120", "--no-color")
    assert result.exit_code == 0, result.output
    assert "dW_Q q_proj_weight_gradient" in result.stdout
    assert "dW_out o_proj_weight_gradient" in result.stdout


def test_a_collision_keeps_todays_names_end_to_end(tmp_path: Path) -> None:
    # q_proj and k_proj both stored as "....proj": both would publish proj_weight
    names = {s: f"{PREFIX}{s}" for s in ("v_proj", "o_proj")}
    names |= {"q_proj": f"{PREFIX}a.proj", "k_proj": f"{PREFIX}b.proj"}
    sourced, inline = llama_layer(tmp_path, names)
    # today's published names, byte for byte (the branches' parameter names aside)
    text, today = attend(sourced, "text").splitlines(), attend(inline, "text").splitlines()
    assert [x for x in text if not x.startswith("parameter_names=")] == [
        x for x in today if not x.startswith("parameter_names=")]
    # the sources are still stated, under the names published
    sources = json.loads(attend(sourced, "json"))["config"]["parameter_sources"]
    assert sources["query_weight"] == "a.proj.weight" and sources["key_bias"] == "b.proj.bias"


# --- the rule, and that it never collides ---------------------------------------------


def layer_config(**weights_extra: Any) -> AttendConfig:
    """The config of a real two-head layer with biases and an output projection."""
    rng = np.random.default_rng(5)
    weights: dict[str, Any] = {
        b: {"shape": [4, 4], "values": rng.normal(size=16).tolist(), "bias": [0.5] * 4}
        for b in ("query", "key", "value")}
    weights |= {"out_proj_weight": rng.normal(size=(4, 4)).tolist(), "out_proj_bias": [0.0] * 4}
    fixture = parse_attend_fixture({"heads": 2, "input": rng.normal(size=(1, 2, 4)).tolist(),
                                    "weights": weights | weights_extra})
    assert fixture.function.heads == 2
    return build_attend_evidence(fixture).config


@pytest.mark.parametrize(("tensor", "key"), [
    ("q_proj.weight", "q_proj_weight"), ("model.layers.0.self_attn.o_proj.bias", "o_proj_bias"),
    ("self.query.weight", "query_weight"), ("output.dense.bias", "dense_bias"),
    ("h.0.attn.c_attn.weight", "c_attn_weight"), ("weight", None), ("qkv.0.weight", None),
    ("a.q-proj.weight", None), ("a.q_proj.wéight", None), ("", None),
], ids=["llama", "prefixed", "bert-query", "bert-dense", "gpt2", "bare", "sequential-index",
        "dash", "non-ascii", "empty"])
def test_framework_key_is_the_last_module_and_parameter(tensor: str, key: str | None) -> None:
    assert framework_key(tensor) == key


FALLBACKS = [
    ("two-parameters-one-key", (("w_query", "a.proj.weight"), ("w_key", "b.proj.weight"))),
    ("another-tensors-default", (("w_query", "x.upstream.output"),)),
    ("a-kept-parameters-default", (("w_query", "x.key.weight"),)),
    ("a-text-lines-key", (("w_query", "x.parameter.count"),)),
    ("anothers-gradient", (("w_query", "a.q.weight"), ("w_key", "b.q_weight.gradient"))),
    ("the-attention-matrix", (("w_query", "a.weights.gradient"),)),
    ("unusable", (("w_query", "a.q_proj.weight"), ("w_key", "0.weight"))),
]


@pytest.mark.parametrize("sources", [c[1] for c in FALLBACKS], ids=[c[0] for c in FALLBACKS])
def test_any_collision_keeps_every_default(sources: tuple[tuple[str, str], ...]) -> None:
    config = layer_config()._replace(sources=sources)
    assert framework_names(config) == {}
    for name in (*PARAMETERS, *FORWARD, *REVERSE):
        assert published_name(name, config) == default_name(name, config), name


def test_without_sources_the_names_are_todays() -> None:
    config = layer_config()
    assert config.sources == ()
    assert published_name("grad_w_query", config) == "query_weight_gradient"
    assert published_name("w_out", config) == "out_proj_weight"
    assert checked_name("b_out", config) == "out_proj_bias"


def test_npy_and_generated_tensors_have_no_source(tmp_path: Path) -> None:
    np.save(tmp_path / "w.npy", np.eye(4))
    weights = {"query": {"npy": "w.npy"}, "key": {"generate": {"seed": 1, "shape": [4, 4]}},
               "value": [[1.0] * 4] * 4, "out_proj_weight": {"npy": "w.npy"}}
    assert checkpoint_sources(weights) == ()
    assert checkpoint_sources({"query": {"safetensors": "m.safetensors", "tensor": "a.q.weight",
                                         "bias": {"safetensors": "m.safetensors",
                                                  "tensor": "a.q.bias"}},
                               "c_proj_bias": {"safetensors": "m", "tensor": "c.bias"}}) == (
        ("w_query", "a.q.weight"), ("b_query", "a.q.bias"), ("b_out", "c.bias"))


@pytest.mark.parametrize(("names", "relative"), [
    (["layers.0.self_attn.q_proj.weight", "layers.0.self_attn.o_proj.weight"],
     ["q_proj.weight", "o_proj.weight"]),
    (["encoder.layer.0.attention.self.query.weight", "encoder.layer.0.attention.output.dense.bias"],
     ["self.query.weight", "output.dense.bias"]),
    (["h.0.attn.c_attn.weight", "h.0.attn.c_attn.bias"], ["c_attn.weight", "c_attn.bias"]),
    (["h.0.attn.c_attn.weight"], ["c_attn.weight"]),
    (["weight", "a.b.weight"], ["weight", "a.b.weight"]),
], ids=["llama", "bert", "one-module", "one-tensor", "too-short"])
def test_sources_are_relative_to_the_layer(names: list[str], relative: list[str]) -> None:
    sources = tuple((f"w_{i}", name) for i, name in enumerate(names))
    assert relative_sources(sources) == tuple(
        (f"w_{i}", name) for i, name in enumerate(relative))


PARTS = st.sampled_from(["q", "key", "query", "weights", "upstream", "output", "weight", "bias",
                         "gradient", "parameter", "count", "0", "dense", "q_proj", "heads",
                         "out_proj", "input", "scores", "scaled", "loss", "value_weight"])
SOURCED = ("w_query", "w_key", "w_value", "b_query", "b_key", "b_value", "w_out", "b_out")


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(SOURCED), st.lists(PARTS, min_size=1, max_size=3)
                       .map(".".join), min_size=1))
def test_published_names_never_collide(chosen: dict[str, str]) -> None:
    config = CONFIG._replace(sources=tuple(chosen.items()))
    published = [published_name(name, config) for name in (*PARAMETERS, *FORWARD, *REVERSE)
                 if not name.endswith("packed")]
    assert len(set(published)) == len(published), published
    assert not set(published) & set(TEXT_KEYS)
    if framework_names(config):  # all or nothing: every source its framework key
        assert {n: published_name(n, config) for n in chosen} == {
            n: framework_key(t) for n, t in chosen.items()}


CONFIG = layer_config()


def test_one_head_read_from_a_checkpoint_takes_the_framework_names_too(tmp_path: Path) -> None:
    # No heads and no output projection: today's one head, its parameters from a checkpoint.
    sourced, _ = llama_layer(tmp_path)
    document = json.loads(sourced.read_text())
    del document["heads"], document["weights"]["out_proj_weight"]
    del document["weights"]["out_proj_bias"]
    sourced.write_text(json.dumps(document))
    run = invoke("attend", str(sourced), "-f", "json")
    assert run.exit_code == 0, run.output
    tensors = json.loads(run.stdout)["tensors"]
    assert {"q_proj_weight", "q_proj_weight_gradient", "v_proj_bias_gradient"} <= set(tensors)
    assert "query_weight_gradient" not in tensors


def test_torch_layout_parameters_are_shared_read_only_views_not_copies(tmp_path: Path) -> None:
    sourced, _ = llama_layer(tmp_path)
    fixture = parse_attend_fixture(json.loads(sourced.read_text()), "names", base_dir=tmp_path)
    parts = layer_parts(fixture)
    layer = parts.layer
    forward = layer.forward(fixture.input, fixture.function.causal)
    tensors = layer_tensors(fixture, parts, forward,
                            layer.backward(fixture.input, forward, fixture.upstream))
    for name, ours in (("w_query", layer.projections.weights[0]), ("w_out", layer.out_weight)):
        published = tensors[name]
        assert np.shares_memory(published, ours) and np.array_equal(published, ours.T)
    for name in ("w_query", "grad_w_query", "grad_w_value", "grad_w_out"):
        with pytest.raises(ValueError):
            tensors[name][0, 0] = 1.0


def test_the_rich_layer_line_names_rope_kv_heads_and_the_projection_as_published(
        tmp_path: Path) -> None:
    sourced, _ = llama_layer(tmp_path)
    document = json.loads(sourced.read_text())
    document["rope"] = {"theta": 500.0, "dims": 2}
    sourced.write_text(json.dumps(document))
    run = invoke("attend", str(sourced), "-f", "rich", "--width", "200", "--no-color")
    assert run.exit_code == 0, run.output
    line = next(x for x in run.stdout.splitlines() if x.startswith("layer: "))
    assert "RoPE theta 500 dims 2 half" in line and "Rope(" not in line
    assert "output projection o_proj: concat [2x2] -> e_out 4" in line


def test_unnamed_branches_take_their_tensors_names_when_all_three_are_usable() -> None:
    from qkvcli.core.names import DEFAULT_NAMES
    from qkvcli.reading.weights import default_names

    tensors = [f"{PREFIX}{s}.weight" for s in ("q_proj", "k_proj", "v_proj")]
    assert default_names(list(tensors)) == tuple(tensors)
    assert default_names([*tensors[:2], None]) == DEFAULT_NAMES  # one given inline
    assert default_names([tensors[0], tensors[0], tensors[2]]) == DEFAULT_NAMES  # one tensor twice
    assert default_names([*tensors[:2], "model.Layers.0.v.weight"]) == DEFAULT_NAMES  # not a name
