"""The forms every JSON report shares: its head, its check entries and its gradient check.

Every JSON document any command prints starts with :func:`head` (``qkv_version``,
``schema_version``, ``report``: which report it is), then the report's own keys; each
judged check is one :func:`check_entry` (``name``, ``family``, ``operation``, ``passed``,
``outcome``, ``detail``), named by the one table, :mod:`qkvcli.render.names`.

A float is written as :func:`~qkvcli.render.numbers.json_float` spells it, a tensor as
:func:`~qkvcli.render.facts.tensor_json` does and the document by
:func:`~qkvcli.render.facts.dumps` (all three importable from here too).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from qkvcli import __version__
from qkvcli.render.facts import dumps as dumps
from qkvcli.render.facts import entries, json_of, scalar, section, shape, verdict
from qkvcli.render.facts import summary_json as summary_json
from qkvcli.render.facts import tensor_json as tensor_json
from qkvcli.render.numbers import json_float as json_float

if TYPE_CHECKING:
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


def coordinate_facts(check: CoordinateCheck) -> dict[str, Any]:
    """One checked coordinate (or direction) as facts: where, both gradients, the error,
    the verdict, and its note when it has one."""
    where: dict[str, Any] = (
        {"direction": check.direction} if check.direction is not None
        else {"flat_index": check.flat_index, "coordinate": shape(check.coordinate)})
    return {"tensor": check.tensor, **where, "analytic": scalar(check.analytic),
            "numerical": scalar(check.numerical), "scaled_error": scalar(check.scaled_error),
            "passed": verdict(check.passed), **({"note": check.note} if check.note else {})}


def coordinate_json(check: CoordinateCheck) -> dict[str, Any]:
    """:func:`coordinate_facts` as JSON."""
    return dict(json_of(coordinate_facts(check)))


def gradcheck_facts(result: GradcheckResult) -> dict[str, Any]:
    """A gradient check as facts: its settings, its worst point (a failed one first, else
    the largest scaled error; ``None`` when nothing was checked), then each tensor's
    checks."""
    worst = result.worst
    return {"passed": verdict(result.passed), "mode": result.mode, "step": result.step,
            "tolerance": result.tolerance, "count": result.count,
            "worst": None if worst is None else section(**coordinate_facts(worst)),
            "tensors": entries([{"tensor": t.tensor, "mode": t.mode, "shape": shape(t.shape),
                                 "requested": t.requested, "checked": len(t.checks),
                                 "passed": verdict(t.passed), "recomputes": t.recomputes,
                                 "checks": entries([coordinate_facts(c) for c in t.checks])}
                                for t in result.tensors])}


def gradcheck_json(result: GradcheckResult) -> dict[str, Any]:
    """:func:`gradcheck_facts` as JSON, as every report embeds it."""
    return dict(json_of(gradcheck_facts(result)))
