"""``qkv attend``: text and JSON.

``qkv attend`` as plain ``key=value`` lines, in the spirit of the chapter's report.

``qkv attend --format json``: everything in the head's evidence, stable key names.
"""

from __future__ import annotations

from typing import Any

from qkvcli import __version__
from qkvcli.attention.records import AttendEvidence
from qkvcli.core.text import escape_controls
from qkvcli.render.numbers import fmt_bool, fmt_float, fmt_shape, fmt_vector
from qkvcli.render.report import dumps, gradcheck_json, json_float, tensor_json

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


SCHEMA_VERSION = 1


def _layer_json(evidence: AttendEvidence) -> dict[str, Any]:
    """What a multi-head layer adds: its config and each head's evidence."""
    c = evidence.config
    return {
        "config": {"heads": c.heads, "e_out": c.e_out, "out_projection": c.out_layout},
        "heads": [
            {"head": h.head, "passed": h.passed,
             "weights": {"min_weight": json_float(h.weights.min_weight),
                         "max_row_deviation": json_float(h.weights.max_row_deviation),
                         "tolerance": h.weights.tolerance},
             "mask": {"applicable": h.mask.applicable,
                      "max_masked_weight": json_float(h.mask.max_masked_weight)},
             "hull": {"barycentric_residual": json_float(h.hull.barycentric_residual),
                      "box_violations": h.hull.box_violations,
                      "tolerance": json_float(h.hull.tolerance)}}
            for h in evidence.heads
        ],
    }


def attend_json(evidence: AttendEvidence) -> dict[str, Any]:
    """The head's evidence as a JSON-ready dictionary (``-inf`` masked scores as strings).

    A multi-head layer (``config.heads`` set) adds ``config.heads``, ``config.e_out``,
    ``config.out_projection`` and a ``heads`` list of per-head evidence.
    """
    document = _attend_json(evidence)
    if evidence.config.heads is not None:
        layer = _layer_json(evidence)
        document["config"].update(layer["config"])
        document["heads"] = layer["heads"]
    return document


def _attend_json(evidence: AttendEvidence) -> dict[str, Any]:
    c = evidence.config
    return {
        "qkv_version": __version__,
        "schema_version": SCHEMA_VERSION,
        "kind": "attend",
        "chapter": evidence.chapter,
        "passed": evidence.passed,
        "config": {
            "batch": c.batch, "tokens": c.tokens, "d_model": c.d_model, "d_k": c.d_k,
            "d_v": c.d_v, "causal": c.causal, "value_width": c.value_width,
            "bias": {"query": c.bias[0], "key": c.bias[1], "value": c.bias[2]},
            "layout": c.layout, "layout_description": c.layout_description,
            "scale": c.scale, "seed": evidence.seed,
        },
        "parameter_names": list(c.names),
        "parameter_count": c.parameter_count,
        "loss": json_float(evidence.primary.loss),
        "checks": [{"name": ch.name, "passed": ch.passed, "detail": ch.detail}
                   for ch in evidence.checks],
        "notes": [{"code": n.code, "text": n.text} for n in evidence.notes],
        "tensors": {name: tensor_json(value) for name, value in evidence.primary.tensors.items()},
        # json_float: an overflowing head gives NaN, which JSON can only hold as a string
        "rows": [
            {"batch": r.batch, "token": r.token, "weights": [json_float(w) for w in r.weights],
             "weight_sum": json_float(r.weight_sum), "output": [json_float(v) for v in r.output]}
            for r in evidence.rows
        ],
        "weights": {"min_weight": json_float(evidence.weights.min_weight),
                    "max_row_deviation": json_float(evidence.weights.max_row_deviation),
                    "tolerance": evidence.weights.tolerance},
        "mask": {"applicable": evidence.mask.applicable,
                 "max_masked_weight": json_float(evidence.mask.max_masked_weight)},
        "hull": {"barycentric_residual": json_float(evidence.hull.barycentric_residual),
                 "box_violations": evidence.hull.box_violations,
                 "tolerance": json_float(evidence.hull.tolerance)},
        "probes": [{"input": list(p.input), "weights": list(p.weights), "output": list(p.output),
                    "input_gradient": list(p.grad_input)} for p in evidence.probes],
        "replay_bitwise": evidence.replay_bitwise,
        "gradcheck": gradcheck_json(evidence.gradcheck),
    }


def render_attend_json(evidence: AttendEvidence) -> str:
    """Deterministic JSON text with a trailing newline."""
    return dumps(attend_json(evidence))
