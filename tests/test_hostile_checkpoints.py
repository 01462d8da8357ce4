"""Hostile ``.safetensors`` checkpoints through ``qkv inspect``, ``qkv attend`` and
``qkv init --from-safetensors``: headers, offsets, dtypes, names, special files, links."""

from __future__ import annotations

import json
import os
import struct
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qkvcli.reading import limits
from tests.hostile_helpers import invoke, refused, write

safetensors_numpy = pytest.importorskip("safetensors.numpy")
WIDTH = 4


def raw(header: Any, data: bytes = b"", stated: int | None = None) -> bytes:
    """A .safetensors file by hand: the stated header length, the header, the data."""
    encoded = json.dumps(header).encode()
    return struct.pack("<Q", len(encoded) if stated is None else stated) + encoded + data


def attend_on(tmp_path: Path, name: str, tensor: str = "t") -> Path:
    """An attend fixture whose query weight is ``tensor`` of checkpoint ``name``."""
    return write(tmp_path / "f.json", {
        "input": [[[1, 2]]],
        "weights": {"query": {"safetensors": name, "tensor": tensor},
                    "key": [[1], [0]], "value": [[1], [0]]},
    })


def both(tmp_path: Path, content: bytes, *parts: str) -> None:
    """inspect and attend refuse ``content`` with one line holding ``parts``."""
    (tmp_path / "c.safetensors").write_bytes(content)
    refused(invoke("inspect", str(tmp_path / "c.safetensors")), *parts)
    refused(invoke("attend", str(attend_on(tmp_path, "c.safetensors"))), *parts)


F32 = {"dtype": "F32", "shape": [2, 1], "data_offsets": [0, 8]}


@pytest.mark.parametrize(("content", "words"), [
    (raw({}, stated=2**62), "more than the limit 100000000"),
    (raw({}, stated=1000), "but the file has only"),
    (b"\x01\x02", "shorter than the 8-byte length"),
    (raw({"t": {**F32, "data_offsets": [0, 800]}}, b"\0" * 8), "offset"),
    (raw({"t": {**F32, "data_offsets": [8, 0]}}, b"\0" * 8), "cannot be read as .safetensors"),
    (raw({"t": {**F32, "shape": [2**40, 2**40]}}, b"\0" * 8), "overflow"),
    (raw({"t": {**F32, "shape": [True, 1]}}, b"\0" * 8), "cannot be read as .safetensors"),
    (raw({"t": {**F32, "dtype": "Z\x1b9"}}, b"\0" * 8), "cannot be read as .safetensors"),
    (raw({"t": {**F32, "shape": [int("9" * 400)]}}, b"\0" * 8), "cannot be read as .safetensors"),
    (struct.pack("<Q", 5) + b"{{{{{", "cannot be read as .safetensors"),
], ids=["header-huge", "header-past-end", "short", "offset-past-end", "offsets-reversed",
        "shape-overflow", "bool-shape", "dtype-escape", "long-int", "not-json"])
def test_lying_headers_are_refused_in_one_line(tmp_path, content, words):
    both(tmp_path, content, words)


def test_the_header_limit_follows_the_byte_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "MAX_FILE_BYTES", 200)  # the fixture itself is smaller
    header = {"t": F32, "__metadata__": {"pad": "x" * 300}}
    both(tmp_path, raw(header, b"\0" * 8), "more than the limit 200")


def test_a_fifo_checkpoint_is_refused_without_hanging(tmp_path):
    os.mkfifo(tmp_path / "c.safetensors")
    outcome: list[Any] = []

    def run() -> None:
        outcome.append(invoke("inspect", str(tmp_path / "c.safetensors")))
        outcome.append(invoke("attend", str(attend_on(tmp_path, "c.safetensors"))))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(20)
    assert len(outcome) == 2, "blocked on a FIFO"
    for result in outcome:
        refused(result, "FIFO")


def test_a_checkpoint_linked_from_outside_is_refused(tmp_path):
    outside = tmp_path / "outside"
    inside = tmp_path / "inside"
    outside.mkdir()
    inside.mkdir()
    safetensors_numpy.save_file({"t": np.ones((2, 1), np.float32)}, str(outside / "c.safetensors"))
    (inside / "c.safetensors").symlink_to(outside / "c.safetensors")
    refused(invoke("attend", str(attend_on(inside, "c.safetensors"))), "outside")


