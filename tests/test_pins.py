"""Pins: the JSON every command prints for every bundled fixture and example implementation.

Each case is a command line, run from the repository's root; its exit status and its
JSON document are held in ``tests/golden/pins/NAME.json`` (``{"exit": N, "output": ...}``).
The check names and outcomes of every report, and every fact the JSON publishes, are
then fixed while the code that computes them moves. What is pinned is facts, never the
digits of a value that BLAS rounds: the kernels a CPU chooses may round the last bits of
a product differently on another machine, and a central difference multiplies that by
1/h. So:

- a number is compared within ``REL`` relative or ``ABS`` absolute (a passing gradient
  check's error is rounding noise below the check's own tolerance);
- a ``detail`` is prose: its numbers are pinned as "#";
- a worst coordinate (in a detail, a gradient check's ``worst`` point, or ``qkv check``'s
  ``compared`` of a gradient-check point) is an argmax, and an argmax over errors that tie
  (a transposed gradient's [0,3] and [3,0]) or over noise (a passing check) is the
  machine's choice: a failing check's worst is pinned by its tensor, a passing check's not
  at all (``qkv check``'s ``worst`` by check name);
- a slip's words are prose too: their numbers are pinned as "#";
- names, verdicts, codes, fixtures, coordinates of failures and exact error messages are
  pinned as they are.

The text reports and traces of the chapters are pinned byte for byte by the golden tests.

``python tests/test_pins.py`` writes the snapshots again (after a change that means to
change what a command prints: say so in the CHANGELOG).
"""

from __future__ import annotations

import json
import math
import os
import re
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


REL = 1e-7
ABS = 1e-9
NUMBER = re.compile(r"(?<![\w.[,])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
WORST = re.compile(r"worst [^:]*:")
INDEX = re.compile(r"\[[\d,]*\]")


def _prose(text: str, passed: bool) -> str:
    """A detail's words: numbers as "#", a worst coordinate by its tensor or not at all."""
    if passed:
        text = WORST.sub("worst …:", text)
    else:
        text = WORST.sub(lambda found: INDEX.sub("[…]", found.group()), text)
    return NUMBER.sub("#", text)


def _facts(value: Any, passed: bool = False) -> Any:
    """``value`` with every ``detail`` reduced to its words (see the module's docstring)."""
    if isinstance(value, list):
        return [_facts(item, passed) for item in value]
    if isinstance(value, dict):
        passed = value.get("passed") is True
        worst = isinstance(value.get("detail"), str) and "worst " in value["detail"]
        facts: dict[str, Any] = {}
        for key, item in value.items():
            if key in ("detail", "slip") and isinstance(item, str):
                facts[key] = _prose(item, passed)
            elif key == "slips" and all(isinstance(said, str) for said in item):
                facts[key] = [_prose(said, passed) for said in item]
            elif key == "coordinate" and worst and isinstance(item, str):
                facts[key] = INDEX.sub("[…]", item)
            elif key == "compared" and item and item["against"] == "central-difference":
                facts[key] = {"tensor": item["tensor"]}  # a worst point: an argmax
            elif key == "worst" and isinstance(item, list):  # check's passing gradient checks'
                facts[key] = [point["check"] for point in item]
            elif key == "worst" and isinstance(item, dict):  # a gradient check's worst point
                facts[key] = {} if passed else {"tensor": item.get("tensor"), "passed": False}
            else:
                facts[key] = _facts(item, passed)
        return facts
    return value


def _differences(actual: Any, pinned: Any, where: str = "$") -> list[str]:
    """Where ``actual`` differs from ``pinned``: numbers within REL or ABS, the rest exactly."""
    numbers = (int, float)
    if (isinstance(actual, numbers) and isinstance(pinned, numbers)
            and not isinstance(actual, bool) and not isinstance(pinned, bool)):
        if isinstance(actual, int) and isinstance(pinned, int):
            return [] if actual == pinned else [f"{where}: {actual!r} != {pinned!r}"]
        if not (math.isfinite(actual) and math.isfinite(pinned)):
            same = actual == pinned or (math.isnan(actual) and math.isnan(pinned))
        else:
            same = math.isclose(actual, pinned, rel_tol=REL, abs_tol=ABS)
        return [] if same else [f"{where}: {actual!r} != {pinned!r}"]
    if isinstance(actual, dict) and isinstance(pinned, dict):
        if list(actual) != list(pinned):
            return [f"{where}: keys {list(actual)} != {list(pinned)}"]
        return [found for key in actual
                for found in _differences(actual[key], pinned[key], f"{where}.{key}")]
    if isinstance(actual, list) and isinstance(pinned, list):
        if len(actual) != len(pinned):
            return [f"{where}: length {len(actual)} != {len(pinned)}"]
        return [found for index, (one, other) in enumerate(zip(actual, pinned, strict=True))
                for found in _differences(one, other, f"{where}[{index}]")]
    return [] if actual == pinned else [f"{where}: {actual!r} != {pinned!r}"]


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
    differences = _differences(_facts(document), _facts(pinned["output"]))
    assert not differences, "\n".join(differences[:20])


def test_every_pin_is_a_case() -> None:
    """No snapshot outlives its case (a renamed fixture leaves no stale pin behind)."""
    assert sorted(path.stem for path in PINS.glob("*.json")) == sorted(name for name, _ in CASES)


def test_the_comparison_holds_facts_not_noise() -> None:
    """Another machine's rounding noise passes; a changed fact, count or verdict does not."""
    here = {"passed": True, "detail": "126 coordinates; worst a[0] grad_input[1,1,3]: scaled error 4.9e-10",
            "error": 4.9e-10, "value": 0.19526306553517803}
    there = {"passed": True, "detail": "126 coordinates; worst a[0] grad_w_query[4,2]: scaled error 3.2e-10",
             "error": 3.17e-10, "value": 0.19526306553517797}
    assert _differences(_facts(here), _facts(there)) == []
    assert _differences(_facts(here), _facts({**there, "passed": False})) != []
    assert _differences(_facts(here), _facts({**there, "detail": "126 coordinates; none"})) != []
    assert _differences(_facts(here), _facts({**there, "value": 0.1953})) != []
    failing = {"passed": False, "detail": "worst grad_w_key[2,1]: scaled error 0.178",
               "coordinate": "grad_w_key[2,1]"}
    tied = {"passed": False, "detail": "worst grad_w_key[1,2]: scaled error 0.178",
            "coordinate": "grad_w_key[1,2]"}
    other = {"passed": False, "detail": "worst grad_input[1,2]: scaled error 0.178",
             "coordinate": "grad_input[1,2]"}
    assert _differences(_facts(failing), _facts(tied)) == []
    assert len(_differences(_facts(failing), _facts(other))) == 2
    point = {"tensor": "input", "coordinate": [0, 0, 2], "scaled_error": 2.5e-10, "passed": True}
    noise = {"passed": True, "worst": point}
    assert _differences(_facts(noise), _facts({**noise, "worst": {
        **point, "tensor": "key_weight", "coordinate": [1, 0]}})) == []
    wrong = {"passed": False, "worst": {**point, "passed": False}}
    assert _differences(_facts(wrong), _facts({**wrong, "worst": {
        **wrong["worst"], "coordinate": [0, 1, 0]}})) == []
    assert _differences(_facts(wrong), _facts({**wrong, "worst": {
        **wrong["worst"], "tensor": "key_weight"}})) != []
    first = {"passed": False, "detail": "weights[0,0,0] = 0.5", "coordinate": "weights[0,0,0]"}
    assert _differences(_facts(first), _facts({**first, "coordinate": "weights[0,1,0]"})) != []


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
