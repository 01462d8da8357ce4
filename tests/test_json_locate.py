"""Where strict JSON is broken: line, column and ``$.path`` of NaN, repeated keys, syntax errors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from qkvcli.reading.json_locate import line_column, locate
from qkvcli.reading.json_values import JsonTextError, parse_json_text
from qkvcli.reading.problems import FixtureError


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": [{"x": 1}, {"y": [1, 2, NaN]}]}',
         "$.a[1].y[2]: line 1 column 31: NaN is not a number JSON allows; write a finite number"),
        ('[1,\n -Infinity]',
         "$[1]: line 2 column 2: -Infinity is not a number JSON allows; write a finite number"),
        ('{"s": "NaN, [ { \\" ]", "t": [Infinity]}',
         "$.t[0]: line 1 column 30: Infinity is not a number JSON allows; write a finite number"),
        ('{"w": {"q": {"values": 1,\n "values": 2}}}',
         '$.w.q: line 2 column 2: duplicate key "values"'),
        ('{"a": 1, "b": [true, null, "x"], "a": 3}', '$: line 1 column 34: duplicate key "a"'),
        ('{\n "a": 1,\n "b": [1 2]\n}', "$.b: line 3 column 10: invalid JSON: expecting ',' delimiter"),
        ('{"a": {"b": 1 "c": 2}}', "$.a: line 1 column 15: invalid JSON: expecting ',' delimiter"),
        ("{", "line 1 column 2: invalid JSON: expecting property name enclosed in double quotes"),
    ],
    ids=["nested-nan", "negative-infinity", "inside-strings", "duplicate-nested",
         "duplicate-top", "syntax-in-array", "syntax-in-object", "syntax-top"],
)
def test_problems_carry_line_column_and_path(text: str, message: str) -> None:
    with pytest.raises(JsonTextError) as caught:
        parse_json_text(text)
    assert str(caught.value) == message
    assert isinstance(caught.value, FixtureError)


def test_the_error_stores_its_fields() -> None:
    with pytest.raises(JsonTextError) as caught:
        parse_json_text('{"a": [1, NaN]}')
    error = caught.value
    assert (error.location, error.line, error.column) == ("$.a[1]", 1, 11)
    assert error.problem == "NaN is not a number JSON allows; write a finite number"


def test_line_column_counts_as_json_does() -> None:
    text = '{\n  "a": [1,\n  2 3]}'
    with pytest.raises(json.JSONDecodeError) as caught:
        json.loads(text)
    assert line_column(text, caught.value.pos) == (caught.value.lineno, caught.value.colno)


def test_valid_text_has_nothing_to_locate() -> None:
    assert locate('{"a": [1, 2, {"b": "NaN"}], "c": -1.5e-3}') is None


def _paths(value: Any, where: str = "$") -> list[tuple[str, Any]]:
    """Every leaf with its path, in document order."""
    if isinstance(value, dict):
        return [p for key, child in value.items() for p in _paths(child, f"{where}.{key}")]
    if isinstance(value, list):
        return [p for i, child in enumerate(value) for p in _paths(child, f"{where}[{i}]")]
    return [(where, value)]


_LEAVES = st.one_of(st.integers(-5, 5), st.floats(-1e3, 1e3), st.booleans(), st.none(),
                    st.sampled_from(["x", "a,b", "[{", 'q"']))
_DOCS = st.recursive(
    _LEAVES,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(["a", "b", "c", "values"]), inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(doc=_DOCS, pick=st.integers(0, 100), indent=st.sampled_from([None, 1]))
def test_the_path_of_a_nan_is_where_it_stands(doc: Any, pick: int, indent: int | None) -> None:
    marker = "@@MARK@@"
    leaves = _paths(doc)
    assume(leaves)
    where, _ = leaves[pick % len(leaves)]
    marked = _replace(doc, where, marker)
    text = json.dumps(marked, indent=indent).replace(f'"{marker}"', "NaN")
    spot = locate(text)
    assert spot is not None
    assert (spot.what, spot.path, spot.detail) == ("constant", where, "NaN")
    assert text[spot.offset:spot.offset + 3] == "NaN"


def _replace(value: Any, where: str, marker: str, here: str = "$") -> Any:
    if here == where:
        return marker
    if isinstance(value, dict):
        return {k: _replace(v, where, marker, f"{here}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_replace(v, where, marker, f"{here}[{i}]") for i, v in enumerate(value)]
    return value
