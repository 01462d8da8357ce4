"""The check entries of a later chapter's JSON (chapters 27 to 30): each judged family
in the one entry shape, named by :mod:`qkvcli.render.names`, with one line of words.

The shared families say what was measured (the gradient check's counts and settings,
how many bad inputs were refused, whether the replay agreed), as run's do; each other
family is said in the words its figure uses for it (the table's ``claim``).
"""

from __future__ import annotations

from typing import Any

from qkvcli.chapters.registry import ChapterEvidence
from qkvcli.core.results import FamilyCheck
from qkvcli.render.names import published
from qkvcli.render.wording import family_words, gradcheck_detail, rejected_words


def detail(report: str, evidence: ChapterEvidence, check: FamilyCheck) -> str:
    """One line of words for ``check`` of chapter ``report``'s ``evidence``."""
    if check.name == "gradcheck":
        return gradcheck_detail(evidence.gradcheck)
    if check.name == "replay":
        return family_words("replay", evidence.replay_bitwise)
    if check.name in ("errors", "rejected_inputs"):
        return rejected_words(sum(case.rejected for case in evidence.errors), len(evidence.errors))
    return published(report, check.name).claim


def chapter_checks(report: str, evidence: ChapterEvidence) -> list[dict[str, Any]]:
    """Every judged family of the chapter, in its order, as the one entry."""
    from qkvcli.render.document import checks_json

    return checks_json(report, evidence.checks, lambda check: detail(report, evidence, check))
