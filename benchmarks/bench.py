"""How fast is qkv? Side-by-side timings against baselines measured in the same run.

Run from the repository root (qkv installed, ideally with ``pip install .`` so the
package's bytecode is compiled)::

    python benchmarks/bench.py                 # everything (a few minutes on 2 cores)
    python benchmarks/bench.py --quick         # about 2 minutes: small shapes, shorter rounds
    python benchmarks/bench.py --clean-blas-env   # unset OPENBLAS_CORETYPE/L2_SIZE first

It prints, per shape and dtype, the median time of qkv's forward+reverse pass
(``layer.forward`` then ``layer.backward``), of the fused-GEMM floor (the three raw
products ``X@[W_Q|W_K|W_V]``, ``[dQ|dK|dV]@[W]^T``, ``X^T@[dQ|dK|dV]`` on ready-made
contiguous arrays), of the straightforward three-GEMM NumPy version, and of PyTorch
CPU autograd (when torch is installed); ratios are medians of per-round ratios, each
round timing every contender back to back. Then the attention layer's forward+reverse
(section ``layer``, ``layer.py``: GPT-2-small and a LLaMA-like GQA+RoPE layer against a
minimal batched NumPy floor and torch's ``scaled_dot_product_attention`` with autograd,
float64, causal). Then end-to-end rows (``qkv run`` at
``[8,512,1024,64]`` in text, json and rich against a baseline process: wall, peak memory
and output; see ``end_to_end.py``), the same rows for ``qkv attend --causal`` on a
GPT-2-small layer read from a ``.safetensors`` checkpoint at T=64 and T=1024 and the
newcomer's fixtures' wall times (section ``attend``), then ``qkv run --format rich --full``
against ``--format text --full`` on a ``[2,64,128]`` fixture (section ``rich-full``: the
whole figure, every value, budget 3x the text), gradient-check timings, the CLI
start-up ratios, and peak memory of a forward+reverse pass. It reports numbers, and
ends with every target it measured, met or MISSED (``--strict``: exit 1 on a miss).

Start-up (``--skip engine end-to-end gradcheck memory`` runs it alone): ``qkv report
--format text`` (the bundled fixture) and ``qkv run FIXTURE --format text`` (the chapter
fixture given by path, the way people run it) against ``python -c "import numpy, click,
json"``, in wall time and in instructions counted by callgrind (the stable figure on a
shared machine). The budget is 1.15x in both; the output says whether each command is
within it. It is a budget, not a target: where the last few percent would cost
readability (a module merged for its import cost alone, a record written by hand),
readability wins. With ``PYTHONDONTWRITEBYTECODE`` set, compile the package first
(``python -m compileall -q qkvcli``): otherwise every launch compiles it.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

SHAPES = [(8, 128, 256, 64), (8, 512, 1024, 64), (4, 2048, 2048, 128)]
BLAS_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
# Child processes run here, so "-c" imports the installed qkvcli, not a checkout in the cwd.
NEUTRAL_DIR = os.path.abspath(os.sep)
# Engine rounds continue until this many seconds have passed (see time_rounds).
ENGINE_SECONDS = 1.0
# The chapter fixture of this checkout, given by path to ``qkv run``.
CHAPTER_FIXTURE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                               "fixtures", "ch26-qkv-projections.json")
# What start-up may cost, against the baseline (instructions and wall time). Printed, never
# asserted: where the last few percent would cost readability, readability wins.
STARTUP_BUDGET = 1.15
RICH_FULL_BUDGET = 3.0
RICH_FULL_SHAPE = (2, 64, 128, 64)  # batch, tokens, d_model, d_head
QUICK_SKIPS = {"end-to-end"}
"""What ``--quick`` leaves out unless ``--skip`` is given: its rows are minutes of launches."""
LAYER_FLOOR_TARGET = 1.2  # layer.py's "targets: qkv/floor <= 1.2"


class Target:
    """One figure measured against the limit the bench states for it."""

    def __init__(self, what: str, value: float, limit: float, note: str = "") -> None:
        self.what, self.value, self.limit, self.note = what, value, limit, note

    @property
    def met(self) -> bool:
        return self.value <= self.limit

    def line(self) -> str:
        verdict = "met   " if self.met else "MISSED"
        return (f"  {verdict} {self.what}: {self.value:.3f} against <= {self.limit:g}"
                + (f" ({self.note})" if self.note and not self.met else ""))


TARGETS: list[Target] = []
"""Every target measured in this run, summed up at the end so a miss is never silent."""


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="skip the largest shape; fewer, shorter rounds; the layer "
                        "against its floor only; no end-to-end rows")
    parser.add_argument("--repeats", type=int, default=None,
                        help="timed rounds per shape (default 7, quick 3)")
    parser.add_argument("--startup-runs", type=int, default=None,
                        help="process launches per command (default 21, quick 7)")
    parser.add_argument("--clean-blas-env", action="store_true",
                        help=f"re-run with {' and '.join(BLAS_ENV)} unset")
    parser.add_argument("--skip", nargs="*", default=None,
                        choices=["engine", "layer", "end-to-end", "attend", "rich-full",
                                 "gradcheck", "startup", "memory"],
                        help="sections to leave out")
    parser.add_argument("--strict", action="store_true",
                        help="exit with status 1 when a measured target was missed")
    parser.add_argument("--memory-probe", nargs=5, metavar=("B", "T", "D", "H", "DTYPE"),
                        help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def median_ms(values: list[float]) -> float:
    return 1000.0 * statistics.median(values)


# --- machine ------------------------------------------------------------------------------


def describe_machine() -> None:
    import numpy as np

    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    print(f"machine: {cpu}, {os.cpu_count()} logical CPUs, Python {platform.python_version()}, "
          f"NumPy {np.__version__}")
    env = ", ".join(f"{name}={os.environ.get(name, '(unset)')}" for name in BLAS_ENV)
    print(f"BLAS environment: {env}")
    try:
        from threadpoolctl import threadpool_info

        for pool in threadpool_info():
            if pool.get("user_api") == "blas":
                print(f"BLAS: {pool.get('internal_api')} {pool.get('version')} "
                      f"kernel={pool.get('architecture')} threads={pool.get('num_threads')}")
    except ImportError:
        print("BLAS: (install threadpoolctl to see which kernel runs)")
    torch = optional_torch()
    print(f"PyTorch: {torch.__version__ + ' CPU, ' + str(torch.get_num_threads()) + ' threads'}"
          if torch is not None else "PyTorch: not installed (its column is skipped)")
    print()


def optional_torch() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


# --- engine -------------------------------------------------------------------------------


def engine_contenders(shape: tuple[int, int, int, int], dtype: str) -> dict[str, Callable[[], Any]]:
    import numpy as np

    from qkvcli.core.projections import QkvProjections

    batch, tokens, d_model, d_head = shape
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (batch, tokens, d_model)).astype(dtype)
    weights = [rng.uniform(-1, 1, (d_model, d_head)).astype(dtype) for _ in range(3)]
    upstream = [rng.uniform(-1, 1, (batch, tokens, d_head)).astype(dtype) for _ in range(3)]
    layer = QkvProjections.from_arrays(*weights).astype(dtype)

    packed = np.ascontiguousarray(np.concatenate(weights, axis=1))
    rows = x.reshape(batch * tokens, d_model)
    joined = np.ascontiguousarray(
        np.concatenate([g.reshape(batch * tokens, d_head) for g in upstream], axis=1)
    )

    def qkv() -> Any:
        return layer.forward(x), layer.backward(x, *upstream)

    # The same pass with dQ, dK, dV as column views of one [B,T,3h] gradient, as a packed
    # layer receives it (and as the floor's ready-made [dQ|dK|dV]): no copy in reverse.
    fused_upstream = np.concatenate(upstream, axis=2)
    packed_views = tuple(fused_upstream[..., i * d_head:(i + 1) * d_head] for i in range(3))

    def qkv_packed() -> Any:
        return layer.forward(x), layer.backward(x, *packed_views)

    def floor() -> Any:
        # The three products any fused implementation must do, on ready-made arrays.
        return rows @ packed, joined @ packed.T, rows.T @ joined

    def separate() -> Any:
        outputs = [x @ w for w in weights]
        grad_input = np.zeros_like(x)
        for w, g in zip(weights, upstream, strict=True):
            grad_input += g @ w.T
        grads = [rows.T @ g.reshape(batch * tokens, d_head) for g in upstream]
        return outputs, grad_input, grads

    contenders: dict[str, Callable[[], Any]] = {"qkv": qkv, "packed": qkv_packed,
                                                 "floor": floor, "separate": separate}
    torch = optional_torch()
    if torch is not None:
        tx = torch.tensor(x, requires_grad=True)
        tw = [torch.tensor(w, requires_grad=True) for w in weights]
        tu = [torch.tensor(g) for g in upstream]

        def torch_autograd() -> Any:
            # Three projections as a PyTorch layer computes them, reverse by autograd.
            for tensor in (tx, *tw):
                tensor.grad = None
            outputs = [tx @ w for w in tw]
            torch.autograd.backward(outputs, tu)
            return outputs

        contenders["torch"] = torch_autograd
    return contenders


def time_rounds(contenders: dict[str, Callable[[], Any]], repeats: int,
                min_seconds: float = 0.0, settle: float = 0.0) -> dict[str, list[float]]:
    """Each round times every contender once, back to back, so ratios are paired.

    The order rotates from round to round, so no contender always runs right after
    another one's thread pools (OpenBLAS, OpenMP) were busy. At least ``repeats``
    rounds, and more until ``min_seconds`` have passed: a few milliseconds' rounds
    are cheap, and one descheduled thread on a shared machine moves the median of
    seven of them by several percent. ``settle``: seconds of sleep before each run
    (contenders in other processes, whose idle threads spin for a while). A contender
    that returns a ``float`` reports its own seconds (one timed in another process).
    """
    for run in contenders.values():  # warm-up: first-touch allocations, thread pools
        run()
    names = list(contenders)
    times: dict[str, list[float]] = {name: [] for name in names}
    deadline = time.perf_counter() + min_seconds
    round_number = 0
    while round_number < repeats or time.perf_counter() < deadline:
        shift = round_number % len(names)
        for name in names[shift:] + names[:shift]:
            if settle:
                time.sleep(settle)
            start = time.perf_counter()
            own = contenders[name]()
            elapsed = time.perf_counter() - start
            times[name].append(own if isinstance(own, float) else elapsed)
        round_number += 1
    return times


def paired_ratio(times: dict[str, list[float]], top: str, bottom: str) -> float:
    return statistics.median(a / b for a, b in zip(times[top], times[bottom], strict=True))


def bench_engine(shapes: list[tuple[int, int, int, int]], repeats: int,
                 seconds: float = ENGINE_SECONDS) -> None:
    print(f"forward+reverse (median ms; ratios are medians of per-round ratios; at least "
          f"{repeats} rounds and {seconds:g} s per set of rounds)")
    print("  qkv/floor from rounds of qkv and the floor alone; the torch columns from rounds")
    print("  of qkv, the three-GEMM version and torch (torch's OpenMP threads keep spinning")
    print("  after each call and would slow whatever NumPy product runs next); packed/floor:")
    print("  qkv given dQ, dK, dV as views of one [B,T,3h] gradient, which reverse need not copy")
    header = (f"{'shape [B,T,d_model,d_head]':<26} {'dtype':<7} {'qkv':>9} {'floor':>9} "
              f"{'3-GEMM':>9} {'torch':>9} {'qkv/floor':>9} {'packed/floor':>12} "
              f"{'qkv/torch':>9} {'3-GEMM/torch':>12}")
    print(header)
    for shape in shapes:
        for dtype in ("float64", "float32"):
            contenders = engine_contenders(shape, dtype)
            floor_rounds = time_rounds(
                {name: contenders[name] for name in ("qkv", "floor")}, repeats, seconds
            )
            packed_rounds = time_rounds(
                {name: contenders[name] for name in ("packed", "floor")}, repeats, seconds
            )
            others = {name: run for name, run in contenders.items()
                      if name not in ("floor", "packed")}
            other_rounds = time_rounds(others, repeats, seconds)
            has_torch = "torch" in other_rounds
            torch_ms = f"{median_ms(other_rounds['torch']):9.1f}" if has_torch else f"{'-':>9}"
            vs_torch = (f"{paired_ratio(other_rounds, 'qkv', 'torch'):9.2f}" if has_torch
                        else f"{'-':>9}")
            sep_torch = (f"{paired_ratio(other_rounds, 'separate', 'torch'):12.2f}"
                         if has_torch else f"{'-':>12}")
            label = "[" + ",".join(map(str, shape)) + "]"
            print(f"{label:<26} {dtype:<7} {median_ms(floor_rounds['qkv']):9.1f} "
                  f"{median_ms(floor_rounds['floor']):9.1f} "
                  f"{median_ms(other_rounds['separate']):9.1f} {torch_ms} "
                  f"{paired_ratio(floor_rounds, 'qkv', 'floor'):9.3f} "
                  f"{paired_ratio(packed_rounds, 'packed', 'floor'):12.3f} {vs_torch} {sep_torch}")
            del contenders, floor_rounds, packed_rounds, other_rounds
    print()


# --- gradient checks ----------------------------------------------------------------------


def gradcheck_case(shape: tuple[int, int, int, int]) -> tuple[Any, ...]:
    import numpy as np

    from qkvcli.core.projections import QkvProjections

    batch, tokens, d_model, d_head = shape
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (batch, tokens, d_model))
    layer = QkvProjections.from_arrays(*[rng.uniform(-1, 1, (d_model, d_head))
                                         for _ in range(3)])
    upstream = tuple(rng.uniform(-1, 1, (batch, tokens, d_head)) for _ in range(3))
    return layer, x, upstream, tuple(layer.backward(x, *upstream))


def naive_loop(layer: Any, x: Any, upstream: Any, analytic: Any) -> Any:
    """The plain per-coordinate check: one NumPy forward pass per evaluation."""
    from qkvcli.core.outputs import weighted_loss
    from qkvcli.core.projections import QkvProjections
    from qkvcli.gradcheck.central import check_tensor

    def weight_objective(branch: int) -> Callable[[Any], float]:
        def objective(probe: Any) -> float:
            weights = list(layer.weights)
            weights[branch] = probe
            return weighted_loss(QkvProjections.from_arrays(*weights).forward(x), upstream)
        return objective

    tensors = [check_tensor("input", x, analytic[0], 1e-6, 2e-6, None,
                            lambda probe: weighted_loss(layer.forward(probe), upstream))]
    for branch in range(3):
        tensors.append(check_tensor("w", layer.weights[branch], analytic[branch + 1], 1e-6,
                                    2e-6, None, weight_objective(branch)))
    return tensors


def bench_gradcheck(repeats: int) -> None:
    from qkvcli.gradcheck.projections import gradcheck_projections

    print("gradient checks (median ms of compute, no start-up)")
    case = gradcheck_case((4, 64, 128, 32))
    fast = time_rounds({"fast": lambda: gradcheck_projections(*case, 1e-6, 2e-6, mode="fast")},
                       repeats)
    result = gradcheck_projections(*case, 1e-6, 2e-6, mode="fast")
    print(f"  --mode fast    [4,64,128,32]: {median_ms(fast['fast']):8.1f} ms "
          f"({result.summary}, passed={result.passed})")
    small = gradcheck_case((2, 16, 32, 8))
    times = time_rounds({
        "full": lambda: gradcheck_projections(*small, 1e-6, 2e-6, mode="full"),
        "loop": lambda: naive_loop(*small),
    }, max(3, repeats // 2))
    result = gradcheck_projections(*small, 1e-6, 2e-6, mode="full")
    print(f"  --mode full    [2,16,32,8]:   {median_ms(times['full']):8.1f} ms "
          f"({result.summary}, passed={result.passed}); naive per-coordinate loop "
          f"{median_ms(times['loop']):.1f} ms; ratio {paired_ratio(times, 'full', 'loop'):.2f}")
    # A large layer's default (sampled) check, against one forward+reverse pass of it: a
    # large weight's coordinates recompute one column of their branch each.
    big = gradcheck_case((8, 512, 1024, 64))
    layer, x, upstream = big[0], big[1], big[2]
    times = time_rounds({
        "sampled": lambda: gradcheck_projections(*big, 1e-6, 2e-6),
        "pass": lambda: layer.backward(x, *upstream) and layer.forward(x),
    }, max(3, repeats // 2))
    result = gradcheck_projections(*big, 1e-6, 2e-6)
    print(f"  --mode auto    [8,512,1024,64]: {median_ms(times['sampled']):6.1f} ms "
          f"({result.summary}, passed={result.passed}); one forward+reverse "
          f"{median_ms(times['pass']):.1f} ms; ratio {paired_ratio(times, 'sampled', 'pass'):.2f}")
    print()


# --- start-up -----------------------------------------------------------------------------


def qkv_program() -> list[str]:
    """The ``qkv`` console script beside this interpreter, else ``python -m qkvcli``."""
    script = os.path.join(os.path.dirname(sys.executable), "qkv")
    if os.path.exists(script):
        return [script]
    return [sys.executable, "-m", "qkvcli"]


def bytecode_note() -> str:
    import importlib.util

    import qkvcli.check.chapter26

    compiled = os.path.exists(importlib.util.cache_from_source(qkvcli.check.chapter26.__file__))
    where = os.path.dirname(os.path.dirname(qkvcli.check.chapter26.__file__))
    # Without bytecode every launch compiles qkv's modules (a third of the report's
    # instructions on a 2-core machine), so the figures say nothing about qkv itself.
    hint = "" if compiled else (f" (run python -m compileall -q {where} first: the "
                                "figures below include compiling qkv)")
    return f"qkvcli from {where}, bytecode {'compiled' if compiled else 'NOT compiled'}{hint}"


def startup_commands() -> dict[str, list[str]]:
    """The baseline; qkv as installed, on the bundled fixture and on a fixture file given by
    path (the real path: read, confined, parsed); qkv keeping the final collections."""
    return {
        "import numpy, click, json": [sys.executable, "-c", "import numpy, click, json"],
        "qkv report --format text": [*qkv_program(), "report", "--format", "text"],
        "qkv run FIXTURE --format text": [*qkv_program(), "run", CHAPTER_FIXTURE,
                                          "--format", "text"],
        # main() without the console entry's gc.freeze(): what the exit trick saves.
        "  ... with final collections": [sys.executable, "-c",
                                         "from qkvcli.cli import main; main()",
                                         "report", "--format", "text"],
    }


def bench_startup(runs: int) -> None:
    import resource

    commands = startup_commands()
    wall: dict[str, list[float]] = {name: [] for name in commands}
    cpu: dict[str, list[float]] = {name: [] for name in commands}
    for command in commands.values():  # warm the page cache
        subprocess.run(command, stdout=subprocess.DEVNULL, check=True, cwd=NEUTRAL_DIR)
    for _ in range(runs):
        for name, command in commands.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            subprocess.run(command, stdout=subprocess.DEVNULL, check=True, cwd=NEUTRAL_DIR)
            wall[name].append(time.perf_counter() - start)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[name].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    print(f"start-up (median of {runs} launches, interleaved; {bytecode_note()}; "
          f"budget {STARTUP_BUDGET:.2f}x the baseline, in wall time and instructions)")
    names = list(commands)
    base = names[0]
    for name in names:
        ratios = "" if name == base else (
            f"   ratio wall {paired_ratio(wall, name, base):.3f} (median of paired), "
            f"cpu {statistics.median(cpu[name]) / statistics.median(cpu[base]):.3f}")
        print(f"  {name:<30} wall {median_ms(wall[name]):7.1f} ms   "
              f"cpu {median_ms(cpu[name]):7.1f} ms{ratios}")
    for name in names[1:3]:
        TARGETS.append(Target(f"start-up wall, {name.strip(' .')}", paired_ratio(wall, name, base),
                              STARTUP_BUDGET, "a busy machine inflates wall time; see the "
                              "instruction count"))
    over = [name for name in names[1:3] if paired_ratio(wall, name, base) > STARTUP_BUDGET]
    print("  wall time: " + (f"over {STARTUP_BUDGET:.2f}x: {', '.join(over)} (a busy machine "
                             "inflates it; the instruction counts below are the stable figure)"
                             if over else f"both qkv commands within {STARTUP_BUDGET:.2f}x"))
    startup_instructions(commands)
    importtime_breakdown()


def startup_instructions(commands: dict[str, list[str]]) -> None:
    """Instructions executed, counted by valgrind's callgrind: the same on a busy machine.

    One BLAS thread (idle BLAS threads spin, and their spinning would be counted) and a
    fixed hash seed make the counts repeatable to a few parts in a thousand.
    """
    import shutil

    if shutil.which("valgrind") is None:
        print("  instructions: valgrind not installed (apt install valgrind), skipped")
        return
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
    counts: dict[str, int] = {}
    for name, command in commands.items():
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *command],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True,
            cwd=NEUTRAL_DIR, env=env,
        )
        refs = [line for line in done.stderr.splitlines() if "I   refs:" in line]
        counts[name] = int(refs[-1].split(":")[1].replace(",", ""))
    base = next(iter(counts))
    print("  instructions (callgrind, one BLAS thread):")
    for name, count in counts.items():
        ratio = "" if name == base else f" ({count / counts[base]:.3f}x)"
        print(f"    {name.strip(' .'):<34} {count / 1e6:8.1f}M{ratio}")
    for name in list(counts)[1:3]:
        TARGETS.append(Target(f"start-up instructions, {name.strip(' .')}",
                              counts[name] / counts[base], STARTUP_BUDGET))
    over = [name for name in list(counts)[1:3] if counts[name] / counts[base] > STARTUP_BUDGET]
    print("    " + (f"over {STARTUP_BUDGET:.2f}x: {', '.join(over)}" if over
                    else f"both qkv commands within {STARTUP_BUDGET:.2f}x"))


def importtime_breakdown() -> None:
    """Where the report's own start-up goes: -X importtime, and building the evidence."""
    def self_times(code: str) -> dict[str, int]:
        result = subprocess.run([sys.executable, "-X", "importtime", "-c", code],
                                capture_output=True, text=True, check=True, cwd=NEUTRAL_DIR)
        times: dict[str, int] = {}
        for line in result.stderr.splitlines():
            if line.startswith("import time:") and "self [us]" not in line:
                fields = line.split("|")
                times[fields[2].strip()] = int(fields[0].split(":")[1])
        return times

    base = self_times("import numpy, click, json")
    report = self_times("import numpy, click, json, qkvcli.cli, qkvcli.cli.evidence, "
                        "qkvcli.check.chapter26, qkvcli.render.report")
    extra = {name: us for name, us in report.items() if name not in base}
    top = sorted(extra.items(), key=lambda item: -item[1])[:8]
    print(f"  -X importtime: modules beyond the baseline {sum(extra.values()) / 1000:.1f} ms "
          "self time; largest: " + ", ".join(f"{name} {us / 1000:.1f}" for name, us in top))
    from qkvcli.check.chapter26 import build_evidence
    from qkvcli.reading.load import load_fixture

    fixture = load_fixture()
    build_evidence(fixture)
    runs = []
    for _ in range(21):
        start = time.perf_counter()
        build_evidence(load_fixture())
        runs.append(time.perf_counter() - start)
    print(f"  loading the chapter fixture and building its evidence: {median_ms(runs):.2f} ms")
    print()


