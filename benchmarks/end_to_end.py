"""End-to-end rows for ``benchmarks/bench.py``: ``qkv run`` against a baseline process.

The baseline imports NumPy, makes tensors of the fixture's size and runs the fused
forward+reverse (``X@[W]``, ``[dY]@[W]^T``, ``X^T@[dY]``) four times: roughly the least
any process that genuinely computes the evidence must do. Each round launches the
baseline and ``qkv run FIXTURE -f FORMAT`` back to back; wall time and peak RSS come from
``os.wait4`` of that very child, and output bytes from its standard output. One unrecorded
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


def measured(command: list[str], cwd: str, env: dict[str, str]) -> tuple[float, int, int]:
    """Wall seconds, peak RSS (KiB) and stdout bytes of one run of ``command``."""
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        child = subprocess.Popen(command, cwd=cwd, env=env, stdout=out,
                                 stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0, os.SEEK_END)
        return wall, int(usage.ru_maxrss), out.tell()


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
