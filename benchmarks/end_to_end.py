"""End-to-end rows for ``benchmarks/bench.py``: ``qkv run`` and ``qkv attend`` against
baseline processes.

``qkv attend`` rows (:func:`bench_attend_end_to_end`): a GPT-2-small attention layer
(E 768, 12 heads, packed ``c_attn`` and ``c_proj`` with biases, random weights) written
to a ``.safetensors`` checkpoint in a temporary directory, its fixture made by ``qkv init
--from-safetensors --prefix h.0.attn. --heads 12 --tokens T``, run as ``qkv attend
--causal`` in text, json and rich against a process that imports NumPy and runs the
layer's causal forward+reverse four times (:data:`ATTEND_BASELINE`); a LLaMA-like
layer (E 2048, 32 heads, 8 K/V heads, RoPE, with its ``config.json``) likewise at T=512
(:data:`LLAMA_BASELINE`, rows ``L512``); then the newcomer's fixtures (``qkv init
--generate``) timed alone.

The baseline imports NumPy, makes tensors of the fixture's size and runs the fused
forward+reverse (``X@[W]``, ``[dY]@[W]^T``, ``X^T@[dY]``) four times: roughly the least
any process that genuinely computes the evidence must do. Each round launches the
baseline and ``qkv run FIXTURE -f FORMAT`` back to back; wall time and peak RSS come from
``os.wait4`` of that very command (run by a small launcher, :data:`LAUNCHER`; its start-up,
a few ms, is in both sides' wall time), and output bytes from its standard output. One unrecorded
pair runs before each format's rounds. Nothing passes or fails: ratios are printed as
median and range over the rounds.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

E2E_SHAPE = (8, 512, 1024, 64)
FORMATS = ("text", "json", "rich")
BASELINE = """
import numpy as np
b, t, d, h = {shape}
rng = np.random.default_rng(0)
x = rng.uniform(-1, 1, (b * t, d))
w = rng.uniform(-0.07, 0.07, (d, 3 * h))
u = rng.uniform(-1, 1, (b * t, 3 * h))
for _ in range(4):
    y = x @ w
    dx = u @ w.T
    dw = x.T @ u