# --- the rich figure in full ----------------------------------------------------------------


def bench_rich_full(runs: int) -> None:
    """``qkv run F --format rich --full`` against ``--format text --full`` on a
    :data:`RICH_FULL_SHAPE` fixture, launches interleaved, stdout to a pipe (so the
    figure is laid out as wide as every value needs): wall and CPU medians, and the
    median of paired wall ratios against :data:`RICH_FULL_BUDGET`."""
    import resource
    import tempfile

    batch, tokens, d_model, d_head = RICH_FULL_SHAPE
    with tempfile.TemporaryDirectory() as folder:
        fixture = os.path.join(folder, "rich-full.json")
        subprocess.run([*qkv_program(), "init", "--generate", "--batch", str(batch),
                        "--tokens", str(tokens), "--d-model", str(d_model), "--d-head",
                        str(d_head), "-o", fixture], check=True, stderr=subprocess.DEVNULL)
        commands = {fmt: [*qkv_program(), "run", fixture, "--format", fmt, "--full"]
                    for fmt in ("text", "rich")}
        wall: dict[str, list[float]] = {name: [] for name in commands}
        cpu: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(runs):
            for name, command in commands.items():
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                start = time.perf_counter()
                subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               check=True, cwd=NEUTRAL_DIR)
                wall[name].append(time.perf_counter() - start)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu[name].append(after.ru_utime - before.ru_utime
                                 + after.ru_stime - before.ru_stime)
    ratio = paired_ratio(wall, "rich", "text")
    label = "[" + ",".join(map(str, RICH_FULL_SHAPE[:3])) + "]"
    TARGETS.append(Target(f"rich-full rich/text wall on {label}", ratio, RICH_FULL_BUDGET))
    print(f"qkv run --full on {label} (d_head {d_head}), median of {runs} launches, interleaved")
    for name in commands:
        print(f"  --format {name:<5} wall {median_ms(wall[name]):8.1f} ms   "
              f"cpu {median_ms(cpu[name]):8.1f} ms")
    print(f"  rich/text: wall {ratio:.2f}x (median of paired), cpu "
          f"{statistics.median(cpu['rich']) / statistics.median(cpu['text']):.2f}x; "
          + ("within" if ratio <= RICH_FULL_BUDGET else "over")
          + f" the {RICH_FULL_BUDGET:.0f}x budget")
    print()


