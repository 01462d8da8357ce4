"""The published JSON Schemas (draft 2020-12) of every report's document, built from the
one head, the one check entry and the names table, so a schema cannot drift from what
the writers print (``qkv schema --report NAME``).

Each schema is strict where the vocabulary is: the head's keys (``qkv_version``,
``schema_version``, ``report``), every check entry (its six keys and no other, its
``name`` one of the report's published names, its ``family``, ``operation`` and
``outcome`` one of the table's, its ``passed`` agreeing with its ``outcome``) and the
document's top-level keys (no other key). What lies under a report's own keys
(tensors, configs, probes) is typed only by its kind of value: ``docs/`` explains it.
"""

from __future__ import annotations

from typing import Any

from qkvcli.render.document import REPORTS, SCHEMA_VERSION
from qkvcli.render.names import (
    ATTEND,
    CH27,
    CH28,
    CH29,
    CH30,
    CH37,
    CHECK,
    FAMILIES,
    OPERATIONS,
    OUTCOMES,
    PUBLISHED,
    RUN,
)

DRAFT = "https://json-schema.org/draft/2020-12/schema"

OBJECT: dict[str, Any] = {"type": "object"}
ARRAY: dict[str, Any] = {"type": "array"}
BOOLEAN: dict[str, Any] = {"type": "boolean"}
STRING: dict[str, Any] = {"type": "string"}
INTEGER: dict[str, Any] = {"type": "integer"}
FLOAT: dict[str, Any] = {"type": ["number", "string"]}
"""A float: a number, or ``"NaN"``/``"Infinity"``/``"-Infinity"`` (JSON has none)."""

ENTRY_KEYS = ("name", "family", "operation", "passed", "outcome", "detail")
PASSING_OUTCOMES = ("passed", "command")
"""The outcomes a check entry has with ``passed`` true (``command``: does not apply and
does not count); every other outcome has ``passed`` false."""
CHECKS: dict[str, Any] = {"type": "array", "items": {"$ref": "#/$defs/entry"}}
FAILURES: dict[str, Any] = {"type": "array", "items": {"$ref": "#/$defs/failure"}}

# Each report's own keys after the head, with the kind of value each holds, then the
# keys only some documents have (chapter 26's ``expect``, attend's per-head ``heads`` and
# ``decode``, check's ``stderr``, gradcheck's ``dtype``).
_CHAPTER_26 = {
    "chapter": STRING, "passed": BOOLEAN, "loss": FLOAT, "checks": CHECKS, "config": OBJECT,
    "parameter_names": ARRAY, "parameter_count": INTEGER, "tensors": OBJECT, "shapes": OBJECT,
    "errors": ARRAY, "initialization": OBJECT, "independence": OBJECT,
    "replay_bitwise": BOOLEAN, "history": OBJECT, "gradcheck": OBJECT,
}
_HEAD_CHAPTER = {
    "passed": BOOLEAN, "checks": CHECKS, "config": OBJECT, "tensors": OBJECT, "loss": FLOAT,
    "single_token": OBJECT, "empty_batch": OBJECT, "gradcheck": OBJECT, "errors": ARRAY,
    "history": OBJECT, "replay_bitwise": BOOLEAN, "next": STRING,
}
_CHAPTERS: dict[str, dict[str, Any]] = {
    CH27: {**_HEAD_CHAPTER, "scale_probe": OBJECT, "batch_probe": OBJECT},
    CH28: {**_HEAD_CHAPTER, "future_probabilities_zero": BOOLEAN, "tape_finite": BOOLEAN,
           "suffix_perturbation": OBJECT, "prefix_gradient": OBJECT},
    CH29: {"passed": BOOLEAN, "checks": CHECKS, "config": OBJECT, "tensors": OBJECT,
           "norms": OBJECT, "loss": FLOAT, "position_zero_identity": BOOLEAN,
           "common_shift_preserved": BOOLEAN, "invariant_tolerance": FLOAT, "shapes": ARRAY,
           "errors": ARRAY, "gradcheck": OBJECT, "tape_finite": BOOLEAN,
           "replay_bitwise": BOOLEAN, "history": OBJECT},
    CH30: {"passed": BOOLEAN, "checks": CHECKS, "config": OBJECT, "tensors": OBJECT,
           "heads": OBJECT, "prefix": OBJECT, "layout": OBJECT, "parameters": OBJECT,
           "loss": FLOAT, "shapes": OBJECT, "errors": ARRAY, "gradcheck": OBJECT,
           "tape_finite": BOOLEAN, "replay_bitwise": BOOLEAN, "history": OBJECT},
    CH37: {"passed": BOOLEAN, "checks": CHECKS, "config": OBJECT, "steps": ARRAY,
           "work": OBJECT, "reset": OBJECT, "errors": ARRAY, "history": OBJECT},
}
_OWN: dict[str, dict[str, Any]] = {
    ATTEND: {"chapter": STRING, "passed": BOOLEAN, "config": OBJECT, "parameter_names": ARRAY,
             "parameter_count": INTEGER, "loss": FLOAT, "checks": CHECKS, "notes": ARRAY,
             "tensors": OBJECT, "rows": ARRAY, "weights": OBJECT, "mask": OBJECT,
             "hull": OBJECT, "probes": ARRAY, "replay_bitwise": BOOLEAN, "gradcheck": OBJECT},
    CHECK: {"implementation": STRING, "fixtures": ARRAY, "passed": BOOLEAN, "checks": CHECKS,
            "failures": FAILURES, "slips": ARRAY, "worst": ARRAY},
    "gradcheck": {"passed": BOOLEAN, "mode": STRING, "step": FLOAT, "tolerance": FLOAT,
                  "count": INTEGER, "worst": {"type": ["object", "null"]}, "tensors": ARRAY},
    "variance": {"seed": INTEGER, "samples": INTEGER, "rows": ARRAY},
    "families": {"computed": ARRAY, "refused": ARRAY, "rope_scaling": ARRAY,
                 "default_rope_only": ARRAY},
}
_OPTIONAL: dict[str, dict[str, Any]] = {
    RUN: {"expect": OBJECT}, ATTEND: {"heads": ARRAY, "decode": OBJECT}, CHECK: {"stderr": STRING},
    "gradcheck": {"dtype": STRING},
}


