"""A family that could not judge a fixture says so and cannot pass.

Each implementation below answers with a tensor of the wrong shape where a claim reads
it. The kind's forward family fails (it says how the shape is wrong); the claim's own
family must not say PASS "on N fixtures" about fixtures it skipped: it is not run,
naming why.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qkvcli.check import engine
from qkvcli.check.cases import Case, chapter_case, random_cases
from qkvcli.check.result import CheckResult
from qkvcli.check.run import run_checks
from qkvcli.protocol.python import PythonImplementation
from qkvcli.render.check import NOT_RUN_WHY, family_detail


def _cases() -> list[Case]:
    chapter = chapter_case()
    return [chapter, *random_cases(2, 26, chapter.step, chapter.tolerance)]


def _checks(result: CheckResult) -> dict[str, Any]:
    return {check.name: check for check in result.checks}


def _not_judged(result: CheckResult, family: str, why: str) -> None:
    check = _checks(result)[family]
    assert check.outcome == "not-run", (family, check.outcome, family_detail(check))
    assert not check.passed
    assert check.first is not None and check.first.not_run == why
    assert NOT_RUN_WHY[why] in family_detail(check)


def test_rope_of_the_wrong_shape_judges_no_position_zero_nor_relative_dot() -> None:
    def rope(x: Any, base: float, offset: int) -> Any:
        return engine.rope(x, base, offset)[:, :, :-2]  # a pair lost

    result = run_checks(PythonImplementation("r", None, rope=rope), [], 1e-9)
    assert _checks(result)["rope"].outcome == "failed"
    _not_judged(result, "position-zero", "rope-shape")
    _not_judged(result, "relative-dot", "rope-shape")
    assert not result.passed


def test_multi_head_weights_of_the_wrong_shape_judge_no_isolation_nor_prefix() -> None:
    def mha_forward(*args: Any) -> Any:
        weights, merged, output = engine.mha_forward(*args)
        return weights[:, :1], merged[..., :1], output[:, :1]  # one head, one column, one token

    result = run_checks(PythonImplementation("m", None, mha_forward=mha_forward), [], 1e-9)
    assert _checks(result)["multi-head"].outcome == "failed"
    _not_judged(result, "head-isolation", "multi-head-shape")
    _not_judged(result, "multi-head-prefix", "multi-head-shape")


def test_a_head_whose_one_token_answer_is_empty_judges_no_single_token() -> None:
    def head_forward(x: Any, w_query: Any, w_key: Any, w_value: Any, causal: bool) -> Any:
        scores, weights, output = engine.head_forward(x, w_query, w_key, w_value, causal)
        if x.shape[1] == 1:
            return scores, np.zeros((x.shape[0], 0, 0)), output
        return scores, weights, output

    result = run_checks(PythonImplementation("h", None, None, head_forward), _cases(), 1e-9)
    _not_judged(result, "head-single-token", "head-shape")


def test_a_claim_with_no_fixture_to_judge_is_not_run() -> None:
    """One-token fixtures: the prefix claim needs two tokens and judges none."""
    one_token = [case._replace(input=case.input[:, :1]) for case in _cases()]
    result = run_checks(engine.engine_implementation(), one_token, 1e-9)
    _not_judged(result, "head-prefix", "no-fixture")
    assert _checks(result)["head-forward"].outcome == "passed"


def test_the_engine_itself_is_judged_on_every_fixture() -> None:
    """The rule skips nothing a right implementation answers: every claim passes."""
    result = run_checks(engine.engine_implementation(), _cases(), 1e-9)
    checks = _checks(result)
    for family in ("position-zero", "relative-dot", "head-isolation", "multi-head-prefix",
                   "head-single-token", "head-prefix"):
        assert checks[family].outcome == "passed", family
        assert checks[family].fixtures > 0
