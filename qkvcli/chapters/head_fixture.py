"""Reading a one-head chapter fixture (chapters 27 and 28): Q, K, V (or X and weights), U, probes.

A head chapter's fixture gives the head's operands one of two ways:

- ``query``, ``key``, ``value``: the tensors themselves, ``[batch, tokens, d_k]``,
  ``[batch, tokens, d_k]`` and ``[batch, tokens, d_v]``;
- ``input`` and ``weights``: ``X`` ``[batch, tokens, d_model]`` and chapter 26's three
  weights (the same ``weights`` object, names and all), projected by
  :mod:`qkvcli.core.projections` into Q, K, V (``d_v = d_k`` then).

Besides: ``chapter`` (the chapter's id, e.g. ``"27-self-attention"``: the key by which
``qkv`` recognises which chapter the fixture is), ``upstream.output`` (``U = dL/dO``, default all
ones), ``single_token`` (the single-token probe's ``query``, ``key``, ``value``
vectors; default the last token of the first batch item) and ``gradcheck`` (``step``,
``tolerance``, ``samples``, read as for chapter 26). Chapter 28 adds two keys
(:data:`CAUSAL_KEYS`): ``suffix_perturbation`` (``key`` and ``value``: the last token's new
key and value in the first batch item; default each coordinate plus one) and
``prefix_seed`` (an upstream ``[batch, tokens, d_v]`` that is zero from some position on;
default ``upstream.output`` with the last position zeroed). Every problem is a
:class:`~qkvcli.reading.problems.FixtureError` naming its ``$.path``; the first one found
is raised. :func:`parse_self_attention` and :func:`parse_causal` are the chapters'
parsers, with the one signature every chapter's has.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from qkvcli.attention.operands import OPERANDS, EmptyTokenAxis, check_operands
from qkvcli.core.arrays import Array, check_finite, readonly
from qkvcli.core.errors import QkvError
from qkvcli.core.names import CHAPTER_IDS
from qkvcli.core.projections import QkvProjections
from qkvcli.core.record import Record
from qkvcli.reading.json_values import expect_object, refuse_unknown_keys
from qkvcli.reading.limits import DEFAULT_MAX_ELEMENTS, expect_shape
from qkvcli.reading.problems import FixtureError, Problems
from qkvcli.reading.settings import parse_gradcheck
from qkvcli.reading.tensors import parse_tensor
from qkvcli.reading.weights import engine_check

if TYPE_CHECKING:
    from qkvcli.reading.files import StrPath

HEAD_KEYS = ("chapter", "query", "key", "value", "input", "weights", "upstream", "single_token",
             "gradcheck")
"""The keys every head chapter's fixture may hold (a chapter adds its own)."""
CAUSAL_KEYS = ("suffix_perturbation", "prefix_seed")
"""The fixture keys chapter 28 adds to chapter 27's."""


class HeadInputs(Record):
    """What a head chapter's fixture gives, validated: plain read-only float64 arrays.

    ``source`` is ``"operands"`` (Q, K, V given) or ``"projections"`` (X and weights;
    ``x`` and ``weights`` hold them). ``single_token`` is the probe's ``(query, key,
    value)`` vectors.
    """

    query: Array
    key: Array
    value: Array
    upstream: Array
    single_token: tuple[Array, Array, Array]
    step: float
    tolerance: float
    samples: int | None
    source: str = "operands"
    x: Array | None = None
    weights: tuple[Array, Array, Array] | None = None
    names: tuple[str, str, str] | None = None


def read_head_inputs(document: Any, name: str, extra: tuple[str, ...] = (),
                     max_elements: int = DEFAULT_MAX_ELEMENTS,
                     base_dir: StrPath | None = None) -> tuple[HeadInputs, dict[str, Any]]:
    """The validated :class:`HeadInputs` of ``document`` for the chapter ``name``, and the
    document (for the chapter's ``extra`` keys). Raises :class:`FixtureError`."""
    problems = Problems()
    data = expect_object(document, "$", problems)
    assert data is not None  # fail-fast: a problem raised
    if "chapter" in data and data["chapter"] != name:
        raise FixtureError("$.chapter", f'expected "{name}" (a chapter {name[:2]} fixture), '
                           f"got {_shown(data['chapter'])}")
    refuse_unknown_keys(data, HEAD_KEYS + extra, "$")
    given = [key for key in OPERANDS if key in data]
    if given and ("input" in data or "weights" in data):
        raise FixtureError("$", "give either query, key and value or input and weights, not both")
    if given or not ("input" in data or "weights" in data):
        query, key, value = _operands(data, max_elements, base_dir)
        source, x, weights, names = "operands", None, None, None
    else:
        query, key, value, x, weights, names = _projected(data, max_elements, base_dir)
        source = "projections"
    batch, tokens, d_v = value.shape
    upstream = _upstream(data.get("upstream"), (batch, tokens, d_v), max_elements, base_dir)
    single = _single_token(data.get("single_token"), query, key, value)
    step, tolerance, samples = parse_gradcheck(data.get("gradcheck"), problems)
    inputs = HeadInputs(readonly(query), readonly(key), readonly(value), readonly(upstream),
                        single, step, tolerance, samples, source, x, weights, names)
    return inputs, data


