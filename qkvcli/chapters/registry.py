"""Which chapter a number or a fixture names, and the module that computes it.

Chapter 26 (the Q/K/V projections) is qkv's own evidence (:mod:`qkvcli.evidence`);
chapters 27 to 30 are one module each, ``qkvcli.chapters.chNN``, found by its number
with :mod:`importlib` (each has ``NAME``, ``FIXTURE``, ``parse`` and ``build``), so a
chapter is available exactly when its module is. A fixture names its chapter by its
``"chapter"`` key: ``"27-self-attention"`` is a chapter 27 fixture.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from qkvcli.core.errors import QkvError
from qkvcli.core.names import CHAPTER_IDS, DEFAULT_CHAPTER


class UnknownChapter(QkvError):
    def __init__(self, number: int) -> None:
        self.number = number
        super().__init__(f"no chapter {number}; qkv shows chapters {min(CHAPTER_IDS)} to {max(CHAPTER_IDS)}")


class ChapterUnavailable(QkvError):
    def __init__(self, number: int) -> None:
        self.number = number
        super().__init__(f"chapter {number} ({CHAPTER_IDS[number]}) is not in this build of qkv")


def chapter_module(number: int) -> ModuleType:
    """The module that parses and builds chapter ``number`` (27 to 30). Raises
    :class:`UnknownChapter` for a number qkv does not know (26 included: it has no
    module) and :class:`ChapterUnavailable` when the module is missing."""
    if number not in CHAPTER_IDS or number == DEFAULT_CHAPTER:
        raise UnknownChapter(number)
    try:
        return importlib.import_module(f"qkvcli.chapters.ch{number}")
    except ModuleNotFoundError as error:
        if error.name != f"qkvcli.chapters.ch{number}":
            raise
        raise ChapterUnavailable(number) from None


def check_number(number: int) -> int:
    """``number`` if qkv knows that chapter. Raises :class:`UnknownChapter`."""
    if number not in CHAPTER_IDS:
        raise UnknownChapter(number)
    return number


def available() -> list[int]:
    """The chapters whose evidence this build computes: 26 and each importable module."""
    found = [DEFAULT_CHAPTER]
    for number in CHAPTER_IDS:
        if number == DEFAULT_CHAPTER:
            continue
        try:
            chapter_module(number)
        except ChapterUnavailable:
            continue
        found.append(number)
    return found
