"""A fixture's ``expect`` section read: values the author expects of a run (judged against
the run by :mod:`qkvcli.check.expect`, not here).

::

    "expect": {
      "query": [[[1, 2], [0, 1]]],
      "loss": 3.5,
      "value_weight_gradient": [[2, 0.5], [3, 2], [-2, 0]],
      "tolerance": 0
    }

Every key is optional. Tensors use the fixture's tensor forms (``npy`` paths relative to
the fixture's directory, as everywhere else) and must have the shape
the run gives them (``query``/``key``/``value`` ``[batch, tokens, d_head]``,
``input_gradient`` ``[batch, tokens, d_model]``, ``*_weight_gradient``
``[d_model, d_head]``). A value passes when its scaled error
``abs(actual - expected) / max(1, abs(actual), abs(expected))`` is at most
``tolerance``; the default tolerance 0 demands exact equality.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qkvcli.core.arrays import Array
from qkvcli.core.record import Record
from qkvcli.reading.json_values import expect_object, finite_number, unknown_keys
from qkvcli.reading.limits import expect_shape
from qkvcli.reading.problems import FixtureError, Problems
from qkvcli.reading.tensors import parse_tensor

if TYPE_CHECKING:
    from qkvcli.reading.files import StrPath

# name -> the axes of its shape, in the order they are compared and reported.
EXPECT_TENSORS: dict[str, str] = {
    "query": "batch, tokens, d_head",
    "key": "batch, tokens, d_head",
    "value": "batch, tokens, d_head",
    "input_gradient": "batch, tokens, d_model",
    "query_weight_gradient": "d_model, d_head",
    "key_weight_gradient": "d_model, d_head",
    "value_weight_gradient": "d_model, d_head",
}
EXPECT_FIELDS: dict[str, str] = {
    "query": "query", "key": "key", "value": "value", "input_gradient": "grad_input",
    "query_weight_gradient": "grad_w_query", "key_weight_gradient": "grad_w_key",
    "value_weight_gradient": "grad_w_value",
}
"""Each expected tensor's key in the fixture, and the engine's field it is compared with."""
EXPECT_KEYS = ("query", "key", "value", "loss", "input_gradient", "query_weight_gradient",
               "key_weight_gradient", "value_weight_gradient", "tolerance")
DEFAULT_EXPECT_TOLERANCE = 0.0


class Expectations(Record):
    """Expected tensors (by name, in :data:`EXPECT_KEYS` order), loss and tolerance."""

    tensors: tuple[tuple[str, Array], ...]
    loss: float | None = None
    tolerance: float = DEFAULT_EXPECT_TOLERANCE


def _tolerance(raw: object) -> float:
    tolerance = finite_number(raw, "$.expect.tolerance")
    if tolerance < 0:
        raise FixtureError("$.expect.tolerance", "tolerance must not be negative")
    return tolerance


def parse_expect(
    raw: object, sizes: tuple[int, int, int, int] | None, max_elements: int, problems: Problems,
    base_dir: StrPath | None = None,
) -> Expectations | None:
    """Parse ``$.expect``; ``sizes`` is ``(batch, tokens, d_model, d_head)`` when known.

    ``base_dir`` is the fixture's directory, where ``npy`` paths resolve (``None``: the
    current directory).

    Each entry is checked on its own; shapes are compared only when ``sizes`` is known.
    Gives ``None`` after reporting a problem to ``problems``.
    """
    section = expect_object(raw, "$.expect", problems)
    if section is None:
        return None
    for error in unknown_keys(section, EXPECT_KEYS, "$.expect"):
        problems.add(error)
    ok = True
    shapes: dict[str, tuple[int, ...]] = {}
    if sizes is not None:
        batch, tokens, d_model, d_head = sizes
        shapes = {
            "query": (batch, tokens, d_head), "key": (batch, tokens, d_head),
            "value": (batch, tokens, d_head), "input_gradient": (batch, tokens, d_model),
            "query_weight_gradient": (d_model, d_head), "key_weight_gradient": (d_model, d_head),
            "value_weight_gradient": (d_model, d_head),
        }
    tensors: list[tuple[str, Array]] = []
    loss: float | None = None
    tolerance = DEFAULT_EXPECT_TOLERANCE
    for key in EXPECT_KEYS:
        if key not in section:
            continue
        location = f"$.expect.{key}"
        if key == "loss":
            loss = problems.attempt(finite_number, section[key], location)
            ok = ok and loss is not None
        elif key == "tolerance":
            found = problems.attempt(_tolerance, section[key])
            ok = ok and found is not None
            tolerance = tolerance if found is None else found
        else:
            tensor = problems.attempt(
                parse_tensor, section[key], location, max_elements, base_dir=base_dir
            )
            if tensor is not None and key in shapes:
                tensor = problems.attempt(
                    expect_shape, tensor, shapes[key], EXPECT_TENSORS[key], location
                )
            if tensor is None:
                ok = False
            else:
                tensors.append((key, tensor))
    if not ok:
        return None
    return Expectations(tuple(tensors), loss, tolerance)
