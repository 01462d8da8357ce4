"""Central-difference check of the whole attention head: input, three weights, any biases.

The objective is ``L = <O, U>`` for the head's output ``O`` and a fixed upstream ``U``.
Each tensor is checked by the chapter's one per-coordinate loop,
:func:`qkvcli.gradcheck.central.check_tensor` (evenly spaced samples, actual rounded
spacings, ``|a - n| / max(1, |a|, |n|) <= tolerance``), with an objective that runs a
fresh forward pass of a head built from perturbed copies.
"""

from __future__ import annotations

from collections.abc import Callable

from qkvcli.attention.head import AttentionHead
from qkvcli.attention.outputs import AttentionGradients, output_loss
from qkvcli.core.arrays import Array
from qkvcli.core.vocabulary import BRANCHES
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
