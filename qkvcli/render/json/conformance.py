"""``qkv check`` as JSON: ``{"qkv_version", "implementation", "passed", "checks", "failures"}``,
and ``"stderr"`` for a ``--command`` program.

Each check is ``{"name", "passed", "detail", "applicable"}``: ``applicable`` is false for a
family that does not apply, with ``passed`` true when it does not count (purity with
``--command``) and false when it fails the check (reverse and gradcheck without backward).
"""

from __future__ import annotations

import json
from typing import Any

from qkvcli import __version__
from qkvcli.conformance.result import ConformanceResult


def conformance_json(result: ConformanceResult) -> dict[str, Any]:
    """The document: each family once in ``checks``; each failure's family, fixture, coordinate."""
    document: dict[str, Any] = {
        "qkv_version": __version__,
        "implementation": result.implementation,
        "passed": result.passed,
        "checks": [{"name": c.name, "passed": c.passed, "detail": c.detail,
                    "applicable": c.applicable} for c in result.checks],
        "failures": [{"family": f.family, "fixture": f.fixture, "coordinate": f.coordinate,
                      "detail": f.detail} for f in result.failures],
    }
    if result.command:
        document["stderr"] = result.stderr
    return document


def render_conformance_json(result: ConformanceResult) -> str:
    """Deterministic JSON text (declared key order, two-space indent, trailing newline)."""
    return json.dumps(conformance_json(result), indent=2, allow_nan=False) + "\n"
