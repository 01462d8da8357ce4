"""The forms every JSON report shares: its head, its numbers, tensors and gradient checks,
and the one deterministic spelling of the document.

Every JSON document any command prints starts with :func:`head` (``qkv_version``,
``schema_version``, ``report``: which report it is), then the report's own keys; each
judged check is one :func:`check_entry` (``name``, ``family``, ``operation``, ``passed``,
``outcome``, ``detail``), named by the one table, :mod:`qkvcli.render.names`.

Floats are written with Python's shortest round-trip representation, so reading the JSON
back gives the same binary64 values. JSON has no NaN or infinity; such values (only
possible when a computation overflows) are written as the strings ``"NaN"``,
``"Infinity"`` and ``"-Infinity"``. A tensor is ``{"shape", "values"}``, or its summary
above the size the ``tensors`` policy shows (``docs/tensors.md``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from qkvcli import __version__
from qkvcli.render.tensors import TensorSummary, shows_values, summarise

if TYPE_CHECKING:
    import numpy.typing as npt  # annotations only: importing it costs start-up

    from qkvcli.core.results import FamilyCheck
    from qkvcli.gradcheck.records import CoordinateCheck, GradcheckResult


def head(report: str, **keys: Any) -> dict[str, Any]:
    """The head of every JSON document: ``qkv_version``, ``schema_version``, ``report``
    (:data:`REPORTS`), then the report's own ``keys`` in their order."""
    if report not in REPORTS:
        raise ValueError(f"unknown report {report!r}")
    return {"qkv_version": __version__, "schema_version": SCHEMA_VERSION, "report": report,
            **keys}


def check_entry(report: str, check: str, passed: bool, detail: str,
                outcome: str | None = None) -> dict[str, Any]:
    """One judged check of ``report`` as every document publishes it: ``name``, ``family``
    and ``operation`` from the names table (``check`` is its internal id), ``passed``,
    ``outcome`` (``passed``/``failed`` unless given) and ``detail``, one line of words."""
    from qkvcli.render.names import published

    found = published(report, check)
    return {"name": found.name, "family": found.family, "operation": found.operation,
            "passed": passed, "outcome": outcome or ("passed" if passed else "failed"),
            "detail": detail}


def checks_json(report: str, checks: Iterable[FamilyCheck],
                detail: Callable[[FamilyCheck], str]) -> list[dict[str, Any]]:
    """Each judged family of ``report`` as a :func:`check_entry`, its words by ``detail``."""
    return [check_entry(report, check.name, check.passed, detail(check), check.outcome)
            for check in checks]


SCHEMA_VERSION = 2
"""2: the one head (``report``), the one check entry and the one vocabulary of names."""
REPORTS: tuple[str, ...] = ("run", "attend", "check", "gradcheck", "variance", "families")
"""The reports a JSON document can be: every command's JSON (``run`` and ``report`` of
any chapter are ``run``; ``families``, ``qkv attend --families``)."""


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


def coordinate_facts(check: CoordinateCheck) -> dict[str, Any]:
    """One checked coordinate (or direction) as facts: where, both gradients, the error,
    the verdict, and its note when it has one."""
    from qkvcli.render.facts import scalar, shape, verdict

    where: dict[str, Any] = (
        {"direction": check.direction} if check.direction is not None
        else {"flat_index": check.flat_index, "coordinate": shape(check.coordinate)})
    return {"tensor": check.tensor, **where, "analytic": scalar(check.analytic),
            "numerical": scalar(check.numerical), "scaled_error": scalar(check.scaled_error),
            "passed": verdict(check.passed), **({"note": check.note} if check.note else {})}


def coordinate_json(check: CoordinateCheck) -> dict[str, Any]:
    """:func:`coordinate_facts` as JSON."""
    from qkvcli.render.facts import json_of

    found: dict[str, Any] = json_of(coordinate_facts(check))
    return found


def gradcheck_facts(result: GradcheckResult) -> dict[str, Any]:
    """A gradient check as facts: its settings, then each tensor's checks."""
    from qkvcli.render.facts import entries, shape, verdict

    return {"passed": verdict(result.passed), "mode": result.mode, "step": result.step,
            "tolerance": result.tolerance, "count": result.count,
            "tensors": entries([{"tensor": t.tensor, "mode": t.mode, "shape": shape(t.shape),
                                 "requested": t.requested, "checked": len(t.checks),
                                 "passed": verdict(t.passed), "recomputes": t.recomputes,
                                 "checks": entries([coordinate_facts(c) for c in t.checks])}
                                for t in result.tensors])}


def gradcheck_json(result: GradcheckResult) -> dict[str, Any]:
    """A gradient check's settings and every tensor's checks, as every report embeds it."""
    from qkvcli.render.facts import json_of

    found: dict[str, Any] = json_of(gradcheck_facts(result))
    return found


def dumps(document: Any) -> str:
    """Deterministic JSON text (declared key order, two-space indent, trailing newline)."""
    return json.dumps(document, indent=2, allow_nan=False) + "\n"
