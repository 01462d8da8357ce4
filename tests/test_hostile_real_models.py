"""A hostile pass over ``qkv init --from-safetensors`` on real-model inputs (issues 19, 21).

Each table row is a config, an index, a checkpoint or an output path that once made init
guess, write a fixture ``attend`` refuses, overwrite what it reads, or print a Python
repr; each must now be one ``Error:`` line naming the file and the key, exit 2, and leave
every input as it was.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.hostile_helpers import invoke, refused

safetensors_numpy = pytest.importorskip("safetensors.numpy")
LLAMA_PREFIX = "layers.0.self_attn."
LLAMA: dict[str, Any] = {"model_type": "llama", "num_attention_heads": 4,
                         "num_key_value_heads": 2}


def llama_checkpoint(folder: Path, dtype: Any = np.float32) -> Path:
    """LLaMA's tensor names: 4 heads and 2 K/V heads of 4, d_model 16."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    shapes = {"q_proj": (16, 16), "k_proj": (8, 16), "v_proj": (8, 16), "o_proj": (16, 16)}
    safetensors_numpy.save_file(
        {f"{LLAMA_PREFIX}{name}.weight": rng.normal(size=shape).astype(dtype)
         for name, shape in shapes.items()}, str(folder / "model.safetensors"))
    return folder / "model.safetensors"


def gpt2_tensors(**replace: np.ndarray) -> dict[str, np.ndarray]:
    """A GPT-2 layer ``h.0.attn.`` (d_model 8, 2 heads of 4), some tensors replaced."""
    rng = np.random.default_rng(0)
    f32 = np.float32
    tensors = {"c_attn.weight": rng.normal(size=(8, 24)).astype(f32),
               "c_attn.bias": rng.normal(size=24).astype(f32),
               "c_proj.weight": rng.normal(size=(8, 8)).astype(f32),
               "c_proj.bias": rng.normal(size=8).astype(f32)} | replace
    return {f"h.0.attn.{name}": value for name, value in tensors.items()}


def init(checkpoint: Path, prefix: str, *extra: str) -> Any:
    return invoke("init", "--from-safetensors", str(checkpoint), "--prefix", prefix,
                  "-o", str(checkpoint.parent / "out.json"), *extra)


def one_line(result: Any, *parts: str) -> str:
    """Refused in one line holding ``parts``, no Python repr of a string, no fixture written."""
    line = refused(result, *parts)
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert "prefix '" not in line and "Traceback" not in result.output
    return line


CONFIGS = [
    ("heads-negative", {**LLAMA, "num_attention_heads": -4},
     "config num_attention_heads must be a positive integer, got -4"),
    ("heads-float", {**LLAMA, "num_attention_heads": 4.0},
     "config num_attention_heads must be a positive integer, got 4.0"),
    ("heads-bool", {**LLAMA, "num_attention_heads": True},
     "config num_attention_heads must be a positive integer, got true"),
    ("heads-not-dividing", {**LLAMA, "num_attention_heads": 3},
     "config says 3 heads, which do not divide the query projection's width 16"),
    ("kv-heads-string", {**LLAMA, "num_key_value_heads": "2"},
     'config num_key_value_heads must be a positive integer, got "2"'),
    ("kv-heads-zero", {**LLAMA, "num_key_value_heads": 0},
     "config num_key_value_heads must be a positive integer, got 0"),
    ("architectures-disagree", {**LLAMA, "architectures": ["GPT2LMHeadModel"]},
     'config architectures names "GPT2LMHeadModel", not a llama class, though model_type is '
     '"llama"'),
    ("architectures-not-list", {**LLAMA, "architectures": 5},
     "config architectures must be a list of class names, got 5"),
    ("partial-rotary-bool", {**LLAMA, "partial_rotary_factor": True},
     "config partial_rotary_factor must be in (0, 1], got true"),
    ("layer-types-garbage", {**LLAMA, "sliding_window": 2, "layer_types": [{"a": 1}]},
     'config layer_types must be a list of "full_attention" and "sliding_attention", got '
     '[{"a": 1}]'),
    ("model-type-list", {**LLAMA, "model_type": ["llama"]}, 'config model_type ["llama"]: qkv'),
    ("rope-theta-zero", {**LLAMA, "rope_theta": 0},
     "config rope_theta must be a finite positive number, got 0"),
    ("hidden-size-other", {**LLAMA, "hidden_size": 32},
     "config hidden_size 32, but the layer reads inputs 16 wide"),
    ("hidden-size-string", {**LLAMA, "hidden_size": "16"},
     'config hidden_size must be a positive integer, got "16"'),
    ("two-spellings-disagree", {**LLAMA, "n_head": 2},
     "config num_attention_heads 4 and n_head 2 disagree"),
]


