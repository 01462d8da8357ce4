"""The check library (qkv check): every evidence family passing for a correct implementation and
failing, for the reason it names, for a wrong one."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from qkvcli.check.cases import SPECIAL_SHAPES, Case, chapter_case, random_cases
from qkvcli.check.engine import engine_implementation
from qkvcli.check.result import HEAD_FAMILIES as ALL_HEAD_FAMILIES
from qkvcli.check.result import PROJECTION_FAMILIES, CheckResult
from qkvcli.check.run import run_checks
from qkvcli.core.results import Clause
from qkvcli.protocol.errors import (
    ImplementationImportFailed,
    ImplementationNotFound,
    MissingForward,
)
from qkvcli.protocol.python import PythonImplementation, load_python
from qkvcli.render.check import failure_detail, family_detail
from tests.tolerant import text_differences

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "implementations"
sys.path.insert(0, str(EXAMPLES))
import numpy_qkv  # noqa: E402


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    chapter = chapter_case()
    return [chapter, *random_cases(4, 26, chapter.step, chapter.tolerance)]


def check_example(name: str, cases: list[Case]) -> CheckResult:
    """The example checked in this process. A wrong_*.py example switches on its base's
    ``BUG`` in the module every example here shares (``numpy_qkv``, ``numpy_head``), so the
    bases are made correct again after it, as a process of its own would find them."""
    try:
        return run_checks(load_python(str(EXAMPLES / name)), cases, 1e-9)
    finally:
        for base in ("numpy_qkv", "numpy_head"):
            if base in sys.modules:
                sys.modules[base].BUG = ""


def check_functions(cases: list[Case], forward: Any, backward: Any = None) -> CheckResult:
    return run_checks(PythonImplementation("test", forward, backward), cases, 1e-9)


def by_name(result: CheckResult) -> dict[str, Any]:
    return {check.name: check for check in result.checks}


def test_the_correct_numpy_example_passes_every_family(cases: list[Case]) -> None:
    result = check_example("numpy_qkv.py", cases)
    assert [c.name for c in result.checks] == list(PROJECTION_FAMILIES)
    assert result.passed, result.checks
    assert result.failures == ()


def test_qkvs_own_engine_passes_every_family_it_is_judged_by(cases: list[Case]) -> None:
    # The judge's families run against qkv's engine as against any implementation: the
    # projections' and the head's, with the head's modes and probes, RoPE's and
    # multi-head attention's.
    from qkvcli.check.result import CACHE_FAMILIES, MHA_FAMILIES, ROPE_FAMILIES

    result = run_checks(engine_implementation(), cases, 1e-9)
    assert {c.name for c in result.checks} == {*PROJECTION_FAMILIES, *ALL_HEAD_FAMILIES,
                                               *ROPE_FAMILIES, *MHA_FAMILIES, *CACHE_FAMILIES}
    assert all(c.outcome == "passed" for c in result.checks), [
        (c.name, c.outcome, c.first) for c in result.checks if c.outcome != "passed"]
    assert result.failures == ()


def test_each_family_every_kind_has_is_one_definition_run_on_a_kind() -> None:
    # Rule 12: every kind's shared families are the same functions; what differs between
    # the kinds is data (kinds.py).
    from qkvcli.check.kinds import HEAD, KINDS, MULTI_HEAD, PROJECTIONS, ROPE
    from qkvcli.check.run import plan

    shared = ["forward", "reverse", "shapes", "errors", "replay", "gradcheck", "purity"]
    plans = [dict(plan(kind)) for kind in KINDS]
    for kind, families in zip(KINDS, plans, strict=True):
        if not kind.backward:  # a KV cache: no reverse, no gradient check; replay and purity
            assert families[kind.family("purity")] == plans[0]["purity"]
            continue
        assert [families[kind.family(name)] for name in shared] == [
            plans[0][name] for name in shared], kind.prefix
    assert [PROJECTIONS.family(name) for name in shared] == shared
    assert [ROPE.family(name) for name in shared][:2] == ["rope", "rope-reverse"]
    assert [MULTI_HEAD.family(name) for name in shared][:2] == ["multi-head", "multi-head-reverse"]
    assert (PROJECTIONS.upstream_names, HEAD.upstream_names) == (
        ("grad_query", "grad_key", "grad_value"), ("grad_output",))


def test_the_correct_torch_example_passes(cases: list[Case]) -> None:
    """Run with a torch-enabled Python (e.g. /work/venv-torch) to exercise it; skipped otherwise."""
    pytest.importorskip("torch")
    import torch_qkv

    query, _, _ = torch_qkv.forward(np.ones((1, 2, 2)), *(np.ones((2, 2)) for _ in range(3)))
    assert query.requires_grad  # what qkv must detach for the user
    result = check_example("torch_qkv.py", cases)
    assert result.passed, result.checks
    assert result.failures == ()


@pytest.mark.parametrize(
    ("example", "family", "reason"),
    [
        ("wrong_no_value_path.py", "reverse", "grad_input misses the value path"),
        ("wrong_key_path_uses_query_weight.py", "reverse",
         "grad_input's key path uses W_Q instead of W_K"),
        ("wrong_key_uses_query_weight.py", "forward", "key equals X W_Q"),
        ("wrong_float32.py", "forward", "float32 arithmetic"),
        ("wrong_modifies_input.py", "purity", "forward changed its argument x[0,0,0]"),
        ("wrong_accepts_rank2.py", "errors", "silently accepted: rank-2 input"),
    ],
    ids=["no-value-path", "dx-key-path-with-query-weight", "key-with-query-weight", "float32",
         "modifies-input", "rank-2"],
)
def test_each_wrong_example_is_caught_by_its_family(
    cases: list[Case], example: str, family: str, reason: str
) -> None:
    result = check_example(example, cases)
    check = by_name(result)[family]
    assert not check.passed
    assert reason in family_detail(check)
    assert any(f.family == family and f.fixture is not None for f in result.failures)
    assert not result.passed


def test_float32_passes_the_integer_chapter_fixture_but_not_random_ones(cases: list[Case]) -> None:
    result = check_example("wrong_float32.py", cases)
    assert {f.fixture for f in result.failures if f.family == "forward"} >= {
        "random-1[2,3,5->3]"}
    assert "chapter" not in {f.fixture for f in result.failures if f.family == "forward"}


def test_forward_names_the_first_failing_coordinate_and_both_values(cases: list[Case]) -> None:
    result = check_example("wrong_key_uses_query_weight.py", cases[:1])
    failure = next(f for f in result.failures if f.family == "forward")
    assert failure.coordinate == "key[0,0,0]"
    # The finding is data: the first mismatch and the diagnosis, each a code and facts.
    assert (failure.code, failure.detail) == ("forward-differs", "")
    assert failure.facts == (
        Clause("value-differs", ("key", "[0,0,0]", 0.0, 3.0, 1.0, 1e-9)),
        Clause("computed-with", ("key", "query")))
    assert failure_detail(failure) == (
        "key[0,0,0] = 0.0, expected 3.0 (scaled error 1 > 1e-09); key equals X W_Q: "
        "computed with the query weight")


def test_without_backward_the_reverse_families_are_not_applicable_and_fail(
    cases: list[Case],
) -> None:
    result = check_functions(cases, numpy_qkv.forward)
    checks = by_name(result)
    for family in ("reverse", "gradcheck"):
        assert family_detail(checks[family]) == "not applicable: no backward"
        assert not checks[family].passed
    assert checks["forward"].passed and checks["purity"].passed
    assert not result.passed


def test_shapes_fail_when_an_empty_batch_is_dropped(cases: list[Case]) -> None:
    def forward(x: Any, wq: Any, wk: Any, wv: Any) -> Any:
        if x.shape[0] == 0:
            x = x.reshape(-1, x.shape[-1])
        return numpy_qkv.forward(x, wq, wk, wv) if x.ndim == 3 else (x @ wq, x @ wk, x @ wv)

    check = by_name(check_functions(cases, forward, numpy_qkv.backward))["shapes"]
    assert not check.passed
    assert "empty batch [0,2,3]: query has shape [0,2], expected [0,2,2]" in family_detail(check)


def test_independence_fails_when_a_weight_gradient_sums_all_paths(cases: list[Case]) -> None:
    def backward(x: Any, wq: Any, wk: Any, wv: Any, gq: Any, gk: Any, gv: Any) -> Any:
        grads = numpy_qkv.backward(x, wq, wk, wv, gq, gk, gv)
        rows = x.reshape(-1, x.shape[-1])
        total = rows.T @ (gq + gk + gv).reshape(rows.shape[0], gq.shape[-1])
        return grads[0], total, grads[2], grads[3]

    result = check_functions(cases, numpy_qkv.forward, backward)
    checks = by_name(result)
    assert "changing dL/dK changed grad_w_query" in family_detail(checks["independence"])
    assert "grad_w_query sums all three paths" in family_detail(checks["reverse"])


LETTERS = "QKV"
CROSS_PAIRS = [(own, other) for own in range(3) for other in range(3) if own != other]


@pytest.mark.parametrize(("own", "other"), CROSS_PAIRS,
                         ids=[f"{LETTERS[o]}-uses-W_{LETTERS[w]}" for o, w in CROSS_PAIRS])
def test_independence_catches_every_output_computed_with_another_weight(
    cases: list[Case], own: int, other: int,
) -> None:
    def forward(x: Any, *weights: Any) -> Any:
        outputs = list(numpy_qkv.forward(x, *weights))
        outputs[own] = x @ weights[other]
        return tuple(outputs)

    check = by_name(check_functions(cases, forward, numpy_qkv.backward))["independence"]
    assert not check.passed
    names = ("query", "key", "value")
    # The weights are changed in order Q, K, V: the borrowed one first moves the wrong
    # output, or the output's own one first fails to move it.
    expected = (f"chapter: changing W_{LETTERS[other]}[0,0] changed {names[own]}[" if other < own
                else f"chapter: changing W_{LETTERS[own]}[0,0] left {names[own]} unchanged")
    assert family_detail(check).startswith(expected), family_detail(check)


@pytest.mark.parametrize(("own", "other"), CROSS_PAIRS,
                         ids=[f"dW_{LETTERS[o]}-uses-d{LETTERS[u]}" for o, u in CROSS_PAIRS])
def test_independence_catches_every_weight_gradient_with_another_upstream(
    cases: list[Case], own: int, other: int,
) -> None:
    def backward(x: Any, wq: Any, wk: Any, wv: Any, *upstream: Any) -> Any:
        grads = list(numpy_qkv.backward(x, wq, wk, wv, *upstream))
        rows = x.reshape(-1, x.shape[-1])
        grads[own + 1] = rows.T @ upstream[other].reshape(rows.shape[0], -1)
        return tuple(grads)

    check = by_name(check_functions(cases, numpy_qkv.forward, backward))["independence"]
    names = ("query", "key", "value")
    assert not check.passed
    assert f"changing dL/d{LETTERS[other]} changed grad_w_{names[own]}[" in family_detail(check)


def test_errors_sends_bad_backward_requests_too(cases: list[Case]) -> None:
    def backward(x: Any, wq: Any, wk: Any, wv: Any, gq: Any, gk: Any, gv: Any) -> Any:
        rows = x.reshape(-1, x.shape[-1])  # validates nothing
        grads = [rows.T @ g.reshape(rows.shape[0], g.shape[-1]) for g in (gq, gk, gv)]
        return (gq @ wq.T + gk @ wk.T + gv @ wv.T, *grads)

    result = check_functions(cases, numpy_qkv.forward, backward)
    check = by_name(result)["errors"]
    assert not check.passed
    assert family_detail(check).startswith(
        "chapter: silently accepted: backward with a rank-2 input [2,3], backward with "
        "input width 4 != weight rows 3")
    assert by_name(result)["reverse"].passed


def test_replay_fails_for_a_stateful_implementation(cases: list[Case]) -> None:
    calls = SimpleNamespace(count=0)

    def forward(x: Any, wq: Any, wk: Any, wv: Any) -> Any:
        calls.count += 1
        q, k, v = numpy_qkv.forward(x, wq, wk, wv)
        return q + calls.count * 1e-300, k, v

    check = by_name(check_functions(cases, forward, numpy_qkv.backward))["replay"]
    assert not check.passed
    assert family_detail(check).startswith("chapter: second forward differs: query[0,0,0] was")


def test_replay_judges_the_forward_of_a_fixture_whose_backward_failed(cases: list[Case]) -> None:
    calls = SimpleNamespace(count=0)

    def forward(x: Any, wq: Any, wk: Any, wv: Any) -> Any:
        calls.count += 1
        q, k, v = numpy_qkv.forward(x, wq, wk, wv)
        return q + calls.count * 2.0**-40, k, v

    def backward(*args: Any) -> Any:
        raise NotImplementedError

    check = by_name(check_functions(cases[:1], forward, backward))["replay"]
    assert check.outcome == "failed"
    assert family_detail(check).startswith("chapter: second forward differs: query[0,0,0] was")


def test_head_replay_says_which_call_differs_and_where_as_replay_does(cases: list[Case]) -> None:
    import numpy_head

    calls = SimpleNamespace(count=0)

    def head_backward(*args: Any) -> Any:
        calls.count += 1
        grad_input, *grad_w = numpy_head.head_backward(*args)
        return (grad_input + calls.count * 2.0**-40, *grad_w)  # within tolerance, not bits

    result = run_checks(PythonImplementation("head", None, None, numpy_head.head_forward,
                                             head_backward), cases[:1], 1e-9)
    failure = next(f for f in result.failures if f.family == "head-replay")
    assert (failure.fixture, failure.coordinate, failure.code) == (
        "chapter", "grad_input[0,0,0]", "replay-differs")
    assert failure_detail(failure).startswith(
        "second head_backward differs: grad_input[0,0,0] was ")


def test_gradcheck_names_the_worst_coordinate(cases: list[Case]) -> None:
    check = by_name(check_example("wrong_no_value_path.py", cases[:1]))["gradcheck"]
    assert family_detail(check).startswith("chapter: worst grad_input[0,0,2]: analytic -0.5")


def test_a_forward_that_returns_garbage_fails_forward_not_errors(cases: list[Case]) -> None:
    result = check_functions(cases[:1], lambda x, wq, wk, wv: "nope")
    assert family_detail(by_name(result)["forward"]) == (
        "chapter: forward returned str, expected (query, key, value)")
    assert not by_name(result)["errors"].passed  # returning instead of raising accepts


@pytest.mark.parametrize(
    ("spec", "error", "message"),
    [
        ("missing_file.py", ImplementationNotFound, "implementation missing_file.py: no such file"),
        ("no_such_module_qkv", ImplementationNotFound,
         "implementation no_such_module_qkv: no such module"),
    ],
    ids=["file", "module"],
)
def test_loading_errors_name_the_implementation(spec: str, error: type, message: str) -> None:
    with pytest.raises(error) as raised:
        load_python(spec)
    assert str(raised.value) == message


def test_loading_a_file_without_forward_or_that_raises(tmp_path: Path) -> None:
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    with pytest.raises(MissingForward):
        load_python(str(empty))
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('no')\n")
    with pytest.raises(ImplementationImportFailed) as raised:
        load_python(str(broken))
    assert str(raised.value).endswith("cannot be imported: RuntimeError: no")


def test_a_module_name_loads() -> None:
    assert load_python("numpy_qkv").has_backward


def test_random_cases_are_seeded_and_start_with_the_special_shapes() -> None:
    first = random_cases(6, 7, 1e-6, 2e-6)
    again = random_cases(6, 7, 1e-6, 2e-6)
    assert [c.shape for c in first[:4]] == list(SPECIAL_SHAPES)
    shapes = [c.shape for c in first]
    assert any(d != h for _, _, d, h in shapes)
    assert any(b == 0 for b, _, _, _ in shapes) and any(t == 0 for _, t, _, _ in shapes)
    assert any(h == 1 for _, _, _, h in shapes)
    assert all(np.array_equal(a.input, b.input) for a, b in zip(first, again, strict=True))
    assert not np.array_equal(first[0].input, random_cases(1, 8, 1e-6, 2e-6)[0].input)


HEAD_FAMILIES = ["head-forward", "scaling", "softmax", "mask", "head-prefix",
                 "head-single-token", "head-reverse", "head-shapes", "head-errors", "head-replay",
                 "head-purity", "head-gradcheck"]


def test_the_correct_numpy_head_passes_the_projection_and_head_families(cases: list[Case]) -> None:
    result = check_example("numpy_head.py", cases)
    assert [c.name for c in result.checks] == [*PROJECTION_FAMILIES, *ALL_HEAD_FAMILIES]
    assert [c.name for c in result.checks][8:] == HEAD_FAMILIES
    assert result.passed, [family_detail(c) for c in result.checks if not c.passed]
    assert "large scores do not overflow" in family_detail(by_name(result)["softmax"])


WRONG_HEADS = [
    ("wrong_head_unscaled.py", "scaling", "scores are Q K^T: the 1/sqrt(d_k) scaling is missing"),
    ("wrong_head_unstable.py", "softmax",
     "overflow: the softmax does not subtract the row maximum before exp"),
    ("wrong_head_diagonal.py", "mask", "the causal mask hides the diagonal too"),
    ("wrong_head_after_softmax.py", "mask",
     "the mask is applied after the softmax: masked rows no longer sum to 1"),
    ("wrong_head_no_rowsum.py", "head-reverse",
     "the softmax backward lacks its row-sum term (dZ = A * dA)"),
    ("wrong_head_dv_uses_a.py", "head-reverse",
     "grad_value is computed with A instead of A^T (dV = A dO)"),
    ("wrong_head_dk_uses_ds.py", "head-reverse",
     "grad_key is computed with dS instead of dS^T (dK = dS Q)"),
]


@pytest.mark.parametrize(("example", "family", "named"), WRONG_HEADS,
                         ids=[row[0][len("wrong_head_"):-3] for row in WRONG_HEADS])
def test_each_wrong_head_fails_its_family_naming_the_bug(
    cases: list[Case], example: str, family: str, named: str,
) -> None:
    result = check_example(example, cases)
    checks = by_name(result)
    assert "forward" not in checks  # a head alone: the projection families are not listed
    assert not checks[family].passed and checks[family].outcome == "failed"
    assert named in family_detail(checks[family])
    assert not result.passed


def test_a_head_without_backward_fails_its_reverse_families_as_not_applicable(
    cases: list[Case],
) -> None:
    import numpy_head

    result = run_checks(PythonImplementation("head", None, None, numpy_head.head_forward),
                        cases, 1e-9)
    checks = by_name(result)
    for family in ("head-reverse", "head-gradcheck"):
        assert family_detail(checks[family]) == "not applicable: no backward"
    assert checks["head-forward"].passed and checks["mask"].passed
    assert not result.passed


@pytest.mark.parametrize("example", ["numpy_head.py", "wrong_float32.py", "wrong_head_dk_uses_ds.py"])
def test_the_child_process_reaches_the_same_judgements_as_an_in_process_call(
    cases: list[Case], example: str,
) -> None:
    """Float64 crosses the runner's pipe exactly: every judgement and failure is the same."""
    from qkvcli.protocol.runner import start_python

    inside = check_example(example, cases)
    with start_python(str(EXAMPLES / example), 30.0) as child:
        outside = run_checks(child, cases, 1e-9)
    assert outside.checks == inside.checks
    assert outside.failures == inside.failures


