"""What the chapters' facts and layout tables share (chapters 27 to 30 and 37).

Each judged family as the one check entry, named by :mod:`qkvcli.render.names`, with its
line of words from the one wording table (:data:`~qkvcli.render.wording.WORDS`).
Each refused input as the entry its chapter publishes (:func:`refusals`), and a trace's
``ERROR`` line of it; a layout table's line per index (:func:`each`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from qkvcli.core.results import Refusal
from qkvcli.render.facts import Fact, entries, verdict
from qkvcli.render.numbers import fmt_bool, fmt_shape, fmt_vector
from qkvcli.render.wording import said

Table = tuple[tuple[str, Any], ...]
"""A text's or a trace's lines (:func:`~qkvcli.render.facts.report`)."""
detail = said
"""A chapter's check in words: ``detail(report, evidence, check)``, the one table's."""


def chapter_checks(report: str, evidence: Any) -> list[dict[str, Any]]:
    """Every judged family of the chapter, in its order, as the one entry."""
    from qkvcli.render.document import checks_json

    return checks_json(report, evidence.checks, lambda check: detail(report, evidence, check))


REFUSAL: dict[str, Callable[[Refusal], Any]] = {
    "case": lambda e: e.case, "expected": lambda e: e.expected,
    "raised": lambda e: e.raised or None, "rejected": lambda e: verdict(e.rejected),
    "message": lambda e: e.message}
"""How a refusal's entry spells each of its own fields."""


def refusals(errors: Iterable[Refusal], keys: Sequence[str],
             **more: Callable[[Refusal], Any]) -> Fact:
    """Each refused input as one entry of ``keys``, in that order: its own fields
    (:data:`REFUSAL`) or ``more``, a chapter's (its ``kind``, its ``facts``)."""
    spell = {**REFUSAL, **more}
    return entries([{key: spell[key](e) for key in keys} for e in errors])


def shape_of(value: Any) -> str:
    """A tensor's shape, ``[1,2,2]``."""
    return fmt_shape(np.shape(value))


TRACED = {"tensor": lambda value: f"shape={shape_of(value)}|values={fmt_vector(value)}"}
"""A trace's spelling of a tensor: ``shape=[1,2,2]|values=[...]``."""


def worded(label: str, path: str, held: str, broken: str) -> tuple[str, str, Any]:
    """A proof's part: the verdict at ``path`` said ``held`` or ``broken``."""
    return (label, path, lambda value: held if value else broken)


KEPT_TEXT = ("", "true", "false", "_changed", "true", "false")
KEPT_TRACE = ("", "bitwise-unchanged", "changed", "", "changed", "unchanged")
"""A prefix proof's words (:func:`invariance`) in a text's line and in a trace's."""


def invariance(kept: Sequence[bool], position: int, last: bool, words: Sequence[str],
               labelled: str, between: str) -> str:
    """Each earlier position's output kept and the perturbed ``position``'s changed (``last``),
    ``words``: a kept position's label end and its words for kept and not, then the
    perturbed one's label end and its words for changed and not."""
    kept_end, same, moved, changed_end, yes, no = words
    return between.join([*(f"position_{i}{kept_end}{labelled}{same if k else moved}"
                           for i, k in enumerate(kept)),
                         f"position_{position}{changed_end}{labelled}{yes if last else no}"])


REPLAY = ("replay", "replay_bitwise", lambda same: "bitwise" if same else "mismatch")
"""A proof's replay part: ``bitwise`` when the same fixture replayed bit for bit."""


def checked(names: Sequence[str]) -> tuple[tuple[Any, ...], ...]:
    """``name_checks`` parts: how many coordinates of each gradient-check tensor were checked."""
    return tuple((f"{name}_checks", lambda e, name=name: e.gradcheck.checked(name)) for name in names)


def json_document(chapter: str, evidence: Any, found: Any) -> dict[str, Any]:
    """A chapter's JSON report: the one head (``report``: ``run``), then its facts ``found``
    by the one walk (floats are numbers, tensors ``{"shape", "values"}``)."""
    from qkvcli.render.document import head
    from qkvcli.render.facts import json_of

    return {**head("run", chapter=chapter, passed=evidence.passed), **json_of(found)}


def rejected(keys: dict[str, str] | None = None) -> tuple[str, Any]:
    """A text's ``errors=`` facts: each refused input's key (``keys``: the chapter's own
    name of its case, else the case) and whether it was rejected."""
    return ("errors", lambda errors: " ".join(
        f"{(keys or {}).get(e['case'], e['case'])}:{fmt_bool(e['rejected'].value)}" for e in errors))


def error_lines(indices: Iterable[int]) -> Table:
    """A trace's ``ERROR`` line per refused input at ``indices`` of the facts' ``errors``:
    its case, kind, published facts and verdict."""
    return tuple(("ERROR", ("errors", lambda errors, i=i: "|".join([
        f"case={errors[i]['case']}", f"kind={errors[i]['kind']}",
        *(f"{key}={value}" for key, value in errors[i]["facts"].items()),
        f"rejected={fmt_bool(errors[i]['rejected'].value)}"]))) for i in indices)