@pytest.mark.parametrize(("dtype", "values", "words"), [
    ("I32", np.ones((2, 1), np.int32), "dtype I32"),
    ("BOOL", np.ones((2, 1), bool), "dtype BOOL"),
    ("F32-nan", np.full((2, 1), np.nan, np.float32), "not finite"),
], ids=["int", "bool", "nan"])
def test_unusable_tensors_are_refused(tmp_path, dtype, values, words):
    safetensors_numpy.save_file({"t": values}, str(tmp_path / "c.safetensors"))
    refused(invoke("attend", str(attend_on(tmp_path, "c.safetensors"))), words)


def test_names_with_control_characters_are_escaped_by_inspect(tmp_path):
    name = "evil\x1b[31m\u202e" + "n" * 500
    safetensors_numpy.save_file({name: np.ones(2, np.float32)}, str(tmp_path / "c.safetensors"))
    result = invoke("inspect", str(tmp_path / "c.safetensors"))
    assert result.exit_code == 0
    assert "\x1b" not in result.output and "\u202e" not in result.output
    assert "evil\\x1b[31m\\u202e" in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) < 300
    refused(invoke("attend", str(attend_on(tmp_path, "c.safetensors", "x\x1b"))),
            "no tensor named x\\x1b")


def gpt2(tmp_path: Path, width: int = WIDTH) -> Path:
    path = tmp_path / "g.safetensors"
    safetensors_numpy.save_file({
        "h.0.attn.c_attn.weight": np.ones((width, 3 * width), np.float32),
        "h.0.attn.c_attn.bias": np.zeros(3 * width, np.float32),
        "odd.c_attn.weight": np.ones((width, 3 * width + 1), np.float32),
        "flat.c_attn.weight": np.ones(3, np.float32),
    }, str(path))
    return path


def init(tmp_path: Path, *extra: str, prefix: str = "h.0.attn.") -> Any:
    # no config.json beside it: the command line says the function (c_attn: the scale too)
    said = ("--causal", "--scale", "inverse-sqrt") + (
        () if "--heads" in extra else ("--heads", "2"))
    return invoke("init", "--from-safetensors", str(gpt2(tmp_path)), "--prefix", prefix,
                  "-o", str(tmp_path / "out.json"), *said, *extra)


@pytest.mark.parametrize(("extra", "prefix", "words"), [
    (("--heads", "3"), "h.0.attn.", "--heads 3: must be at most 4096 and divide"),
    (("--heads", "99999999999999999999"), "h.0.attn.", "must be at most 4096"),
    (("--tokens", "99999999999"), "h.0.attn.", "--tokens 99999999999"),
    (("--tokens", "5000", "--heads", "4", "--max-elements", "1000000"), "h.0.attn.",
     "attention scores [1,H,T,T]"),
    ((), "h.0\x1b.", "control characters are refused"),
    ((), "odd.", "is not 3 equal parts"),
    ((), "flat.", "not a non-empty matrix"),
], ids=["heads-divide", "heads-huge", "tokens-huge", "scores", "prefix-escape", "odd-width",
        "not-a-matrix"])
def test_init_refuses_a_fixture_attend_would_refuse(tmp_path, extra, prefix, words):
    line = refused(init(tmp_path, *extra, prefix=prefix), words)
    assert "\x1b" not in line
    assert not (tmp_path / "out.json").exists()


def test_a_checkpoint_linked_from_outside_needs_trust_paths_to_be_read(tmp_path):
    # The path typed on init's command line is the user's; the fixture it writes keeps
    # the confinement promise: attend follows the link out only with --trust-paths.
    checkpoint = gpt2(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "g.safetensors").symlink_to(checkpoint)
    result = invoke("init", "--from-safetensors", str(tmp_path / "sub" / "g.safetensors"),
                    "--prefix", "h.0.attn.", "--heads", "2", "--causal", "--scale",
                    "inverse-sqrt", "-o", str(tmp_path / "sub" / "out.json"))
    assert result.exit_code == 0
    assert result.stderr.splitlines()[0] == (
        "qkv: note: g.safetensors lies outside the fixture's directory (or links out of it, as "
        "a hub cache does): run the fixture with qkv attend --trust-paths")
    refused(invoke("attend", str(tmp_path / "sub" / "out.json")),
            "g.safetensors resolves outside the fixture's directory; refused")
    trusted = invoke("attend", str(tmp_path / "sub" / "out.json"), "--trust-paths")
    assert trusted.exit_code in (0, 1) and trusted.stderr.count("Error") == 0