# --- memory -------------------------------------------------------------------------------


def memory_probe(batch: int, tokens: int, d_model: int, d_head: int, dtype: str) -> None:
    """Run in a fresh process: peak traced bytes of one forward+reverse pass."""
    import resource
    import tracemalloc

    import numpy as np

    from qkvcli.core.projections import QkvProjections

    tracemalloc.start()  # NumPy reports its data allocations to tracemalloc
    rng = np.random.default_rng(2)
    layer = QkvProjections.from_arrays(
        *[rng.uniform(-1, 1, (d_model, d_head)).astype(dtype) for _ in range(3)]
    ).astype(dtype)  # the caller's weight arrays are dropped: the layer holds the weights
    x = rng.uniform(-1, 1, (batch, tokens, d_model)).astype(dtype)
    upstream = [rng.uniform(-1, 1, (batch, tokens, d_head)).astype(dtype) for _ in range(3)]
    tracemalloc.reset_peak()
    outputs = layer.forward(x)
    grads = layer.backward(x, *upstream)
    _, peak = tracemalloc.get_traced_memory()
    inputs = x.nbytes + layer.packed.nbytes + sum(g.nbytes for g in upstream)
    produced = (outputs.query.base.nbytes + grads.grad_input.nbytes
                + grads.grad_w_query.base.nbytes)
    print(f"{peak} {inputs + produced} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}")


