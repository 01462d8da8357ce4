"""Central-difference check of the whole attention head: input, three weights, any biases.

The objective is ``L = <O, U>`` for the head's output ``O`` and a fixed upstream ``U``.
Coordinates, spacings and the pass rule are the chapter's (see :mod:`qkvcli.gradcheck.central`):
evenly spaced samples, actual rounded spacings, ``|a - n| / max(1, |a|, |n|) <= tolerance``.
Each evaluation is a fresh forward pass of a head built from perturbed copies.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from qkvcli.attention.head import AttentionGradients, AttentionHead, output_loss
from qkvcli.core.arrays import Array
from qkvcli.core.vocabulary import BRANCHES
from qkvcli.gradcheck.central import central_difference, sample_indices, scaled_error
from qkvcli.gradcheck.records import CoordinateCheck, GradcheckResult, TensorCheck
from qkvcli.gradcheck.settings import validate_settings


def _check(
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
                flat[index] = original  # restore: evaluations never share state

        numerical, note = central_difference(original, step, evaluate)
        a = float(analytic_flat[index])
        error = scaled_error(a, numerical) if not note else math.inf
        checks.append(CoordinateCheck(
            tensor=tensor,
            flat_index=index,
            coordinate=tuple(int(i) for i in np.unravel_index(index, probe.shape)),
            analytic=a,
            numerical=numerical,
            scaled_error=error,
            passed=(not note) and error <= tolerance,
            note=note,
        ))
    requested = flat.size if samples is None else samples
    return TensorCheck(tensor, tuple(probe.shape), requested, tuple(checks))


def gradcheck_head(
    head: AttentionHead,
    x: Array,
    upstream: Array,
    analytic: AttentionGradients,
    causal: bool,
    step: float,
    tolerance: float,
    samples: int | None = None,
) -> GradcheckResult:
    """Check ``analytic`` (from :meth:`AttentionHead.backward`) against central differences.

    Tensors, in order: ``input``, ``query_weight``, ``key_weight``, ``value_weight``, then
    ``query_bias``, ``key_bias``, ``value_bias`` for the biases the head has. Raises
    :class:`~qkvcli.gradcheck.settings.GradcheckSettingError` for unusable settings.
    """
    validate_settings(step, tolerance, samples)

    def loss_of(probe_head: AttentionHead, probe_x: Array) -> float:
        return output_loss(probe_head.forward(probe_x, causal), upstream)

    def parameter_objective(kind: str, branch: int) -> Callable[[Array], float]:
        def objective(probe: Array) -> float:
            weights = list(head.weights)
            biases = list(head.biases)
            (weights if kind == "weight" else biases)[branch] = probe
            return loss_of(head.with_parameters(weights, biases), x)

        return objective

    tensors = [_check("input", x, analytic.input, step, tolerance, samples,
                      lambda probe: loss_of(head, probe))]
    weight_grads = (analytic.query_weight, analytic.key_weight, analytic.value_weight)
    for branch, name in enumerate(BRANCHES):
        tensors.append(_check(f"{name}_weight", head.weights[branch], weight_grads[branch],
                              step, tolerance, samples, parameter_objective("weight", branch)))
    bias_grads = (analytic.query_bias, analytic.key_bias, analytic.value_bias)
    for branch, name in enumerate(BRANCHES):
        bias, grad = head.biases[branch], bias_grads[branch]
        if bias is not None and grad is not None:
            tensors.append(_check(f"{name}_bias", bias, grad, step, tolerance, samples,
                                  parameter_objective("bias", branch)))
    return GradcheckResult(step, tolerance, tuple(tensors))
