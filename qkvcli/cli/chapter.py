"""``--chapter N`` of ``qkv run`` and ``qkv report``: which chapter a fixture is, and its evidence.

A fixture is chapter 26's unless ``--chapter`` names another (27 to 30, 37) or its
``"chapter"`` key names one (``"27-self-attention"``); without a fixture the chapter's
bundled one is used. The document is read once (:func:`load`), then parsed by chapter
26's reader or by the chapter's parser (:mod:`qkvcli.chapters.registry`). The
gradient-check options a chapter's fixture takes (``--step``, ``--tolerance``,
``--samples``) replace its own; the others are named in a warning.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from qkvcli.cli.group import InputError
from qkvcli.cli.io import label_of, refuse_layer_fixture
from qkvcli.cli.options import CheckOverrides
from qkvcli.core.names import CHAPTER_IDS, DEFAULT_CHAPTER, chapter_of_id
from qkvcli.core.record import Record
from qkvcli.reading.load import fixture_json
from qkvcli.reading.parse import parse_fixture
from qkvcli.reading.settings import misnamed_chapter

if TYPE_CHECKING:
    from qkvcli.chapters.registry import Chapter


class ChapterFixture(Record):
    """A fixture of one of chapters 27 to 30 or 37, parsed by its chapter."""

    chapter: Chapter
    fixture: Any


def chapter_option(func: Any) -> Any:
    """``--chapter N``: the course chapter to show (26, the default, to 30, or 37)."""
    return click.option(
        "--chapter", "chapter", type=int, default=None, metavar="N",
        help="The course chapter: 26 (Q/K/V projections, the default), 27 (self-attention), "
        "28 (causal masking), 29 (RoPE), 30 (multi-head attention), 37 (a KV cache). Without "
        "FIXTURE, the chapter's own fixture; a fixture whose \"chapter\" key names one is that chapter's.",
    )(func)


def check_chapter(chapter: int | None) -> None:
    """Refuse an unknown ``--chapter`` before any work: one ``Error:`` line, exit 2."""
    if chapter is None:
        return
    from qkvcli.chapters.registry import chapter_of, check_number
    from qkvcli.core.errors import QkvError

    try:
        if check_number(chapter) != DEFAULT_CHAPTER:
            chapter_of(chapter)
    except QkvError as error:
        raise InputError(f"--chapter {chapter}: {error}") from None


def chapter_of(number: int) -> Chapter:
    """Chapter ``number`` (27 to 30, 37), the registry imported only then: a chapter 26
    command never loads it."""
    from qkvcli.chapters.registry import chapter_of

    return chapter_of(number)


def load(path: Path | None, max_elements: int, chapter: int | None) -> Any:
    """The fixture at ``path`` (``None``: the chapter's bundled one) as chapter 26's
    :class:`~qkvcli.reading.fixture.Fixture` or a :class:`ChapterFixture`. Raises the
    readers' errors (the caller names the file)."""
    label = label_of(path)
    found = None
    if chapter is not None and chapter != DEFAULT_CHAPTER:
        found = chapter_of(chapter)
    if path is None and found is not None:
        data, stem, base_dir = fixture_json(None, found.fixture)
    else:
        data, stem, base_dir = fixture_json(path)
    if found is None:  # a misspelt later chapter is one problem, not every key it has
        misnamed = misnamed_chapter(data)
        if misnamed is not None:
            raise misnamed
    named = chapter_of_id(data.get("chapter")) if isinstance(data, dict) else None
    if found is None and named not in (None, DEFAULT_CHAPTER):
        if chapter == DEFAULT_CHAPTER:
            raise InputError(f"{label}: $.chapter: a chapter {named} fixture "
                             f"({CHAPTER_IDS[named]}); --chapter 26 reads chapter 26's")
        found = chapter_of(named)
    if found is None:
        refuse_layer_fixture(data, label)
        return parse_fixture(data, stem, max_elements, base_dir)
    return ChapterFixture(found, found.parse(data, max_elements, base_dir))


def build(loaded: ChapterFixture, overrides: CheckOverrides, tensors: str | None = None) -> Any:
    """The chapter's evidence for ``loaded``, with the command line's gradient-check
    settings (the rest, and ``--tensors``, named in a warning: a chapter's report prints
    every value)."""
    chapter, fixture = loaded.chapter, loaded.fixture
    given = overrides.changes()
    settable = {name: value for name, value in given.items() if name in chapter.settings}
    if settable:
        fixture = chapter.with_settings(fixture, **settable)
    ignored = [name for name in given if name not in settable]
    if tensors is not None:
        ignored.append("tensors")
    for name in ignored:
        click.echo(f"qkv: warning: --{name} does not apply to chapter {chapter.name}; ignored",
                   err=True)
    from qkvcli.gradcheck.settings import evaluation_budget

    with evaluation_budget(overrides.max_evaluations):  # a limit the chapter's check keeps
        return chapter.build(fixture)


def chapter_problems(data: Any, base_dir: Any, max_elements: int,
                     chapter: int | None) -> tuple[str, list[str]] | None:
    """``qkv validate`` of a chapter 27-30 fixture: its chapter's id and its first problem
    (none when valid); ``None`` for a chapter 26 fixture (``chapter`` is ``--chapter``)."""
    from qkvcli.reading.problems import FixtureError

    number = chapter
    if number is None or number == DEFAULT_CHAPTER:
        misnamed = misnamed_chapter(data)
        if misnamed is not None:
            return CHAPTER_IDS[DEFAULT_CHAPTER], [str(misnamed)]
    if number is None and isinstance(data, dict):
        number = chapter_of_id(data.get("chapter"))
    if number is None or number == DEFAULT_CHAPTER:
        return None
    found = chapter_of(number)
    try:
        found.parse(data, max_elements, base_dir)
    except FixtureError as error:
        return found.name, [str(error)]
    return found.name, []