def test_what_init_writes_attend_runs(tmp_path):
    assert init(tmp_path, "--heads", "2", "--tokens", "3").exit_code == 0
    assert invoke("attend", str(tmp_path / "out.json")).exit_code in (0, 1)
    result = init(tmp_path, "--heads", "2", "--tokens", "20000", "--max-elements", "999999999",
                  "--force")
    assert result.exit_code == 0
    assert "run the fixture with --max-elements 800000000" in result.stderr


def test_inspect_names_the_file_first_when_the_library_refuses_it(tmp_path):
    path = tmp_path / "c.safetensors"
    path.write_bytes(struct.pack("<Q", 5) + b"{{{{{")
    line = refused(invoke("inspect", str(path)), "cannot be read as .safetensors")
    assert line.startswith(f"Error: {path}: cannot be read as .safetensors (")


ENTRY = '{"dtype": "F32", "shape": [2, 1], "data_offsets": [0, 8]}'


@pytest.mark.parametrize("header", [
    '{"t": ' + ENTRY + ', "t": ' + ENTRY + '}',
    '{"t": ' + ENTRY + ', "u": ' + ENTRY + ', "\\u0074": ' + ENTRY + '}',
    '{"u": ' + ENTRY + ', "u": ' + ENTRY + ', "t": ' + ENTRY + '}',
], ids=["twice", "escaped-spelling", "another-name"])
def test_a_name_given_twice_is_refused_naming_it(tmp_path, header):
    content = struct.pack("<Q", len(header)) + header.encode() + b"\0" * 8
    twice = "u" if header.startswith('{"u"') else "t"
    both(tmp_path, content, "cannot be read as .safetensors",
         f"tensor {twice} is named twice in the header")


def test_a_long_tensor_name_is_quoted_to_120_characters(tmp_path):
    safetensors_numpy.save_file({"t": np.ones((2, 1), np.float32)}, str(tmp_path / "c.safetensors"))
    name = "n" * 10_000
    line = refused(invoke("attend", str(attend_on(tmp_path, "c.safetensors", name))),
                   "has no tensor named")
    quoted = line.split("has no tensor named ", 1)[1]
    assert len(quoted) == 120 and quoted.endswith("…"), len(quoted)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux's /proc")
def test_one_tensor_is_read_without_expanding_a_large_header(tmp_path):
    # 400,000 entries (~28 MB of header) beside the one tensor read. The library
    # expanded every entry (about 10x the header in memory); the scan keeps a hash a name.
    header = {"t": {"dtype": "F32", "shape": [2, 1], "data_offsets": [0, 8]}}
    for index in range(400_000):
        header[f"layer.{index}.weight"] = {"dtype": "F32", "shape": [1],
                                           "data_offsets": [8 + 4 * index, 12 + 4 * index]}
    encoded = json.dumps(header, separators=(",", ":")).encode()
    (tmp_path / "c.safetensors").write_bytes(
        struct.pack("<Q", len(encoded)) + encoded + b"\0" * (8 + 4 * 400_000))
    # VmHWM, not ru_maxrss: the latter keeps the forked pytest's size across exec.
    probe = (
        "import sys\n"
        "from qkvcli.reading.safetensors import load_safetensors\n"
        "array = load_safetensors({'safetensors': 'c.safetensors', 'tensor': 't'}, '$.w',"
        " sys.argv[1], 100)\n"
        "status = open('/proc/self/status').read().split('VmHWM:')[1].split()[0]\n"
        "print(array.shape, status)\n")
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True,
                          text=True, timeout=120, check=True,
                          env={**os.environ, "PYTHONPATH": str(root)})
    shape, peak_kb = done.stdout.rsplit(" ", 1)
    assert shape == "(2, 1)"
    header_kb = len(encoded) // 1024
    assert int(peak_kb) < 80_000 + 3 * header_kb, (peak_kb, header_kb)


