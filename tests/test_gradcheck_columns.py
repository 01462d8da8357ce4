"""A large weight's coordinate recomputes one column of its branch, and is still ``L``.

Perturbing ``W_b[i,j]`` changes column ``j`` of ``Y_b = X W_b`` and nothing else; the
column objective recomputes that column and sums every term of ``L`` again. These tests
prove each evaluation is ``weighted_loss`` of the perturbed forward values (bit for bit),
that it agrees with the plain loop, and that it still catches a wrong gradient.
"""

from __future__ import annotations

import numpy as np
import pytest

from qkvcli.core.outputs import QkvForward, weighted_loss
from qkvcli.core.projections import QkvProjections, project
from qkvcli.gradcheck.central import check_tensor
from qkvcli.gradcheck.probes import RECOMPUTES_COLUMN, StackedObjective, loss_terms
from qkvcli.gradcheck.projections import gradcheck_projections
from qkvcli.gradcheck.settings import AUTO_FULL_LIMIT

STEP = 1e-6
TOLERANCE = 2e-6


def _case(seed, batch, tokens, d_model, d_head, integers=False):
    rng = np.random.default_rng(seed)

    def draw(shape):
        if integers:
            return rng.integers(-3, 4, shape).astype(float)
        return rng.uniform(-1, 1, shape)

    x = draw((batch, tokens, d_model))
    layer = QkvProjections.from_arrays(*[draw((d_model, d_head)) for _ in range(3)])
    upstream = tuple(draw((batch, tokens, d_head)) for _ in range(3))
    return layer, x, upstream, tuple(layer.backward(x, *upstream))


def _weight_loop(layer, x, upstream, analytic, branch, step, samples):
    def objective(probe):
        weights = list(layer.weights)
        weights[branch] = probe
        return weighted_loss(QkvProjections.from_arrays(*weights).forward(x), upstream)

    return check_tensor("w", layer.weights[branch], analytic[branch + 1], step, TOLERANCE,
                        samples, objective)


@pytest.mark.parametrize("index", [1, 2, 3], ids=["query", "key", "value"])
def test_each_evaluation_is_the_loss_of_the_perturbed_forward_bit_for_bit(index):
    layer, x, upstream, _ = _case(4, 2, 24, 96, 48)
    objective = StackedObjective(layer, x, upstream, index, 4, local=True)
    assert objective.recomputes == RECOMPUTES_COLUMN
    h = layer.d_head
    puts = [(0, 1.5), (17 * h + 5, -0.25), (95 * h + h - 1, 3.0), (17 * h + 6, 0.0)]
    for k, (flat, value) in enumerate(puts):
        objective.put(k, flat, value)
    got = objective.evaluate(len(puts))
    # The reference: the engine's unperturbed forward with column j of the branch replaced
    # by the engine's product of the perturbed columns (the same [BT,d] @ [d,count]
    # shape, so the same kernel), then weighted_loss.
    rows = x.reshape(-1, x.shape[2])
    columns = np.stack([layer.weights[index - 1][:, flat % h] for flat, _ in puts], axis=1)
    for k, (flat, value) in enumerate(puts):
        columns[flat // h, k] = value
    products = project(rows, columns)
    for k, (flat, _) in enumerate(puts):
        outputs = np.concatenate(list(layer.forward(x)), axis=-1)
        outputs[..., (index - 1) * h + flat % h] = products[:, k].reshape(x.shape[:2])
        forward = QkvForward(outputs[..., :h], outputs[..., h:2 * h], outputs[..., 2 * h:])
        assert got[k] == weighted_loss(forward, upstream)


def test_large_weights_recompute_a_column_and_agree_with_the_loop():
    layer, x, upstream, analytic = _case(5, 2, 24, 96, 48)  # weights of 4608 elements
    assert layer.weights[0].size > AUTO_FULL_LIMIT
    result = gradcheck_projections(layer, x, upstream, analytic, STEP, TOLERANCE, 7, mode="sampled")
    assert result.passed
    assert [t.recomputes for t in result.tensors] == ["perturbed row"] + ["perturbed column"] * 3
    for branch in range(3):
        looped = _weight_loop(layer, x, upstream, analytic, branch, STEP, 7)
        for column, loop in zip(result.tensors[branch + 1].checks, looped.checks, strict=True):
            assert column.flat_index == loop.flat_index and column.note == loop.note == ""
            assert abs(column.numerical - loop.numerical) <= TOLERANCE / 20


def test_the_column_path_equals_the_loop_exactly_when_arithmetic_is_exact():
    # Small integers and a power-of-two step: every product and sum is exact in binary64,
    # so the column path and the loop's full forward passes give identical numbers.
    layer, x, upstream, analytic = _case(6, 1, 4, 128, 33, integers=True)
    step = 2.0**-20
    result = gradcheck_projections(layer, x, upstream, analytic, step, TOLERANCE, 5, mode="sampled")
    assert result.passed
    for branch in range(3):
        tensor = result.tensors[branch + 1]
        assert tensor.recomputes == "perturbed column"
        looped = _weight_loop(layer, x, upstream, analytic, branch, step, 5)
        assert [c.numerical for c in tensor.checks] == [c.numerical for c in looped.checks]


@pytest.mark.parametrize("branch", [0, 1, 2], ids=["query", "key", "value"])
def test_the_column_path_catches_a_wrong_weight_gradient(branch):
    layer, x, upstream, analytic = _case(7, 2, 24, 96, 48)
    wrong = [np.array(a, copy=True) for a in analytic]
    wrong[branch + 1].reshape(-1)[-1] += 1e-3  # the last coordinate is always sampled
    result = gradcheck_projections(layer, x, upstream, tuple(wrong), STEP, TOLERANCE, 3,
                             mode="sampled")
    failed = [(t.tensor, c.flat_index) for t in result.tensors for c in t.checks if not c.passed]
    assert failed == [(("query_weight", "key_weight", "value_weight")[branch],
                       wrong[branch + 1].size - 1)]


def test_the_shared_loss_terms_are_the_branches_products():
    layer, x, upstream, _ = _case(8, 2, 3, 5, 2)
    terms = loss_terms(layer, x, upstream)
    forward = layer.forward(x)
    for branch in range(3):
        expected = np.asarray(list(forward)[branch]) * upstream[branch]
        assert terms[branch].tobytes() == expected.reshape(-1, layer.d_head).tobytes()


@pytest.mark.parametrize(
    ("shape", "recomputes"),
    [
        ((2, 24, 96, 48), ["perturbed row"] + ["perturbed column"] * 3),  # large weights
        ((4, 64, 32, 32), ["perturbed row"] + ["perturbed column"] * 3),  # large outputs only
        ((2, 48, 64, 8), ["perturbed row"] + ["perturbed branch"] * 3),  # both small
        ((1, 3, 4, 2), ["full forward"] + ["perturbed branch"] * 3),  # the chapter's size
    ],
    ids=["large-weights", "large-outputs", "small-weights", "chapter-size"],
)
def test_which_evaluations_recompute_a_column(shape, recomputes):
    layer, x, upstream, analytic = _case(9, *shape)
    result = gradcheck_projections(layer, x, upstream, analytic, STEP, TOLERANCE, 3, mode="sampled")
    assert result.passed
    assert [t.recomputes for t in result.tensors] == recomputes


def test_fast_mode_keeps_whole_branch_copies():
    layer, x, upstream, analytic = _case(10, 2, 24, 96, 48)
    result = gradcheck_projections(layer, x, upstream, analytic, STEP, TOLERANCE, mode="fast")
    assert [t.recomputes for t in result.tensors] == ["full forward"] + ["perturbed branch"] * 3
