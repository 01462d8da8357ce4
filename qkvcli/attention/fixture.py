"""An attend fixture judged by the engine: :func:`layer_of`, the one way to build the layer a
fixture describes, each refusal located in the fixture; and :func:`parse_attend_fixture`,
a fixture read and judged (its first problem, for ``qkv validate`` and the library).

The format is read whole by :mod:`qkvcli.reading.attend`
(:func:`~qkvcli.reading.attend.read_attend_fixture`, its order first); the engine then
judges what the plain record describes, once, as it builds the layer, in this order
(first failure wins): the parameters as the engine judges a head (finite values, widths,
bias shapes, unique names, the scale and RoPE); the layer (``kv_heads`` and ``heads``
dividing the projection widths, RoPE against a head, the output projection's values and
shapes, the window, the soft-cap, one ALiBi slope per head, the q/k norm).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from qkvcli.attention.errors import QkNormError
from qkvcli.attention.head import AttentionHead
from qkvcli.attention.maths import AlibiForm, QkNorm
from qkvcli.attention.multihead import MultiHeadLayer
from qkvcli.core.errors import BranchOutputWidthMismatch, DuplicateName, ProjectionError, QkvError, RopeError
from qkvcli.core.names import BRANCHES
from qkvcli.reading.attend import (
    EXAMPLES,
    AttendFixture,
    LayerFunction,
    LayerParameters,
    read_attend_fixture,
)
from qkvcli.reading.limits import DEFAULT_MAX_ELEMENTS, check_step_fits
from qkvcli.reading.load import fixture_json
from qkvcli.reading.problems import FixtureError
from qkvcli.reading.settings import refuse_chapter_fixture

if TYPE_CHECKING:
    from qkvcli.reading.files import StrPath


def head_of(parameters: LayerParameters, function: LayerFunction) -> AttentionHead:
    """The engine's projections of ``parameters`` (one head's, or a layer's full width).
    Raises a :class:`~qkvcli.core.errors.QkvError` for parameters it refuses."""
    return AttentionHead.from_arrays(
        *parameters.weights, parameters.biases, parameters.names, function.independent,
        function.scale, function.rope, function.kv_groups, parameters.value_input)


def layer_of(fixture: AttendFixture) -> MultiHeadLayer:
    """The engine's layer of ``fixture`` (a head runs as a layer of one head), judged in
    the module's order: the one way to build it. Each call builds it anew (validation,
    then read-only copies of the parameters), so a caller builds it once per run.

    Raises :class:`~qkvcli.reading.problems.FixtureError`, located in the fixture, for
    anything the engine refuses.
    """
    parameters, function = fixture.parameters, fixture.function
    head = _judged_head(parameters, function)
    try:
        norm = _norm(parameters, function)
        layer = MultiHeadLayer.build(
            head, function.heads or 1, parameters.out_weight, parameters.out_bias,
            function.kv_heads, function.window, function.softcap,
            None if function.alibi is None else np.array(function.alibi), function.clip_qkv,
            norm, AlibiForm(function.alibi_scaled, function.alibi_rounding))
    except QkvError as error:
        raise FixtureError(_layer_location(error, parameters), str(error)) from None
    return layer


def _norm(parameters: LayerParameters, function: LayerFunction) -> QkNorm | None:
    """The engine's q/k norm of the fixture's ``qk_norm`` and its weights."""
    spec, query, key = function.qk_norm, parameters.norm_query, parameters.norm_key
    if spec is None or query is None or key is None:
        return None
    return QkNorm(query, key, spec.eps, spec.span, spec.offset, spec.kind,
                  parameters.norm_query_bias, parameters.norm_key_bias, spec.after == "rope")


def _judged_head(parameters: LayerParameters, function: LayerFunction) -> AttentionHead:
    """:func:`head_of`, its refusal located in the fixture."""
    try:
        return head_of(parameters, function)
    except BranchOutputWidthMismatch as error:
        query, key, value = error.query, error.key, error.value
        if function.kv_groups == 1 and key == value and query > key and query % key == 0:
            # the chapter's wording says "head widths"; here they are projection widths
            raise FixtureError("$.weights", f"the query projection is {query} wide, the key and "
                               f"value projections {key}: grouped-query attention needs "
                               f'"kv_heads" (the K/V heads the query heads share)') from None
        raise FixtureError("$.weights", str(error)) from None
    except RopeError as error:
        raise FixtureError("$.rope", str(error)) from None
    except ProjectionError as error:
        where = parameters.locations[BRANCHES.index(error.projection)]
        raise FixtureError(where, str(error)) from None
    except DuplicateName as error:
        raise FixtureError(f"{parameters.locations[error.repeated]}.name", str(error)) from None
    except QkvError as error:
        raise FixtureError("$.weights", str(error)) from None


def _layer_location(error: QkvError, parameters: LayerParameters) -> str:
    """Where the layer's refusal ``error`` points: ``$.heads``, ``$.rope``, ``$.alibi``,
    the output projection, or a q/k norm's key."""
    message = str(error)
    if isinstance(error, QkNormError):
        if "kind" in message:
            return "$.qk_norm.kind"
        return "$.weights." + ("q" if "query" in message else "k") + (
            "_norm_bias" if " bias" in message else "_norm_weight")
    if "alibi" in message:
        return "$.alibi"
    if "rope" in message:
        return "$.rope"
    out = parameters.out_layout
    return "$.heads" if out is None or "heads" in message else f"$.weights.{out}_weight"