"""


ATTEND_BASELINE = """
import numpy as np
B, T, E, H = 1, {tokens}, 768, 12
rng = np.random.default_rng(0)
x = rng.uniform(-1, 1, (B * T, E))
wa = rng.normal(0, 0.02, (E, 3 * E)); ba = rng.normal(0, 0.02, 3 * E)
wp = rng.normal(0, 0.02, (E, E)); bp = rng.normal(0, 0.02, E)
u = rng.uniform(-1, 1, (B * T, E))
d = E // H
mask = np.triu(np.ones((T, T), bool), 1)
for _ in range(4):
    qkv = x @ wa + ba
    q, k, v = [qkv[:, i * E:(i + 1) * E].reshape(B, T, H, d).transpose(0, 2, 1, 3)
               for i in range(3)]
    s = np.where(mask, -np.inf, q @ k.transpose(0, 1, 3, 2) / np.sqrt(d))
    a = np.exp(s - s.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    c = (a @ v).transpose(0, 2, 1, 3).reshape(B * T, E)
    y = c @ wp + bp
    dc = u @ wp.T; dwp = c.T @ u; dbp = u.sum(0)
    do = dc.reshape(B, T, H, d).transpose(0, 2, 1, 3)
    da = do @ v.transpose(0, 1, 3, 2); dv = a.transpose(0, 1, 3, 2) @ do
    ds = a * (da - (da * a).sum(-1, keepdims=True)) / np.sqrt(d)
    dq = ds @ k; dk = ds.transpose(0, 1, 3, 2) @ q
    dqkv = np.concatenate([g.transpose(0, 2, 1, 3).reshape(B * T, E) for g in (dq, dk, dv)],
                          axis=1)
    dx = dqkv @ wa.T; dwa = x.T @ dqkv; dba = dqkv.sum(0)
"""
LLAMA_BASELINE = """
import numpy as np
B, T, E, H, G = 1, {tokens}, 2048, 32, 8
d, per = E // H, H // G
rng = np.random.default_rng(0)
x = rng.uniform(-1, 1, (B * T, E))
wa = rng.normal(0, 0.02, (E, (H + 2 * G) * d)); wo = rng.normal(0, 0.02, (E, E))
u = rng.uniform(-1, 1, (B * T, E))
mask = np.triu(np.ones((T, T), bool), 1)
angles = np.arange(T)[:, None] / 10000.0 ** (np.arange(0, d, 2) / d)
cos, sin = np.cos(angles), np.sin(angles)
def rope(t, sign):
    a, b = t[..., :d // 2], t[..., d // 2:]
    return np.concatenate([a * cos - sign * b * sin, b * cos + sign * a * sin], -1)
def heads(flat, n):
    return flat.reshape(B, T, n, d).transpose(0, 2, 1, 3)
for _ in range(4):
    y = x @ wa
    q = rope(heads(y[:, :H * d], H), 1).reshape(B, G, per, T, d)
    k = rope(heads(y[:, H * d:(H + G) * d], G), 1)[:, :, None]
    v = heads(y[:, (H + G) * d:], G)[:, :, None]
    s = np.where(mask, -np.inf, q @ k.transpose(0, 1, 2, 4, 3) / np.sqrt(d))
    a = np.exp(s - s.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    c = (a @ v).reshape(B, H, T, d).transpose(0, 2, 1, 3).reshape(B * T, E)
    out = c @ wo
    dc = u @ wo.T; dwo = c.T @ u
    do = dc.reshape(B, T, H, d).transpose(0, 2, 1, 3).reshape(B, G, per, T, d)
    da = do @ v.transpose(0, 1, 2, 4, 3); dv = (a.transpose(0, 1, 2, 4, 3) @ do).sum(2)
    ds = a * (da - (da * a).sum(-1, keepdims=True)) / np.sqrt(d)
    dq = rope((ds @ k).reshape(B, H, T, d), -1)
    dk = rope((ds.transpose(0, 1, 2, 4, 3) @ q).sum(2), -1)
    flat = np.concatenate([g.transpose(0, 2, 1, 3).reshape(B * T, -1) for g in (dq, dk, dv)],
                          axis=1)
    dx = flat @ wa.T; dwa = x.T @ flat
"""
"""The LLaMA-like layer's four passes: packed projections, RoPE, grouped K/V heads
broadcast, causal softmax, ``A V``, ``o_proj``; the reverse likewise."""
LLAMA_TOKENS = (512,)
GPT2_TOKENS = (64, 1024)
NEWCOMERS = ((2, 128, 64, 16), (2, 300, 50, 8))
"""The newcomer's ``qkv init --generate`` fixtures: batch, tokens, d_model, d_head."""


CHECKPOINT_WRITER = """
import sys
import numpy as np
from safetensors.numpy import save_file
rng = np.random.default_rng(0)
e = 768
def normal(*shape):
    return (0.02 * rng.normal(size=shape)).astype(np.float32)
save_file({"h.0.attn.c_attn.weight": normal(e, 3 * e), "h.0.attn.c_attn.bias": normal(3 * e),
           "h.0.attn.c_proj.weight": normal(e, e), "h.0.attn.c_proj.bias": normal(e)},
          sys.argv[1])
"""
"""GPT-2-small's first attention layer, names and shapes, random weights (float32). Run in a
child: a child's peak RSS starts at its parent's, so the bench process stays small."""


LLAMA_WRITER = """
import json, os, sys
import numpy as np
from safetensors.numpy import save_file
rng = np.random.default_rng(0)
e, heads, kv = 2048, 32, 8
d = e // heads
def normal(*shape):
    return (0.02 * rng.normal(size=shape)).astype(np.float32)
p = "model.layers.0.self_attn."
save_file({p + "q_proj.weight": normal(e, e), p + "k_proj.weight": normal(kv * d, e),
           p + "v_proj.weight": normal(kv * d, e), p + "o_proj.weight": normal(e, e)},
          os.path.join(sys.argv[1], "model.safetensors"))
config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": e,
          "num_attention_heads": heads, "num_key_value_heads": kv, "num_hidden_layers": 1,
          "rope_theta": 10000.0, "attention_bias": False}
with open(os.path.join(sys.argv[1], "config.json"), "w") as out:
    json.dump(config, out)
"""
"""A LLaMA-like first attention layer (E 2048, 32 heads, 8 K/V heads, RoPE, no biases):
names, shapes and ``config.json``, random float32 weights."""


def write_gpt2_checkpoint(path: str) -> None:
    subprocess.run([sys.executable, "-c", CHECKPOINT_WRITER, path], check=True)


def llama_rows(qkv: list[str], directory: str, rounds: int, neutral_dir: str,
               env: dict[str, str], tokens: tuple[int, ...]) -> None:
    """The LLaMA-like layer's rows, as the GPT-2 ones (its ``config.json`` gives heads,
    K/V heads, RoPE and causality)."""
    folder = os.path.join(directory, "llama")
    os.makedirs(folder)
    subprocess.run([sys.executable, "-c", LLAMA_WRITER, folder], check=True)
    for t in tokens:
        fixture = os.path.join(directory, f"llama-{t}.json")
        subprocess.run([*qkv, "init", "--from-safetensors",
                        os.path.join(folder, "model.safetensors"), "--prefix",
                        "model.layers.0.self_attn.", "--tokens", str(t), "-o", fixture],
                       check=True, cwd=neutral_dir, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        baseline = [sys.executable, "-c", LLAMA_BASELINE.format(tokens=t)]
        for fmt in FORMATS:
            row(f"L{t:>4} {fmt:<7}", baseline, [*qkv, "attend", fixture, "-f", fmt], rounds,
                neutral_dir, env)


def bench_attend_end_to_end(qkv: list[str], rounds: int, neutral_dir: str,
                            tokens: tuple[int, ...] = GPT2_TOKENS,
                            llama: tuple[int, ...] = LLAMA_TOKENS) -> None:
    """Print the GPT-2-small rows (wall, memory, output against the baseline) and the
    newcomer's fixtures' wall times."""
    env = {**os.environ, "COLUMNS": "120"}
    with tempfile.TemporaryDirectory() as directory:
        checkpoint = os.path.join(directory, "gpt2.safetensors")
        write_gpt2_checkpoint(checkpoint)
        print(f"end to end: qkv attend --causal, GPT-2-small layer from a .safetensors "
              f"checkpoint, against the baseline (numpy, causal forward+reverse x4); median "
              f"(range) of {rounds} rounds")
        print(f"{'T':>5} {'format':<7} {'qkv s':>6} {'base s':>7} {'wall ratio':>18} "
              f"{'qkv MiB':>8} {'base MiB':>9} {'memory ratio':>18} {'output':>10}")
        for t in tokens:
            fixture = os.path.join(directory, f"layer-{t}.json")
            subprocess.run([*qkv, "init", "--from-safetensors", checkpoint, "--prefix",
                            "h.0.attn.", "--heads", "12", "--tokens", str(t), "--causal", "--scale",
                            "inverse-sqrt", "-o", fixture],
                           check=True, cwd=neutral_dir, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            baseline = [sys.executable, "-c", ATTEND_BASELINE.format(tokens=t)]
            for fmt in FORMATS:
                command = [*qkv, "attend", fixture, "--causal", "-f", fmt]
                row(f"{t:>5} {fmt:<7}", baseline, command, rounds, neutral_dir, env)
        if llama:
            print("LLaMA-like layer (E 2048, 32 heads, 8 K/V heads, RoPE, causal from its "
                  "config.json), rows L<T>:")
            llama_rows(qkv, directory, rounds, neutral_dir, env, llama)
        print("targets: wall <= 3x, memory <= 2x, output <= 256 KiB")
        print("newcomer fixtures (qkv init --generate), qkv attend -f text alone:")
        for b, t, d, h in NEWCOMERS:
            fixture = os.path.join(directory, f"newcomer-{b}-{t}-{d}-{h}.json")
            subprocess.run([*qkv, "init", "--generate", "--batch", str(b), "--tokens", str(t),
                            "--d-model", str(d), "--d-head", str(h), "-o", fixture],
                           check=True, cwd=neutral_dir, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            walls = [measured([*qkv, "attend", fixture, "-f", "text"], neutral_dir, env)[0]
                     for _ in range(rounds)]
            print(f"  [{b},{t},{d},{h}]: {spread(walls)} s (target: about a second)")
    print()


def row(label: str, baseline: list[str], command: list[str], rounds: int, cwd: str,
        env: dict[str, str]) -> None:
    """One row: ``command`` against ``baseline``, paired round by round (one unrecorded pair
    first: a cold page cache)."""
    measured(baseline, cwd, env)
    measured(command, cwd, env)
    walls, mems, base_walls, base_mems, sizes = [], [], [], [], []
    for _ in range(rounds):
        bw, bm, _ = measured(baseline, cwd, env)
        qw, qm, size = measured(command, cwd, env)
        walls.append(qw)
        mems.append(qm)
        base_walls.append(bw)
        base_mems.append(bm)
        sizes.append(size)
    print(f"{label} {statistics.median(walls):6.2f} {statistics.median(base_walls):7.2f} "
          f"{spread([q / b for q, b in zip(walls, base_walls, strict=True)]):>18} "
          f"{statistics.median(mems) / 1024:8.0f} {statistics.median(base_mems) / 1024:9.0f} "
          f"{spread([q / b for q, b in zip(mems, base_mems, strict=True)]):>18} "
          f"{max(sizes) / 1024:8.1f} KiB")


LAUNCHER = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as out:
    out.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""
"""Runs a command and records its peak RSS. Linux keeps a peak across ``execve`` from the
memory of the process that called it, so a child forked straight from this (large)
bench would report at least the bench's size; forked from this small launcher it
reports its own."""


def measured(command: list[str], cwd: str, env: dict[str, str]) -> tuple[float, int, int]:
    """Wall seconds, peak RSS (KiB) and stdout bytes of one run of ``command``."""
    with tempfile.TemporaryFile() as out, tempfile.NamedTemporaryFile("r") as peak:
        start = time.perf_counter()
        child = subprocess.Popen([sys.executable, "-c", LAUNCHER, peak.name, *command],
                                 cwd=cwd, env=env, stdout=out, stderr=subprocess.DEVNULL)
        child.wait()
        wall = time.perf_counter() - start
        out.seek(0, os.SEEK_END)
        return wall, int(peak.read() or 0), out.tell()


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):5.2f} ({min(values):.2f}-{max(values):.2f})"


def bench_end_to_end(qkv: list[str], rounds: int, neutral_dir: str) -> None:
    """Print one row per format: qkv's wall, memory and output against the baseline's."""
    b, t, d, h = E2E_SHAPE
    env = {**os.environ, "COLUMNS": "120"}
    with tempfile.TemporaryDirectory() as directory:
        fixture = os.path.join(directory, "big.json")
        subprocess.run([*qkv, "init", "--generate", "--seed", "5", "--batch", str(b),
                        "--tokens", str(t), "--d-model", str(d), "--d-head", str(h),
                        "-o", fixture], check=True, cwd=neutral_dir, stdout=subprocess.DEVNULL)
        baseline = [sys.executable, "-c", BASELINE.format(shape=E2E_SHAPE)]
        label = "[" + ",".join(map(str, E2E_SHAPE)) + "]"
        print(f"end to end: qkv run {label} against the baseline (numpy, tensors, fused "
              f"forward+reverse x4); median (range) of {rounds} rounds")
        print(f"{'format':<7} {'qkv s':>6} {'base s':>7} {'wall ratio':>18} "
              f"{'qkv MiB':>8} {'base MiB':>9} {'memory ratio':>18} {'output':>10}")
        for fmt in FORMATS:
            walls, mems, ratios_w, ratios_m, sizes = [], [], [], [], []
            base_walls, base_mems = [], []
            # One unrecorded pair first: the first launch after the fixture is written (or
            # after a format switch) can pay for a cold page cache that no later round sees.
            measured(baseline, neutral_dir, env)
            measured([*qkv, "run", fixture, "-f", fmt], neutral_dir, env)
            for _ in range(rounds):
                bw, bm, _ = measured(baseline, neutral_dir, env)
                qw, qm, size = measured([*qkv, "run", fixture, "-f", fmt], neutral_dir, env)
                walls.append(qw)
                mems.append(qm)
                base_walls.append(bw)
                base_mems.append(bm)
                ratios_w.append(qw / bw)
                ratios_m.append(qm / bm)
                sizes.append(size)
            print(f"{fmt:<7} {statistics.median(walls):6.2f} {statistics.median(base_walls):7.2f} "
                  f"{spread(ratios_w):>18} {statistics.median(mems) / 1024:8.0f} "
                  f"{statistics.median(base_mems) / 1024:9.0f} {spread(ratios_m):>18} "
                  f"{max(sizes) / 1024:8.1f} KiB")
    print("targets: wall <= 3x, memory <= 2x, output <= 256 KiB")
    print()
