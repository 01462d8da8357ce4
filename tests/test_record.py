"""Record: the cheap immutable base of the evidence and gradient-check types."""

from __future__ import annotations

import pytest

from qkvcli.core.record import FrozenRecordError, Record


class Point(Record):
    x: int
    y: int
    label: str = "p"


def test_construction_defaults_and_repr():
    assert Point(1, 2) == Point(x=1, y=2, label="p")
    assert Point(1, y=2, label="q").label == "q"
    assert repr(Point(1, 2)) == "Point(x=1, y=2, label='p')"


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [((1, 2, "a", 4), {}, "takes 3 fields"), ((1,), {}, "missing field 'y'"),
     ((1, 2), {"z": 3}, "no field 'z'"), ((1, 2), {"x": 3}, "field 'x' twice")],
    ids=["too-many", "missing", "unknown", "twice"],
)
def test_bad_construction(args, kwargs, message):
    with pytest.raises(TypeError, match=message):
        Point(*args, **kwargs)


def test_immutable_equal_and_hashable():
    point = Point(1, 2)
    with pytest.raises(FrozenRecordError):
        point.x = 5  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del point.y  # type: ignore[misc]
    assert point.x == 1
    assert point != Point(1, 3)
    assert hash(point) == hash(Point(1, 2))
    assert point != (1, 2, "p")  # not a tuple: only records of the same type compare

    class Other(Record):
        x: int
        y: int
        label: str = "p"

    assert point != Other(1, 2)


class Derived(Record):
    width: int
    height: int = 1

    def __post_init__(self) -> None:
        self.__dict__["area"] = self.width * self.height


def test_post_init_runs_on_every_construction_and_replace():
    first = Derived(2, 3)
    assert first.__dict__["area"] == 6
    assert Derived(width=4).__dict__["area"] == 4
    changed = first._replace(height=5)
    assert changed == Derived(2, 5) and changed.__dict__["area"] == 10
    assert first.height == 3  # the original is untouched
    assert repr(first) == "Derived(width=2, height=3)"  # derived values are not fields
    with pytest.raises(TypeError, match="no field 'depth'"):
        first._replace(depth=1)


def test_fixture_replace_rebuilds_its_layer():
    from qkvcli.reading.load import load_fixture

    fixture = load_fixture()
    changed = fixture._replace(step=1e-5, mode="fast")
    assert (changed.step, changed.mode, fixture.step) == (1e-5, "fast", 1e-6)
    assert changed.layer.names == fixture.layer.names