def parse_attend_fixture(
    data: Any, default_chapter: str = "custom", max_elements: int = DEFAULT_MAX_ELEMENTS,
    base_dir: StrPath | None = None, heads: int | None = None, causal: bool = False,
) -> AttendFixture:
    """Read parsed JSON for ``qkv attend``
    (:func:`~qkvcli.reading.attend.read_attend_fixture`, with its arguments) and judge it
    (:func:`layer_of`): the first problem of either, in that order. Gives the record; a
    run builds its layer again from it.

    Raises :class:`~qkvcli.reading.problems.FixtureError`.
    """
    fixture = read_attend_fixture(data, default_chapter, max_elements, base_dir, heads, causal)
    layer_of(fixture)
    return fixture


def load_layer(
    path: StrPath | None = None, example: str = "chapter",
    max_elements: int = DEFAULT_MAX_ELEMENTS, heads: int | None = None, causal: bool = False,
    overrides: dict[str, Any] | None = None,
) -> tuple[AttendFixture, MultiHeadLayer]:
    """attend's one reading: ``path``, or the bundled ``example`` (``chapter`` or
    ``primer``) when ``path`` is ``None``, loaded; a chapter 27-30 document refused
    (:func:`~qkvcli.reading.settings.refuse_chapter_fixture`); read whole and judged as
    :func:`parse_attend_fixture` does; the gradient check's ``overrides`` (the command
    line's ``step``, ``tolerance``, ``samples``) put in place of the fixture's, a step that
    does not fit the fixture's values refused as ``--step``. Gives the fixture and the
    engine's layer of it.

    Raises :class:`~qkvcli.reading.problems.FixtureError` for bad content and
    :class:`~qkvcli.reading.files.InputFileError` for a file that cannot be read.
    """
    data, chapter, base_dir = fixture_json(path, EXAMPLES[example])
    refuse_chapter_fixture(data)
    fixture = read_attend_fixture(data, chapter, max_elements, base_dir, heads, causal)
    layer = layer_of(fixture)
    if overrides:
        fixture = fixture._replace(**overrides)
        if "step" in overrides:
            check_step_fits(fixture.step, fixture.perturbed(), "--step")
    return fixture, layer


def load_attend_fixture(
    path: StrPath | None = None, example: str = "chapter",
    max_elements: int = DEFAULT_MAX_ELEMENTS, heads: int | None = None, causal: bool = False,
) -> AttendFixture:
    """:func:`load_layer`'s fixture, without overrides."""
    return load_layer(path, example, max_elements, heads, causal)[0]
