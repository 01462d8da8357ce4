"""``qkv attend`` as plain ``key=value`` lines, in the spirit of the chapter's report."""

from __future__ import annotations

from qkvcli.attention.records import AttendEvidence
from qkvcli.core.text import escape_controls
from qkvcli.render.text.numbers import fmt_bool, fmt_float, fmt_shape, fmt_vector

FORMULA = "O = softmax(Q K^T / sqrt(d_k)) V"
FORWARD = ("query", "key", "value", "scores", "scaled_scores", "weights", "heads_output",
           "output")
PARAMETERS = ("input", "query_weight", "key_weight", "value_weight",
              "query_bias", "key_bias", "value_bias")
PARAMETERS_LAYER = ("in_proj_weight", "in_proj_bias", "c_attn_weight", "c_attn_bias",
                    "out_proj_weight", "out_proj_bias", "c_proj_weight", "c_proj_bias")
REVERSE = ("upstream_output", "heads_output_gradient", "weights_gradient",
           "scaled_scores_gradient", "scores_gradient",
           "query_gradient", "key_gradient", "value_gradient", "input_gradient",
           "query_weight_gradient", "key_weight_gradient", "value_weight_gradient",
           "query_bias_gradient", "key_bias_gradient", "value_bias_gradient",
           "in_proj_weight_gradient", "in_proj_bias_gradient", "c_attn_weight_gradient",
           "c_attn_bias_gradient", "out_proj_weight_gradient", "out_proj_bias_gradient",
           "c_proj_weight_gradient", "c_proj_bias_gradient")


def render_attend_text(evidence: AttendEvidence) -> str:
    """The head's evidence, one fact per line; ends with a newline."""
    c = evidence.config
    tensors = evidence.primary.tensors

    def tensor_lines(names: tuple[str, ...]) -> list[str]:
        return [f"{name}=shape:{fmt_shape(tensors[name].shape)} values:{fmt_vector(tensors[name])}"
                for name in names if name in tensors]

    bias = ",".join(f"{b}={fmt_bool(flag)}" for b, flag in zip(("query", "key", "value"), c.bias,
                                                                strict=True))
    lines = [
        f"attend={escape_controls(evidence.chapter)}",
        f"formula={FORMULA}",
        f"config=batch:{c.batch} tokens:{c.tokens} d_model:{c.d_model} d_k:{c.d_k} d_v:{c.d_v} "
        f"causal:{fmt_bool(c.causal)} value_width:{c.value_width} bias:{bias}",
        f"layout={c.layout}: {c.layout_description}",
        *([] if c.heads is None else [
            f"layer=heads:{c.heads} d_k:{c.d_k} d_v:{c.d_v} e_out:{c.e_out} "
            f"out_projection:{c.out_layout or 'none'}"]),
        f"parameter_names=[{','.join(c.names)}]",
        f"parameter_count={c.parameter_count}",
        f"scale=1/sqrt({c.d_k})={fmt_float(c.scale)}",
        "# parameters and input",
        *tensor_lines(PARAMETERS + PARAMETERS_LAYER),
        "# forward: Q,K,V projections; S = Q K^T; Z = S*scale (causal: -inf above the diagonal); "
        "A = softmax(Z) (row max subtracted); O = A V",
        *tensor_lines(FORWARD),
        "# each query position: its weights over the keys and its output",
        *(f"token=b{r.batch} t{r.token} weights:{fmt_vector(r.weights)} "
          f"sum:{fmt_float(r.weight_sum)} output:{fmt_vector(r.output)}" for r in evidence.rows),
        f"# reverse: L = <O,U>, U from SplitMix64(seed {evidence.seed}) uniform [-1,1); "
        "dA = dO V^T, dV = A^T dO, dZ = A*(dA - rowsum(dA*A)), dS = dZ*scale, dQ = dS K, "
        "dK = dS^T Q, dX = sum of three paths",
        f"loss={fmt_float(evidence.primary.loss)}",
        *tensor_lines(REVERSE),
        "# checks",
        *(f"check={check.name} {'PASS' if check.passed else 'FAIL'} {check.detail}"
          for check in evidence.checks),
        *(f"head={h.head} {'PASS' if h.passed else 'FAIL'} min_weight:"
          f"{fmt_float(h.weights.min_weight)} max_row_deviation:"
          f"{fmt_float(h.weights.max_row_deviation)} max_masked_weight:"
          f"{fmt_float(h.mask.max_masked_weight)} hull_residual:"
          f"{fmt_float(h.hull.barycentric_residual)} box_violations:{h.hull.box_violations}"
          for h in evidence.heads),
        *(f"probe=input:{fmt_shape(p.input)} weights:{fmt_shape(p.weights)} "
          f"output:{fmt_shape(p.output)} input_gradient:{fmt_shape(p.grad_input)}"
          for p in evidence.probes),
        *(f"note={note.code} {note.text}" for note in evidence.notes),
        f"attend_passed={fmt_bool(evidence.passed)}",
    ]
    return "\n".join(lines) + "\n"
