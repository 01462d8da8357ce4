"""The learned norm of Q and K, RMSNorm (Qwen3, OLMo 2, Gemma 3) or LayerNorm (Phi,
Persimmon, StableLM, Cohere): the engine against torch autograd written from the formulas
(``torch.nn.functional.layer_norm`` for LayerNorm), the gradient check through the
engine, and the layer's refusals of a norm it cannot compute."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from qkvcli.attention import engine
from qkvcli.attention.errors import QkNormError
from qkvcli.attention.gradcheck import gradcheck_attention
from qkvcli.attention.head import AttentionHead
from qkvcli.attention.maths import (
    QkNorm,
    layer_norm,
    layer_norm_backward,
    rms_norm,
    rms_norm_backward,
)
from qkvcli.attention.multihead import MultiHeadLayer
from qkvcli.core.rope import Rope

D_MODEL, D_K = 6, 4


def _layer(rng: np.random.Generator, heads: int, kv: int, span: str, offset: float,
           eps: float = 1e-6, kind: str = "rms", per_head: bool = False,
           bias: bool = False) -> MultiHeadLayer:
    weights = [rng.uniform(-1, 1, (D_MODEL, n * D_K)) for n in (heads, kv, kv)]
    biases = [rng.uniform(-1, 1, w.shape[1]) for w in weights]
    projections = AttentionHead.from_arrays(weights[0], weights[1], weights[2], biases,
                                            rope=Rope(100.0, D_K, "half"),
                                            kv_groups=heads // kv)
    widths: tuple[Any, Any] = (D_K, D_K) if span == "head" else (heads * D_K, kv * D_K)
    if per_head:
        widths = ((heads, D_K), (kv, D_K))
    norm = QkNorm(rng.uniform(-1, 1, widths[0]), rng.uniform(-1, 1, widths[1]), eps, span,
                  offset, kind, *((rng.uniform(-1, 1, widths[0]), rng.uniform(-1, 1, widths[1]))
                                  if bias else (None, None)))
    return MultiHeadLayer.build(projections, heads, rng.uniform(-1, 1, (heads * D_K, 5)),
                                rng.uniform(-1, 1, 5), kv_heads=kv, qk_norm=norm)


def _torch_reference(layer: MultiHeadLayer, x: np.ndarray, upstream: np.ndarray,
                     causal: bool) -> dict[str, np.ndarray]:
    """The layer from its formulas in torch float64 (the norm as transformers writes it:
    ``x * rsqrt(mean(x^2) + eps) * (offset + w)``), with autograd for every gradient."""
    torch = pytest.importorskip("torch")
    p, norm = layer.projections, layer.qk_norm
    assert norm is not None and p.rope is not None
    t = {name: torch.tensor(a, dtype=torch.float64, requires_grad=True) for name, a in (
        ("x", x), ("wq", p.weights[0]), ("wk", p.weights[1]), ("wv", p.weights[2]),
        ("bq", p.biases[0]), ("bk", p.biases[1]), ("bv", p.biases[2]),
        ("nq", norm.query), ("nk", norm.key), ("nqb", norm.query_bias),
        ("nkb", norm.key_bias), ("wo", layer.out_weight),
        ("bo", layer.out_bias)) if a is not None}
    batch, tokens, _ = x.shape
    heads, kv, dk = layer.heads, layer.kv_heads, layer.d_k

    def normed(y: Any, w: Any, b: Any) -> Any:
        if norm.kind == "layer":  # torch's own LayerNorm, its weight plus the offset
            return torch.nn.functional.layer_norm(y, (y.shape[-1],), eps=norm.eps) * (
                norm.offset + w) + (0.0 if b is None else b)
        return y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + norm.eps) * (norm.offset + w)

    def split(y: Any, n: int, w: Any = None, b: Any = None) -> Any:
        if w is not None and norm.span == "layer":
            y = normed(y, w, b)
        y = y.view(batch, tokens, n, dk)
        if w is not None and norm.span == "head":
            y = normed(y, w, b)
        return y.transpose(1, 2)

    q = split(t["x"] @ t["wq"] + t["bq"], heads, t["nq"], t.get("nqb"))
    k = split(t["x"] @ t["wk"] + t["bk"], kv, t["nk"], t.get("nkb"))
    v = split(t["x"] @ t["wv"] + t["bv"], kv)
    inv = 1.0 / (p.rope.theta ** (torch.arange(0, dk, 2, dtype=torch.float64) / dk))
    ang = torch.arange(tokens, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = torch.cos(ang), torch.sin(ang)

    def turn(z: Any) -> Any:
        a, b = z[..., : dk // 2], z[..., dk // 2:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)

    q, k = turn(q), turn(k).repeat_interleave(heads // kv, dim=1)
    v = v.repeat_interleave(heads // kv, dim=1)
    z = (q @ k.transpose(-1, -2)) / math.sqrt(dk)
    if causal:
        z = z.masked_fill(torch.triu(torch.ones(tokens, tokens, dtype=torch.bool), 1),
                          float("-inf"))
    a = torch.softmax(z, dim=-1)
    y = (a @ v).transpose(1, 2).reshape(batch, tokens, heads * dk) @ t["wo"] + t["bo"]
    (y * torch.tensor(upstream)).sum().backward()
    found = {"output": y.detach().numpy(), "attention": a.detach().numpy()}
    found |= {f"grad_{n}": tensor.grad.numpy() for n, tensor in t.items()}
    return found


# id, heads, K/V heads, span, offset, causal, then kind, a weight per head, biases
CASES = [
    ("per-head-gqa", 4, 2, "head", 0.0, True, "rms", False, False),
    ("per-head-plus-one", 2, 1, "head", 1.0, False, "rms", False, False),
    ("over-the-layer-gqa", 4, 2, "layer", 0.0, True, "rms", False, False),
    ("over-the-layer-mha", 2, 2, "layer", 0.0, False, "rms", False, False),
    ("layernorm-shared-biases", 2, 2, "head", 0.0, True, "layer", False, True),  # Phi
    ("layernorm-row-per-head-gqa", 4, 2, "head", 0.0, True, "layer", True, False),  # StableLM
    ("layernorm-row-per-head-biases-mqa", 2, 1, "head", 0.0, False, "layer", True, True),
    ("layernorm-over-the-layer-biases", 2, 1, "layer", 0.5, True, "layer", False, True),
]


@pytest.mark.parametrize(("heads", "kv", "span", "offset", "causal", "kind", "per_head", "bias"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
@pytest.mark.parametrize("reached", [False, True], ids=["whole", "reached"])
def test_the_norm_matches_autograd_and_passes_the_gradient_check(
    heads: int, kv: int, span: str, offset: float, causal: bool, kind: str, per_head: bool,
    bias: bool, reached: bool
) -> None:
    rng = np.random.default_rng(5)
    layer = _layer(rng, heads, kv, span, offset, kind=kind, per_head=per_head, bias=bias)
    x = rng.uniform(-1, 1, (2, 5, D_MODEL))
    upstream = rng.uniform(-1, 1, (2, 5, 5))
    forward = layer.forward(x, causal)
    grads = layer.backward(x, forward, upstream)
    ref = _torch_reference(layer, x, upstream, causal)

    def close(ours: np.ndarray | None, theirs: np.ndarray) -> None:
        assert ours is not None and ours.shape == theirs.shape
        assert np.max(np.abs(ours - theirs)) <= 1e-12 * max(1.0, float(np.max(np.abs(theirs))))

    close(forward.output, ref["output"])
    close(forward.attention, ref["attention"])
    close(grads.grad_input, ref["grad_x"])
    for ours, name in ((grads.grad_w_query, "wq"), (grads.grad_w_key, "wk"),
                       (grads.grad_w_value, "wv"), (grads.grad_b_query, "bq"),
                       (grads.grad_b_key, "bk"), (grads.grad_norm_query, "nq"),
                       (grads.grad_norm_key, "nk"), (grads.grad_out_weight, "wo")):
        close(ours, ref[f"grad_{name}"])
    if bias:
        close(grads.grad_norm_query_bias, ref["grad_nqb"])
        close(grads.grad_norm_key_bias, ref["grad_nkb"])
    else:
        assert grads.grad_norm_query_bias is None and grads.grad_norm_key_bias is None
    result = gradcheck_attention(layer, x, upstream, grads, causal, 1e-6, 1e-6, mode="full",
                                 reached=reached)
    assert result.passed
    checked = {check.tensor for check in result.tensors}
    assert {"norm_query", "norm_key"} <= checked
    assert ({"norm_query_bias", "norm_key_bias"} <= checked) is bias


def test_the_norm_alone_against_central_differences() -> None:
    rng = np.random.default_rng(3)
    values, weight, up = (rng.uniform(-1, 1, s) for s in ((3, 2, 4), (4,), (3, 2, 4)))
    grad_values, grad_weight = rms_norm_backward(values, up, weight, 1e-5, 1.0)
    step = 1e-6
    for array, grad in ((values, grad_values), (weight, grad_weight)):
        for index in np.ndindex(array.shape):
            saved = array[index]
            array[index] = saved + step
            plus = float(np.sum(rms_norm(values, weight, 1e-5, 1.0) * up))
            array[index] = saved - step
            minus = float(np.sum(rms_norm(values, weight, 1e-5, 1.0) * up))
            array[index] = saved
            assert abs((plus - minus) / (2 * step) - grad[index]) < 1e-8


@pytest.mark.parametrize("shape", [(4,), (2, 4)], ids=["shared", "row-per-head"])
def test_the_layernorm_alone_against_central_differences(shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(4)
    values, up = rng.uniform(-1, 1, (3, 2, 4)), rng.uniform(-1, 1, (3, 2, 4))
    weight, bias = rng.uniform(-1, 1, shape), rng.uniform(-1, 1, shape)
    grads = layer_norm_backward(values, up, weight, 1e-3, 0.5)
    step = 1e-6
    for array, grad in zip((values, weight, bias), grads, strict=True):
        assert grad.shape == array.shape
        for index in np.ndindex(array.shape):
            saved = array[index]
            array[index] = saved + step
            plus = float(np.sum(layer_norm(values, weight, bias, 1e-3, 0.5) * up))
            array[index] = saved - step
            minus = float(np.sum(layer_norm(values, weight, bias, 1e-3, 0.5) * up))
            array[index] = saved
            assert abs((plus - minus) / (2 * step) - grad[index]) < 1e-8


def test_a_wrong_layernorm_reverse_fails_the_gradient_check_on_its_parameters(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reverse whose weight and bias gradients forget to sum over the heads that share
    them (head 0's alone): the check fails on exactly the norm's weights and biases."""
    rng = np.random.default_rng(8)
    layer = _layer(rng, 2, 2, "head", 0.0, kind="layer", bias=True)
    x = rng.uniform(-1, 1, (1, 4, D_MODEL))
    upstream = rng.uniform(-1, 1, (1, 4, 5))
    right = layer_norm_backward

    def first_head_only(values: np.ndarray, grad: np.ndarray, weight: np.ndarray, eps: float,
                        offset: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        grad_values, _, _ = right(values, grad, weight, eps, offset)
        _, grad_weight, grad_bias = right(values[..., :1, :], grad[..., :1, :], weight, eps,
                                          offset)
        return grad_values, grad_weight, grad_bias

    monkeypatch.setattr(engine, "layer_norm_backward", first_head_only)
    grads = layer.backward(x, layer.forward(x, True), upstream)
    result = gradcheck_attention(layer, x, upstream, grads, True, 1e-6, 1e-6, mode="full")
    failed = {check.tensor for check in result.tensors if not check.passed}
    assert failed == {"norm_query", "norm_key", "norm_query_bias", "norm_key_bias"}


def test_a_wrong_norm_reverse_fails_the_gradient_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reverse that forgets the mean's own gradient (treats the RMS as a constant)."""
    rng = np.random.default_rng(7)
    layer = _layer(rng, 2, 2, "head", 0.0)
    x = rng.uniform(-1, 1, (1, 4, D_MODEL))
    upstream = rng.uniform(-1, 1, (1, 4, 5))

    def constant_rms(values: np.ndarray, grad: np.ndarray, weight: np.ndarray, eps: float,
                     offset: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        inverse = 1.0 / np.sqrt(np.mean(values * values, axis=-1, keepdims=True) + eps)
        grad_weight = (grad * values * inverse).reshape(-1, values.shape[-1]).sum(axis=0)
        return grad * (weight + offset) * inverse, grad_weight

    monkeypatch.setattr(engine, "rms_norm_backward", constant_rms)
    grads = layer.backward(x, layer.forward(x, True), upstream)
    result = gradcheck_attention(layer, x, upstream, grads, True, 1e-6, 1e-6, mode="full")
    failed = {check.tensor for check in result.tensors if not check.passed}
    assert not result.passed and "input" in failed and "w_query" in failed


BAD = [
    ("span", {"span": "heads"}, 'qk_norm span must be "head" or "layer", got \'heads\''),
    ("eps", {"eps": 0.0}, "qk_norm eps must be finite and positive, got 0.0"),
    ("offset", {"offset": math.inf}, "qk_norm offset must be finite, got inf"),
    ("width", {"query": np.ones(8)}, "qk_norm query weight must be [4] (shared by the heads) "
     "or [2,4] (a row per head), got [8]"),
    ("kind", {"kind": "group"}, 'qk_norm kind must be "rms" or "layer", got \'group\''),
    ("row-per-head", {"key": np.ones((3, 4))}, "qk_norm key weight must be [4] (shared by "
     "the heads) or [2,4] (a row per head), got [3,4]"),
    ("rms-bias", {"query_bias": np.ones(4), "key_bias": np.ones(4)},
     'qk_norm biases need kind "layer" (an RMSNorm has none)'),
    ("one-bias", {"kind": "layer", "query_bias": np.ones(4)},
     "qk_norm key bias must be [4] (its weight's shape), got none"),
    ("bias-shape", {"kind": "layer", "query_bias": np.ones(4), "key_bias": np.ones((2, 4))},
     "qk_norm key bias must be [4] (its weight's shape), got [2,4]"),
    ("layer-width", {"span": "layer"}, "qk_norm query weight must be [8] (a norm over the "
     "layer), got [4]"),
]


@pytest.mark.parametrize(("change", "message"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_a_norm_the_layer_cannot_compute_is_refused(change: dict[str, Any], message: str) -> None:
    rng = np.random.default_rng(1)
    weights = [rng.uniform(-1, 1, (D_MODEL, 2 * D_K)) for _ in range(3)]
    projections = AttentionHead.from_arrays(weights[0], weights[1], weights[2])
    norm = QkNorm(np.ones(D_K), np.ones(D_K), 1e-6)._replace(**change)
    with pytest.raises(QkNormError) as raised:
        MultiHeadLayer.build(projections, 2, qk_norm=norm)
    assert str(raised.value) == message


def _layernormed(**changes: object) -> dict[str, object]:
    """A fixture of 2 heads of 4 with a LayerNorm of Q and K: a row of weights and biases
    per head (``[2, 4]``), in place of whatever ``changes`` gives."""
    weights: dict[str, object] = {
        "query": {"generate": {"seed": 4, "shape": [4, 8]}},
        "key": {"generate": {"seed": 5, "shape": [4, 8]}},
        "value": {"generate": {"seed": 6, "shape": [4, 8]}},
        "q_norm_weight": [[0.5, -1.0, 2.0, 1.5], [1.0, 0.5, 0.25, -2.0]],
        "k_norm_weight": [[1.0, 0.25, -0.5, 3.0], [0.75, -0.25, 1.0, 0.5]],
        "q_norm_bias": [[0.1, 0.0, -0.2, 0.3], [0.0, 0.4, 0.1, -0.1]],
        "k_norm_bias": [[-0.3, 0.2, 0.0, 0.1], [0.2, 0.1, -0.4, 0.0]]}
    weights.update(changes.pop("weights", {}))  # type: ignore[call-overload]
    weights = {key: value for key, value in weights.items() if value is not None}  # None: left out
    document: dict[str, object] = {
        "heads": 2, "causal": True, "input": {"generate": {"seed": 1, "shape": [1, 4, 4]}},
        "weights": weights, "qk_norm": {"kind": "layer", "span": "head", "eps": 1e-5}}
    document.update(changes)
    return {key: value for key, value in document.items() if value is not None}


def test_a_layernorm_fixture_is_computed_and_its_biases_gradients_checked(tmp_path: Any) -> None:
    import json

    from tests.hostile_helpers import invoke, write

    path = write(tmp_path / "f.json", _layernormed())
    run = invoke("attend", str(path), "-f", "json")
    assert run.exit_code == 0, run.output
    evidence = json.loads(run.stdout)
    assert evidence["passed"]
    assert evidence["config"]["qk_norm"] == {"kind": "layer", "span": "head", "eps": 1e-5,
                                             "offset": 0.0}
    for name in ("q_norm_weight", "k_norm_weight", "q_norm_bias", "k_norm_bias"):
        assert evidence["tensors"][f"{name}_gradient"]["shape"] == [2, 4]
    checked = {row["tensor"] for row in evidence["gradcheck"]["tensors"]}
    assert {"q_norm_weight", "k_norm_weight", "q_norm_bias", "k_norm_bias"} <= checked
    assert "qk_norm:kind=layer,span=head,eps=1e-05,offset=0.0" in invoke("attend",
                                                                         str(path)).stdout
    assert invoke("validate", "--attend", str(path)).exit_code == 0


BAD_FIXTURES = [
    ("kind", {"qk_norm": {"kind": "group", "span": "head", "eps": 1e-5}},
     "$.qk_norm.kind: \"rms\" (RMSNorm) or \"layer\" (LayerNorm), got 'group'"),
    ("rows", {"weights": {"k_norm_weight": [[1.0, 1.0, 1.0, 1.0]] * 3}},
     "$.weights.k_norm_weight: qk_norm key weight must be [4] (shared by the heads) or [2,4] "
     "(a row per head), got [3,4]"),
    ("bias-shape", {"weights": {"q_norm_bias": [0.0, 0.0, 0.0, 0.0]}},
     "$.weights.q_norm_bias: qk_norm query bias must be [2,4] (its weight's shape), got [4]"),
    ("one-bias", {"weights": {"k_norm_bias": None}},
     "$.weights: missing key \"k_norm_bias\" (q_norm_bias needs it)"),
    ("rms-bias", {"qk_norm": {"span": "head", "eps": 1e-5}},
     "$.weights.q_norm_bias: a bias needs \"qk_norm\" of kind \"layer\" (an RMSNorm has none)"),
    ("rank-three", {"weights": {"q_norm_weight": [[[1.0] * 4] * 2]}},
     "$.weights.q_norm_weight: q_norm_weight must have rank one or two, got rank 3"),
    ("row-of-another-width", {"weights": {"q_norm_weight": [
        {"generate": {"seed": 1, "shape": [4]}}, {"generate": {"seed": 2, "shape": [3]}}]}},
     "$.weights.q_norm_weight[1]: each head's row must be [4] as the first, got [3]"),
]


@pytest.mark.parametrize(("changes", "words"), [c[1:] for c in BAD_FIXTURES],
                         ids=[c[0] for c in BAD_FIXTURES])
def test_a_bad_layernorm_fixture_is_one_line_at_its_path(tmp_path: Any, changes: dict[str, Any],
                                                         words: str) -> None:
    from tests.hostile_helpers import invoke, write

    path = write(tmp_path / "f.json", _layernormed(**changes))
    for command in (("attend", str(path)), ("validate", "--attend", str(path))):
        run = invoke(*command)
        assert run.exit_code == 2, (command, run.output)
        assert words in run.stderr or words in run.output, (command, run.output)


def test_rows_given_as_one_tensor_per_head_are_stacked(tmp_path: Any) -> None:
    """StableLM's norms.{h}: a list of tensor objects, one row per head, reads as the rank
    two tensor of those rows: the same evidence, byte for byte."""
    from tests.hostile_helpers import invoke, write

    (tmp_path / "rows").mkdir()
    whole = write(tmp_path / "f.json", _layernormed())
    rows = {key: [{"values": row} for row in value]
            for key, value in _layernormed()["weights"].items()  # type: ignore[attr-defined]
            if key.endswith(("_norm_weight", "_norm_bias"))}
    stacked = write(tmp_path / "rows" / "f.json", _layernormed(weights=rows))
    first, second = (invoke("attend", str(path), "-f", "json") for path in (whole, stacked))
    assert first.exit_code == 0 and first.stdout == second.stdout
