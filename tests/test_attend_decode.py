"""``qkv attend --decode``: a layer decoded one token at a time through a KV cache of its
K/V heads (a ring of its sliding window), each step against row ``t`` of the engine's
full causal pass, for every piece of a layer the engine computes; the layers a cache
cannot serve refused in one line; the check able to fail; nothing changed without the
option. Real checkpoints built by transformers: ``tests/test_attend_decode_models.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qkvcli.attention import decode as decode_module
from qkvcli.attention.decode import TOLERANCE, KvRing, check_decodable
from qkvcli.attention.errors import DecodeRefusal
from qkvcli.attention.fixture import load_layer
from qkvcli.check.attend import build_attend_evidence
from tests.hostile_helpers import invoke, refused, write

BATCH, TOKENS, D_MODEL = 2, 7, 4


def _weights(heads: int, kv_heads: int, d_k: int, d_v: int) -> dict[str, Any]:
    widths = {"query": heads * d_k, "key": kv_heads * d_k, "value": kv_heads * d_v}
    return {branch: {"generate": {"seed": i + 3, "shape": [D_MODEL, width]}}
            for i, (branch, width) in enumerate(widths.items())}


def layer(heads: int = 4, kv_heads: int = 2, d_k: int = 8, d_v: int | None = None,
          **changes: Any) -> dict[str, Any]:
    """A causal layer fixture of ``heads`` query heads over ``kv_heads`` K/V heads."""
    document: dict[str, Any] = {
        "heads": heads, "causal": True,
        "input": {"generate": {"seed": 1, "shape": [BATCH, TOKENS, D_MODEL]}},
        "weights": _weights(heads, kv_heads, d_k, d_k if d_v is None else d_v),
    }
    if kv_heads != heads:
        document["kv_heads"] = kv_heads
    for key, value in changes.items():
        if key == "weights":
            document["weights"].update(value)
        else:
            document[key] = value
    return document


def _rope(dims: int = 8, layout: str = "half", **scaling: Any) -> dict[str, Any]:
    found: dict[str, Any] = {"theta": 10000.0, "dims": dims, "layout": layout}
    if scaling:
        found["scaling"] = scaling
    return found


def _norm(kind: str, d_k: int, bias: bool = False) -> dict[str, Any]:
    found = {"q_norm_weight": {"generate": {"seed": 11, "shape": [d_k]}},
             "k_norm_weight": {"generate": {"seed": 12, "shape": [d_k]}}}
    if bias:
        found |= {"q_norm_bias": {"generate": {"seed": 13, "shape": [d_k]}},
                  "k_norm_bias": {"generate": {"seed": 14, "shape": [d_k]}}}
    return found


GPT2 = {"heads": 2, "causal": True,
        "input": {"generate": {"seed": 1, "shape": [BATCH, TOKENS, D_MODEL]}},
        "weights": {"c_attn_weight": {"generate": {"seed": 2, "shape": [D_MODEL, 12]}},
                    "c_attn_bias": {"generate": {"seed": 3, "shape": [12]}},
                    "c_proj_weight": {"generate": {"seed": 4, "shape": [4, 5]}},
                    "c_proj_bias": {"generate": {"seed": 5, "shape": [5]}}}}
SINGLE = {"causal": True, "rope": _rope(4),
          "input": {"generate": {"seed": 1, "shape": [BATCH, TOKENS, D_MODEL]}},
          "weights": {b: {"generate": {"seed": i, "shape": [D_MODEL, 4]}}
                      for i, b in enumerate(("query", "key", "value"))}}

# id, the fixture, (K/V heads, d_k, d_v, window) it must decode with
CASES: list[tuple[str, dict[str, Any], tuple[int, int, int, int | None]]] = [
    ("gpt2-mha-biases", GPT2, (2, 2, 2, None)),
    ("single-head-rope", SINGLE, (1, 4, 4, None)),
    ("llama-rope", layer(4, 4, rope=_rope()), (4, 8, 8, None)),
    ("gqa-rope", layer(rope=_rope()), (2, 8, 8, None)),
    ("multi-query", layer(4, 1, rope=_rope()), (1, 8, 8, None)),
    ("partial-rope-interleaved", layer(rope=_rope(4, "interleaved")), (2, 8, 8, None)),
    ("rope-linear", layer(rope=_rope(type="linear", factor=2.0)), (2, 8, 8, None)),
    ("rope-yarn", layer(rope=_rope(type="yarn", factor=4.0,
                                   original_max_position_embeddings=4)), (2, 8, 8, None)),
    ("rope-llama3", layer(rope=_rope(type="llama3", factor=8.0,
                                     original_max_position_embeddings=4, low_freq_factor=1.0,
                                     high_freq_factor=4.0)), (2, 8, 8, None)),
    ("rope-dynamic-within", layer(rope=_rope(type="dynamic", factor=2.0,
                                             max_position_embeddings=TOKENS)), (2, 8, 8, None)),
    ("rope-longrope-within", layer(rope=_rope(
        type="longrope", factor=4.0, original_max_position_embeddings=16,
        short_factor=[1.0, 1.5, 2.0, 2.5], long_factor=[3.0, 3.0, 3.0, 3.0])), (2, 8, 8, None)),
    ("window-ring", layer(rope=_rope(), window=3), (2, 8, 8, 3)),
    ("window-one", layer(rope=_rope(), window=1), (2, 8, 8, 1)),
    ("window-wider-than-input", layer(rope=_rope(), window=20), (2, 8, 8, 20)),
    ("softcap-window", layer(rope=_rope(), window=4, softcap=1.5), (2, 8, 8, 4)),
    ("alibi", layer(4, 4, alibi=[0.5, 0.25, 0.125, 0.0625]), (4, 8, 8, None)),
    ("alibi-falcon-window", layer(4, 4, alibi=[0.5, 0.25, 0.125, 0.0625], alibi_scaled=True,
                                  alibi_rounding="bfloat16", window=3), (4, 8, 8, 3)),
    ("clip-qkv", layer(rope=_rope(), clip_qkv=0.6), (2, 8, 8, None)),
    ("given-scale", layer(rope=_rope(), scale=0.3), (2, 8, 8, None)),
    ("qk-rms-norm", layer(rope=_rope(), qk_norm={"span": "head", "eps": 1e-6},
                          weights=_norm("rms", 8)), (2, 8, 8, None)),
    ("qk-layer-norm-after-rope", layer(rope=_rope(), qk_norm={
        "kind": "layer", "span": "head", "eps": 1e-5, "after": "rope"},
        weights=_norm("layer", 8, bias=True)), (2, 8, 8, None)),
    ("value-width", layer(4, 2, 4, 6, rope=_rope(4), value_width="independent", window=5),
     (2, 4, 6, 5)),
]


def _run(path: Path, *extra: str) -> Any:
    return invoke("attend", str(path), "-f", "json", "--decode", *extra)


@pytest.mark.parametrize(("document", "shape"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_layer_decodes_as_its_full_pass(tmp_path: Path, document: dict[str, Any],
                                             shape: tuple[int, int, int, int | None]) -> None:
    run = _run(write(tmp_path / "layer.json", document))
    assert run.exit_code == 0, run.output
    evidence = json.loads(run.stdout)
    decoded = evidence["decode"]
    kv, d_k, d_v, window = shape
    capacity = TOKENS if window is None else min(window, TOKENS)
    assert decoded["passed"] and decoded["tolerance"] == TOLERANCE
    assert decoded["window"] == window
    assert len(decoded["steps"]) == TOKENS
    for t, step in enumerate(decoded["steps"]):
        held = t + 1 if window is None else min(t + 1, window)
        assert step["position"] == t
        assert 0.0 <= step["worst"] <= 1e-12, step
        assert step["keys"] == [BATCH, kv, held, d_k]  # K/V heads, not query heads
        assert step["values"] == [BATCH, kv, held, d_v]
        assert step["held_bytes"] == 8 * BATCH * kv * held * (d_k + d_v)
    assert decoded["held_worst"] <= 1e-12
    assert decoded["worst"] == max(step["worst"] for step in decoded["steps"])
    assert decoded["storage"] == {"keys": [BATCH, kv, capacity, d_k],
                                  "values": [BATCH, kv, capacity, d_v],
                                  "bytes": 8 * BATCH * kv * capacity * (d_k + d_v)}
    entry = [c for c in evidence["checks"] if c["name"] == "cached-steps"]
    assert entry and entry[0]["passed"] and entry[0]["family"] == "cached-step"
    assert evidence["passed"]


def test_the_json_holds_each_steps_worst_difference_exactly(tmp_path: Path) -> None:
    path = write(tmp_path / "layer.json", layer(rope=_rope(), window=3))
    printed = json.loads(_run(path).stdout)["decode"]
    loaded, built = load_layer(path, causal=True)
    evidence = build_attend_evidence(loaded, causal=True, layer=built, decode=TOLERANCE,
                                     mode="sampled")
    assert evidence.decode is not None
    assert [s["worst"] for s in printed["steps"]] == [s.worst for s in evidence.decode.steps]
    assert printed["held_worst"] == evidence.decode.held_worst
    # the steps really differ from the pass in their last bits somewhere: the floats printed
    # are the measured ones, not a rounded zero
    assert any(s.worst > 0.0 for s in evidence.decode.steps)


def test_the_text_names_every_step_and_the_storage(tmp_path: Path) -> None:
    path = write(tmp_path / "layer.json", layer(rope=_rope(), window=3))
    run = invoke("attend", str(path), "--decode", "-f", "text")
    assert run.exit_code == 0, run.output
    lines = run.stdout.splitlines()
    steps = [line for line in lines if line.startswith("decode_step=")]
    assert [line.split()[0] for line in steps] == [f"decode_step=t:{t}" for t in range(TOKENS)]
    assert "keys:[2,2,3,8] values:[2,2,3,8] held_bytes:1536" in steps[-1]
    assert "keys:[2,2,1,8]" in steps[0]
    (summary,) = [line for line in lines if line.startswith("decode=")]
    assert summary.startswith("decode=steps:7 window:3 storage_keys:[2,2,3,8] "
                              "storage_values:[2,2,3,8] storage_bytes:1536 worst:")
    assert "check=decode PASS 7 tokens one at a time" in run.stdout


def test_the_decodes_keys_are_explained() -> None:
    from tests.test_docs import _missing

    run = invoke("attend", "--causal", "--decode", "-f", "text")
    assert run.exit_code == 0, run.output
    assert _missing({"attend-decode": run.stdout}) == []


def test_without_the_option_nothing_is_decoded(tmp_path: Path) -> None:
    path = write(tmp_path / "layer.json", layer(rope=_rope(), window=3))
    plain, decoded = (json.loads(invoke("attend", str(path), "-f", "json", *extra).stdout)
                      for extra in ((), ("--decode",)))
    assert "decode" not in plain
    assert [c["name"] for c in plain["checks"]] == [
        c["name"] for c in decoded["checks"] if c["name"] != "cached-steps"]
    text = invoke("attend", str(path), "-f", "text").stdout
    assert not [line for line in text.splitlines()
                if line.startswith(("decode", "# decode", "check=decode"))]


def test_the_decoded_document_keeps_its_schema(tmp_path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    from qkvcli.render.schemas import report_schema

    path = write(tmp_path / "layer.json", layer(rope=_rope(), window=3))
    jsonschema.validate(json.loads(_run(path).stdout), report_schema("attend"))


# --- refusals: one line, exit 2, the reason named -----------------------------------------

REFUSED = [
    ("no-causal-mask", {**layer(rope=_rope()), "causal": False}, "it has no causal mask"),
    ("two-sided-window", {**layer(rope=_rope(), window=2), "causal": False},
     "its window of 2 keys is two-sided"),
    ("dynamic-past-its-length", layer(rope=_rope(type="dynamic", factor=2.0,
                                                 max_position_embeddings=4)),
     "its RoPE scaling 'dynamic' changes every frequency once a sequence passes 4 positions "
     "and this one reaches 7"),
    ("longrope-past-its-length", layer(rope=_rope(
        type="longrope", factor=4.0, original_max_position_embeddings=5,
        short_factor=[1.0, 1.5, 2.0, 2.5], long_factor=[3.0, 3.0, 3.0, 3.0])),
     "its RoPE scaling 'longrope'"),
]


@pytest.mark.parametrize(("document", "words"), [c[1:] for c in REFUSED],
                         ids=[c[0] for c in REFUSED])
def test_a_layer_no_cache_can_serve_is_refused_by_name(tmp_path: Path, document: dict[str, Any],
                                                     words: str) -> None:
    run = _run(write(tmp_path / "layer.json", document))
    line = refused(run, "a KV cache cannot decode this layer: ", words)
    assert run.stdout == "" and run.stderr.count("\n") == 1, line


def test_refusals_come_in_their_order() -> None:
    built = load_layer(None, causal=False)[1]
    with pytest.raises(DecodeRefusal) as first:
        check_decodable(built, False, 0, 0)  # no causal mask before no token
    assert first.value.reason == "no-causal-mask"
    with pytest.raises(DecodeRefusal) as second:
        check_decodable(built, True, 0, 0)  # no token before no batch item
    assert second.value.reason == "no-token"
    with pytest.raises(DecodeRefusal) as third:
        check_decodable(built, True, 0, 1)
    assert third.value.reason == "no-batch"
    assert str(third.value) == "a KV cache cannot decode this layer: the input has no batch item"


# --- the cache itself ----------------------------------------------------------------------

def test_the_ring_keeps_the_window_oldest_first() -> None:
    ring = KvRing(1, 2, 3, 2, 1)
    before = ring.keys
    for t in range(5):
        ring.append(np.full((1, 2, 1, 2), float(t)), np.full((1, 2, 1, 1), -float(t)))
    keys, values, first = ring.held()
    assert first == 2 and ring.length == 5
    assert keys[0, 0, :, 0].tolist() == [2.0, 3.0, 4.0]
    assert values[0, 1, :, 0].tolist() == [-2.0, -3.0, -4.0]
    assert ring.keys is before and ring.keys.shape == (1, 2, 3, 2)  # storage made once
    assert ring.keys[0, 0, :, 0].tolist() == [3.0, 4.0, 2.0]  # written over the oldest
    assert ring.storage_bytes == 8 * 2 * 3 * (2 + 1)


# --- the check can fail ---------------------------------------------------------------------

def test_a_cache_turned_at_position_zero_fails(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The classic slip: each new query and key turned by RoPE at position 0, not at the
    cache's length. The steps after the first disagree with the full pass; exit 1."""
    original = decode_module.split_heads

    def at_zero(layer_: Any, projected: Any, first_row: int = 0, key_first: int = 0) -> Any:
        return original(layer_, projected)

    monkeypatch.setattr(decode_module, "split_heads", at_zero)
    run = _run(write(tmp_path / "layer.json", layer(rope=_rope())))
    assert run.exit_code == 1, run.output
    decoded = json.loads(run.stdout)["decode"]
    assert not decoded["passed"]
    assert decoded["steps"][0]["worst"] <= 1e-12  # position 0 is position 0
    assert all(step["worst"] > 1e-6 for step in decoded["steps"][1:])
    assert "qkv: FAILED: decode" in run.stderr


def test_a_ring_read_in_storage_order_fails_where_positions_count(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ring handed to the scores in its storage order, not oldest first: with ALiBi the
    keys' positions weigh them, so the steps after the ring wraps disagree."""
    def storage_order(self: KvRing) -> tuple[Any, Any, int]:
        held = min(self.length, self.capacity)
        return (self.keys[:, :, :held], self.values[:, :, :held],
                max(0, self.length - self.capacity))

    monkeypatch.setattr(KvRing, "held", storage_order)
    document = layer(4, 4, alibi=[0.5, 0.25, 0.125, 0.0625], window=3)
    decoded = json.loads(_run(write(tmp_path / "layer.json", document)).stdout)["decode"]
    worst = [step["worst"] for step in decoded["steps"]]
    assert max(worst[:3]) <= 1e-12  # before the ring wraps, storage order is the order
    assert max(worst[3:]) > 1e-6 and not decoded["passed"]
