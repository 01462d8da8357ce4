"""Chapters 27 to 30's readers on damaged fixtures: every value of the bundled fixture
replaced, in turn, by each kind of wrong JSON value gives a fixture or one
:class:`~qkvcli.reading.problems.FixtureError` naming a ``$.path``, never another
exception (which the CLI would report as an internal error)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from qkvcli.chapters.registry import Chapter, chapter_of
from qkvcli.reading.limits import DEFAULT_MAX_ELEMENTS
from qkvcli.reading.load import bundled_fixture_text
from qkvcli.reading.problems import FixtureError
from qkvcli.render.chapters.dispatch import renderer

CHAPTERS = [chapter_of(number) for number in (27, 28, 29, 30)]
IDS = [f"ch{chapter.number}" for chapter in CHAPTERS]

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
@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_every_damaged_value_is_one_fixture_error_or_a_fixture(chapter: Chapter) -> None:
    document = json.loads(bundled_fixture_text(chapter.fixture))
    tried = refused = 0
    for path in paths(document):
        for junk in JUNK:
            tried += 1
            try:
                fixture = chapter.parse(replaced(document, path, junk), DEFAULT_MAX_ELEMENTS,
                                        None)
            except FixtureError as error:
                refused += 1
                assert error.location.startswith("$"), (path, junk, error)
                continue
            evidence = chapter.build(fixture)  # what parse accepts, build computes and renders
            shown = renderer(evidence)
            assert shown.text(evidence).startswith(f"chapter={chapter.name}\n")
            assert shown.trace(evidence).endswith("\n")
            json.dumps(shown.json_document(evidence), allow_nan=False)
    assert refused > tried // 2  # most damage is refused, and the loop is not vacuous


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_a_document_that_is_not_an_object_is_refused(chapter: Chapter) -> None:
    with pytest.raises(FixtureError, match=r"^\$: expected an object, got array$"):
        chapter.parse([], DEFAULT_MAX_ELEMENTS, None)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_a_tensor_path_is_read_beside_the_fixture(chapter: Chapter, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Every chapter's tensors may be ``.npy`` files, found beside the fixture whatever
    the working directory (chapters 29 and 30 looked in the working directory)."""
    import numpy as np
    from click.testing import CliRunner

    from qkvcli.cli import main

    document = json.loads(bundled_fixture_text(chapter.fixture))
    place = next(_tensor_places(document))
    np.save(tmp_path / "tensor.npy", _array_given(document, place))
    fixture = tmp_path / "fixture.json"
    fixture.write_text(json.dumps(replaced(document, place, {"npy": "tensor.npy"})),
                       encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    given = CliRunner().invoke(main, ["run", str(fixture), "-f", "text"])
    bundled = CliRunner().invoke(main, ["run", "--chapter", str(chapter.number), "-f", "text"])
    assert given.exit_code == 0, given.output
    assert given.stdout == bundled.stdout


def _tensor_places(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every tensor of a fixture: a ``{"shape", "values"}`` object or a nested list."""
    if isinstance(value, dict):
        if {"shape", "values"} <= set(value):
            yield path
            return
        for key, item in value.items():
            yield from _tensor_places(item, (*path, key))
    elif isinstance(value, list) and value and isinstance(value[0], list):
        yield path


def _empty_axes() -> Iterator[tuple[str, Any]]:
    """Each bundled chapter 27-30 fixture with one axis of one of its tensors emptied."""
    import numpy as np

    for name in ("ch27-self-attention", "ch28-causal-masking", "ch29-rope",
                 "ch30-multi-head-attention"):
        document = json.loads(bundled_fixture_text(f"{name}.json"))
        for place in _tensor_places(document):
            found: Any = document
            for key in place:
                found = found[key]
            shape = (list(found["shape"]) if isinstance(found, dict)
                     else list(np.asarray(found).shape))
            for axis in range(len(shape)):
                empty = [0 if i == axis else size for i, size in enumerate(shape)]
                yield (f"{name}-{'.'.join(place)}-{axis}",
                       replaced(document, place, {"shape": empty, "values": []}))
        # one axis emptied in every tensor of the same rank that shares its size: an
        # empty batch, no tokens
        places = list(_tensor_places(document))
        arrays = {place: _array_at(document, place) for place in places}
        for rank in sorted({array.ndim for array in arrays.values()}):
            for axis in range(rank):
                sizes = {array.shape[axis] for array in arrays.values() if array.ndim == rank}
                for size in sorted(sizes):
                    emptied = document
                    for place, array in arrays.items():
                        if array.ndim == rank and array.shape[axis] == size:
                            shape = [0 if i == axis else n for i, n in enumerate(array.shape)]
                            emptied = replaced(emptied, place, {"shape": shape, "values": []})
                    yield f"{name}-rank{rank}-axis{axis}-size{size}", emptied


def _array_given(document: Any, place: tuple[Any, ...]) -> Any:
    """The values of the tensor at ``place``, as the fixture gives them."""
    import numpy as np

    found: Any = document
    for key in place:
        found = found[key]
    if isinstance(found, dict):
        return np.asarray(found["values"], dtype=np.float64).reshape(found["shape"])
    return np.asarray(found, dtype=np.float64)


def _array_at(document: Any, place: tuple[Any, ...]) -> Any:
    import numpy as np

    found: Any = document
    for key in place:
        found = found[key]
    if isinstance(found, dict):
        return np.zeros(found["shape"])
    return np.asarray(found, dtype=np.float64)


EMPTY_AXES = list(_empty_axes())


@pytest.mark.parametrize(("label", "document"), EMPTY_AXES, ids=[label for label, _ in EMPTY_AXES])
def test_a_chapter_fixture_with_an_empty_axis_is_run_exactly_when_it_validates(
        label: str, document: Any, tmp_path: Any) -> None:
    """Its evidence (exit 0 or 1) or one line naming the place (exit 2), never exit 70,
    and ``validate`` says ok exactly when ``run`` computes the evidence."""
    from click.testing import CliRunner

    from qkvcli.cli import main

    path = tmp_path / "fixture.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    validated = CliRunner().invoke(main, ["validate", str(path)])
    ran = CliRunner().invoke(main, ["run", str(path), "-f", "text"])
    assert ran.exit_code in (0, 1, 2), ran.output
    assert (validated.exit_code == 0) == (ran.exit_code in (0, 1)), (validated.output, ran.output)
    if ran.exit_code == 2:
        assert ran.stderr.count("\n") == 1 and ran.stderr.startswith(f"Error: {path}: $.")
