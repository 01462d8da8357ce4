"""Which chapter a number or a fixture names, and the :class:`Chapter` that computes it.

Chapter 26 (the Q/K/V projections) is ``qkv run``'s plan (:mod:`qkvcli.check.chapter26`);
chapters 27 to 30 are each a :class:`Chapter` (its id, its bundled fixture, its parser,
its evidence builder), found through one table (:data:`CHAPTERS`: the module and the
name of each, imported only when asked), so a chapter is available exactly when its
module is. A fixture names its chapter by its ``"chapter"`` key: ``"27-self-attention"``
is a chapter 27 fixture.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from qkvcli.core.errors import QkvError
from qkvcli.core.names import CHAPTER_IDS, DEFAULT_CHAPTER, chapter_span
from qkvcli.core.record import Record
from qkvcli.core.results import FamilyCheck

if TYPE_CHECKING:
    from qkvcli.core.results import Refusal
    from qkvcli.gradcheck.records import GradcheckResult
    from qkvcli.reading.files import StrPath

CHAPTERS = {
    27: ("qkvcli.chapters.head", "SELF_ATTENTION"),
    28: ("qkvcli.chapters.head", "CAUSAL_MASKING"),
    29: ("qkvcli.chapters.ch29", "CHAPTER"),
    30: ("qkvcli.chapters.ch30", "CHAPTER"),
    37: ("qkvcli.chapters.ch37", "CHAPTER"),
}
"""Each later chapter: the module that defines it and the :class:`Chapter`'s name there."""


def settings_replaced(fixture: Any, **settings: float | int | None) -> Any:
    """``fixture`` (a record holding ``step``, ``tolerance`` and ``samples``) with the
    gradient check's settings replaced (the command line's ``--step``, ``--tolerance``,
    ``--samples``)."""
    return fixture._replace(**settings)


class Chapter(Record):
    """One later chapter: what the CLI, the quiz and the tests need of it.

    ``parse(document, max_elements, base_dir)`` validates a fixture document (raising
    :class:`~qkvcli.reading.problems.FixtureError` naming the ``$.path``), ``build`` computes
    the evidence of a parsed fixture (no I/O, no wording), ``with_settings(fixture,
    **settings)`` replaces the gradient check's ``step``, ``tolerance`` or ``samples``
    (:func:`settings_replaced` where the fixture holds them itself); ``settings`` are the
    ones it takes (none for a chapter without a gradient check, chapter 37's).
    """

    number: int
    name: str
    fixture: str
    parse: Callable[[object, int, StrPath | None], Any]
    build: Callable[[Any], Any]
    with_settings: Callable[..., Any] = settings_replaced
    settings: tuple[str, ...] = ("step", "tolerance", "samples")

    @property
    def has_gradcheck(self) -> bool:
        """Whether the chapter has a reverse pass whose gradients are checked."""
        return bool(self.settings)


class ChapterEvidence(Record):
    """What every later chapter's evidence holds besides its own: its rejected inputs,
    its gradient check, whether a second run replays the first bit for bit, and its
    families judged (``checks``, in report order)."""

    errors: tuple[Refusal, ...]
    gradcheck: GradcheckResult
    replay_bitwise: bool
    checks: tuple[FamilyCheck, ...]

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)


class UnknownChapter(QkvError):
    def __init__(self, number: int) -> None:
        self.number = number
        super().__init__(f"no chapter {number}; qkv shows chapters {chapter_span()}")


class ChapterUnavailable(QkvError):
    def __init__(self, number: int) -> None:
        self.number = number
        super().__init__(f"chapter {number} ({CHAPTER_IDS[number]}) is not in this build of qkv")


def chapter_of(number: int) -> Chapter:
    """Chapter ``number`` (27 to 30, 37). Raises :class:`UnknownChapter` for a number qkv does
    not know (26 included: it is not a :class:`Chapter`) and :class:`ChapterUnavailable`
    when its module is missing."""
    if number not in CHAPTERS:
        raise UnknownChapter(number)
    module, attribute = CHAPTERS[number]
    try:
        found: Chapter = getattr(importlib.import_module(module), attribute)
    except ModuleNotFoundError as error:
        if error.name != module:
            raise
        raise ChapterUnavailable(number) from None
    return found


def check_number(number: int) -> int:
    """``number`` if qkv knows that chapter. Raises :class:`UnknownChapter`."""
    if number not in CHAPTER_IDS:
        raise UnknownChapter(number)
    return number


def available() -> list[int]:
    """The chapters whose evidence this build computes: 26 and each importable one."""
    found = [DEFAULT_CHAPTER]
    for number in CHAPTERS:
        try:
            chapter_of(number)
        except ChapterUnavailable:
            continue
        found.append(number)
    return found
