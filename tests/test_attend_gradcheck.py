"""The head's gradient check runs the chapter's one ``check_tensor``, with the results it always gave.

``reference_check`` is the per-coordinate loop attention used to carry of its own; the
shared loop must reproduce it bit for bit (``repr`` spells every float exactly and tells
``-0.0`` from ``0.0``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from qkvcli.attention.errors import OutputGradientShapeMismatch
from qkvcli.attention.gradcheck import gradcheck_attention
from qkvcli.attention.head import AttentionHead, output_loss
from qkvcli.core.arrays import Array
from qkvcli.core.names import BRANCHES
from qkvcli.gradcheck.central import central_difference, sample_indices, scaled_error
from qkvcli.gradcheck.records import CoordinateCheck, GradcheckResult, TensorCheck


def reference_check(
    tensor: str, values: Array, analytic: Array, step: float, tolerance: float,
    samples: int | None, objective: Callable[[Array], float],
) -> TensorCheck:
    probe = np.array(values, dtype=np.float64, copy=True)
    flat = probe.reshape(-1)
    analytic_flat = np.asarray(analytic, dtype=np.float64).reshape(-1)
    checks = []
    for index in sample_indices(flat.size, samples):
        original = float(flat[index])

        def evaluate(point: float, index: int = index, original: float = original) -> float:
            flat[index] = point
            try:
                return objective(probe)
            finally:
                flat[index] = original

        numerical, note = central_difference(original, step, evaluate)
        a = float(analytic_flat[index])
        error = scaled_error(a, numerical) if not note else math.inf
        checks.append(CoordinateCheck(
            tensor=tensor, flat_index=index,
            coordinate=tuple(int(i) for i in np.unravel_index(index, probe.shape)),
            analytic=a, numerical=numerical, scaled_error=error,
            passed=(not note) and error <= tolerance, note=note,
        ))
    requested = flat.size if samples is None else samples
    # run's modes: every coordinate unless a sample count is given (auto)
    return TensorCheck(tensor, tuple(probe.shape), requested, tuple(checks),
                       "full" if samples is None else "sampled")


def reference_gradcheck(head: AttentionHead, x: Array, upstream: Array, causal: bool,
                        step: float, tolerance: float, samples: int | None) -> GradcheckResult:
    grads = head.backward(x, head.forward(x, causal), upstream)

    def loss_of(probe_head: AttentionHead, probe_x: Array) -> float:
        return output_loss(probe_head.forward(probe_x, causal), upstream)

    def parameter(kind: str, branch: int) -> Callable[[Array], float]:
        def objective(probe: Array) -> float:
            weights, biases = list(head.weights), list(head.biases)
            (weights if kind == "weight" else biases)[branch] = probe
            return loss_of(head.with_parameters(weights, biases), x)
        return objective

    tensors = [reference_check("input", x, grads.grad_input, step, tolerance, samples,
                               lambda probe: loss_of(head, probe))]
    grad_w = (grads.grad_w_query, grads.grad_w_key, grads.grad_w_value)
    for branch, name in enumerate(BRANCHES):
        tensors.append(reference_check(f"w_{name}", head.weights[branch], grad_w[branch],
                                       step, tolerance, samples, parameter("weight", branch)))
    grad_b = (grads.grad_b_query, grads.grad_b_key, grads.grad_b_value)
    for branch, name in enumerate(BRANCHES):
        bias, grad = head.biases[branch], grad_b[branch]
        if bias is not None and grad is not None:
            tensors.append(reference_check(f"b_{name}", bias, grad, step, tolerance, samples,
                                           parameter("bias", branch)))
    return GradcheckResult(step, tolerance, tuple(tensors), "auto")


def head_of(seed: int, bias: bool) -> tuple[AttentionHead, Array, Array]:
    rng = np.random.default_rng(seed)
    d_model, d_k, d_v = 4, 3, 2
    head = AttentionHead.from_arrays(
        rng.normal(size=(d_model, d_k)), rng.normal(size=(d_model, d_k)),
        rng.normal(size=(d_model, d_v)),
        biases=[rng.normal(size=d_k), None, rng.normal(size=d_v)] if bias else [None] * 3,
        names=("t.query", "t.key", "t.value"), independent_value_width=True)
    x = rng.normal(size=(2, 3, d_model))
    return head, x, rng.normal(size=(2, 3, d_v))


@pytest.mark.parametrize("samples", [None, 1, 5, 1000], ids=lambda s: f"samples={s}")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seed", [0, 1], ids=["biases", "no-biases"])
def test_shared_check_tensor_gives_the_old_results_bit_for_bit(
    samples: int | None, causal: bool, seed: int
) -> None:
    head, x, upstream = head_of(seed, bias=seed == 0)
    grads = head.backward(x, head.forward(x, causal), upstream)
    shared = gradcheck_attention(head, x, upstream, grads, causal, 1e-6, 2e-6, samples)
    assert repr(shared) == repr(reference_gradcheck(head, x, upstream, causal, 1e-6, 2e-6,
                                                    samples))


def test_a_misshapen_output_gradient_is_a_typed_error() -> None:
    head, x, upstream = head_of(0, bias=False)
    with pytest.raises(OutputGradientShapeMismatch) as caught:
        head.backward(x, head.forward(x), upstream[:, :2])
    assert caught.value == OutputGradientShapeMismatch((2, 3, 2), (2, 2, 2))
    assert str(caught.value) == "output gradient must have shape [2,3,2], got [2,2,2]"


def test_thousands_of_tiny_heads_count_their_overhead_in_the_budget() -> None:
    from qkvcli.attention.gradcheck import HEAD_OVERHEAD, forward_cost, plan_check
    from qkvcli.attention.head import AttentionHead
    from qkvcli.attention.multihead import MultiHeadLayer
    from qkvcli.gradcheck.settings import TooManyEvaluations

    rng = np.random.default_rng(3)
    heads = 4096
    weights = [rng.uniform(-1, 1, size=(1, heads)) for _ in range(3)]
    layer = MultiHeadLayer.build(AttentionHead.from_arrays(*weights), heads)
    x = rng.uniform(-1, 1, size=(1, 1, 1))
    assert forward_cost(layer, x) >= heads * HEAD_OVERHEAD  # the products alone are tiny
    with pytest.raises(TooManyEvaluations):
        plan_check(layer, x, 1e-6, 1e-6, mode="full")  # 2 x 12289 whole forwards
    plan = plan_check(layer, x, 1e-6, 1e-6)  # auto samples the weights
    assert [row[1] for row in plan.rows] == ["full", "sampled", "sampled", "sampled"]
