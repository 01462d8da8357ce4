"""``qkv attend --format json``: everything in the head's evidence, stable key names."""

from __future__ import annotations

from typing import Any

from qkvcli import __version__
from qkvcli.attention.records import AttendEvidence
from qkvcli.render.json.evidence import dumps, gradcheck_json, json_float, tensor_json

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
