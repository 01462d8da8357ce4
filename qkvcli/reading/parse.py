"""Validating a fixture document: :func:`parse_fixture` (first problem) and
:func:`fixture_problems` (every problem, for ``qkv validate``).

Order: document keys; weights (each weight's name, then finite values; then per branch
rank and widths; then model widths, head widths, duplicate names); then the input (rank,
width, finite values); then upstream gradients; then settings (gradcheck, seed,
chapter); then expectations. Problems are :class:`~qkvcli.reading.problems.FixtureError`
values carrying the JSON location (``$.weights.key``) of what is wrong.

The document's keys, the input and the upstream gradients are read here for ``qkv
attend`` too (:func:`read_document`, :func:`read_input`, :func:`read_upstream`), as are
the settings (:mod:`qkvcli.reading.settings`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from qkvcli.core.arrays import Array, check_finite
from qkvcli.core.errors import InputRank, QkvError
from qkvcli.core.names import BRANCHES
from qkvcli.core.weights import check_input_shape
from qkvcli.reading.fixture import TOP_KEYS, Fixture, uses_extensions
from qkvcli.reading.json_values import expect_object, unknown_keys
from qkvcli.reading.limits import DEFAULT_MAX_ELEMENTS, check_projection_size, check_step_fits, expect_shape
from qkvcli.reading.problems import MAX_PROBLEMS, FixtureError, Problems, TooManyProblems
from qkvcli.reading.settings import parse_gradcheck, parse_seed_and_chapter
from qkvcli.reading.tensors import parse_tensor
from qkvcli.reading.weights import Weights, parse_weights

if TYPE_CHECKING:
    from qkvcli.reading.files import StrPath


def parse_fixture(
    data: Any, default_chapter: str = "custom", max_elements: int = DEFAULT_MAX_ELEMENTS,
    base_dir: StrPath | None = None,
) -> Fixture:
    """Validate parsed JSON and build a :class:`Fixture`. Raises :class:`FixtureError`.

    ``base_dir`` is where ``npy`` tensor paths are resolved, in every section (the
    fixture file's directory; ``None``: the current directory). The first problem in the
    module's order is the one raised.
    """
    fixture = _parse(data, default_chapter, max_elements, Problems(), base_dir)
    if fixture is None:  # pragma: no cover - fail-fast raises before anything is skipped
        raise FixtureError("$", "invalid fixture")
    return fixture


def fixture_problems(
    data: Any, default_chapter: str = "custom", max_elements: int = DEFAULT_MAX_ELEMENTS,
    limit: int = MAX_PROBLEMS, base_dir: StrPath | None = None,
) -> list[FixtureError]:
    """Every problem of parsed JSON, in :func:`parse_fixture`'s order; empty when valid.

    The first problem is the one :func:`parse_fixture` raises. Independent parts (each
    weight, the input, each upstream gradient, each setting, each expectation) are all
    checked; a check that needs an earlier part (widths, shapes) is skipped when that
    part failed. At most ``limit`` problems, the last saying that it stopped.
    """
    problems = Problems(collect=True, limit=limit)
    try:
        _parse(data, default_chapter, max_elements, problems, base_dir)
    except TooManyProblems as stop:
        problems.errors.append(FixtureError("", str(stop)))
    return problems.errors


def read_document(data: Any, keys: tuple[str, ...], problems: Problems) -> dict[str, Any] | None:
    """``data`` if it is an object; unknown keys (``keys`` are known) and a missing
    ``input`` or ``weights`` reported. ``None`` when it is not an object."""
    document = expect_object(data, "$", problems)
    if document is None:
        return None
    for error in unknown_keys(document, keys, "$"):
        problems.add(error)
    for key in ("input", "weights"):
        if key not in document:
            problems.add(FixtureError("$", f'missing key "{key}"'))
    return document


def read_input(
    raw: Any, d_model: int | None, max_elements: int, problems: Problems,
    base_dir: StrPath | None = None,
) -> Array | None:
    """``$.input``: rank three, final width ``d_model``, finite. ``d_model`` is ``None``
    after a problem in the weights: only the rank is checked then, and nothing returned."""
    x = problems.attempt(parse_tensor, raw, "$.input", max_elements, base_dir=base_dir)
    if x is None:
        return None
    try:
        if d_model is None:
            if x.ndim != 3:
                raise InputRank(x.ndim)
            return None
        check_input_shape(x, d_model)
        check_finite(x, "input")
    except QkvError as error:
        problems.add(FixtureError("$.input", f"{error}{_empty_hint(x)}"))
        return None
    return x


def _empty_hint(x: Array) -> str:
    """Why an empty nested list has too low a rank, and what to write instead."""
    if x.size == 0 and x.ndim < 3:
        return ('; an empty nested list cannot show its inner axes, so write an empty '
                'input as {"shape": [0, tokens, d_model], "values": []}')
    return ""


def read_upstream(
    raw: Any, shapes: tuple[tuple[int, ...], ...] | None, max_elements: int, problems: Problems,
    base_dir: StrPath | None = None, keys: tuple[str, ...] = BRANCHES,
    axes: str | None = "batch, tokens, d_head",
) -> list[Array | None] | None:
    """The upstream gradients ``raw`` gives, query, key, value (``None``: not given), each
    checked against its shape in ``shapes`` (``None``: unknown after a problem; ``axes``
    names their axes in messages); ``keys`` are the keys it may hold. ``None`` after a
    problem."""
    if raw is None:
        return [None, None, None]
    upstream = expect_object(raw, "$.upstream", problems)
    if upstream is None:
        return None
    for error in unknown_keys(upstream, keys, "$.upstream"):
        problems.add(error)
    given: list[Array | None] = []
    ok = True
    for branch, shape in zip(BRANCHES, shapes or (None, None, None), strict=True):
        location = f"$.upstream.{branch}"
        grad = None
        if branch in upstream:
            grad = problems.attempt(parse_tensor, upstream[branch], location, max_elements,
                                    base_dir=base_dir)
            if grad is not None and shape is not None:
                grad = problems.attempt(expect_shape, grad, shape, axes, location)
            ok = ok and grad is not None
        given.append(grad)
    return given if ok else None


def _parse(
    data: Any, default_chapter: str, max_elements: int, problems: Problems,
    base_dir: StrPath | None = None,
) -> Fixture | None:
    data = read_document(data, TOP_KEYS, problems)
    if data is None:
        return None
    layout = "separate"
    layer: Weights | None = None  # the weights and their names
    if "weights" in data and not uses_extensions(data):
        layer = parse_weights(data["weights"], max_elements, problems, base_dir)
    elif "weights" in data:
        from qkvcli.reading.layouts import chapter_weights  # lazy: only extended fixtures need it

        # Torch/packed layouts become the plain form; bias and d_v are refused (qkv attend).
        converted = problems.attempt(chapter_weights, data, max_elements, base_dir)
        if converted is not None:
            plain, layout = converted
            layer = parse_weights(plain, max_elements, problems, base_dir)
    d_model, d_head = (0, 0) if layer is None else layer[0][0].shape
    x = (read_input(data["input"], None if layer is None else d_model, max_elements,
                    problems, base_dir) if "input" in data else None)
    expected: tuple[int, ...] | None = None
    sizes: tuple[int, int, int, int] | None = None
    if layer is not None and x is not None:
        batch, tokens, _ = x.shape
        before = len(problems.errors)
        problems.attempt(check_projection_size, int(batch), int(tokens), d_head,
                         "$.input", max_elements)
        if len(problems.errors) == before:
            expected = (batch, tokens, d_head)
            sizes = (int(batch), int(tokens), d_model, d_head)
        else:
            x = None  # the derived tensors are refused: nothing that needs them is checked
    given = read_upstream(data.get("upstream"), None if expected is None else (expected,) * 3,
                          max_elements, problems, base_dir)
    upstream = (None if given is None or expected is None
                else [np.ones(expected) if grad is None else grad for grad in given])
    step, tolerance, samples = parse_gradcheck(data.get("gradcheck"), problems)
    if layer is not None and x is not None:
        problems.attempt(check_step_fits, step, (x, *layer[0]), "$.gradcheck.step")
    seed, chapter = parse_seed_and_chapter(data, default_chapter, problems)
    expect = None
    if "expect" in data:
        from qkvcli.reading.expect import parse_expect  # only fixtures with expectations pay for it

        expect = parse_expect(data["expect"], sizes, max_elements, problems, base_dir)

    if layer is None or x is None or upstream is None or problems.errors:
        return None  # only reached when collecting: fail-fast raised already
    return Fixture(
        input=x,
        weights=layer[0],
        names=layer[1],
        upstream=(upstream[0], upstream[1], upstream[2]),
        step=step,
        tolerance=tolerance,
        samples=samples,
        seed=seed,
        chapter=chapter,
        expect=expect,
        layout=layout,
    )
