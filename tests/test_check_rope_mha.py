"""RoPE (chapter 29) and multi-head attention (chapter 30) under ``qkv check``: the correct
NumPy example and qkv's engine pass, each wrong example fails the family its slip belongs
to with the slip named, as a Python module and as a ``--command`` program."""

from __future__ import annotations

import functools
import json
import shlex
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from qkvcli.check.cases import mha_cases, rope_cases
from qkvcli.check.engine import engine_implementation
from qkvcli.check.reference import engine_mha, engine_rope
from qkvcli.check.result import MHA_FAMILIES, ROPE_FAMILIES
from qkvcli.check.run import run_checks
from qkvcli.cli import main
from qkvcli.protocol.python import PythonImplementation, load_python
from qkvcli.render.check import SLIP_WORDS, family_detail

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "implementations"
PROGRAM = ROOT / "tests" / "programs" / "rope_mha_command.py"


def checks_of(implementation: Any) -> dict[str, Any]:
    return {check.name: check for check in run_checks(implementation, [], 1e-9).checks}


def test_qkvs_engine_and_the_numpy_example_pass_every_rope_and_multi_head_family() -> None:
    for implementation in (engine_implementation(), load_python(str(EXAMPLES /
                                                                    "numpy_rope_mha.py"))):
        result = run_checks(implementation, [], 1e-9)
        names = [check.name for check in result.checks]
        assert {*ROPE_FAMILIES, *MHA_FAMILIES} <= set(names)
        assert result.passed, [family_detail(c) for c in result.checks if not c.passed]


def test_the_engine_s_rope_is_the_chapter_s() -> None:
    """The chapter's anchor: [1,0,1,0] at positions 0..2, base 100, adjacent pairs."""
    x = np.tile([1.0, 0.0, 1.0, 0.0], (1, 3, 1))
    turned = engine_rope(x, 100.0, 0)
    expected = [1, 0, 1, 0, 0.540302, 0.841471, 0.995004, 0.099833,
                -0.416147, 0.909297, 0.980067, 0.198669]
    np.testing.assert_allclose(turned.reshape(-1), expected, atol=5e-7)
    np.testing.assert_allclose(engine_rope(turned, 100.0, 0, reverse=True), x, atol=1e-15)


def test_a_bare_reshape_split_is_the_engine_on_permuted_projections() -> None:
    """The split slip's variant against the slip written out directly."""
    from qkvcli.attention.maths import softmax

    case = next(c for c in mha_cases() if c.input.shape == (2, 4, 6))
    x, (wq, wk, wv, wo), heads = case.input, case.weights, case.heads
    split = [(x @ w).reshape(2, heads, 4, 2) for w in (wq, wk, wv)]
    scores = split[0] @ np.swapaxes(split[1], -1, -2) / 2 ** 0.5
    weights = softmax(scores)
    merged = (weights @ split[2]).reshape(2, 4, 6)
    variant = engine_mha(x, case.weights, heads, False, False, 100.0, 0, "split-no-transpose")
    np.testing.assert_allclose(variant[0], weights, atol=1e-12)
    np.testing.assert_allclose(variant[1], merged, atol=1e-12)
    np.testing.assert_allclose(variant[2], merged @ wo, atol=1e-12)


WRONG = [
    ("wrong_rope_half_split.py", "rope", SLIP_WORDS["half-split"]),
    ("wrong_rope_from_one.py", "rope", SLIP_WORDS["from-one"]),
    ("wrong_rope_not_inverted.py", "rope-reverse", SLIP_WORDS["not-inverted"]),
    ("wrong_mha_split_no_transpose.py", "multi-head", SLIP_WORDS["split-no-transpose"]),
    ("wrong_mha_split_no_transpose.py", "head-isolation", "changing W_Q[:,0:2] changed weights"),
    ("wrong_mha_merge_no_transpose.py", "multi-head", SLIP_WORDS["merge-no-transpose"]),
    ("wrong_mha_wo_before_merge.py", "multi-head", SLIP_WORDS["wo-before-merge"]),
    ("wrong_rope_half_split.py", "multi-head", SLIP_WORDS["rope-half-split"]),
]


@functools.cache
def _checked_example(example: str) -> dict[str, Any]:
    """Every family's check of one example, run once however many rows ask about it."""
    from qkvcli.protocol.runner import start_python

    with start_python(str(EXAMPLES / example), 30.0) as child:  # each sets the module's BUG
        return {check.name: check for check in run_checks(child, [], 1e-9).checks}


