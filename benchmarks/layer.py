"""The attention layer's forward+reverse rows for ``benchmarks/bench.py`` (section ``layer``).

Per layer: qkv's ``MultiHeadLayer.forward`` then ``.backward`` (float64), against

* the NumPy floor (:func:`numpy_floor`): the same maths written once, batched and
  minimal: one packed projection GEMM, the heads as views, grouped K/V broadcast,
  RoPE from ready-made cos/sin tables, the scores scaled, masked and soft-maxed in
  place, one ``A V``, the out projection; the reverse likewise, overwriting one
  ``[B,H,T,T]`` buffer. It keeps no intermediate for anyone to read, which qkv does
  (its evidence reads ``S``, ``Z``, ``A``, ``dA``, ``dZ``, ``dS`` of every head);
* torch CPU float64 (:func:`torch_layer`): packed ``F.linear``, RoPE, causal
  ``scaled_dot_product_attention`` (``enable_gqa`` for grouped K/V), out projection,
  reverse by autograd.

Before timing, the three are run once on the same parameters and their output and
``dX`` compared (the largest absolute difference is printed): a row whose contenders
disagree would measure nothing. Ratios are medians of per-round ratios (qkv and the
floor in rounds of their own, qkv and torch in others: torch's OpenMP threads spin
after each call and would slow a NumPy product that runs next).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any

import numpy as np

# name: batch, tokens, d_model, heads, kv_heads, biases, rope (theta or None)
LAYERS: list[tuple[str, int, int, int, int, int, bool, float | None]] = [
    ("GPT-2-small", 1, 256, 768, 12, 12, True, None),
    ("GPT-2-small", 1, 1024, 768, 12, 12, True, None),
    ("LLaMA-like GQA+RoPE", 1, 512, 2048, 32, 8, False, 10000.0),
]
QUICK_LAYERS = [*LAYERS[:1], ("LLaMA-like GQA+RoPE", 1, 256, 2048, 32, 8, False, 10000.0)]


def make_layer(batch: int, tokens: int, d_model: int, heads: int, kv_heads: int, bias: bool,
               theta: float | None) -> dict[str, Any]:
    """Random parameters (our ``[d_model, out]`` layout), input and upstream; causal."""
    rng = np.random.default_rng(0)
    d = d_model // heads
    widths = (heads * d, kv_heads * d, kv_heads * d)
    return {
        "heads": heads, "kv_heads": kv_heads, "d": d, "theta": theta,
        "weights": [0.02 * rng.normal(size=(d_model, w)) for w in widths],
        "biases": [0.02 * rng.normal(size=w) if bias else None for w in widths],
        "out_weight": 0.02 * rng.normal(size=(heads * d, d_model)),
        "out_bias": 0.02 * rng.normal(size=d_model) if bias else None,
        "x": rng.normal(size=(batch, tokens, d_model)),
        "upstream": rng.normal(size=(batch, tokens, d_model)),
    }


def qkv_layer(p: dict[str, Any]) -> Callable[[], Any]:
    from qkvcli.attention.head import AttentionHead, Rope
    from qkvcli.attention.multihead import MultiHeadLayer

    rope = None if p["theta"] is None else Rope(p["theta"], p["d"], "half")
    head = AttentionHead.from_arrays(*p["weights"], biases=p["biases"], rope=rope,
                                     kv_groups=p["heads"] // p["kv_heads"])
    layer = MultiHeadLayer.build(head, p["heads"], p["out_weight"], p["out_bias"], p["kv_heads"])
    x, upstream = p["x"], p["upstream"]

    def run() -> Any:
        forward = layer.forward(x, True)
        grads = layer.backward(x, forward, upstream)
        return forward.output, grads.grad_input

    return run


def numpy_floor(p: dict[str, Any]) -> Callable[[], Any]:
    heads, kv, d = p["heads"], p["kv_heads"], p["d"]
    per = heads // kv
    x, upstream = p["x"], p["upstream"]
    batch, tokens, d_model = x.shape
    packed = np.ascontiguousarray(np.concatenate(p["weights"], axis=1))
    packed_bias = None if p["biases"][0] is None else np.concatenate(p["biases"])
    w_out, b_out = p["out_weight"], p["out_bias"]
    qw, kw = heads * d, kv * d
    scale = 1.0 / math.sqrt(d)
    mask = np.triu(np.ones((tokens, tokens), dtype=bool), k=1)
    cos = sin = None
    if p["theta"] is not None:
        inv = 1.0 / (p["theta"] ** (np.arange(0, d, 2) / d))
        angles = np.arange(tokens)[:, None] * inv[None, :]
        cos, sin = np.cos(angles), np.sin(angles)
    half = d // 2

    def rotate(t: Any, sign: float) -> Any:
        a, b = t[..., :half], t[..., half:]
        out = np.empty(t.shape)
        out[..., :half] = a * cos - sign * (b * sin)
        out[..., half:] = b * cos + sign * (a * sin)
        return out

    def split(flat: Any, n: int) -> Any:  # [B,T,n*d] -> [B,n,T,d] view
        return np.swapaxes(flat.reshape(batch, tokens, n, d), 1, 2)

    rows = x.reshape(batch * tokens, d_model)

    def run() -> Any:
        y = rows @ packed
        if packed_bias is not None:
            y += packed_bias
        y3 = y.reshape(batch, tokens, -1)
        q, k, v = split(y3[..., :qw], heads), split(y3[..., qw:qw + kw], kv), split(
            y3[..., qw + kw:], kv)
        if cos is not None:
            q, k = rotate(q, 1.0), rotate(k, 1.0)
        a = (q.reshape(batch, kv, per, tokens, d) @ np.swapaxes(k, -1, -2)[:, :, None])
        a *= scale
        np.copyto(a, -np.inf, where=mask)
        a -= a.max(axis=-1, keepdims=True)
        np.exp(a, out=a)
        a /= a.sum(axis=-1, keepdims=True)
        o = a @ v[:, :, None]  # [B,G,per,T,d]
        c = np.ascontiguousarray(np.swapaxes(o.reshape(batch, heads, tokens, d), 1, 2)).reshape(
            batch * tokens, qw)
        out = c @ w_out
        if b_out is not None:
            out += b_out
        # reverse
        dy = upstream.reshape(batch * tokens, -1)
        dc = dy @ w_out.T
        c.T @ dy  # dW_O
        if b_out is not None:
            dy.sum(axis=0)
        do = split(dc.reshape(batch, tokens, qw), heads).reshape(batch, kv, per, tokens, d)
        dv = (np.swapaxes(a, -1, -2) @ do).sum(axis=2)
        da = do @ np.swapaxes(v, -1, -2)[:, :, None]
        da -= np.sum(da * a, axis=-1, keepdims=True)
        da *= a
        da *= scale
        dq = (da @ k[:, :, None]).reshape(batch, heads, tokens, d)
        dk = (np.swapaxes(da, -1, -2) @ q.reshape(batch, kv, per, tokens, d)).sum(axis=2)
        if cos is not None:
            dq, dk = rotate(dq, -1.0), rotate(dk, -1.0)
        joined = np.empty((batch, tokens, qw + 2 * kw))
        split(joined[..., :qw], heads)[...] = dq
        split(joined[..., qw:qw + kw], kv)[...] = dk
        split(joined[..., qw + kw:], kv)[...] = dv
        flat = joined.reshape(batch * tokens, -1)
        dx = flat @ packed.T
        rows.T @ flat  # dW
        if packed_bias is not None:
            flat.sum(axis=0)
        return out.reshape(batch, tokens, -1), dx.reshape(x.shape)

    return run


def torch_layer(torch: Any, p: dict[str, Any]) -> Callable[[], Any]:
    functional = torch.nn.functional
    heads, kv, d = p["heads"], p["kv_heads"], p["d"]
    x = torch.tensor(p["x"], requires_grad=True)
    upstream = torch.tensor(p["upstream"])
    batch, tokens, _ = p["x"].shape
    # torch's [out, in] layout, packed
    w = torch.tensor(np.concatenate(p["weights"], axis=1).T.copy(), requires_grad=True)
    b = None if p["biases"][0] is None else torch.tensor(np.concatenate(p["biases"]),
                                                         requires_grad=True)
    w_out = torch.tensor(p["out_weight"].T.copy(), requires_grad=True)
    b_out = None if p["out_bias"] is None else torch.tensor(p["out_bias"], requires_grad=True)
    leaves = [t for t in (x, w, b, w_out, b_out) if t is not None]
    cos = sin = None
    if p["theta"] is not None:
        inv = 1.0 / (p["theta"] ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
        angles = torch.arange(tokens, dtype=torch.float64)[:, None] * inv[None, :]
        cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)

    def rotate(t: Any) -> Any:  # LLaMA's apply_rotary_pos_emb
        first, second = t[..., :d // 2], t[..., d // 2:]
        return t * cos + torch.cat((-second, first), dim=-1) * sin

    def run() -> Any:
        for leaf in leaves:
            leaf.grad = None
        y = functional.linear(x, w, b)
        q, k, v = y.split([heads * d, kv * d, kv * d], dim=-1)
        q = q.view(batch, tokens, heads, d).transpose(1, 2)
        k = k.view(batch, tokens, kv, d).transpose(1, 2)
        v = v.view(batch, tokens, kv, d).transpose(1, 2)
        if cos is not None:
            q, k = rotate(q), rotate(k)
        o = functional.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                    enable_gqa=kv != heads)
        out = functional.linear(o.transpose(1, 2).reshape(batch, tokens, heads * d), w_out, b_out)
        out.backward(upstream)
        return out.detach().numpy(), x.grad.numpy()

    return run


def bench_layer(time_rounds: Callable[..., dict[str, list[float]]], repeats: int,
                seconds: float, quick: bool, torch: Any) -> None:
    """Print one row per layer: medians and paired ratios."""
    print("attention layer forward+reverse, float64, causal (median ms; ratios are medians of "
          "per-round ratios)")
    print("  floor: the same maths in minimal batched NumPy; torch: SDPA + autograd, CPU")
    print(f"{'layer':<21} {'B,T,E,H,G':<18} {'qkv':>8} {'floor':>8} {'torch':>8} "
          f"{'qkv/floor':>9} {'qkv/torch':>9} {'max |diff|':>10}")
    for name, batch, tokens, d_model, heads, kv, bias, theta in (
            QUICK_LAYERS if quick else LAYERS):
        p = make_layer(batch, tokens, d_model, heads, kv, bias, theta)
        runs = {"qkv": qkv_layer(p), "floor": numpy_floor(p)}
        if torch is not None:
            runs["torch"] = torch_layer(torch, p)
        results = {k: run() for k, run in runs.items()}
        diff = max(float(np.max(np.abs(results["qkv"][i] - r[i])))
                   for r in results.values() for i in (0, 1))
        del results
        floor_rounds = time_rounds({k: runs[k] for k in ("qkv", "floor")}, repeats, seconds)
        ratio_floor = statistics.median(
            a / b for a, b in zip(floor_rounds["qkv"], floor_rounds["floor"], strict=True))
        torch_ms = vs_torch = "-"
        if torch is not None:
            torch_rounds = time_rounds({k: runs[k] for k in ("qkv", "torch")}, repeats, seconds)
            torch_ms = f"{1000 * statistics.median(torch_rounds['torch']):.1f}"
            vs_torch = f"{statistics.median(a / b for a, b in zip(torch_rounds['qkv'], torch_rounds['torch'], strict=True)):.3f}"  # noqa: E501
        label = f"{batch},{tokens},{d_model},{heads},{kv}"
        print(f"{name:<21} {label:<18} {1000 * statistics.median(floor_rounds['qkv']):8.1f} "
              f"{1000 * statistics.median(floor_rounds['floor']):8.1f} {torch_ms:>8} "
              f"{ratio_floor:9.3f} {vs_torch:>9} {diff:10.1e}")
    print("  targets: qkv/floor <= 1.2, qkv/torch <= 1.0")
    print()
