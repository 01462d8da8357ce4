"""The attention check's cheaper evaluations, its modes and its budget.

Each shortcut must give the full forward's ``L`` within :func:`shortcut_bound` at every
perturbed point, and the same verdicts; a broken gradient must still fail through every
shortcut; ``auto`` samples what is costly; a check over budget is refused before any
evaluation. The real-checkpoint layer kinds (RoPE, grouped K/V heads, a given scale):
tests/test_attend_shortcut_kinds.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from qkvcli.attention.gradcheck import (
    CheckPlan,
    _copy_point,
    _tensor_objective,
    _tensors,
    analytic_of,
    as_layer,
    gradcheck_attention,
    plan_check,
    reaches_far,
)
from qkvcli.attention.head import AttentionHead
from qkvcli.attention.multihead import MultiHeadLayer, layer_loss
from qkvcli.attention.shortcuts import Shortcuts, shortcut_bound
from qkvcli.gradcheck.settings import TooManyEvaluations


def model(seed: int, heads: int, out: bool, bias: bool, tokens: int = 5) -> tuple[
    MultiHeadLayer, np.ndarray, np.ndarray
]:
    rng = np.random.default_rng(seed)
    d_model, width = 6, 4 * heads
    biases: list[Any] = [rng.normal(size=width) for _ in range(3)] if bias else [None] * 3
    head = AttentionHead.from_arrays(*(rng.normal(size=(d_model, width)) for _ in range(3)),
                                     biases=biases)
    e_out = 7
    layer = MultiHeadLayer.build(head, heads, rng.normal(size=(width, e_out)) if out else None,
                                 rng.normal(size=e_out) if out and bias else None)
    x = rng.normal(size=(2, tokens, d_model))
    upstream = rng.normal(size=(2, tokens, layer.e_out))
    return layer, x, upstream


CASES = [(0, 1, False, False), (1, 2, True, True), (2, 3, True, False), (3, 2, False, True)]
IDS = ["one-head", "two-heads-out-bias", "three-heads-out", "two-heads-bias"]


@pytest.mark.parametrize(("seed", "heads", "out", "bias"), CASES, ids=IDS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_every_shortcut_gives_the_full_forwards_loss_within_its_bound(
    seed: int, heads: int, out: bool, bias: bool, causal: bool
) -> None:
    layer, x, upstream = model(seed, heads, out, bias)
    fast = Shortcuts(layer, x, upstream, causal)
    bound = shortcut_bound(layer, x, upstream, causal)
    assert 0.0 < bound < 1e-9
    rng = np.random.default_rng(seed + 100)
    for name, values in _tensors(layer, x):
        full = _copy_point(_tensor_objective(layer, x, upstream, causal, name), values)
        short = fast.objective(name)
        for index in rng.choice(values.size, size=min(values.size, 8), replace=False):
            for delta in (-1e-6, 0.0, 1e-6, 0.3):
                value = float(values.reshape(-1)[index]) + delta
                assert abs(short(int(index), value) - full(int(index), value)) <= bound, (
                    name, index, delta)
    # unperturbed, the shortcut's L is the forward's L
    assert abs(fast.objective("input")(0, float(x.reshape(-1)[0]))
               - layer_loss(layer.forward(x, causal), upstream)) <= bound


@pytest.mark.parametrize(("seed", "heads", "out", "bias"), CASES, ids=IDS)
def test_shortcuts_and_full_recomputation_reach_the_same_verdicts(
    seed: int, heads: int, out: bool, bias: bool
) -> None:
    layer, x, upstream = model(seed, heads, out, bias)
    grads = analytic_of(layer.backward(x, layer.forward(x, True), upstream))
    short = gradcheck_attention(layer, x, upstream, grads, True, 1e-6, 2e-6, mode="full",
                                shortcuts=True)
    full = gradcheck_attention(layer, x, upstream, grads, True, 1e-6, 2e-6, mode="full",
                               shortcuts=False)
    assert short.passed and full.passed
    assert {t.recomputes for t in full.tensors} == {"full forward"}
    assert_same_checks(short, full)


def assert_same_checks(short: Any, full: Any) -> None:
    """A check through the shortcuts against the same check by full forwards: the same
    tensors and coordinates, no full forward used, derivatives equal to rounding."""
    assert "full forward" not in {t.recomputes for t in short.tensors}
    for a, b in zip(short.tensors, full.tensors, strict=True):
        assert a.tensor == b.tensor and len(a.checks) == len(b.checks)
        for p, q in zip(a.checks, b.checks, strict=True):
            # the derivatives differ by rounding only: within the bound over the step
            assert abs(p.numerical - q.numerical) <= 1e-7 * max(1.0, abs(q.numerical))


@pytest.mark.parametrize("name", ["input", "w_query", "w_key", "w_value", "b_query", "b_key",
                                  "b_value", "w_out", "b_out"])
def test_a_wrong_gradient_fails_through_every_shortcut(name: str) -> None:
    layer, x, upstream = model(1, 2, True, True)
    grads = analytic_of(layer.backward(x, layer.forward(x, False), upstream))
    broken = dict(grads)
    wrong = np.array(broken[name], copy=True)
    wrong.reshape(-1)[0] += 0.5
    broken[name] = wrong
    result = gradcheck_attention(layer, x, upstream, broken, False, 1e-6, 2e-6, mode="full",
                                 shortcuts=True)
    failed = [t.tensor for t in result.tensors if not t.passed]
    assert failed == [name]


def test_small_models_keep_the_full_forward_and_large_ones_shortcut() -> None:
    small, x, _ = model(0, 1, False, False, tokens=3)
    assert not reaches_far(small, x)
    large, x_large, _ = model(0, 2, True, False, tokens=64)
    assert reaches_far(large, x_large)


def test_auto_samples_what_is_costly_and_the_budget_counts_costs() -> None:
    layer, x, _ = model(0, 2, True, True, tokens=600)
    plan = CheckPlan(layer, x, "auto", None, 3, None)
    modes = {name: mode for name, mode, *_ in plan.rows}
    assert modes["input"] == "sampled"  # 7200 elements: run's rule
    # 48 elements, but each evaluation redoes a head's 600x600 scores: 96 of them cost
    # more than 8192 units, so auto samples; 8 of them (a bias) do not
    assert modes["w_query"] == "sampled" and modes["b_query"] == "full"
    assert modes["w_out"] == modes["b_out"] == "full"  # an output column is cheap
    with pytest.raises(TooManyEvaluations) as raised:
        CheckPlan(layer, x, "full", None, 3, None).refuse_over(10_000)
    assert "evaluation units" in str(raised.value)
    assert "a unit is 65536 multiply-adds of an evaluation" in str(raised.value)


def test_fast_mode_checks_directions_by_full_recomputation() -> None:
    layer, x, upstream = model(2, 3, True, False)
    grads = analytic_of(layer.backward(x, layer.forward(x, False), upstream))
    result = gradcheck_attention(layer, x, upstream, grads, False, 1e-6, 2e-6, mode="fast",
                                 directions=2)
    assert result.passed and result.count == 2 * len(result.tensors)
    assert {t.mode for t in result.tensors} == {"fast"}
    again = gradcheck_attention(layer, x, upstream, grads, False, 1e-6, 2e-6, mode="fast",
                                directions=2)
    assert repr(again) == repr(result)  # seeded directions: the same bytes


def test_a_head_is_the_one_head_layer() -> None:
    layer, x, upstream = model(0, 1, False, True)
    head = layer.projections
    assert as_layer(head).projections is head
    grads = analytic_of(head.backward(x, head.forward(x), upstream))
    a = gradcheck_attention(head, x, upstream, grads, False, 1e-6, 2e-6)
    b = gradcheck_attention(layer, x, upstream, grads, False, 1e-6, 2e-6)
    assert repr(a) == repr(b)


def test_the_layers_replay_comparison_sees_one_changed_bit() -> None:
    from qkvcli.attention.fixture import LayerParts
    from qkvcli.attention.layer_evidence import layer_tensors, same_bits

    layer, x, upstream = model(1, 2, True, True)
    parts = LayerParts(layer, ("qkv", "qkv", "qkv"), None, "out_proj")

    class Given:  # the fixture: only its input and upstream are read
        input = x

    Given.upstream = upstream  # type: ignore[attr-defined]

    f = layer.forward(x)
    g = layer.backward(x, f, upstream)
    tensors = layer_tensors(Given, parts, f, g)  # type: ignore[arg-type]
    assert same_bits(tensors, Given, parts, f, g)  # type: ignore[arg-type]
    changed = np.array(f.heads[1].attention, copy=True)
    changed[0, 0, 0] = -0.0 if changed[0, 0, 0] == 0.0 else np.nextafter(changed[0, 0, 0], 2)
    heads = (f.heads[0], f.heads[1]._replace(attention=changed))
    assert not same_bits(tensors, Given, parts, f._replace(heads=heads), g)  # type: ignore[arg-type]


def test_progress_counts_every_coordinate_across_tensors() -> None:
    layer, x, upstream = model(1, 2, True, True)
    grads = analytic_of(layer.backward(x, layer.forward(x, False), upstream))
    seen: list[tuple[int, int]] = []
    result = gradcheck_attention(layer, x, upstream, grads, False, 1e-6, 2e-6, samples=3,
                                 progress=lambda done, total: seen.append((done, total)))
    assert seen == [(k, result.count) for k in range(1, result.count + 1)]


@pytest.mark.parametrize("name", ["scores", "scaled_scores", "attention", "output",
                                  "grad_attention", "grad_scores", "grad_input", "grad_w_key"])
def test_the_replay_in_two_halves_still_compares_every_tensor(name: str) -> None:
    # The replay compares the forward's tensors, then the reverse's from a forward without
    # S and Z: a changed bit in either half is seen, an unchanged run passes.
    from qkvcli.attention.fixture import LayerParts
    from qkvcli.attention.layer_evidence import layer_tensors, replays_bitwise

    layer, x, upstream = model(1, 2, True, True)
    parts = LayerParts(layer, ("qkv", "qkv", "qkv"), None, "out_proj")

    class Given:  # the fixture: only its input and upstream are read
        input = x

    Given.upstream = upstream  # type: ignore[attr-defined]
    for causal in (False, True):
        f = layer.forward(x, causal)
        g = layer.backward(x, f, upstream)
        tensors = layer_tensors(Given, parts, f, g)  # type: ignore[arg-type]
        assert replays_bitwise(tensors, Given, parts, (f, g), causal)  # type: ignore[arg-type]
        changed = dict(tensors)
        flipped = np.array(tensors[name], copy=True)
        flipped.reshape(-1)[-1] = np.nextafter(flipped.reshape(-1)[-1], np.inf)
        changed[name] = flipped
        assert not replays_bitwise(changed, Given, parts, (f, g), causal)  # type: ignore[arg-type]


@pytest.mark.parametrize("tokens", [5, 64], ids=["small", "large"])
def test_a_refused_fast_check_does_not_suggest_the_fast_mode(tokens: int) -> None:
    # fast mode's directions each run a whole forward: the hint names fewer directions,
    # and, where sampled coordinates use the shortcuts, --mode auto
    layer, x, _ = model(1, 2, True, True, tokens=tokens)
    with pytest.raises(TooManyEvaluations) as refused:
        plan_check(layer, x, 1e-6, 2e-6, mode="fast", limit=1)
    message = str(refused.value)
    assert "check less with fewer --directions" in message
    assert "--mode fast" not in message
    assert ("--mode auto" in message) == (tokens == 64)
    with pytest.raises(TooManyEvaluations) as sampled:
        plan_check(layer, x, 1e-6, 2e-6, mode="sampled", limit=1)
    assert "check less with --samples or --mode fast" in str(sampled.value)