def entry_schema(names: list[str]) -> dict[str, Any]:
    """The one check entry: exactly its six keys, ``name`` one of ``names``."""
    return {
        "type": "object",
        "properties": {
            "name": {"enum": names},
            "family": {"enum": list(FAMILIES)},
            "operation": {"enum": list(OPERATIONS)},
            "passed": BOOLEAN,
            "outcome": {"enum": list(OUTCOMES)},
            "detail": {"type": "string", "minLength": 1},
        },
        "required": list(ENTRY_KEYS),
        "additionalProperties": False,
        "if": {"properties": {"outcome": {"enum": list(PASSING_OUTCOMES)}}},
        "then": {"properties": {"passed": {"const": True}}},
        "else": {"properties": {"passed": {"const": False}}},
    }


FAILURE: dict[str, Any] = {
    "type": "object",
    "properties": {"check": STRING, "family": {"enum": list(FAMILIES)},
                   "fixture": {"type": ["string", "null"]},
                   "coordinate": {"type": ["string", "null"]}, "detail": STRING,
                   "slips": {"type": "array", "items": STRING},
                   "compared": {"type": ["object", "null"]}},
    "required": ["check", "family", "fixture", "coordinate", "detail", "slips", "compared"],
    "additionalProperties": False,
}
"""A failure of ``qkv check``: the check it failed (its entry's ``name``), that check's
family, the fixture and coordinate (``null`` where none applies), its words, the slips
it names and the numbers it compared (``null``: none, docs/check.md)."""


def _document(report: str, own: dict[str, Any], optional: dict[str, Any]) -> dict[str, Any]:
    """A document's object schema: the head's three keys, then ``own`` (required), then
    ``optional``, and no other key."""
    head = {"qkv_version": STRING, "schema_version": {"const": SCHEMA_VERSION},
            "report": {"const": report}}
    return {"type": "object", "properties": {**head, **own, **optional},
            "required": [*head, *own], "additionalProperties": False}


def _names(*tables: str) -> list[str]:
    """Every published name of the given tables, once each, in table order."""
    found: dict[str, None] = {}
    for table in tables:
        found.update((p.name, None) for p in PUBLISHED[table].values())
    return list(found)


def report_schema(report: str) -> dict[str, Any]:
    """The JSON Schema of ``report``'s document (one of :data:`REPORTS`). Raises
    ``KeyError`` for another name."""
    if report not in REPORTS:
        raise KeyError(report)
    title = f"qkv {report} report (schema_version {SCHEMA_VERSION})"
    head = {"$schema": DRAFT, "$id": f"urn:qkv:report-{report}.schema.json", "title": title}
    if report == RUN:
        # chapter 26 (any chapter label a fixture gives) or one of chapters 27 to 30
        defs: dict[str, Any] = {}
        chapters: list[dict[str, Any]] = []
        for chapter, own in _CHAPTERS.items():
            checks = {"type": "array", "items": {"$ref": f"#/$defs/entry-{chapter}"}}
            variant = _document(RUN, {**own, "checks": checks}, {"chapter": {"const": chapter}})
            variant["required"].insert(3, "chapter")
            chapters.append(variant)
            defs[f"entry-{chapter}"] = entry_schema(_names(chapter))
        projections = _document(RUN, _CHAPTER_26, _OPTIONAL[RUN])
        projections["properties"]["chapter"] = {"not": {"enum": list(_CHAPTERS)}}
        defs["entry"] = entry_schema(_names(RUN))
        return {**head, "$defs": defs, "anyOf": [projections, *chapters]}
    own = _OWN[report]
    defs = {**({"entry": entry_schema(_names(report))} if "checks" in own else {}),
            **({"failure": FAILURE} if "failures" in own else {})}
    return {**head, **({"$defs": defs} if defs else {}),
            **_document(report, own, _OPTIONAL.get(report, {}))}
