"""Central-difference gradient checks of a head and of a layer.

Central-difference check of the whole attention head: input, three weights, any biases.

The objective is ``L = <O, U>`` for the head's output ``O`` and a fixed upstream ``U``.
Each tensor is checked by the chapter's one per-coordinate loop,
:func:`qkvcli.gradcheck.central.check_tensor` (evenly spaced samples, actual rounded
spacings, ``|a - n| / max(1, |a|, |n|) <= tolerance``), with an objective that runs a
fresh forward pass of a head built from perturbed copies.

Central-difference check of the whole multi-head layer: input, projections, out_proj.

The objective is ``L = <Y, U>`` for the layer's final output ``Y`` and a fixed upstream
``U``. Each tensor goes through the chapter's one per-coordinate loop,
:func:`qkvcli.gradcheck.central.check_tensor`, with an objective that runs a fresh
forward pass of a layer built from perturbed copies. Tensors are checked in our layout
(``[in, out]``); their names are those of the JSON report.
"""

from __future__ import annotations

from collections.abc import Callable

from qkvcli.attention.head import AttentionGradients, AttentionHead, output_loss
from qkvcli.attention.multihead import LayerGradients, MultiHeadLayer, layer_loss
from qkvcli.core.arrays import Array
from qkvcli.core.names import BRANCHES
from qkvcli.gradcheck.central import check_tensor
from qkvcli.gradcheck.records import GradcheckResult, TensorCheck
from qkvcli.gradcheck.settings import validate_settings

# attend's report has always recorded every tensor as "full", sampled or not; its JSON
# is published, so the record keeps saying so.
RECORDED_MODE = "full"


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

    tensors: list[TensorCheck] = []

    def check(
        tensor: str, values: Array, grad: Array, objective: Callable[[Array], float]
    ) -> None:
        tensors.append(check_tensor(tensor, values, grad, step, tolerance, samples, objective,
                                    mode=RECORDED_MODE))

    check("input", x, analytic.grad_input, lambda probe: loss_of(head, probe))
    grad_w = (analytic.grad_w_query, analytic.grad_w_key, analytic.grad_w_value)
    for branch, name in enumerate(BRANCHES):
        check(f"{name}_weight", head.weights[branch], grad_w[branch],
              parameter_objective("weight", branch))
    grad_b = (analytic.grad_b_query, analytic.grad_b_key, analytic.grad_b_value)
    for branch, name in enumerate(BRANCHES):
        bias, grad = head.biases[branch], grad_b[branch]
        if bias is not None and grad is not None:
            check(f"{name}_bias", bias, grad, parameter_objective("bias", branch))
    return GradcheckResult(step, tolerance, tuple(tensors))


def gradcheck_layer(
    layer: MultiHeadLayer, x: Array, upstream: Array, analytic: LayerGradients, causal: bool,
    step: float, tolerance: float, samples: int | None = None, out_name: str | None = None,
) -> GradcheckResult:
    """Check ``analytic`` (from :meth:`MultiHeadLayer.backward`) against central differences.

    Tensors, in order: ``input``, the three weights, the biases the layer has, then the
    output projection's weight and bias (named ``out_name``, default ``out_proj``).
    Raises :class:`~qkvcli.gradcheck.settings.GradcheckSettingError` for unusable settings.
    """
    validate_settings(step, tolerance, samples)
    projections = layer.projections

    def loss_of(probe_layer: MultiHeadLayer, probe_x: Array) -> float:
        return layer_loss(probe_layer.forward(probe_x, causal), upstream)

    def parameter_objective(kind: str, index: int) -> Callable[[Array], float]:
        def objective(probe: Array) -> float:
            weights: list[Array] = list(projections.weights)
            biases: list[Array | None] = list(projections.biases)
            out: list[Array | None] = [layer.out_weight, layer.out_bias]
            if kind == "weight":
                weights[index] = probe
            else:
                (biases if kind == "bias" else out)[index] = probe
            return loss_of(layer.with_parameters(weights, biases, out[0], out[1]), x)

        return objective

    tensors: list[TensorCheck] = []

    def check(name: str, values: Array, grad: Array, objective: Callable[[Array], float]) -> None:
        tensors.append(check_tensor(name, values, grad, step, tolerance, samples, objective,
                                    mode=RECORDED_MODE))

    check("input", x, analytic.grad_input, lambda probe: loss_of(layer, probe))
    grad_w = (analytic.grad_w_query, analytic.grad_w_key, analytic.grad_w_value)
    for i, name in enumerate(BRANCHES):
        check(f"{name}_weight", projections.weights[i], grad_w[i], parameter_objective("weight", i))
    grad_b = (analytic.grad_b_query, analytic.grad_b_key, analytic.grad_b_value)
    for i, name in enumerate(BRANCHES):
        bias, grad = projections.biases[i], grad_b[i]
        if bias is not None and grad is not None:
            check(f"{name}_bias", bias, grad, parameter_objective("bias", i))
    out = out_name or "out_proj"
    if layer.out_weight is not None and analytic.grad_out_weight is not None:
        check(f"{out}_weight", layer.out_weight, analytic.grad_out_weight,
              parameter_objective("out", 0))
    if layer.out_bias is not None and analytic.grad_out_bias is not None:
        check(f"{out}_bias", layer.out_bias, analytic.grad_out_bias, parameter_objective("out", 1))
    return GradcheckResult(step, tolerance, tuple(tensors))