@pytest.mark.parametrize(("config", "words"), [c[1:] for c in CONFIGS],
                         ids=[c[0] for c in CONFIGS])
def test_a_config_qkv_cannot_read_as_transformers_would_is_refused(tmp_path: Path,
                                                                   config: Any, words: str):
    checkpoint = llama_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(config))
    line = one_line(init(checkpoint, LLAMA_PREFIX), f'prefix "{LLAMA_PREFIX}": {words}')
    assert line.startswith(f"Error: {checkpoint}: ")
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize(("model", "key", "value"), [
    ("bert", "is_decoder", "false"),
    ("gpt2", "scale_attn_weights", "false"),
    ("gpt2", "scale_attn_by_inverse_layer_idx", 1),
])
def test_a_flag_given_as_a_string_or_number_is_refused_not_taken_as_true(
        tmp_path: Path, model: str, key: str, value: Any):
    # bool("false") is True: before, a BERT config with "is_decoder": "false" made a causal fixture.
    rng = np.random.default_rng(2)
    if model == "bert":
        prefix = "encoder.layer.0.attention.self."
        tensors = {f"{prefix}{n}.{p}": rng.normal(size=(8, 8) if p == "weight" else 8)
                   .astype(np.float32) for n in ("query", "key", "value") for p in ("weight", "bias")}
        config = {"model_type": "bert", "num_attention_heads": 2, key: value}
    else:
        prefix, tensors = "h.0.attn.", gpt2_tensors()
        config = {"model_type": "gpt2", "n_head": 2, key: value}
    safetensors_numpy.save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(config))
    one_line(init(tmp_path / "model.safetensors", prefix),
             f"config {key} must be true or false, got {json.dumps(value)}")


@pytest.mark.parametrize(("text", "words"), [
    ('{"model_type": "llama", "num_attention_heads": 4, "num_attention_heads": 2}',
     'not a JSON config: $: line 1 column 51: duplicate key "num_attention_heads"'),
    (b'{"model_type": "llam\xe9"}', "not a JSON config: not UTF-8 text (byte 20 is 0xe9)"),
    ('{"model_type": "llama", "num_attention_heads": NaN}',
     "$.num_attention_heads: line 1 column 48: NaN is not a number JSON allows"),
])
def test_a_config_json_whose_meaning_is_not_one_is_refused(tmp_path: Path, text: Any,
                                                           words: str):
    checkpoint = llama_checkpoint(tmp_path)
    path = tmp_path / "config.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    line = one_line(init(checkpoint, LLAMA_PREFIX), words)
    assert line.startswith(f"Error: {path}: ")


@pytest.mark.parametrize("link", ["config.json", "nowhere.json"], ids=["loop", "dangling"])
def test_a_broken_config_link_is_named_not_taken_for_no_config(tmp_path: Path, link: str):
    # Before, a config.json link to nothing read as "no config.json beside the checkpoint".
    checkpoint = llama_checkpoint(tmp_path)
    os.symlink(link, tmp_path / "config.json")
    one_line(init(checkpoint, LLAMA_PREFIX),
             f"{tmp_path / 'config.json'}: a symbolic link to nothing (or a loop of links)")


