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
  reverse by autograd;
* torch eager (``torch_layer(eager=True)``): the same, with the attention matrix made and
  kept as qkv makes it (scores, mask, softmax, ``A V``: HF's eager attention, which is
  what ``nn.MultiheadAttention`` computes with ``need_weights=True``).

Each contender runs in a process of its own (:func:`serve`), and the rounds are paired
over pipes: every round runs each contender once, in rotating order. Before timing, all
are run once on the same parameters and their output and ``dX`` compared (the largest
absolute difference is printed): a row whose contenders disagree would measure nothing.
Ratios are medians of per-round ratios.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from functools import partial
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
    from qkvcli.attention.head import AttentionHead
    from qkvcli.attention.multihead import MultiHeadLayer
    from qkvcli.core.rope import Rope

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


def torch_layer(torch: Any, p: dict[str, Any], eager: bool = False) -> Callable[[], Any]:
    """torch CPU float64, reverse by autograd. ``eager``: the attention matrix made as qkv
    makes it (HF's eager attention, what ``nn.MultiheadAttention`` does with
    ``need_weights=True``): scores, causal mask, softmax, ``A V``, K/V heads repeated per
    group; otherwise ``scaled_dot_product_attention``, whose fused CPU kernel never
    materialises ``A`` and skips the masked blocks."""
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
    masked = torch.triu(torch.ones(tokens, tokens, dtype=torch.bool), diagonal=1)

    def rotate(t: Any) -> Any:  # LLaMA's apply_rotary_pos_emb
        first, second = t[..., :d // 2], t[..., d // 2:]
        return t * cos + torch.cat((-second, first), dim=-1) * sin

    def attend(q: Any, k: Any, v: Any) -> Any:
        if not eager:
            return functional.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                           enable_gqa=kv != heads)
        if kv != heads:  # HF's repeat_kv
            k = k.repeat_interleave(heads // kv, dim=1)
            v = v.repeat_interleave(heads // kv, dim=1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(d)
        a = torch.softmax(scores.masked_fill(masked, float("-inf")), dim=-1)
        return a @ v

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
        o = attend(q, k, v)
        out = functional.linear(o.transpose(1, 2).reshape(batch, tokens, heads * d), w_out, b_out)
        out.backward(upstream)
        return out.detach().numpy(), x.grad.numpy()

    return run


CONTENDERS = ("qkv", "floor", "torch-eager", "torch-sdpa")
"""Each in a process of its own (:func:`serve`): qkv never runs beside torch's allocator and
OpenMP threads, which slow the NumPy code that shares a process with them (measured: qkv's
forward+reverse 1.2-1.8x slower once torch had run in the same process, the floor's not)."""
SETTLE = 0.25
"""Seconds between two contenders' runs in a round: after a call, OpenBLAS's threads
busy-wait for work (about 2^28 cycles) and torch's OpenMP threads spin too; in separate
processes they would otherwise run on the cores the next contender uses."""


def contender(name: str, p: dict[str, Any]) -> Callable[[], Any]:
    if name == "qkv":
        return qkv_layer(p)
    if name == "floor":
        return numpy_floor(p)
    import torch

    return torch_layer(torch, p, eager=name == "torch-eager")


def serve(name: str, index: int, quick: bool) -> None:
    """A contender's process: build layer ``index`` of the table, then answer one line per
    request on standard input: ``run`` (run once, reply the seconds it took) or ``check
    PATH`` (run once, save its output and ``dX`` to ``PATH`` (``.npz``), reply ``ok``)."""
    import sys
    import time

    p = make_layer(*(QUICK_LAYERS if quick else LAYERS)[index][1:])
    run = contender(name, p)
    for line in sys.stdin:
        request = line.split(maxsplit=1)
        if request[0] == "check":
            output, grad_input = run()
            np.savez(request[1].strip(), output=output, grad_input=grad_input)
            reply = "ok"
        else:
            start = time.perf_counter()
            run()
            reply = repr(time.perf_counter() - start)
        print(reply, flush=True)


ALLOCATORS = (
    ("glibc's default allocator", {}),
    ("freed memory kept in the process (MALLOC_MMAP_MAX_=0, MALLOC_TRIM_THRESHOLD_=2^40)",
     {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 40)}),
)
"""The table is measured twice, every contender with the same allocator settings. By
default glibc maps each array over 32 MiB afresh and returns it when freed; on this kind
of virtual machine the memory returned is handed back to the host, and touching new
memory then costs a host page fault per page. qkv makes six [B,H,T,T] arrays per pass
(it keeps S, Z, A, dA, dZ, dS for its evidence), the floor three, so the first table
charges qkv for twice the fresh memory; the second, where freed memory is reused, shows
the arithmetic alone."""


class Worker:
    """A :func:`serve` process and the pipe to it."""

    def __init__(self, name: str, index: int, quick: bool, env: dict[str, str]) -> None:
        import os
        import subprocess
        import sys

        command = [sys.executable, os.path.abspath(__file__), "--serve", name, str(index)]
        self.process = subprocess.Popen([*command, *(["--quick"] if quick else [])],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True, env={**os.environ, **env})

    def ask(self, request: str) -> str:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(request + "\n")
        self.process.stdin.flush()
        reply = self.process.stdout.readline()
        if not reply:
            raise RuntimeError(f"a benchmark worker died (exit {self.process.wait()})")
        return reply.strip()

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait()


def float_reply(worker: Worker) -> float:
    """One run in the worker's process: the seconds it reports."""
    return float(worker.ask("run"))


def largest_difference(workers: dict[str, Worker]) -> float:
    """Run every contender once on the same parameters and compare output and ``dX`` with
    qkv's: a row whose contenders disagree would measure nothing."""
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        found = {}
        for name, worker in workers.items():
            path = os.path.join(directory, f"{name}.npz")
            worker.ask(f"check {path}")
            with np.load(path) as saved:
                found[name] = (saved["output"], saved["grad_input"])
    ours = found["qkv"]
    return max(float(np.max(np.abs(ours[i] - theirs[i])))
               for theirs in found.values() for i in (0, 1))


def row(times: dict[str, list[float]], diff: float) -> str:
    """Medians, paired ratios against qkv, and the largest difference, for one layer."""

    def ms(name: str) -> str:
        return f"{1000 * statistics.median(times[name]):7.1f}" if name in times else f"{'-':>7}"

    def ratio(name: str) -> str:
        if name not in times:
            return "-"
        pairs = zip(times["qkv"], times[name], strict=True)
        return f"{statistics.median(a / b for a, b in pairs):.3f}"

    return (f"{ms('qkv')} {ms('floor')} {ms('torch-eager')} {ms('torch-sdpa')} "
            f"{ratio('floor'):>9} {ratio('torch-eager'):>9} {ratio('torch-sdpa'):>8} "
            f"{diff:10.1e}")


def bench_layer(time_rounds: Callable[..., dict[str, list[float]]], repeats: int,
                seconds: float, quick: bool, torch: Any) -> None:
    """Print one row per layer: medians and paired ratios, each contender in its own process."""
    print("attention layer forward+reverse, float64, causal (median ms; ratios are medians of "
          "per-round ratios; each contender in a process of its own, the rounds paired)")
    print("  floor: the same maths in minimal batched NumPy; torch eager: A made and kept as qkv "
          "does")
    print("  (HF eager attention, nn.MultiheadAttention with need_weights); torch SDPA: its "
          "fused causal")
    print("  kernel, A never made and masked blocks skipped; autograd for both, CPU")
    names = CONTENDERS if torch is not None else CONTENDERS[:2]
    for allocator, env in ALLOCATORS:
        print(f"  {allocator}:")
        print(f"{'layer':<21} {'B,T,E,H,G':<17} {'qkv':>7} {'floor':>7} {'eager':>7} "
              f"{'SDPA':>7} {'qkv/floor':>9} {'qkv/eager':>9} {'qkv/SDPA':>8} {'max |diff|':>10}")
        for index, (name, batch, tokens, d_model, heads, kv, _, _) in enumerate(
                QUICK_LAYERS if quick else LAYERS):
            workers = {n: Worker(n, index, quick, env) for n in names}
            try:
                diff = largest_difference(workers)
                times = time_rounds({n: partial(float_reply, w) for n, w in workers.items()},
                                    repeats, seconds, SETTLE)
            finally:
                for worker in workers.values():
                    worker.close()
            label = f"{batch},{tokens},{d_model},{heads},{kv}"
            print(f"{name:<21} {label:<17} {row(times, diff)}")
    print("  targets: qkv/floor <= 1.2, qkv/torch <= 1.0")
    print()


if __name__ == "__main__":
    import sys

    arguments = sys.argv[1:]
    if len(arguments) >= 3 and arguments[0] == "--serve":
        serve(arguments[1], int(arguments[2]), "--quick" in arguments[3:])
    else:
        sys.exit("usage: layer.py --serve NAME INDEX [--quick] (benchmarks/bench.py runs it)")