def _shown(value: Any) -> str:
    import json

    return json.dumps(value)[:60]


def _operands(data: dict[str, Any], max_elements: int,
              base_dir: StrPath | None) -> tuple[Array, Array, Array]:
    arrays = []
    for operand in OPERANDS:
        if operand not in data:
            raise FixtureError("$", f'missing key "{operand}" (or give "input" and "weights")')
        location = f"$.{operand}"
        array = parse_tensor(data[operand], location, max_elements, base_dir=base_dir)
        engine_check(check_finite, array, operand, location=location)
        arrays.append(array)
    query, key, value = arrays
    try:
        check_operands(query, key, value)
    except QkvError as error:
        raise FixtureError(_blame(error, query, key, value), str(error)) from None
    return query, key, value


def _blame(error: QkvError, query: Array, key: Array, value: Array) -> str:
    """The operand an operand error is about: the one named, or the first that differs
    from the query."""
    named = getattr(error, "operand", None)
    if isinstance(named, str):
        return f"$.{named}"
    fields = ("query", "key", "value")
    values = [getattr(error, f, None) for f in fields]
    if all(v is not None for v in values):
        for field, v in zip(fields[1:], values[1:], strict=True):
            if v != values[0]:
                return f"$.{field}"
    if hasattr(error, "key") and hasattr(error, "query") and not hasattr(error, "value"):
        return "$.key"
    return "$.query"


def _projected(data: dict[str, Any], max_elements: int, base_dir: StrPath | None) -> tuple[
        Array, Array, Array, Array, tuple[Array, Array, Array], tuple[str, str, str]]:
    from qkvcli.reading.parse import read_input
    from qkvcli.reading.weights import parse_weights

    for needed in ("input", "weights"):
        if needed not in data:
            raise FixtureError("$", f'missing key "{needed}" (or give "query", "key" and "value")')
    problems = Problems()
    parsed = parse_weights(data["weights"], max_elements, problems, base_dir)
    assert parsed is not None  # fail-fast: a problem raised
    layer = QkvProjections.from_arrays(*parsed[0], names=parsed[1])  # chapter 26's engine
    x = read_input(data["input"], layer.d_model, max_elements, problems, base_dir)
    assert x is not None
    if x.shape[1] == 0:
        raise FixtureError("$.input", str(EmptyTokenAxis()))
    projected = layer.forward(x)
    query, key, value = projected.query, projected.key, projected.value
    for operand, branch in zip(OPERANDS, (query, key, value), strict=True):
        engine_check(check_finite, branch, f"{operand} projection", location="$.input")
    return (np.array(query), np.array(key), np.array(value), readonly(x), layer.weights,
            layer.names)


def _upstream(raw: Any, shape: tuple[int, int, int], max_elements: int,
              base_dir: StrPath | None) -> Array:
    if raw is None:
        return np.ones(shape)
    problems = Problems()
    upstream = expect_object(raw, "$.upstream", problems)
    assert upstream is not None
    refuse_unknown_keys(upstream, ("output",), "$.upstream")
    if "output" not in upstream:
        raise FixtureError("$.upstream", 'missing key "output"')
    grad = parse_tensor(upstream["output"], "$.upstream.output", max_elements, base_dir=base_dir)
    expect_shape(grad, shape, "batch, tokens, d_v", "$.upstream.output")
    engine_check(check_finite, grad, "upstream", location="$.upstream.output")
    return grad