def bench_memory(shape: tuple[int, int, int, int]) -> None:
    label = "[" + ",".join(map(str, shape)) + "]"
    result = subprocess.run(
        [sys.executable, __file__, "--memory-probe", *map(str, shape), "float64"],
        capture_output=True, text=True, check=True,
    )
    peak, needed, maxrss_kib = (int(v) for v in result.stdout.split())
    print(f"peak memory, forward+reverse {label} float64 (fresh process, tracemalloc)")
    print(f"  inputs+outputs+gradients {needed / 2**20:8.1f} MiB; peak traced "
          f"{peak / 2**20:8.1f} MiB; ratio {peak / needed:.3f}; "
          f"process max RSS {maxrss_kib / 1024:.1f} MiB (interpreter and NumPy included)")
    print()


def layer_targets(time_rounds_: Callable[..., dict[str, list[float]]],
                  quick: bool) -> Callable[..., dict[str, list[float]]]:
    """``time_rounds`` for layer.py's table, recording each row's qkv/floor as a target.

    layer.py times one set of rounds per row, allocators outer and layers inner, so the
    n-th call is row n of that order."""
    import layer

    layers = layer.QUICK_LAYERS if quick else layer.LAYERS
    rows = [(allocator, row) for allocator, _ in layer.ALLOCATORS for row in layers]
    calls = iter(rows)

    def timed(contenders: dict[str, Callable[[], Any]], *args: Any,
              **kwargs: Any) -> dict[str, list[float]]:
        times = time_rounds_(contenders, *args, **kwargs)
        allocator, (name, batch, tokens, d_model, heads, kv, *_) = next(calls)
        if "qkv" in times and "floor" in times:
            TARGETS.append(Target(
                f"layer qkv/floor, {name} {batch},{tokens},{d_model},{heads},{kv}, "
                f"{allocator.split(' (')[0]}", paired_ratio(times, "qkv", "floor"),
                LAYER_FLOOR_TARGET, "glibc's default allocator maps and faults each large "
                "array afresh: docs/performance.md" if allocator.startswith("glibc") else ""))
        return times

    return timed


