"""Chapters 29 and 30's readers on damaged fixtures: every value of the bundled fixture
replaced, in turn, by each kind of wrong JSON value gives a fixture or one
:class:`~qkvcli.reading.problems.FixtureError` naming a ``$.path``, never another
exception (which the CLI would report as an internal error)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

from qkvcli.chapters import ch29, ch30
from qkvcli.reading.load import bundled_fixture_text
from qkvcli.reading.problems import FixtureError
from qkvcli.render.chapters import ch29 as report29
from qkvcli.render.chapters import ch30 as report30

RENDERERS = {ch29.NAME: report29, ch30.NAME: report30}

JUNK: tuple[Any, ...] = (None, True, -1, 0, 2.5, 1e308, "x", "", [], [[]], [1, 2], {}, {"a": 1},
                         [[1, 0], [0, 1]], [[[1.0]]], {"shape": [2], "values": [1, "a"]})


def paths(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place in a JSON document, the document itself first; lists only by their
    first element (their other elements are alike)."""
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths(item, (*path, key))
    elif isinstance(value, list) and value:
        yield from paths(value[0], (*path, 0))


def replaced(document: Any, path: tuple[Any, ...], junk: Any) -> Any:
    if not path:
        return copy.deepcopy(junk)
    changed = copy.deepcopy(document)
    target = changed
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = copy.deepcopy(junk)
    return changed


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("chapter", [ch29, ch30], ids=["ch29", "ch30"])
def test_every_damaged_value_is_one_fixture_error_or_a_fixture(chapter: ModuleType) -> None:
    document = json.loads(bundled_fixture_text(chapter.FIXTURE))
    tried = refused = 0
    for path in paths(document):
        for junk in JUNK:
            tried += 1
            try:
                fixture = chapter.parse(replaced(document, path, junk))
            except FixtureError as error:
                refused += 1
                assert error.location.startswith("$"), (path, junk, error)
                continue
            evidence = chapter.build(fixture)  # what parse accepts, build computes and renders
            shown = RENDERERS[chapter.NAME]
            assert shown.text(evidence).startswith(f"chapter={chapter.NAME}\n")
            assert shown.trace(evidence).endswith("\n")
            json.dumps(shown.json_document(evidence), allow_nan=False)
    assert refused > tried // 2  # most damage is refused, and the loop is not vacuous


@pytest.mark.parametrize("chapter", [ch29, ch30], ids=["ch29", "ch30"])
def test_a_document_that_is_not_an_object_is_refused(chapter: ModuleType) -> None:
    with pytest.raises(FixtureError, match=r"^\$: expected an object, got array$"):
        chapter.parse([])