def test_a_fifo_config_is_refused_without_hanging(tmp_path: Path):
    checkpoint = llama_checkpoint(tmp_path)
    os.mkfifo(tmp_path / "config.json")
    results: list[Any] = []
    worker = threading.Thread(target=lambda: results.append(init(checkpoint, LLAMA_PREFIX)),
                              daemon=True)
    worker.start()
    worker.join(30)
    if worker.is_alive():  # unblock the reader so the test run ends, then fail
        with open(tmp_path / "config.json", "w"):
            pass
        pytest.fail("init hung on a FIFO config.json")
    one_line(results[0], f"{tmp_path / 'config.json'}:")


def test_a_message_cuts_user_text_at_120_characters(tmp_path: Path):
    checkpoint = llama_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**LLAMA, "model_type": "x\x1b" * 300}))
    line = one_line(init(checkpoint, LLAMA_PREFIX), "config model_type \"x\\u001bx")
    shown = line.split("config model_type ", 1)[1].split(": qkv reads only", 1)[0]
    assert len(shown) == 120 and shown.endswith("…") and "\x1b" not in line
    long = one_line(init(checkpoint, "p" * 500), 'prefix "ppp')
    assert "p" * 120 not in long


def test_the_layer_prefixes_listed_are_escaped(tmp_path: Path):
    tensors = {name.replace("h.0.", "h\x1b.0."): value for name, value in gpt2_tensors().items()}
    safetensors_numpy.save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_head": 2}))
    line = one_line(init(tmp_path / "model.safetensors", "h.0.attn."),
                    "the layer prefixes are h\\x1b.0.attn.; did you mean h\\x1b.0.attn.?")
    assert "\x1b" not in line


@pytest.mark.parametrize(("target", "sharded"), [
    ("config.json", False), ("s1.safetensors", True), ("config.json", True),
])
@pytest.mark.parametrize("force", [(), ("--force",)], ids=["", "force"])
def test_init_never_writes_over_the_config_or_a_shard(tmp_path: Path, target: str,
                                                      sharded: bool, force: tuple[str, ...]):
    # Before, -o config.json --force (or -o a shard --force) replaced the model's own file.
    tensors = gpt2_tensors()
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_head": 2}))
    if sharded:
        names = sorted(tensors)
        safetensors_numpy.save_file({k: tensors[k] for k in names[:2]}, str(tmp_path / "s1.safetensors"))
        safetensors_numpy.save_file({k: tensors[k] for k in names[2:]}, str(tmp_path / "s2.safetensors"))
        checkpoint = tmp_path / "model.safetensors.index.json"
        checkpoint.write_text(json.dumps({"weight_map": {
            k: "s1.safetensors" if k in names[:2] else "s2.safetensors" for k in names}}))
    else:
        checkpoint = tmp_path / "model.safetensors"
        safetensors_numpy.save_file(tensors, str(checkpoint))
    before = {path.name: path.read_bytes() for path in tmp_path.iterdir()}
    result = invoke("init", "--from-safetensors", str(checkpoint), "--prefix", "h.0.attn.",
                    "-o", str(tmp_path / target), *force)
    one_line(result, f"{tmp_path / target}: refusing to overwrite a file this command reads")
    assert {path.name: path.read_bytes() for path in tmp_path.iterdir()} == before


def test_an_explicit_config_is_not_overwritten_either(tmp_path: Path):
    safetensors_numpy.save_file(gpt2_tensors(), str(tmp_path / "model.safetensors"))
    config = tmp_path / "elsewhere.json"
    config.write_text(json.dumps({"model_type": "gpt2", "n_head": 2}))
    result = invoke("init", "--from-safetensors", str(tmp_path / "model.safetensors"),
                    "--config", str(config), "--prefix", "h.0.attn.", "-o", str(config), "--force")
    one_line(result, "refusing to overwrite a file this command reads")
    assert json.loads(config.read_text()) == {"model_type": "gpt2", "n_head": 2}