def test_purity_independence_and_replay_findings_are_codes_and_facts(cases: list[Case]) -> None:
    """The families hand over data; the words are render.check's."""
    from qkvcli.render.check import FINDING_WORDS, failure_detail

    impure = next(f for f in check_example("wrong_modifies_input.py", cases).failures
                  if f.family == "purity")
    assert impure.code == "changed-argument" and impure.detail == ""
    assert impure.facts[:2] == ("forward", "x[0,0,0]")
    assert failure_detail(impure) == FINDING_WORDS["changed-argument"].format(*impure.facts)

    def forward(x: Any, wq: Any, wk: Any, wv: Any) -> Any:
        return x @ wq, x @ wq, x @ wv  # K = X W_Q: moves with W_Q

    moved = next(f for f in check_functions(cases[:1], forward, numpy_qkv.backward).failures
                 if f.family == "independence")
    assert (moved.code, moved.facts[:2]) == ("moved", ("W_Q[0,0]", "key[0,0,0]"))
    assert failure_detail(moved).startswith("changing W_Q[0,0] changed key[0,0,0] from ")


def _head_hiding(hidden: Any) -> Any:
    """A head whose causal mask hides ``hidden(tokens)`` (True: hidden) with -inf."""
    from qkvcli.attention.maths import softmax

    def head_forward(x: Any, wq: Any, wk: Any, wv: Any, causal: bool) -> Any:
        numpy_qkv.validate(x, wq, wk, wv)
        q, k, v = x @ wq, x @ wk, x @ wv
        scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(wq.shape[1])
        z = np.where(hidden(x.shape[1]), -np.inf, scores) if causal else scores
        weights = softmax(z)
        return scores, weights, weights @ v

    return head_forward


