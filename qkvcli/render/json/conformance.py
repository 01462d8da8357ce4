"""``qkv check`` as JSON: ``{"qkv_version", "implementation", "passed", "checks", "failures"}``."""

from __future__ import annotations

import json
from typing import Any

from qkvcli import __version__
from qkvcli.conformance.result import ConformanceResult


def conformance_json(result: ConformanceResult) -> dict[str, Any]:
    """The document: each family once in ``checks``; each failure's family, fixture, coordinate."""
    return {
        "qkv_version": __version__,
        "implementation": result.implementation,
        "passed": result.passed,
        "checks": [{"name": c.name, "passed": c.passed, "detail": c.detail}
                   for c in result.checks],
        "failures": [{"family": f.family, "fixture": f.fixture, "coordinate": f.coordinate,
                      "detail": f.detail} for f in result.failures],
    }


def render_conformance_json(result: ConformanceResult) -> str:
    """Deterministic JSON text (declared key order, two-space indent, trailing newline)."""
    return json.dumps(conformance_json(result), indent=2, allow_nan=False) + "\n"
