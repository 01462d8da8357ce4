"""An attend fixture read and judged: :func:`parse_attend_fixture`, and :func:`layer_of`,
the one way to build the engine's layer from the record.

The format is read by :mod:`qkvcli.reading` (:mod:`qkvcli.reading.attend` for what only
attention adds); the function it describes is judged by the engine itself, by building
it once while the fixture is read, then dropped: the record keeps plain arrays. Reading
may not import the engine, so the two meet here.

Validation order (first failure wins): document keys; ``value_width``; the function's
keys (``heads``, ``kv_heads``, ``causal``, ``rope``, ``scale``, ``architecture``,
``window``, ``softcap``, ``alibi``, ``clip_qkv``, and the command line against them); weights (structure,
layouts, ranks, bias shapes; then names; then finite values, widths, unique names, the
scale and RoPE, as the engine judges a head); the output projection's structure; the
layer as the engine judges it (``kv_heads`` and ``heads`` dividing the projection
widths, RoPE against a head, the output projection's shapes, the window, the soft-cap
and one ALiBi slope per head); input (rank, width, finite); the sizes it makes qkv derive; the
chapter's ``upstream`` (shapes only); ``upstream.output``; ``gradcheck``; ``seed``;
``chapter``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from qkvcli.attention.errors import QkNormError, RopeError
from qkvcli.attention.head import AttentionHead
from qkvcli.attention.maths import AlibiForm, QkNorm
from qkvcli.attention.multihead import MultiHeadLayer
from qkvcli.core.errors import BranchOutputWidthMismatch, DuplicateName, ProjectionError, QkvError
from qkvcli.core.names import BRANCHES
from qkvcli.reading.attend import (
    EXAMPLES,
    UPSTREAM_OUTPUT,
    AttendFixture,
    LayerFunction,
    LayerParameters,
    read_function,
    read_layer,
    read_parameters,
    read_upstream_output,
    seeded_upstream,
)
from qkvcli.reading.fixture import LAYER_TOP_KEYS, TOP_KEYS
from qkvcli.reading.layouts import NORM_KEYS, OUT_KEYS, CanonicalWeights, canonicalize
from qkvcli.reading.limits import (
    DEFAULT_MAX_ELEMENTS,
    check_derived,
    check_projection_size,
    check_scores_size,
    check_step_fits,
)
from qkvcli.reading.load import fixture_json
from qkvcli.reading.parse import read_document, read_input, read_upstream
from qkvcli.reading.problems import FixtureError, Problems
from qkvcli.reading.settings import parse_gradcheck, parse_seed_and_chapter

if TYPE_CHECKING:
    from qkvcli.reading.files import StrPath


def head_of(parameters: LayerParameters, function: LayerFunction) -> AttentionHead:
    """The engine's projections of ``parameters`` (one head's, or a layer's full width).
    Raises a :class:`~qkvcli.core.errors.QkvError` for parameters it refuses."""
    return AttentionHead.from_arrays(
        *parameters.weights, parameters.biases, parameters.names, function.independent,
        function.scale, function.rope, function.kv_groups)


def _layer(head: AttentionHead, parameters: LayerParameters,
           function: LayerFunction) -> MultiHeadLayer:
    return MultiHeadLayer.build(head, function.heads or 1, parameters.out_weight,
                                parameters.out_bias, function.kv_heads, function.window,
                                function.softcap,
                                None if function.alibi is None else np.array(function.alibi),
                                function.clip_qkv, _norm(parameters, function),
                                AlibiForm(function.alibi_scaled, function.alibi_rounding))


def _norm(parameters: LayerParameters, function: LayerFunction) -> QkNorm | None:
    """The engine's q/k norm of the fixture's ``qk_norm`` and its weights."""
    spec, query, key = function.qk_norm, parameters.norm_query, parameters.norm_key
    if spec is None or query is None or key is None:
        return None
    return QkNorm(query, key, spec.eps, spec.span, spec.offset, spec.kind,
                  parameters.norm_query_bias, parameters.norm_key_bias)


def layer_of(fixture: AttendFixture) -> MultiHeadLayer:
    """The engine's layer of ``fixture`` (a head runs as a layer of one head): the one way
    to run it. Each call builds it anew (validation, then read-only copies of the
    parameters), so a caller builds it once per run. Raises a
    :class:`~qkvcli.core.errors.QkvError` for parameters no parse would have accepted."""
    return _layer(head_of(fixture.parameters, fixture.function), fixture.parameters,
                  fixture.function)


def _judged_head(canonical: CanonicalWeights, parameters: LayerParameters,
                 function: LayerFunction) -> AttentionHead:
    """:func:`head_of`, its refusal located in the fixture."""
    b = canonical.branches
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
        raise FixtureError(b[BRANCHES.index(error.projection)].location, str(error)) from None
    except DuplicateName as error:
        raise FixtureError(f"{b[error.repeated].location}.name", str(error)) from None
    except QkvError as error:
        raise FixtureError("$.weights", str(error)) from None


def _judged_layer(head: AttentionHead, parameters: LayerParameters,
                  function: LayerFunction) -> MultiHeadLayer:
    """The layer of ``head``, its refusal located at ``$.heads``, ``$.rope`` or the output
    projection."""
    try:
        return _layer(head, parameters, function)
    except QkvError as error:
        out = parameters.out_layout
        location = "$.heads" if out is None or "heads" in str(error) else f"$.weights.{out}_weight"
        if "rope" in str(error):
            location = "$.rope"
        if "alibi" in str(error):
            location = "$.alibi"
        if isinstance(error, QkNormError):
            message = str(error)
            location = "$.weights." + ("q" if "query" in message else "k") + (
                "_norm_bias" if " bias" in message else "_norm_weight")
            if "kind" in message:
                location = "$.qk_norm.kind"
        raise FixtureError(location, str(error)) from None


def parse_attend_fixture(
    data: Any, default_chapter: str = "custom", max_elements: int = DEFAULT_MAX_ELEMENTS,
    base_dir: StrPath | None = None, heads: int | None = None, causal: bool = False,
) -> AttendFixture:
    """Validate parsed JSON for ``qkv attend``, in the module's order.

    ``heads`` (``--heads``) sets the heads of a fixture that does not say; against a
    fixture's other ``"heads"`` it is an error. ``causal`` (``--causal``) masks a fixture
    that does not say; against ``"causal": false`` it is an error.

    Raises :class:`~qkvcli.reading.problems.FixtureError`.
    """
    problems = Problems()  # fail-fast: a reader returns None only after raising
    document = read_document(data, TOP_KEYS + LAYER_TOP_KEYS, problems)
    assert document is not None
    function = read_function(document, heads, causal)
    weights = document["weights"]
    canonical = canonicalize(weights, max_elements, base_dir, OUT_KEYS + NORM_KEYS,
                             function.heads,
                             function.kv_heads)
    parameters = read_parameters(weights, canonical)
    head = _judged_head(canonical, parameters, function)
    parameters, function = read_layer(weights, parameters, function, max_elements, base_dir)
    layer = _judged_layer(head, parameters, function)

    x = read_input(document["input"], head.d_model, max_elements, problems, base_dir)
    assert x is not None
    batch, tokens, _ = x.shape
    # Refused before anything allocates them: projections, scores and the upstream U.
    # A layer's projections are full width (H*d_k); its scores are [B,H,T,T].
    check_projection_size(batch, tokens, max(head.d_k, head.d_v), "$.input", max_elements)
    check_scores_size(batch, function.heads, tokens, "$.input", max_elements)
    if function.heads is not None:
        check_derived("layer output", "[B,T,E_out]", (batch, tokens, layer.e_out), "$.input",
                      max_elements)

    raw_upstream = document.get("upstream")
    widths = (head.d_k, head.d_k, head.d_v)
    # the chapter's upstream gradients: checked, not kept (L = <O, U> does not use them)
    read_upstream(raw_upstream, tuple((batch, tokens, width) for width in widths), max_elements,
                  problems, base_dir, (*BRANCHES, UPSTREAM_OUTPUT), axes=None)
    shape = (batch, tokens, head.d_v if function.heads is None else layer.e_out)
    given = read_upstream_output((raw_upstream or {}).get(UPSTREAM_OUTPUT), shape, max_elements,
                                 base_dir)

    step, tolerance, samples = parse_gradcheck(document.get("gradcheck"), problems)
    check_step_fits(step, (x, *parameters.arrays()), "$.gradcheck.step")
    seed, chapter = parse_seed_and_chapter(document, default_chapter, problems)
    upstream = seeded_upstream(shape, seed) if given is None else given
    return AttendFixture(x, parameters, function, upstream, step, tolerance, samples, seed,
                         chapter, upstream_given=given is not None)


def load_attend_fixture(
    path: StrPath | None = None, example: str = "chapter",
    max_elements: int = DEFAULT_MAX_ELEMENTS, heads: int | None = None, causal: bool = False,
) -> AttendFixture:
    """Load ``path``, or the bundled ``example`` (``chapter`` or ``primer``) when ``path``
    is ``None``.

    Raises :class:`~qkvcli.reading.problems.FixtureError` for bad content and
    :class:`~qkvcli.reading.files.InputFileError` for a file that cannot be read.
    """
    data, chapter, base_dir = fixture_json(path, EXAMPLES[example])
    return parse_attend_fixture(data, chapter, max_elements, base_dir, heads, causal)
