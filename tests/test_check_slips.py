"""A learner's head slips, one wrong head each (tests/programs/slip_head.py): each fails the
family its slip belongs to, with a detail that names the slip, as a Python module and as a
``--command`` program; the contrast fixture is what tells them apart."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from qkvcli.check.cases import Case, chapter_case, contrast_case, precision_case, random_cases
from qkvcli.check.reference import FORWARD_BUGS, variant_forward
from qkvcli.check.run import run_checks
from qkvcli.cli import main
from qkvcli.protocol.python import PythonImplementation
from qkvcli.render.check import SLIP_WORDS, family_detail

PROGRAMS = Path(__file__).resolve().parent / "programs"
sys.path.insert(0, str(PROGRAMS))
from slip_head import SLIPS, head  # noqa: E402


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    chapter = chapter_case()
    return [chapter, precision_case(chapter.step, chapter.tolerance),
            contrast_case(chapter.step, chapter.tolerance),
            *random_cases(4, 26, chapter.step, chapter.tolerance)]


NAMED = {
    "query-axis": ("softmax", SLIP_WORDS["query-axis"]),
    "global-max": ("softmax", SLIP_WORDS["global-max"]),
    "transposed-scores": ("scaling", SLIP_WORDS["transposed-scores"]),
    "float32": ("head-forward", "every value is a float32: float32 arithmetic"),
    "sqrt-d_model": ("scaling", "scores are divided by sqrt(d_model) instead of sqrt(d_k)"),
    "hides-earlier": ("mask", "the mask hides earlier positions (weights["),
    "hides-diagonal": ("mask", "the mask hides the diagonal (weights["),
    "leaks-future": ("mask", "leaks future positions (weights["),
    "after-softmax": ("mask", "masks after the softmax (exactly the later keys get 0, but row"),
    "backward-ignores-mask": ("head-reverse", SLIP_WORDS["ignores-mask"]),
    "dw-one-item": ("head-reverse", SLIP_WORDS["last-item"]),
    "rowsum-axis": ("head-reverse", SLIP_WORDS["rowsum-axis"]),
    "elementwise": ("head-reverse", SLIP_WORDS["elementwise"]),
}
"""Each slip of slip_head.py: the family it fails, and words its detail holds."""


def test_every_slip_of_the_wrong_heads_is_in_the_table() -> None:
    assert set(NAMED) == set(SLIPS)


def test_the_wrong_heads_own_correct_head_passes(cases: list[Case]) -> None:
    result = run_checks(PythonImplementation("correct", None, None, *head("")), cases, 1e-9)
    assert result.passed, [family_detail(c) for c in result.checks if not c.passed]


@pytest.mark.parametrize("slip", sorted(NAMED))
def test_each_slip_fails_its_family_naming_it(cases: list[Case], slip: str) -> None:
    family, words = NAMED[slip]
    result = run_checks(PythonImplementation(slip, None, None, *head(slip)), cases, 1e-9)
    checks = {check.name: check for check in result.checks}
    assert checks[family].outcome == "failed", family_detail(checks[family])
    assert words in family_detail(checks[family])
    assert not result.passed


def test_a_slip_the_fixture_cannot_tell_apart_is_said_as_either(cases: list[Case]) -> None:
    """precision[1,3,4->2] has sqrt(d_model) = d_k = 2: dividing by either is the same."""
    result = run_checks(PythonImplementation("s", None, None, *head("sqrt-d_model")),
                        cases[1:2], 1e-9)
    scaling = next(c for c in result.checks if c.name == "scaling")
    assert family_detail(scaling) == (
        "precision[1,3,4->2] non-causal: on this fixture, either scores are divided by d_k "
        "instead of sqrt(d_k); or scores are divided by sqrt(d_model) instead of sqrt(d_k) "
        "(the same numbers here)")


def test_the_contrast_fixture_tells_every_forward_slip_apart() -> None:
    """No two known forward slips give the same results on it (in either mode), and the
    whole-tensor maximum is finite there but wrong: the probe names it without a NaN."""
    from qkvcli.check.diagnose import largest_error
    from qkvcli.core.arrays import close

    case = contrast_case(1e-6, 1e-6)
    for causal in (False, True):
        right = variant_forward(case.input, case.weights, causal)
        found = {bug: variant_forward(case.input, case.weights, causal, bug)
                 for bug in FORWARD_BUGS}
        differ = {bug: results for bug, results in found.items()
                  if not all(close(r, g, 1e-9) for r, g in zip(right, results, strict=True))}
        for first in differ:
            for second in differ:
                if first < second:
                    assert not all(close(a, b, 1e-9) for a, b in zip(
                        differ[first], differ[second], strict=True)), (first, second, causal)
    widths = (np.sqrt(5), 3.0, np.sqrt(3))
    assert len({round(float(w), 6) for w in widths}) == 3
    shifted = variant_forward(case.input, case.weights, False, "global-max")[1]
    assert np.isfinite(shifted).all()
    assert 1e-6 < largest_error(shifted, variant_forward(case.input, case.weights, False)[1]) < 0.1
    scores = variant_forward(case.input, case.weights, False)[0]
    assert float(np.max(np.abs(scores))) < 700  # exp of no score overflows: unstable passes it
    assert not np.allclose(scores[0], np.swapaxes(scores[0], -1, -2))  # not symmetric
    assert not np.allclose(case.input[0], case.input[1])


PROGRAM_SLIPS = ["global-max", "transposed-scores", "hides-diagonal", "backward-ignores-mask",
                 "dw-one-item", "elementwise"]


@pytest.mark.parametrize("slip", PROGRAM_SLIPS)
def test_a_command_program_with_a_slip_is_named_as_a_module_is(slip: str) -> None:
    family, words = NAMED[slip]
    program = f"{shlex.quote(sys.executable)} {shlex.quote(str(PROGRAMS / 'slip_head.py'))} {slip}"
    result = CliRunner().invoke(main, ["check", "--command", program, "--random", "1",
                                       "-f", "json"])
    assert result.exit_code == 1, result.output
    checks = {check["name"]: check for check in json.loads(result.stdout)["checks"]}
    assert checks["protocol"]["passed"]
    assert not checks[family]["passed"] and words in checks[family]["detail"]


EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "implementations"
WRONG_EXAMPLES = [
    ("wrong_head_query_axis.py", "softmax", SLIP_WORDS["query-axis"]),
    ("wrong_head_global_max.py", "softmax", SLIP_WORDS["global-max"]),
    ("wrong_head_ignores_mask.py", "head-reverse", SLIP_WORDS["ignores-mask"]),
    ("wrong_head_first_item.py", "head-reverse", SLIP_WORDS["first-item"]),
]


@pytest.mark.parametrize(("example", "family", "named"), WRONG_EXAMPLES,
                         ids=[row[0][len("wrong_head_"):-3] for row in WRONG_EXAMPLES])
def test_each_wrong_head_example_fails_its_family_naming_the_slip(
    cases: list[Case], example: str, family: str, named: str,
) -> None:
    from qkvcli.protocol.runner import start_python

    with start_python(str(EXAMPLES / example), 30.0) as child:  # each sets numpy_head.BUG
        result = run_checks(child, cases, 1e-9)
    checks = {check.name: check for check in result.checks}
    assert checks[family].outcome == "failed"
    assert named in family_detail(checks[family])


def test_a_slip_is_named_only_where_it_fits_every_wrong_fixture(cases: list[Case]) -> None:
    """A softmax without keepdims divides row j's sum into column j: on the chapter's
    symmetric scores that is the softmax over the query axis, on no other fixture; it
    fails with its numbers, and the rows that do not sum to 1, not with a wrong name."""
    def head_forward(x: np.ndarray, wq: np.ndarray, wk: np.ndarray, wv: np.ndarray,
                     causal: bool) -> tuple[np.ndarray, ...]:
        scores, _, _ = head("")[0](x, wq, wk, wv, False)
        z = np.where(np.triu(np.ones(scores.shape[-2:], dtype=bool), k=1), -np.inf,
                     scores) if causal else scores
        e = np.exp(z - np.max(z, axis=-1))  # no keepdims: batch 1 only
        weights = e / np.sum(e, axis=-1)
        return scores, weights, weights @ (x @ wv)

    one_item = [case for case in cases if case.shape[0] == 1]
    result = run_checks(PythonImplementation("k", None, None, head_forward), one_item, 1e-9)
    details = [family_detail(check) for check in result.checks]
    assert not any(SLIP_WORDS["query-axis"] in detail for detail in details), details
    softmax = next(check for check in result.checks if check.name == "softmax")
    assert family_detail(softmax).startswith("chapter causal: rows of weights sum to ")


def test_a_backward_of_a_wrong_forward_says_the_forward_is_wrong_too(cases: list[Case]) -> None:
    """A softmax over the query axis has a right backward of its own (head-gradcheck's to
    judge); head-reverse does not leave its numbers unexplained."""
    result = run_checks(PythonImplementation("q", None, None, *head("query-axis")), cases, 1e-9)
    reverse = next(check for check in result.checks if check.name == "head-reverse")
    assert family_detail(reverse).endswith(
        "(its head_forward is wrong on this fixture too, see head-forward: head-gradcheck judges "
        "the backward against it) (and 4 more fixtures)")
