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


def test_replace_builds_a_new_record():
    first = Point(1, 2)
    changed = first._replace(y=5)
    assert changed == Point(1, 5)
    assert first.y == 2  # the original is untouched
    with pytest.raises(TypeError, match="no field 'depth'"):
        first._replace(depth=1)


def test_fixture_replace_shares_the_fixtures_arrays():
    from qkvcli.reading.load import load_fixture

    fixture = load_fixture()
    changed = fixture._replace(step=1e-5, mode="fast")
    assert (changed.step, changed.mode, fixture.step) == (1e-5, "fast", 1e-6)
    assert changed.weights is fixture.weights and changed.names == fixture.names


class Labelled(Point):
    colour: str = "black"


class Relabelled(Labelled):
    label: str = "r"  # declared again: keeps its place, takes the new default


def test_fields_are_inherited_from_base_records_in_order():
    assert Labelled.__record_fields__ == ("x", "y", "label", "colour")
    item = Labelled(1, 2, colour="red")
    assert (item.x, item.y, item.label, item.colour) == (1, 2, "p", "red")
    assert item == Labelled(x=1, y=2, label="p", colour="red")
    assert repr(item) == "Labelled(x=1, y=2, label='p', colour='red')"
    assert item != Point(1, 2)  # another type: never equal, even with the same base fields
    assert item._replace(x=5) == Labelled(5, 2, "p", "red")
    assert Relabelled.__record_fields__ == ("x", "y", "label", "colour")
    assert Relabelled(1, 2).label == "r"
    with pytest.raises(TypeError, match="missing field 'y'"):
        Labelled(1)


def test_class_vars_are_not_fields_with_or_without_string_annotations():
    namespace: dict[str, object] = {}
    # Compiled without ``from __future__ import annotations``: the hints are objects.
    exec(
        "from typing import ClassVar\n"
        "from qkvcli.core.record import Record\n"
        "class Plain(Record):\n"
        "    unit: ClassVar[str] = 'm'\n"
        "    size: int\n"
        "    count: int = 1\n",
        namespace,
    )
    plain = namespace["Plain"]
    assert plain.__record_fields__ == ("size", "count")  # type: ignore[attr-defined]
    assert plain(3).unit == "m"  # type: ignore[operator]


def test_a_field_without_default_after_one_with_a_default_is_refused():
    with pytest.raises(TypeError, match="field 'z' without a default follows 'label'"):
        class Broken(Point):
            z: int


def test_engine_outputs_unpack_in_field_order_and_name_their_fields():
    import numpy as np

    from qkvcli import QkvForward, QkvGradients, QkvProjections

    rng = np.random.default_rng(3)
    weights = [rng.uniform(-1, 1, (4, 2)) for _ in range(3)]
    layer = QkvProjections.from_arrays(*weights)
    x = rng.uniform(-1, 1, (2, 3, 4))
    outputs = layer.forward(x)
    assert isinstance(outputs, QkvForward) and isinstance(outputs, Record)
    q, k, v = outputs
    for got, field, w in zip((q, k, v), ("query", "key", "value"), weights, strict=True):
        assert got is getattr(outputs, field)
        np.testing.assert_allclose(got, x @ w, rtol=1e-12, atol=1e-12)
    upstream = [rng.uniform(-1, 1, (2, 3, 2)) for _ in range(3)]
    grads = layer.backward(x, *upstream)
    assert isinstance(grads, QkvGradients)
    assert QkvGradients.__record_fields__ == ("grad_input", "grad_w_query", "grad_w_key",
                                               "grad_w_value")
    grad_input, grad_w_query, grad_w_key, grad_w_value = grads
    assert grad_input is grads.grad_input and grad_w_query is grads.grad_w_query
    assert grad_w_key is grads.grad_w_key and grad_w_value is grads.grad_w_value
    rows = x.reshape(-1, 4)
    np.testing.assert_allclose(grad_w_value, rows.T @ upstream[2].reshape(-1, 2), rtol=1e-12)
    assert repr(outputs).startswith("QkvForward(query=array(")
    with pytest.raises(FrozenRecordError):
        outputs.query = q  # type: ignore[misc]


def test_gradient_names_are_the_fields_of_the_gradients():
    from qkvcli.core.names import BRANCHES, GRADIENTS
    from qkvcli.core.outputs import QkvForward, QkvGradients
    from qkvcli.protocol.python import BACKWARD_NAMES, FORWARD_NAMES

    assert QkvGradients.__record_fields__ == GRADIENTS == BACKWARD_NAMES
    assert QkvForward.__record_fields__ == BRANCHES == FORWARD_NAMES


OTHER_IDIOMS = ("@dataclass", "NamedTuple", "namedtuple(")


def test_one_record_idiom_in_the_whole_package():
    import pathlib

    package = pathlib.Path(__file__).resolve().parent.parent / "qkvcli"
    skip = {"core/record.py"}  # the idiom itself, which names what it replaces
    found = []
    for path in sorted(package.rglob("*.py")):
        if str(path.relative_to(package)) in skip:
            continue
        text = path.read_text(encoding="utf-8")
        found += [f"{path.relative_to(package)}: {idiom}" for idiom in OTHER_IDIOMS
                  if idiom in text]
    assert found == []
