"""The projections' gradient check evaluates through the engine, never a second derivation.

Every evaluation of :class:`~qkvcli.gradcheck.probes.StackedObjective`, in each of its
four ways (the whole forward, a perturbed branch, a perturbed column, a perturbed row), is
one call of :func:`qkvcli.core.projections.project`, forward's own product, on a smaller
problem; its value is the engine's ``L`` at the perturbed point. No module of
``qkvcli/gradcheck`` multiplies matrices itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import qkvcli.gradcheck
from qkvcli.core import projections as engine
from qkvcli.core.outputs import weighted_loss
from qkvcli.core.projections import QkvProjections
from qkvcli.gradcheck import probes
from qkvcli.gradcheck.probes import (
    RECOMPUTES_ALL,
    RECOMPUTES_BRANCH,
    RECOMPUTES_COLUMN,
    RECOMPUTES_ROW,
    StackedObjective,
)
from tests.test_gradcheck_columns import _case as seeded_case

# (tensor index, local, what an evaluation recomputes): the ways StackedObjective evaluates.
WAYS = [(0, False, RECOMPUTES_ALL), (0, True, RECOMPUTES_ROW),
        (1, False, RECOMPUTES_BRANCH), (2, True, RECOMPUTES_COLUMN),
        (3, False, RECOMPUTES_BRANCH), (3, True, RECOMPUTES_COLUMN)]
WAY_IDS = ["input-whole", "input-row", "query-branch", "key-column", "value-branch",
           "value-column"]


def _case(seed, batch, tokens, d_model, d_head, integers=False):
    """A seeded layer, input and upstream (the column tests' cases, without the gradients)."""
    return seeded_case(seed, batch, tokens, d_model, d_head, integers)[:3]


def _puts(layer, x, index):
    """Perturbations ``(flat index, value)`` spread over the tensor, two at one place."""
    size = x.size if index == 0 else layer.d_model * layer.d_head
    return [(0, 1.5), (size // 3, -2.25), (size // 3, 0.75), (size - 1, 3.0), (size // 2, 0.0)]


def _engine_loss(layer, x, upstream, index, flat, value):
    """``L`` at the perturbed point: a fresh layer (or input) through the engine's forward."""
    if index == 0:
        probe = np.array(x, copy=True)
        probe.reshape(-1)[flat] = value
        return weighted_loss(layer.forward(probe), upstream)
    weights = [np.array(w, copy=True) for w in layer.weights]
    weights[index - 1].reshape(-1)[flat] = value
    return weighted_loss(QkvProjections.from_arrays(*weights).forward(x), upstream)


def _evaluate(layer, x, upstream, index, local, puts):
    objective = StackedObjective(layer, x, upstream, index, len(puts), local)
    for k, (flat, value) in enumerate(puts):
        objective.put(k, flat, value)
    return objective, objective.evaluate(len(puts))


@pytest.mark.parametrize(("index", "local", "recomputes"), WAYS, ids=WAY_IDS)
def test_each_evaluation_is_the_engines_loss_exactly_when_arithmetic_is_exact(
    index, local, recomputes
):
    # Small integers and halves: every product and sum is exact in binary64, so the check's
    # value and the engine's L at the perturbed point must be the same number, whatever
    # order either sums in.
    layer, x, upstream = _case(11, 2, 5, 7, 3, integers=True)
    puts = _puts(layer, x, index)
    objective, got = _evaluate(layer, x, upstream, index, local, puts)
    assert objective.recomputes == recomputes
    for k, (flat, value) in enumerate(puts):
        assert got[k] == _engine_loss(layer, x, upstream, index, flat, value)


@pytest.mark.parametrize(("index", "local", "recomputes"), WAYS, ids=WAY_IDS)
def test_each_evaluation_is_the_engines_loss_on_general_values(index, local, recomputes):
    # Rounding may differ with the product's shape; the difference must stay at the
    # rounding of the sum, far below what a perturbation changes.
    layer, x, upstream = _case(12, 2, 24, 40, 16)
    puts = _puts(layer, x, index)
    _, got = _evaluate(layer, x, upstream, index, local, puts)
    scale = sum(float(np.sum(np.abs(y) * np.abs(u)))
                for y, u in zip(layer.forward(x), upstream, strict=True))
    unperturbed = weighted_loss(layer.forward(x), upstream)
    for k, (flat, value) in enumerate(puts):
        expected = _engine_loss(layer, x, upstream, index, flat, value)
        assert abs(got[k] - expected) <= 1e-13 * scale
    assert abs(got[0] - unperturbed) > 1e-6 * scale  # the perturbation shows


@pytest.mark.parametrize(("index", "local", "recomputes"), WAYS, ids=WAY_IDS)
def test_each_evaluation_is_one_call_of_the_engines_product_on_less(
    index, local, recomputes, monkeypatch
):
    layer, x, upstream = _case(13, 2, 6, 5, 4)
    calls: list[tuple[tuple[int, ...], tuple[int, ...], bool]] = []

    def spy(rows, weights, out=None):
        calls.append((rows.shape, weights.shape, weights is layer.packed))
        return engine.project(rows, weights, out)

    monkeypatch.setattr(probes, "project", spy)
    puts = _puts(layer, x, index)[:3]
    objective = StackedObjective(layer, x, upstream, index, len(puts), local,
                                 probes.loss_terms(layer, x, upstream))
    for k, (flat, value) in enumerate(puts):
        objective.put(k, flat, value)
    calls.clear()
    objective.evaluate(len(puts))
    count, rows, d, h = len(puts), x.shape[0] * x.shape[1], layer.d_model, layer.d_head
    expected = {
        RECOMPUTES_ALL: ((count * rows, d), (d, 3 * h), True),  # copies of X stacked
        RECOMPUTES_ROW: ((count, d), (d, 3 * h), True),  # the perturbed rows only
        RECOMPUTES_BRANCH: ((rows, d), (d, count * h), False),  # copies of W_b side by side
        RECOMPUTES_COLUMN: ((rows, d), (d, count), False),  # the perturbed columns only
    }[recomputes]
    assert calls == [expected]


def test_forward_is_the_engines_product_of_the_packed_weights():
    layer, x, _ = _case(14, 3, 4, 6, 2)
    outputs = layer.forward(x)
    rows = engine.project(x.reshape(-1, 6), layer.packed)
    assert np.concatenate(list(outputs), axis=-1).reshape(-1, 6).tobytes() == rows.tobytes()


def test_the_shared_sums_make_weighted_loss():
    # weighted_loss and the check share branch_sums and add_branches: the chapter-sized
    # loss equals a one-slot stack's value, bit for bit.
    layer, x, upstream = _case(15, 1, 3, 4, 2)
    objective = StackedObjective(layer, x, upstream, 0, 1)
    assert objective.evaluate(1)[0] == weighted_loss(layer.forward(x), upstream)


def test_no_gradcheck_module_multiplies_matrices():
    # The engine's product is the only projection product: no '@', matmul, einsum or
    # tensordot in qkvcli/gradcheck (np.dot of two vectors, a direction's norm and the
    # gradient's projection on it, is not a projection).
    forbidden = {"matmul", "einsum", "tensordot"}
    found = []
    for path in sorted(Path(qkvcli.gradcheck.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.BinOp, ast.AugAssign)) and isinstance(node.op, ast.MatMult):
                found.append(f"{path.name}:{node.lineno} @")
            name = node.attr if isinstance(node, ast.Attribute) else (
                node.id if isinstance(node, ast.Name) else None)
            if name in forbidden:
                found.append(f"{path.name}:{node.lineno} {name}")
    assert found == []