@pytest.mark.parametrize(("example", "family", "named"), WRONG,
                         ids=[f"{row[0][6:-3]}-{row[1]}" for row in WRONG])
def test_each_wrong_example_fails_its_family_naming_the_slip(example: str, family: str,
                                                             named: str) -> None:
    checks = _checked_example(example)
    assert checks[family].outcome == "failed"
    assert named in family_detail(checks[family])


def test_rope_errors_lists_what_was_accepted_and_rope_purity_fails() -> None:
    def rope(x: Any, base: float, offset: int) -> Any:
        if x.shape[-1] % 2:
            raise ValueError("odd")
        return engine_rope(x, base, offset) if base > 0 and offset >= 0 and x.shape[-1] else x

    def scaling(x: Any, base: float, offset: int) -> Any:
        out = rope(x, base, offset)
        x[...] = 0.0  # in place: the argument is not the implementation's to change
        return out

    accepted = checks_of(PythonImplementation("r", None, rope=rope))["rope-errors"]
    assert family_detail(accepted).startswith(
        "rope requests: silently accepted: no width, base 0, base -10, offset -1")
    impure = checks_of(PythonImplementation("r", None, rope=scaling))["rope-purity"]
    assert impure.outcome == "failed"
    assert "rope changed its argument x[0,0,0]" in family_detail(impure)


def test_a_rope_alone_is_checked_and_its_reverse_is_not_applicable_without_it() -> None:
    checks = checks_of(PythonImplementation("r", None, rope=lambda x, b, o: engine_rope(x, b, o)
                                            if x.shape[-1] and x.shape[-1] % 2 == 0 and b > 0
                                            and o >= 0 else 1 / 0))
    assert list(checks) == list(ROPE_FAMILIES)
    assert family_detail(checks["rope-reverse"]) == "not applicable: no backward"
    assert checks["rope"].passed and not checks["rope-reverse"].passed


def test_the_fixture_labels_name_every_rope_and_multi_head_fixture() -> None:
    assert [case.label for case in rope_cases()][:3] == [
        "rope[1,3,4,base=100,offset=0]", "rope[2,5,6,base=10000,offset=0]",
        "rope[2,5,6,base=100,offset=3]"]
    assert mha_cases()[2].label == "mha[2,4,6/3,base=10000,offset=2]"


@pytest.mark.parametrize(("slip", "family", "named"), [
    ("", None, None),
    ("half-split", "rope", SLIP_WORDS["half-split"]),
    ("split-no-transpose", "multi-head", SLIP_WORDS["split-no-transpose"]),
    ("wo-before-merge", "multi-head", SLIP_WORDS["wo-before-merge"]),
], ids=["correct", "half-split", "split-no-transpose", "wo-before-merge"])
def test_a_command_program_is_judged_as_a_module_is(slip: str, family: str | None,
                                                    named: str | None) -> None:
    program = f"{shlex.quote(sys.executable)} {shlex.quote(str(PROGRAM))} {slip}".strip()
    result = CliRunner().invoke(main, ["check", "--command", program, "-f", "json"])
    document = json.loads(result.stdout)
    checks = {check["name"]: check for check in document["checks"]}
    assert checks["protocol"]["passed"], checks["protocol"]
    assert {*ROPE_FAMILIES, *MHA_FAMILIES} <= set(checks)
    if family is None:
        assert result.exit_code == 0, result.output
        return
    assert result.exit_code == 1
    assert not checks[family]["passed"] and named in checks[family]["detail"]


def test_an_implementation_that_rejects_every_valid_input_is_not_said_to_reject_bad_ones() -> None:
    def refuses(*args: Any) -> Any:
        raise NotImplementedError("not yet")

    checks = checks_of(PythonImplementation("r", None, rope=refuses, mha_forward=refuses))
    for family, operation in (("rope-errors", "rope"), ("multi-head-errors", "mha_forward")):
        assert checks[family].outcome == "not-run"
        assert family_detail(checks[family]) == (
            f"not run: its {operation} failed (see {family.removesuffix('-errors')})")


def test_a_head_that_rejects_every_valid_input_skips_head_errors() -> None:
    from qkvcli.check.cases import chapter_case

    def refuses(*args: Any) -> Any:
        raise NotImplementedError("not yet")

    result = run_checks(PythonImplementation("h", None, None, refuses), [chapter_case()], 1e-9)
    errors = next(check for check in result.checks if check.name == "head-errors")
    assert errors.outcome == "not-run"
    assert family_detail(errors) == "not run: its head_forward failed (see head-forward)"
