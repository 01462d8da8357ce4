"""A learner's KV cache under ``qkv check`` (chapter 37's ``cache_steps``): the bundled
NumPy cache passes every family; each ``wrong_cache_*.py`` slip fails with its slip
named; a cache that reads a score it cannot softmax, or takes a bad request, is found;
the report validates against the check schema; the
operation is refused in one line by the engine for a bad capacity; a projections-only
check still loads no attention engine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from qkvcli.cli import main

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "implementations"


def check(*args: str) -> tuple[int, str]:
    found = CliRunner().invoke(main, ["check", *args])
    return found.exit_code, found.output


def test_the_bundled_cache_passes_every_family() -> None:
    code, text = check(str(EXAMPLES / "numpy_kv_cache.py"))
    assert code == 0, text
    names = [line.split()[0] for line in text.splitlines()[2:-1]]
    assert names == ["cache-steps", "cache-refusals", "cache-errors", "cache-replay",
                     "cache-purity"]
    assert "verdict: PASS (5 of 5 checks passed)" in text


SLIPS = {
    "rope_at_zero": ("cache-steps", "RoPE at position 0, not at the cache's length"),
    "query_cached": ("cache-steps", "the turned queries where the turned keys belong"),
    "values_turned": ("cache-steps", "the values turned by RoPE: only Q and K turn"),
    "append_before_check": ("cache-refusals", "the append comes before the check"),
    "no_reset": ("cache-replay", "reset did not empty it"),
}


@pytest.mark.parametrize("slip", sorted(SLIPS))
def test_each_slip_fails_with_its_name(slip: str) -> None:
    family, words = SLIPS[slip]
    code, text = check(str(EXAMPLES / f"wrong_cache_{slip}.py"))
    assert code == 1, text
    line = next(line for line in text.splitlines() if line.startswith(family + " "))
    assert " FAIL " in line and words in line, text


def test_the_report_validates_against_the_check_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    from qkvcli.render.schemas import report_schema

    for name in ("numpy_kv_cache.py", "wrong_cache_append_before_check.py"):
        _, text = check(str(EXAMPLES / name), "-f", "json")
        document = json.JSONDecoder().raw_decode(text)[0]  # stderr's verdict after it
        jsonschema.Draft202012Validator(report_schema("check")).validate(document)
        assert {entry["name"] for entry in document["checks"]} == {
            "cache-steps", "cache-refusals", "cache-errors", "cache-replay", "cache-purity"}
        assert {entry["operation"] for entry in document["checks"]} == {"kv-cache"}


def test_a_projections_check_still_loads_no_attention_engine() -> None:
    probe = ("import sys\nfrom qkvcli.check.run import run_checks\n"
             "from qkvcli.check.cases import chapter_case\n"
             "from qkvcli.check.engine import engine_implementation\n"
             "import qkvcli.check.kinds\n"
             "print(any(m.startswith('qkvcli.attention') for m in sys.modules))\n")
    found = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                           cwd=ROOT, check=False)
    assert found.stdout.strip() == "False", found.stderr


def test_a_bad_capacity_is_rejected_by_the_engine_in_one_line() -> None:
    from qkvcli.check.engine import cache_steps

    x, w = np.ones((1, 2, 4)), np.eye(4)
    with pytest.raises(ValueError, match="capacity and step must be at least 1"):
        cache_steps(x, w, w, w, w, 2, 100.0, 0, 1)


def test_a_cache_that_softmaxes_an_overflowed_score_fails_the_refusals(tmp_path: Path) -> None:
    source = (EXAMPLES / "numpy_kv_cache.py").read_text(encoding="utf-8")
    guard = "if not np.all(np.isfinite(scores)):"
    assert guard in source
    careless = tmp_path / "careless_cache.py"
    careless.write_text(source.replace(guard, "if False:"), encoding="utf-8")
    code, text = check(str(careless))
    assert code == 1, text
    line = next(line for line in text.splitlines() if line.startswith("cache-refusals "))
    assert " FAIL " in line and "a non-finite logit" in line, text
    assert "cache-steps     PASS" in text  # finite inputs: every step still right


def test_a_cache_steps_that_raises_fails_cache_steps_with_what_it_said(tmp_path: Path) -> None:
    unwritten = tmp_path / "unwritten_cache.py"
    unwritten.write_text("def cache_steps(*args):\n    raise RuntimeError('not written yet')\n",
                         encoding="utf-8")
    code, text = check(str(unwritten), "--format", "text")
    assert code == 1, text  # a failing check, not exit 70
    line = next(line for line in text.splitlines() if line.startswith("cache-steps "))
    assert " FAIL " in line and "RuntimeError: not written yet" in line, text
    assert "verdict: FAIL" in text


def test_a_cache_that_accepts_a_bad_request_fails_its_errors(tmp_path: Path) -> None:
    lax = tmp_path / "lax_cache.py"
    lax.write_text(
        "import importlib.util\nimport numpy as np\n"
        f"spec = importlib.util.spec_from_file_location('cache', {str(EXAMPLES / 'numpy_kv_cache.py')!r})\n"
        "cache = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(cache)\n"
        "def cache_steps(x, *args):\n"
        "    try:\n        return cache.cache_steps(x, *args)\n"
        "    except (ValueError, ZeroDivisionError):  # the slip: a bad request answered\n"
        "        return np.zeros(x.shape), np.zeros((1, 1, 0, 1)), np.zeros((1, 1, 0, 1)), "
        "np.zeros(1)\n", encoding="utf-8")
    code, text = check(str(lax))
    assert code == 1, text
    line = next(line for line in text.splitlines() if line.startswith("cache-errors "))
    assert " FAIL " in line and "silently accepted" in line, text


@pytest.mark.parametrize("heads", [0, 3])
def test_a_head_count_that_does_not_divide_is_the_engines_typed_refusal(heads: int) -> None:
    from qkvcli.attention.errors import HeadCountMismatch
    from qkvcli.check.engine import cache_steps

    x, w = np.ones((1, 2, 4)), np.eye(4)
    with pytest.raises(HeadCountMismatch, match=f"got {heads}"):
        cache_steps(x, w, w, w, w, heads, 100.0, 2, 1)


PROGRAM = '''
import importlib.util, json, sys
import numpy as np
spec = importlib.util.spec_from_file_location("cache", sys.argv[1])
cache = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cache)
NAMES = ("input", "w_query", "w_key", "w_value", "w_output")
for line in sys.stdin:
    message = json.loads(line)
    ident, op = message["id"], message["op"]
    if op == "hello":
        reply = {"id": ident, "version": 1, "ops": ["cache_steps"]}
    elif op == "bye":
        print(json.dumps({"id": ident}), flush=True)
        break
    else:
        try:
            arrays = [np.array(message[k]["values"], dtype=float).reshape(message[k]["shape"])
                      for k in NAMES]
            found = cache.cache_steps(*arrays, message["heads"], message["base"],
                                      message["capacity"], message["step"])
            reply = {"id": ident, **{name: {"shape": list(a.shape), "values": a.ravel().tolist()}
                     for name, a in zip(("output", "keys", "values", "lengths"), found)}}
        except (ValueError, ZeroDivisionError) as error:
            reply = {"id": ident, "error": str(error)}
    print(json.dumps(reply), flush=True)
'''


@pytest.mark.parametrize(("example", "verdict"), [("numpy_kv_cache.py", 0),
                                                  ("wrong_cache_rope_at_zero.py", 1)])
def test_a_command_program_offering_cache_steps_is_judged_alike(tmp_path: Path, example: str,
                                                                verdict: int) -> None:
    program = tmp_path / "cache_program.py"
    program.write_text(PROGRAM, encoding="utf-8")
    command = f"{sys.executable} {program} {EXAMPLES / example}"
    code, text = check("--command", command)
    _, direct = check(str(EXAMPLES / example))
    assert code == verdict, text
    # the fixtures and the four families that judge values read as in process; purity
    # is not applicable to a program, and the protocol family is a program's alone
    assert text.splitlines()[1:6] == direct.splitlines()[1:6], text
    assert "protocol        PASS" in text, text
    if verdict:
        assert "RoPE at position 0, not at the cache's length" in text, text
