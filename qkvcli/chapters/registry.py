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

DEFAULT = 26
"""The chapter ``qkv run`` and ``qkv report`` show without ``--chapter``."""
NAMES = {26: "26-qkv-projections", 27: "27-self-attention", 28: "28-causal-masking",
         29: "29-rope", 30: "30-multi-head-attention"}
"""Each chapter's id, as its report's first line prints it and its fixture's
``"chapter"`` key gives it."""


class UnknownChapter(QkvError):
    def __init__(self, number: int) -> None:
        self.number = number
        super().__init__(f"no chapter {number}; qkv shows chapters {min(NAMES)} to {max(NAMES)}")


class ChapterUnavailable(QkvError):
    def __init__(self, number: int) -> None:
        self.number = number
        super().__init__(f"chapter {number} ({NAMES[number]}) is not in this build of qkv")


def chapter_module(number: int) -> ModuleType:
    """The module that parses and builds chapter ``number`` (27 to 30). Raises
    :class:`UnknownChapter` for a number qkv does not know (26 included: it has no
    module) and :class:`ChapterUnavailable` when the module is missing."""
    if number not in NAMES or number == DEFAULT:
        raise UnknownChapter(number)
    try:
        return importlib.import_module(f"qkvcli.chapters.ch{number}")
    except ModuleNotFoundError as error:
        if error.name != f"qkvcli.chapters.ch{number}":
            raise
        raise ChapterUnavailable(number) from None


def number_named(name: object) -> int | None:
    """The chapter whose id is ``name`` (a fixture's ``"chapter"`` value); ``None`` when
    it names none of 26 to 30."""
    for number, known in NAMES.items():
        if name == known:
            return number
    return None


def check_number(number: int) -> int:
    """``number`` if qkv knows that chapter. Raises :class:`UnknownChapter`."""
    if number not in NAMES:
        raise UnknownChapter(number)
    return number


def available() -> list[int]:
    """The chapters whose evidence this build computes: 26 and each importable module."""
    found = [DEFAULT]
    for number in NAMES:
        if number == DEFAULT:
            continue
        try:
            chapter_module(number)
        except ChapterUnavailable:
            continue
        found.append(number)
    return found
