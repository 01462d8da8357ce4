"""Pins: the JSON every command prints for every bundled fixture and example implementation.

Each case is a command line, run from the repository's root; its exit status and its
JSON document are held in ``tests/golden/pins/NAME.json`` (``{"exit": N, "output": ...}``).
The check names and outcomes of every report, and every fact the JSON publishes, are
then fixed while the code that computes them moves. Floats are compared to 12
significant digits: BLAS kernels chosen by the CPU may round the last bits of a product
differently on another machine (the text reports and traces are pinned byte for byte
by the golden tests).

``python tests/test_pins.py`` writes the snapshots again (after a change that means to
change what a command prints: say so in the CHANGELOG).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PINS = Path(__file__).resolve().parent / "golden" / "pins"
IMPLEMENTATIONS = ROOT / "examples" / "implementations"
NEEDS_TORCH = ("torch_qkv",)


def _cases() -> list[tuple[str, list[str]]]:
    cases: list[tuple[str, list[str]]] = [("run-bundled", ["run", "-f", "json"])]
    for folder in ("fixtures", "fixtures/examples"):
        for path in sorted((ROOT / folder).glob("*.json")):
            relative = path.relative_to(ROOT).as_posix()
            cases.append((f"run-{path.stem}", ["run", relative, "-f", "json"]))
    for path in sorted((ROOT / "fixtures" / "attend").glob("*.json")):
        relative = path.relative_to(ROOT).as_posix()
        cases.append((f"attend-{path.stem}", ["attend", relative, "-f", "json"]))
        cases.append((f"attend-{path.stem}-causal",
                      ["attend", relative, "--causal", "-f", "json"]))
    cases.append(("gradcheck-bundled", ["gradcheck", "-f", "json"]))
    cases.append(("gradcheck-seeded-7",
                  ["gradcheck", "fixtures/examples/seeded-7.json", "-f", "json"]))
    for path in sorted(IMPLEMENTATIONS.glob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if path.stem == "command_qkv":
            cases.append((f"check-{path.stem}",
                          ["check", "--command", f"python3 {relative}", "-f", "json"]))
        else:
            cases.append((f"check-{path.stem}", ["check", relative, "-f", "json"]))
    return cases


CASES = _cases()


def _rounded(value: Any) -> Any:
    """``value`` with every float to 12 significant digits (non-finite ones as they are)."""
    if isinstance(value, float):
        return float(f"{value:.12g}") if math.isfinite(value) else value
    if isinstance(value, list):
        return [_rounded(item) for item in value]
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    return value


def _invoke(args: list[str]) -> tuple[int, Any]:
    from click.testing import CliRunner

    from qkvcli.cli import main

    result = CliRunner().invoke(main, args, catch_exceptions=False)
    try:
        document = json.loads(result.stdout)
    except ValueError:
        raise AssertionError(f"qkv {' '.join(args)} printed no JSON (exit "
                             f"{result.exit_code}): {result.stdout[:200]!r}") from None
    return result.exit_code, document


@pytest.mark.parametrize(("name", "args"), CASES, ids=[name for name, _ in CASES])
def test_pinned(name: str, args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    if any(name.endswith(stem) for stem in NEEDS_TORCH):
        pytest.importorskip("torch")
    monkeypatch.chdir(ROOT)
    pinned = json.loads((PINS / f"{name}.json").read_text(encoding="utf-8"))
    code, document = _invoke(args)
    assert code == pinned["exit"]
    assert [check.get("name") for check in document.get("checks", [])] == [
        check.get("name") for check in pinned["output"].get("checks", [])]
    assert _rounded(document) == _rounded(pinned["output"])


def test_every_pin_is_a_case() -> None:
    """No snapshot outlives its case (a renamed fixture leaves no stale pin behind)."""
    assert sorted(path.stem for path in PINS.glob("*.json")) == sorted(name for name, _ in CASES)


def write() -> None:
    """Write every snapshot again, from the repository's root."""
    os.chdir(ROOT)
    PINS.mkdir(parents=True, exist_ok=True)
    for old in PINS.glob("*.json"):
        old.unlink()
    for name, args in CASES:
        code, document = _invoke(args)
        text = json.dumps({"exit": code, "output": document}, indent=1, ensure_ascii=False)
        (PINS / f"{name}.json").write_text(text + "\n", encoding="utf-8")
        print(f"{name}: exit {code}")


if __name__ == "__main__":
    write()
