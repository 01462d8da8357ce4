"""``qkv check``: text and JSON.

``qkv check`` as plain text: one line per family (PASS, FAIL or N/A), the failures, a verdict.

``qkv check`` as JSON: ``{"qkv_version", "implementation", "passed", "checks", "failures"}``,
and ``"stderr"`` for a ``--command`` program.

Each check is ``{"name", "passed", "detail", "applicable"}``: ``applicable`` is false for a
family that does not apply, with ``passed`` true when it does not count (purity with
``--command``) and false when it fails the check (reverse and gradcheck without backward).
"""

from __future__ import annotations

import json
from typing import Any

from qkvcli import __version__
from qkvcli.conformance.result import ConformanceResult, FamilyCheck


def word(check: FamilyCheck) -> str:
    """``PASS``, ``FAIL``, or ``N/A`` for a not-applicable family that does not count."""
    if not check.applicable and check.passed:
        return "N/A"
    return "PASS" if check.passed else "FAIL"


def verdict(result: ConformanceResult) -> str:
    """``verdict: PASS (8 of 8 applicable checks passed)`` or ``verdict: FAIL (...; failed: ...)``."""
    counted = [c for c in result.checks if c.applicable or not c.passed]
    passed = sum(c.passed for c in counted)
    if result.passed:
        return f"verdict: PASS ({passed} of {len(counted)} applicable checks passed)"
    failed = ", ".join(c.name for c in result.checks if not c.passed)
    return f"verdict: FAIL ({passed} of {len(counted)} applicable checks passed; failed: {failed})"


def render_conformance_text(result: ConformanceResult) -> str:
    """The report; ends with a newline. Same result, same bytes."""
    width = max(len(check.name) for check in result.checks)
    lines = [f"implementation={result.implementation}",
             f"fixtures={','.join(result.fixtures)}"]
    lines += [f"{check.name:<{width}}  {word(check):<4}  {check.detail}"
              for check in result.checks]
    if result.failures:
        lines.append(f"failures={len(result.failures)}")
        for failure in result.failures:
            where = f" [{failure.fixture}]" if failure.fixture is not None else ""
            lines.append(f"  {failure.family}{where} {failure.detail}")
    lines.append(verdict(result))
    return "\n".join(lines) + "\n"


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