SLIP_HIDES_PAST = ("the causal mask hides the earlier positions instead of the later ones: "
                   "each position sees itself and the future")


HIDES_EARLIER = "hides earlier positions (weights[0,1,0] = 0: query 1 cannot see key 0)"
LEAKS = "leaks future positions (weights[0,0,1] = {}: query 0 sees the later key 1)"


@pytest.mark.parametrize(
    ("hidden", "detail"),
    [
        (lambda t: np.tril(np.ones((t, t), dtype=bool), k=-1),
         f"{SLIP_HIDES_PAST}: the mask {HIDES_EARLIER}; {LEAKS.format(0.5259780687915117)}"),
        (lambda t: np.arange(t)[None, :] < np.arange(t)[:, None],  # j < i
         f"{SLIP_HIDES_PAST}: the mask {HIDES_EARLIER}; {LEAKS.format(0.5259780687915117)}"),
        (lambda t: np.triu(np.ones((t, t), dtype=bool), k=2),  # one later position seen
         "the causal mask leaks: it hides only the keys 2 or more positions ahead, so each "
         "query also sees its next key (a mask such as np.triu(..., k=2) where k=1 belongs): "
         f"the mask {LEAKS.format(0.6469902724418696)}"),
    ],
    ids=["tril", "keys-before", "one-later-seen"],
)
def test_a_mask_that_hides_the_wrong_positions_fails_the_mask_family(
    cases: list[Case], hidden: Any, detail: str,
) -> None:
    three_tokens = cases[1]  # random-1[2,3,5->3]
    result = run_checks(PythonImplementation("head", None, None, _head_hiding(hidden)),
                        [three_tokens], 1e-9)
    checks = by_name(result)
    assert checks["mask"].outcome == "failed"
    assert text_differences(family_detail(checks["mask"]),
                            f"{three_tokens.label} causal: {detail}") == []
    assert checks["head-forward"].outcome == "failed" and checks["scaling"].passed
    named = detail.startswith(SLIP_HIDES_PAST)  # head-forward names the slip it knows
    assert family_detail(checks["head-forward"]).startswith(
        f"{three_tokens.label} causal: {SLIP_HIDES_PAST}: weights[") is named