def test_validate_keeps_the_confinement_rule_unless_told(tmp_path):
    checkpoint = gpt2(tmp_path)
    (tmp_path / "sub").mkdir()
    fixture = tmp_path / "sub" / "out.json"
    assert invoke("init", "--from-safetensors", str(checkpoint), "--prefix", "h.0.attn.",
                  "--heads", "2", "--causal", "--scale", "inverse-sqrt",
                  "-o", str(fixture)).exit_code == 0
    assert json.loads(fixture.read_text())["weights"]["c_attn_weight"]["safetensors"] == (
        "../g.safetensors")
    refused(invoke("validate", str(fixture)), "'..' is refused")
    trusted = invoke("validate", "--trust-paths", str(fixture))
    assert trusted.exit_code == 0 and trusted.stdout == f"{fixture}: ok (attend fixture)\n"


def test_a_sharded_index_with_a_missing_tensor_is_one_line(tmp_path):
    safetensors_numpy.save_file({"a": np.ones(2, np.float32)}, str(tmp_path / "s1.safetensors"))
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors"}}))
    refused(invoke("inspect", str(index)), "tensor b is not in its shard s1.safetensors")
    index.write_text(json.dumps({"weight_map": {"a": "../s1.safetensors"}}))
    refused(invoke("inspect", str(index)), "shard ../s1.safetensors: '..' is refused")
    index.write_text("[1]")
    refused(invoke("inspect", str(index)), "not a checkpoint index")


def _llama_shaped(tmp_path: Path) -> Path:
    """LLaMA's tensor names and shapes (4 heads, 2 K/V heads of 4), float32."""
    path = tmp_path / "model.safetensors"
    rng = np.random.default_rng(1)
    tensors = {f"layers.0.self_attn.{name}.weight": rng.normal(size=shape).astype(np.float32)
               for name, shape in (("q_proj", (16, 16)), ("k_proj", (8, 16)),
                                   ("v_proj", (8, 16)), ("o_proj", (16, 16)))}
    safetensors_numpy.save_file(tensors, str(path))
    return path


LLAMA = '"model_type": "llama", "num_attention_heads": 4, "num_key_value_heads": 2'


@pytest.mark.parametrize(("config", "words"), [
    ('{"model_type": 5}', "config model_type 5: qkv reads only gpt2"),
    ("[1]", "not a model config (not a JSON object)"),
    ("[" * 5000 + "]" * 5000, "not a JSON config"),
    ('{"model_type": "llama", "num_attention_heads": "4"}',
     'config num_attention_heads must be a positive integer, got "4"'),
    ("{" + LLAMA + ', "rope_parameters": []}', "config rope_parameters must be an object"),
    ("{" + LLAMA + ', "rope_parameters": {"rope_theta": 1e400}}',
     "config rope_parameters.rope_theta must be a finite positive number, got Infinity"),
    ("{" + LLAMA + ', "rope_theta": NaN}', "$.rope_theta: line 1 column 91: NaN is not a number"),
    ("{" + LLAMA + ', "rope_scaling": {"type": "dynamic", "factor": 2}}',
     'config rope_scaling.rope_type "dynamic" reads max_position_embeddings, which '
     'config.json leaves out'),
    ("{" + LLAMA + ', "head_dim": 0}', "config head_dim must be a positive integer, got 0"),
    ('{"model_type": "llama", "num_attention_heads": 4, "num_key_value_heads": 3}',
     "config says 4 heads and 3 K/V heads of 4, but the projections are query 16, key 8 wide"),
    ("{" + LLAMA + ', "rope_parameters": {"rope_theta": 1e4, "partial_rotary_factor": 0.5}}',
     "config rope_parameters.partial_rotary_factor 0.5: llama rotates whole heads in qkv's "
     "reading; refused"),
], ids=["model-type", "not-object", "deep", "heads-string", "rope-list", "theta-inf",
        "theta-nan", "rope-dynamic", "head-dim-0", "kv-heads", "partial-llama"])
def test_a_hostile_config_is_one_line_naming_the_key(tmp_path, config, words):
    checkpoint = _llama_shaped(tmp_path)
    (tmp_path / "config.json").write_text(config)
    line = refused(invoke("init", "--from-safetensors", str(checkpoint), "--prefix",
                          "layers.0.self_attn.", "-o", str(tmp_path / "out.json")), words)
    assert line.count("\n") == 0
    assert not (tmp_path / "out.json").exists()


# --- names, numbers and sizes that once ended in exit 70 -----------------------------------

