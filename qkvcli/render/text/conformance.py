"""``qkv check`` as plain text: one line per family (PASS, FAIL or N/A), the failures, a verdict."""

from __future__ import annotations

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