def vector(raw: Any, location: str, width: int) -> Array:
    """A finite vector of ``width`` numbers at ``location``. Raises :class:`FixtureError`."""
    array = parse_tensor(raw, location)
    expect_shape(array, (width,), None, location)
    engine_check(check_finite, array, location.rsplit(".", 1)[-1], location=location)
    return readonly(array)


def _single_token(raw: Any, query: Array, key: Array,
                  value: Array) -> tuple[Array, Array, Array]:
    if raw is None:  # the last token of the first batch item, when there is one
        if query.shape[0] == 0:
            return (readonly(np.ones(query.shape[2])), readonly(np.ones(key.shape[2])),
                    readonly(np.ones(value.shape[2])))
        return readonly(query[0, -1]), readonly(key[0, -1]), readonly(value[0, -1])
    problems = Problems()
    probe = expect_object(raw, "$.single_token", problems)
    assert probe is not None
    refuse_unknown_keys(probe, OPERANDS, "$.single_token")
    found: list[Array] = []
    for operand, whole in zip(OPERANDS, (query, key, value), strict=True):
        if operand not in probe:
            raise FixtureError("$.single_token", f'missing key "{operand}"')
        found.append(vector(probe[operand], f"$.single_token.{operand}", int(whole.shape[2])))
    return found[0], found[1], found[2]


class CausalFixture(Record):
    """Chapter 28's fixture: the head's inputs, the last token's new key and value, and
    the prefix seed (``suffix_start``: the first position from which it is all zero)."""

    inputs: HeadInputs
    perturbed_key: Array
    perturbed_value: Array
    prefix_seed: Array
    suffix_start: int


def parse_self_attention(document: object, max_elements: int = DEFAULT_MAX_ELEMENTS,
                         base_dir: StrPath | None = None) -> HeadInputs:
    """A chapter 27 fixture validated. Raises :class:`FixtureError` naming the ``$.path``."""
    inputs, _ = read_head_inputs(document, CHAPTER_IDS[27], (), max_elements, base_dir)
    return inputs


def parse_causal(document: object, max_elements: int = DEFAULT_MAX_ELEMENTS,
                 base_dir: StrPath | None = None) -> CausalFixture:
    """A chapter 28 fixture validated. Raises :class:`FixtureError` naming the ``$.path``."""
    inputs, data = read_head_inputs(document, CHAPTER_IDS[28], CAUSAL_KEYS, max_elements,
                                    base_dir)
    _, tokens, d_k = inputs.key.shape
    d_v = int(inputs.value.shape[2])
    if inputs.key.shape[0] == 0:
        raise FixtureError("$.query", "chapter 28 perturbs the first batch item's last token: "
                           "give at least one batch item")
    key_after, value_after = inputs.key[0, -1] + 1.0, inputs.value[0, -1] + 1.0
    if "suffix_perturbation" in data:
        raw = expect_object(data["suffix_perturbation"], "$.suffix_perturbation", Problems())
        assert raw is not None  # fail-fast: a problem raised
        refuse_unknown_keys(raw, ("key", "value"), "$.suffix_perturbation")
        if "key" in raw:
            key_after = vector(raw["key"], "$.suffix_perturbation.key", int(d_k))
        if "value" in raw:
            value_after = vector(raw["value"], "$.suffix_perturbation.value", d_v)
    if (np.array_equal(key_after, inputs.key[0, -1])
            and np.array_equal(value_after, inputs.value[0, -1])):
        raise FixtureError("$.suffix_perturbation", "changes nothing: give the last token a "
                           "new key or a new value")
    if "prefix_seed" in data:
        seed = parse_tensor(data["prefix_seed"], "$.prefix_seed", max_elements, base_dir=base_dir)
        expect_shape(seed, inputs.value.shape, "batch, tokens, d_v", "$.prefix_seed")
        engine_check(check_finite, seed, "prefix seed", location="$.prefix_seed")
    else:
        seed = np.array(inputs.upstream)
        seed[:, -1, :] = 0.0
    start = suffix_start(seed)
    if start >= tokens:
        raise FixtureError("$.prefix_seed", "must be zero at the last position at least (the "
                           "positions whose gradient must vanish)")
    return CausalFixture(inputs, readonly(key_after), readonly(value_after), readonly(seed),
                         start)


def suffix_start(seed: Array) -> int:
    """The first position from which ``seed`` ``[B,T,d]`` is zero in every batch item."""
    nonzero = np.flatnonzero(np.any(seed != 0.0, axis=(0, 2)))
    return int(nonzero[-1]) + 1 if nonzero.size else 0