def summary(strict: bool) -> None:
    """Every target of the run, met or MISSED, and with ``strict`` exit status 1 on a miss."""
    missed = [target for target in TARGETS if not target.met]
    print(f"targets: {len(TARGETS) - len(missed)} of {len(TARGETS)} met"
          + (f", {len(missed)} MISSED" if missed else ""))
    for target in TARGETS:
        print(target.line())
    if strict and missed:
        sys.exit(1)


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    if args.memory_probe:
        b, t, d, h, dtype = args.memory_probe
        memory_probe(int(b), int(t), int(d), int(h), dtype)
        return
    if args.clean_blas_env and any(name in os.environ for name in BLAS_ENV):
        env = {k: v for k, v in os.environ.items() if k not in BLAS_ENV}
        rest = [a for a in argv if a != "--clean-blas-env"]
        os.execve(sys.executable, [sys.executable, __file__, *rest], env)
    repeats = args.repeats or (3 if args.quick else 7)
    shapes = SHAPES[:2] if args.quick else SHAPES
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    describe_machine()
    seconds = ENGINE_SECONDS / 4 if args.quick else ENGINE_SECONDS

    def bench_layer_section() -> None:
        import layer

        if args.quick:
            # Quick: qkv against its floor only, with freed memory kept (the setting the
            # 1.2 target is for): each torch worker's start costs more than its rows.
            layer.ALLOCATORS = layer.ALLOCATORS[1:]
            print("--quick: qkv and the floor only, freed memory kept in the process\n")
        layer.bench_layer(layer_targets(time_rounds, args.quick), repeats, seconds, args.quick,
                          None if args.quick else optional_torch())

    def end_to_end_section() -> None:
        from end_to_end import bench_end_to_end

        bench_end_to_end(qkv_program(), 3 if args.quick else 5, NEUTRAL_DIR)

    def attend_section() -> None:
        from end_to_end import bench_attend_end_to_end

        bench_attend_end_to_end(qkv_program(), 1 if args.quick else 3, NEUTRAL_DIR,
                                (64,) if args.quick else (64, 1024),
                                () if args.quick else (512,))

    sections: dict[str, Callable[[], None]] = {
        "engine": lambda: bench_engine(shapes, repeats, seconds),
        "layer": bench_layer_section,
        # --quick: the end-to-end rows at [8,512,1024,64] are most of a quick run's time
        "end-to-end": end_to_end_section,
        "attend": attend_section,
        "rich-full": lambda: bench_rich_full(3 if args.quick else 7),
        "gradcheck": lambda: bench_gradcheck(repeats),
        "startup": lambda: bench_startup(args.startup_runs or (7 if args.quick else 21)),
        "memory": lambda: bench_memory(shapes[-1]),
    }
    given = set(args.skip or ())
    skipped = given | (QUICK_SKIPS if args.quick and args.skip is None else set())
    if skipped - given:
        print(f"--quick leaves out {', '.join(sorted(skipped - given))} (a bare --skip, or "
              "--skip naming other sections, runs it)\n")
    started = time.perf_counter()
    for name, section in sections.items():
        if name in skipped:
            continue
        begun = time.perf_counter()
        section()
        print(f"[{name}: {time.perf_counter() - begun:.0f} s]\n")
    print(f"[all: {time.perf_counter() - started:.0f} s]")
    summary(args.strict)


if __name__ == "__main__":
    main(sys.argv[1:])
