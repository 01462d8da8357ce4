"""The machine-readable report: everything in the evidence, with stable key names.

Floats are written with Python's shortest round-trip representation, so reading the
JSON back gives the same binary64 values. JSON has no NaN or infinity; such values
(only possible when a computation overflows) are written as the strings ``"NaN"``,
``"Infinity"`` and ``"-Infinity"``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from qkvcli import __version__
from qkvcli.checks.records import Evidence, ShapeProbe
from qkvcli.gradcheck.records import CoordinateCheck, GradcheckResult
from qkvcli.render.json.stream import marker, stream_document
from qkvcli.render.tensors import TensorSummary, shows_values, summarise
from qkvcli.render.text.checks import check_rows

SCHEMA_VERSION = 1


def json_float(value: float) -> float | str:
    """A float JSON can hold, or the string spelling of a non-finite value."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return float(value)


def tensor_json(values: npt.ArrayLike, tensors: str = "full") -> dict[str, Any]:
    """``{"shape", "values"}``, or per the ``tensors`` policy the summary form
    ``{"shape", "count", "summary": {...}}`` (``none``: ``{"shape", "count", "sha256"}``)."""
    array = np.asarray(values, dtype=np.float64)
    if not shows_values(array.size, tensors):
        return summary_json(summarise(array), tensors)
    flat = array.reshape(-1).tolist()
    if not np.isfinite(array).all():
        flat = [json_float(v) for v in flat]
    return {"shape": list(array.shape), "values": flat}


def summary_json(s: TensorSummary, tensors: str) -> dict[str, Any]:
    """A summarised tensor: see ``docs/tensors.md`` for the schema of both forms."""
    if tensors == "none":
        return {"shape": list(s.shape), "count": s.count, "sha256": s.sha256}
    return {
        "shape": list(s.shape),
        "count": s.count,
        "summary": {
            "head": [json_float(v) for v in s.head],
            "tail": [json_float(v) for v in s.tail],
            "min": json_float(s.minimum),
            "max": json_float(s.maximum),
            "mean": json_float(s.mean),
            "l2_norm": json_float(s.l2_norm),
            "sha256": s.sha256,
        },
    }


def _probe(probe: ShapeProbe) -> dict[str, Any]:
    return {
        "input": list(probe.input),
        "query": list(probe.outputs[0]),
        "key": list(probe.outputs[1]),
        "value": list(probe.outputs[2]),
        "gradient_shapes_ok": probe.gradient_shapes_ok,
    }


def coordinate_json(check: CoordinateCheck) -> dict[str, Any]:
    where: dict[str, Any] = (
        {"direction": check.direction} if check.direction is not None
        else {"flat_index": check.flat_index, "coordinate": list(check.coordinate)}
    )
    return {
        "tensor": check.tensor,
        **where,
        "analytic": json_float(check.analytic),
        "numerical": json_float(check.numerical),
        "scaled_error": json_float(check.scaled_error),
        "passed": check.passed,
        **({"note": check.note} if check.note else {}),
    }


def gradcheck_json(result: GradcheckResult) -> dict[str, Any]:
    return {
        "passed": result.passed,
        "mode": result.mode,
        "step": result.step,
        "tolerance": result.tolerance,
        "count": result.count,
        "tensors": [
            {
                "tensor": t.tensor,
                "mode": t.mode,
                "shape": list(t.shape),
                "requested": t.requested,
                "checked": len(t.checks),
                "passed": t.passed,
                "recomputes": t.recomputes,
                "checks": [coordinate_json(c) for c in t.checks],
            }
            for t in result.tensors
        ],
    }


def evidence_json(evidence: Evidence, tensors: str = "summary") -> dict[str, Any]:
    """The report as a JSON-ready dictionary (tensors per the ``tensors`` policy)."""
    p = evidence.primary
    c = evidence.config
    s = evidence.shapes
    i = evidence.initialization
    ind = evidence.independence
    return {
        "qkv_version": __version__,
        "schema_version": SCHEMA_VERSION,
        "chapter": evidence.chapter,
        "passed": evidence.passed,
        "loss": json_float(p.loss),
        "checks": [
            {"name": ch.name, "passed": ch.passed, "detail": ch.detail}
            for ch in check_rows(evidence)
        ],
        "config": {
            "batch": c.batch,
            "tokens": c.tokens,
            "d_model": c.d_model,
            "d_head": c.d_head,
            "bias": c.bias,
            "seed": evidence.seed,
            "layout": c.layout,
        },
        "parameter_names": list(p.parameter_names),
        "parameter_count": p.parameter_count,
        "tensors": {name: tensor_json(value, tensors) for name, value in p.tensors().items()},
        "shapes": {
            "rule": _probe(s.rule),
            "batch": _probe(s.batch),
            "empty_batch": _probe(s.empty_batch),
            "empty_tokens": _probe(s.empty_tokens),
            "report_empty_tokens": _probe(s.report_empty_tokens),
        },
        "errors": [
            {"case": case.case, "rejected": case.rejected, "message": case.message}
            for case in evidence.errors.cases()
        ],
        "initialization": {
            "seed": i.seed,
            "reproducible": i.reproducible,
            "independent": i.independent,
            "transactional": i.transactional,
            "rejection": i.rejection,
        },
        "independence": {
            "applicable": ind.applicable,
            "changed": "query",
            "row": ind.row,
            "query_changed": ind.query_changed,
            "key_unchanged": ind.key_unchanged,
            "value_unchanged": ind.value_unchanged,
        },
        "replay_bitwise": evidence.replay_bitwise,
        "history": {
            "earlier_left": evidence.history.earlier_left,
            "earlier_right": evidence.history.earlier_right,
            "transformer_source": evidence.history.transformer_source,
            "mapping": evidence.history.mapping,
        },
        "gradcheck": gradcheck_json(evidence.gradcheck),
    }


def dumps(document: Any) -> str:
    """Deterministic JSON text (declared key order, two-space indent, trailing newline)."""
    return json.dumps(document, indent=2, allow_nan=False) + "\n"


def render_json(evidence: Evidence, tensors: str = "summary") -> str:
    """The JSON report as one string (see :func:`iter_json`)."""
    return "".join(iter_json(evidence, tensors))


def iter_json(evidence: Evidence, tensors: str = "summary") -> Iterator[str]:
    """The JSON report in pieces: the bytes of ``dumps(evidence_json(evidence, tensors))``.

    Large tensors shown in full are streamed (:func:`~qkvcli.render.json.stream.iter_values`)
    instead of being held as one list of Python floats and one string.
    """
    document = evidence_json(evidence, "summary" if tensors == "full" else tensors)
    if tensors != "full":
        yield dumps(document)
        return
    arrays: list[npt.ArrayLike] = []
    for name, value in evidence.primary.tensors().items():
        entry = document["tensors"][name]
        if "values" not in entry:
            document["tensors"][name] = {"shape": entry["shape"], "values": marker(len(arrays))}
            arrays.append(value)
    yield from stream_document(dumps(document), arrays)