def _linear_layer(prefix: str) -> dict[str, Any]:
    rng = np.random.default_rng(2)
    return {f"{prefix}{name}.weight": rng.normal(size=(4, 4)).astype(np.float32)
            for name in ("q_proj", "k_proj", "v_proj", "out_proj")}


@pytest.mark.parametrize("layer", ["1\u00b2", "9" * 5000], ids=["superscript", "5000-digits"])
def test_odd_layer_numbers_are_listed_and_refused_in_one_line(tmp_path, layer):
    path = tmp_path / "m.safetensors"
    prefix = f"h.{layer}.attn."
    safetensors_numpy.save_file({**_linear_layer(prefix), "h.2.attn.q_proj.weight":
                                 np.ones((4, 4), np.float32), "1\u00b2": np.ones(1, np.float32)},
                                str(path))
    listing = invoke("inspect", str(path))
    assert listing.exit_code == 0, listing.output
    assert "h.2.attn." in listing.output.splitlines()[-1]
    made = invoke("init", "--from-safetensors", str(path), "--prefix", prefix, "--heads", "2",
                  "--causal", "--no-rope", "--scale", "inverse-sqrt",
                  "-o", str(tmp_path / "out.json"))
    assert made.exit_code == 0, made.output  # without a config the number is not read
    (tmp_path / "config.json").write_text(json.dumps(  # GPT-J's names (h.N.attn., out_proj)
        {"model_type": "gptj", "n_head": 2, "n_embd": 4, "rotary_dim": 2}))
    with_config = invoke("init", "--from-safetensors", str(path), "--prefix", prefix,
                         "-o", str(tmp_path / "other.json"))
    if layer.isascii():  # the config's per-layer settings need the number: refused
        refused(with_config, "the layer number in the prefix has 5000 digits")
    else:
        assert with_config.exit_code == 0, with_config.output


def test_a_401_digit_rope_theta_in_a_config_is_one_line(tmp_path):
    checkpoint = _llama_shaped(tmp_path)
    (tmp_path / "config.json").write_text("{" + LLAMA + ', "rope_theta": 1' + "0" * 400 + "}")
    refused(invoke("init", "--from-safetensors", str(checkpoint), "--prefix",
                   "layers.0.self_attn.", "-o", str(tmp_path / "out.json")),
            "not a JSON config: $.rope_theta: number is too large for binary64")


def test_a_theta_whose_frequencies_overflow_is_refused_in_the_config(tmp_path):
    path = tmp_path / "model.safetensors"
    rng = np.random.default_rng(1)
    safetensors_numpy.save_file({f"layers.0.self_attn.{name}.weight": rng.normal(
        size=(128, 128)).astype(np.float32) for name in ("q_proj", "k_proj", "v_proj", "o_proj")},
        str(path))
    (tmp_path / "config.json").write_text(json.dumps(
        {"model_type": "llama", "num_attention_heads": 2, "rope_theta": 5e-324}))
    refused(invoke("init", "--from-safetensors", str(path), "--prefix", "layers.0.self_attn.",
                   "-o", str(tmp_path / "out.json")),
            "config rope_theta 5e-324 makes the rotation frequencies theta^(-2i/64) overflow")


@pytest.mark.parametrize(("names", "words"), [
    (("layers.0.self_attn.q_a_proj.weight", "layers.0.self_attn.kv_a_proj_with_mqa.weight"),
     "it has \"layers.0.self_attn.q_a_proj.weight\", multi-head latent attention's q_a_proj"),
    (("blocks.0.mixer.attention_weird.weight",),
     "its attention tensors include \"blocks.0.mixer.attention_weird.weight\""),
    (("embed.weight", "lm_head.weight"), "none of its 2 tensors is named as attention"),
], ids=["deepseek", "unknown-attention", "no-attention"])
def test_no_layer_qkv_reads_names_what_the_checkpoint_holds(tmp_path, names, words):
    path = tmp_path / "m.safetensors"
    safetensors_numpy.save_file({name: np.ones((2, 2), np.float32) for name in names}, str(path))
    refused(invoke("init", "--from-safetensors", str(path), "--prefix", "layers.0.self_attn.",
                   "--heads", "1", "--causal", "-o", str(tmp_path / "out.json")),
            "the checkpoint has no attention layer qkv recognises; " + words)
