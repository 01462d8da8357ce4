"""benchmarks/bench.py never lets a target's miss pass silently (issue 44): every target
it measured is summed up at the end, met or MISSED, and ``--strict`` exits 1 on a miss."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture
def bench() -> Iterator[Any]:
    sys.path.insert(0, str(BENCHMARKS))
    writes, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # nothing into the checkout
    try:
        module = importlib.import_module("bench")
        importlib.import_module("layer")
        module.TARGETS.clear()
        yield module
    finally:
        sys.dont_write_bytecode = writes
        sys.path.remove(str(BENCHMARKS))


def test_a_missed_target_is_flagged_and_strict_fails(bench: Any,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    bench.TARGETS.append(bench.Target("layer qkv/floor, GPT-2-small", 2.72, 1.2, "why"))
    bench.TARGETS.append(bench.Target("rich-full rich/text wall", 1.99, 3.0))
    bench.summary(strict=False)
    assert capsys.readouterr().out == (
        "targets: 1 of 2 met, 1 MISSED\n"
        "  MISSED layer qkv/floor, GPT-2-small: 2.720 against <= 1.2 (why)\n"
        "  met    rich-full rich/text wall: 1.990 against <= 3\n")
    with pytest.raises(SystemExit) as stopped:
        bench.summary(strict=True)
    assert stopped.value.code == 1


def test_the_layer_rows_qkv_over_floor_become_targets(bench: Any) -> None:
    import layer

    rounds = iter([{"qkv": [2.0, 3.0, 2.8], "floor": [1.0, 1.0, 1.0]},
                   {"qkv": [1.0, 1.1, 0.9], "floor": [1.0, 1.0, 1.0]}] * len(layer.ALLOCATORS))
    timed = bench.layer_targets(lambda contenders, *args, **kwargs: next(rounds), quick=True)
    for _ in range(2 * len(layer.ALLOCATORS)):
        timed({})
    found = [(target.what.split(", ")[1], round(target.value, 3), target.met)
             for target in bench.TARGETS]
    assert found[:2] == [("GPT-2-small 1,256,768,12,12", 2.8, False),
                         ("LLaMA-like GQA+RoPE 1,256,2048,32,8", 1.0, True)]