def _written_as(kind: str) -> Any:
    """numpy_head's functions computing in float32, or writing 6 decimals."""
    import importlib.util

    # A copy of its own: the wrong_head_*.py examples set the shared module's BUG.
    spec = importlib.util.spec_from_file_location("correct_head", EXAMPLES / "numpy_head.py")
    assert spec is not None and spec.loader is not None
    numpy_head = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(numpy_head)

    def inputs(*arrays: Any) -> list[Any]:
        return [a.astype(np.float32) if kind == "float32" else a for a in arrays]

    def results(values: Any) -> Any:
        if kind == "float32":
            return values
        return tuple(np.vectorize(lambda v: float(f"{v:.6f}"))(v) for v in values)

    def head_forward(x: Any, wq: Any, wk: Any, wv: Any, causal: bool) -> Any:
        return results(numpy_head.head_forward(*inputs(x, wq, wk, wv), causal))

    def head_backward(x: Any, wq: Any, wk: Any, wv: Any, causal: bool, grad_output: Any) -> Any:
        return results(numpy_head.head_backward(*inputs(x, wq, wk, wv), causal,
                                                *inputs(grad_output)))

    return head_forward, head_backward


@pytest.mark.parametrize(
    ("kind", "forward", "reverse"),
    [
        ("float32",
         "chapter non-causal: scores[0,0,1] = 4.242640972137451, expected 4.242640687119285 "
         "(scaled error 6.72e-08 > 1e-09); scores, weights and output agree only to 7.5e-08 "
         "and every value is a float32: float32 arithmetic",
         "grad_input, grad_w_query, grad_w_key and grad_w_value agree only to 6.7e-07 and "
         "every value is a float32: float32 arithmetic: grad_input[0,0,0] = "),
        ("decimals",
         "chapter non-causal: scores[0,0,1] = 4.242641, expected 4.242640687119285 (scaled "
         "error 7.37e-08 > 1e-09); scores, weights and output are written with 6 decimal "
         "places (largest scaled error 4e-07): write each float's shortest round-trip "
         "spelling",
         "are written with 6 decimal places"),
    ],
    ids=["float32", "decimals"],
)
def test_a_head_right_but_for_its_precision_is_said_so_before_any_slip(
    cases: list[Case], kind: str, forward: str, reverse: str,
) -> None:
    result = run_checks(PythonImplementation("head", None, None, *_written_as(kind)), cases[:1],
                        1e-9)
    checks = by_name(result)
    assert family_detail(checks["head-forward"]) == forward
    assert reverse in family_detail(checks["head-reverse"])
    precision = ("not run: its head_forward is right but for its precision (see head-forward): "
                 "at this tolerance its results cannot show the family's claim")
    for family in ("scaling", "mask", "softmax"):
        assert checks[family].outcome == "not-run"
        assert family_detail(checks[family]).endswith(f"causal: {precision}"), family  # no "more"
    assert family_detail(checks["head-gradcheck"]) == (
        "not run: head_forward agrees only to a lossy precision (see head-forward): central "
        "differences of it would measure the rounding, not the backward")
    assert not any("Q K^T" in failure_detail(f) for f in result.failures)