@pytest.mark.parametrize(("index", "words"), [
    ('{"weight_map": {"h.0.attn.c_attn.weight": "s.safetensors", '
     '"h.0.attn.c_attn.weight": "t.safetensors"}}',
     'not a checkpoint index ($.weight_map: line 1 column 60: duplicate key '
     '"h.0.attn.c_attn.weight")'),
    ('{"weight_map": {"a": "model.safetensors.index.json"}}',
     "shard model.safetensors.index.json is the index itself"),
    ('{"weight_map": {"a": "/etc/passwd"}}',
     "shard /etc/passwd is an absolute path; an index names its shards beside it"),
], ids=["tensor-twice", "itself", "absolute"])
def test_an_index_without_one_meaning_is_refused(tmp_path: Path, index: str, words: str):
    path = tmp_path / "model.safetensors.index.json"
    path.write_text(index)
    one_line(invoke("inspect", str(path)), f"{path}: {words}")
    one_line(init(path, "h.0.attn."), f"{path}: {words}")


@pytest.mark.parametrize(("replace", "words"), [
    ({"c_attn.weight": np.ones((8, 24), np.int32)},
     'tensor "c_attn.weight" has dtype I32; only F16, F32, F64 and BF16 are read'),
    ({"c_proj.bias": np.ones(8, np.bool_)}, 'tensor "c_proj.bias" has dtype BOOL'),
    ({"c_attn.bias": np.ones(0, np.float32)},
     'tensor "c_attn.bias" has shape [0], the layer needs [24]'),
    ({"c_attn.bias": np.ones((24, 1), np.float32)},
     'tensor "c_attn.bias" has shape [24,1], the layer needs [24]'),
    ({"c_proj.weight": np.ones((5, 8), np.float32)},
     'tensor "c_proj.weight" has shape [5,8], the layer needs [8,N]'),
    ({"c_proj.bias": np.ones(3, np.float32)},
     'tensor "c_proj.bias" has shape [3], the layer needs [8]'),
], ids=["int", "bool", "empty-bias", "bias-rank-2", "out-rows", "out-bias"])
def test_init_refuses_tensors_attend_would_refuse(tmp_path: Path, replace: Any, words: str):
    # Before, init wrote these fixtures and attend refused them: init now reads what
    # attend will need from the header.
    safetensors_numpy.save_file(gpt2_tensors(**replace), str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_head": 2}))
    one_line(init(tmp_path / "model.safetensors", "h.0.attn."), f'prefix "h.0.attn.": {words}')
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_grouped_query_layers_in_every_float_dtype_run(tmp_path: Path, dtype: Any):
    # The output projection reads H * d_v = 16 columns though the value projection is 8 wide.
    checkpoint = llama_checkpoint(tmp_path, dtype)
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    assert init(checkpoint, LLAMA_PREFIX).exit_code == 0
    run = invoke("attend", str(tmp_path / "out.json"))
    assert run.exit_code == 0, run.output


def test_a_fixture_moved_away_from_its_checkpoint_names_the_missing_file(tmp_path: Path):
    safetensors_numpy.save_file(gpt2_tensors(), str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_head": 2}))
    assert init(tmp_path / "model.safetensors", "h.0.attn.").exit_code == 0
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    (tmp_path / "out.json").rename(moved / "layer.json")
    for command in ("attend", "validate"):
        one_line(invoke(command, str(moved / "layer.json")),
                 "$.weights.c_attn_weight.safetensors: no such file: model.safetensors")
        for trust in ((), ("--trust-paths",)):
            one_line(invoke(command, str(moved / "layer.json"), *trust),
                     "$.weights.c_attn_weight", "model.safetensors")


def test_bfloat16_is_accepted_by_init_and_read_by_attend(tmp_path: Path):
    ml_dtypes = pytest.importorskip("ml_dtypes")  # only to write the file
    tensors = gpt2_tensors()
    tensors["h.0.attn.c_attn.weight"] = tensors["h.0.attn.c_attn.weight"].astype(
        ml_dtypes.bfloat16)
    safetensors_numpy.save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_head": 2}))
    assert init(tmp_path / "model.safetensors", "h.0.attn.").exit_code == 0
    assert invoke("attend", str(tmp_path / "out.json"), "-f", "text").exit_code == 0


def test_a_checkpoint_whose_file_name_is_not_utf8_is_refused_not_written(tmp_path: Path):
    # Before, init wrote the name's surrogate escapes and attend refused the fixture.
    name = os.fsdecode(b"m\xff.safetensors")
    safetensors_numpy.save_file(gpt2_tensors(), os.path.join(tmp_path, name))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_head": 2}))
    one_line(init(tmp_path / name, "h.0.attn."),
             "m\\udcff.safetensors: the file name is not UTF-8, so no fixture can name it")
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize(("content", "words"), [
    (b"PK\x03\x04" + b"\0" * 64, "it looks like a zip archive, as torch.save writes"),
    (b"\x80\x02}q\x00(X" + b"\0" * 64, "it looks like a Python pickle"),
    (b'{"model_type": "gpt2"}', "it looks like JSON text (a config.json?"),
    (b"GGUF\x03\0\0\0" + b"\0" * 64, "it looks like a GGUF file"),
], ids=["torch-zip", "pickle", "json", "gguf"])
def test_a_newcomers_other_checkpoint_format_is_named(tmp_path: Path, content: bytes,
                                                      words: str):
    # Before: only "its header would be 578712552184433488 bytes".
    path = tmp_path / "pytorch_model.bin"
    path.write_bytes(content)
    line = one_line(invoke("inspect", str(path)), f"{path}: its header would be", words)
    assert line.endswith("not .safetensors")


@pytest.mark.parametrize("model", ["gpt2", "bert"])
def test_a_cross_attention_layer_is_refused_even_without_a_config(tmp_path: Path, model: str):
    # GPT-2's crossattention.c_attn is key|value, 2W wide: with W = 12 it split into three
    # 8-wide "projections", and init wrote a self-attention fixture of another function.
    rng = np.random.default_rng(4)
    f32 = np.float32
    if model == "gpt2":
        prefix = "h.0.crossattention."
        tensors = {f"{prefix}c_attn.weight": rng.normal(size=(12, 24)).astype(f32),
                   f"{prefix}q_attn.weight": rng.normal(size=(12, 12)).astype(f32),
                   f"{prefix}c_proj.weight": rng.normal(size=(12, 12)).astype(f32)}
    else:
        prefix = "encoder.layer.0.crossattention.self."
        tensors = {f"{prefix}{name}.weight": rng.normal(size=(8, 8)).astype(f32)
                   for name in ("query", "key", "value")}
    safetensors_numpy.save_file(tensors, str(tmp_path / "model.safetensors"))
    one_line(init(tmp_path / "model.safetensors", prefix, "--heads", "2", "--causal"),
             f'prefix "{prefix}": a cross-attention layer (keys and values from the encoder); '
             "qkv computes self-attention only")
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize("command", ["attend", "validate"])
def test_a_fixture_beside_its_checkpoints_parent_names_the_flag_of_its_own_command(
        tmp_path: Path, command: str):
    safetensors_numpy.save_file(gpt2_tensors(), str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_head": 2}))
    (tmp_path / "sub").mkdir()
    assert invoke("init", "--from-safetensors", str(tmp_path / "model.safetensors"), "--prefix",
                  "h.0.attn.", "-o", str(tmp_path / "sub" / "layer.json")).exit_code == 0
    one_line(invoke(command, str(tmp_path / "sub" / "layer.json")),
             "'..' is refused", "--trust-paths of qkv attend or qkv validate reads it")
    assert invoke(command, str(tmp_path / "sub" / "layer.json"), "--trust-paths").exit_code == 0


def test_a_large_index_with_a_tensor_twice_is_named_without_scanning_for_its_line(
        tmp_path: Path):
    # Locating the key took 19 s on a 33 MB index; above 1 MB the key is named alone.
    from qkvcli.reading.json_values import LOCATE_LIMIT

    entries = ", ".join(f'"t{i}": "s.safetensors"' for i in range(LOCATE_LIMIT // 20))
    path = tmp_path / "model.safetensors.index.json"
    path.write_text('{"weight_map": {' + entries + ', "t0": "s.safetensors"}}')
    assert path.stat().st_size > LOCATE_LIMIT
    line = one_line(invoke("inspect", str(path)),
                    f'{path}: not a checkpoint index (duplicate key "t0")')
    assert "line " not in line
