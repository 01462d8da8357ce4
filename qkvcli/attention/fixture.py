"""Attention fixtures: one head, and multi-head layers.

Fixtures for ``qkv attend``: the chapter's format plus layouts, biases and ``d_v``.

Every key of a chapter fixture means the same here; :mod:`qkvcli.reading.layouts` adds the
weight spellings. Validation order (first failure wins): document keys; ``value_width``;
the function's keys (:func:`parse_features`: ``heads``, ``kv_heads``, ``causal``,
``rope``, ``scale``, ``architecture``, and the command line against them); weights
(structure, layouts, ranks, bias shapes; then names; then the head's widths and unique
names); input (rank, width, finite); the chapter's ``upstream`` (shapes only: the
head's objective does not use it); ``gradcheck``; ``seed``; ``chapter``. Unnamed branches
read from checkpoint tensors take the tensors' names (:func:`~qkvcli.reading.weights.default_names`).

The head's objective is ``L = <O, U>`` with ``U [batch, tokens, d_v]`` drawn from
SplitMix64(seed), uniform in ``[-1, 1)``, row-major: deterministic, and uneven enough that a
gradient mixing up axes cannot pass by symmetry.

A fixture runs as a layer (:class:`~qkvcli.attention.multihead.MultiHeadLayer`) when it
gives ``"heads"`` (or ``--heads`` does), ``"kv_heads"``, an output projection
(``out_proj_*`` or ``c_proj_*``), GPT-2's packed ``c_attn`` or GPT-NeoX's
``query_key_value``; ``heads`` defaults to 1 then. Otherwise it is one head.

Validation order, after the weights and before the input: ``heads`` (an integer of at
least 1 dividing both projection widths), then the output projection's shapes.
``upstream.output`` (U of ``L = <O, U>``, shaped like the final output) is read after
the input.
"""

from __future__ import annotations

from typing import Any

from qkvcli.attention.errors import RopeError
from qkvcli.attention.head import AttentionHead
from qkvcli.attention.maths import ROPE_LAYOUTS, Rope
from qkvcli.attention.multihead import MultiHeadLayer
from qkvcli.core.arrays import Array
from qkvcli.core.errors import BranchOutputWidthMismatch, DuplicateName, ProjectionError, QkvError
from qkvcli.core.names import BRANCHES
from qkvcli.core.record import Record
from qkvcli.core.splitmix import SplitMix64
from qkvcli.gradcheck.settings import DEFAULT_STEP, DEFAULT_TOLERANCE
from qkvcli.reading.files import StrPath
from qkvcli.reading.fixture import TOP_KEYS
from qkvcli.reading.json_values import (
    is_json_int,
    json_type_name,
    refuse_unknown_keys,
)
from qkvcli.reading.layouts import (
    OUT_KEYS,
    CanonicalWeights,
    canonicalize,
    read_out_projection,
    value_width_mode,
)
from qkvcli.reading.limits import (
    DEFAULT_MAX_ELEMENTS,
    DEFAULT_SEED,
    check_derived,
    check_projection_size,
    check_scores_size,
    check_step_fits,
    expect_shape,
)
from qkvcli.reading.load import BUNDLED_NAME, fixture_json
from qkvcli.reading.parse import read_document, read_input, read_upstream
from qkvcli.reading.problems import FixtureError, Problems
from qkvcli.reading.settings import parse_gradcheck, parse_seed_and_chapter
from qkvcli.reading.tensors import parse_tensor
from qkvcli.reading.weights import check_name, default_names

EXAMPLES = {"chapter": BUNDLED_NAME, "primer": "primer-worked-example.json"}  # --example


class AttendFixture(Record):
    """A validated fixture for one attention head (or, with ``layer``, a layer)."""

    input: Array
    head: AttentionHead
    layout: str
    layout_description: str
    value_width: str
    upstream: Array
    step: float = DEFAULT_STEP
    tolerance: float = DEFAULT_TOLERANCE
    samples: int | None = None
    seed: int = DEFAULT_SEED
    chapter: str = "custom"
    layer: LayerParts | None = None  # heads, out_proj or c_attn: a multi-head layer
    causal: bool = False  # the fixture's "causal", or --causal
    architecture: str | None = None  # the model the fixture says it was read from
    sources: tuple[tuple[str, str], ...] = ()  # (name, tensor) of checkpoint parameters


def seeded_upstream(shape: tuple[int, int, int], seed: int) -> Array:
    """``U``: SplitMix64(seed) unit draws mapped to ``[-1, 1)``, row-major, shaped ``shape``."""
    count = shape[0] * shape[1] * shape[2]
    return (2.0 * SplitMix64(seed).next_unit_block(count) - 1.0).reshape(shape)


def attend_parameters(x: Array, head: AttentionHead, layer: LayerParts | None) -> tuple[Array, ...]:
    """Every tensor the gradient check perturbs: the input, the weights, the biases given,
    and a layer's output projection."""
    extra = () if layer is None else (layer.layer.out_weight, layer.layer.out_bias)
    return (x, *head.weights, *(t for t in (*head.biases, *extra) if t is not None))


def _head(canonical: CanonicalWeights, independent: bool, features: Features,
          sources: dict[str, str]) -> AttentionHead:
    names, defaults = [], default_names([sources.get(f"w_{branch}") for branch in BRANCHES])
    for index, branch in enumerate(canonical.branches):
        name = defaults[index] if branch.name is None else branch.name
        check_name(name, f"{branch.location}.name")
        names.append(name)
    b = canonical.branches
    try:
        return AttentionHead.from_arrays(
            b[0].weight, b[1].weight, b[2].weight, [x.bias for x in b], names, independent,
            features.scale, features.rope, features.kv_groups,
        )
    except BranchOutputWidthMismatch as error:
        query, key, value = error.query, error.key, error.value
        if features.kv_groups == 1 and key == value and query > key and query % key == 0:
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


def parse_attend_fixture(
    data: Any, default_chapter: str = "custom", max_elements: int = DEFAULT_MAX_ELEMENTS,
    base_dir: StrPath | None = None, heads: int | None = None, causal: bool = False,
) -> AttendFixture:
    """Validate parsed JSON for ``qkv attend``.

    ``heads`` (``--heads``) sets the heads of a fixture that does not say; against a
    fixture's other ``"heads"`` it is an error. ``causal`` (``--causal``) masks a fixture
    that does not say; against ``"causal": false`` it is an error.

    Raises :class:`~qkvcli.reading.problems.FixtureError`.
    """
    problems = Problems()  # fail-fast: a reader returns None only after raising
    data = read_document(data, TOP_KEYS + LAYER_TOP_KEYS, problems)
    assert data is not None
    mode = value_width_mode(data)
    features = parse_features(data, heads, causal)
    canonical = canonicalize(data["weights"], max_elements, base_dir, OUT_KEYS, features.heads)
    sources = checkpoint_sources(data["weights"])
    head = _head(canonical, mode == "independent", features, dict(sources))
    layer = parse_layer(data, head, canonical, heads, max_elements, base_dir, features)

    x = read_input(data["input"], head.d_model, max_elements, problems, base_dir)
    assert x is not None
    batch, tokens, _ = x.shape
    # Refused before the head allocates them: projections, scores and the upstream U.
    # A layer's projections are full width (H*d_k); its scores are [B,H,T,T].
    check_projection_size(batch, tokens, max(head.d_k, head.d_v), "$.input", max_elements)
    check_scores_size(batch, None if layer is None else layer.layer.heads, tokens, "$.input",
                      max_elements)
    if layer is not None:
        check_derived("layer output", "[B,T,E_out]", (batch, tokens, layer.layer.e_out),
                      "$.input", max_elements)

    raw_upstream = data.get("upstream")
    widths = (head.d_k, head.d_k, head.d_v)
    read_upstream(raw_upstream, tuple((batch, tokens, width) for width in widths), max_elements,
                  problems, base_dir, (*BRANCHES, UPSTREAM_OUTPUT), axes=None)

    width_out = head.d_v if layer is None else layer.layer.e_out
    given_upstream = parse_upstream_output(
        (raw_upstream or {}).get(UPSTREAM_OUTPUT), (batch, tokens, width_out), max_elements,
        base_dir)

    step, tolerance, samples = parse_gradcheck(data.get("gradcheck"), problems)
    check_step_fits(step, attend_parameters(x, head, layer), "$.gradcheck.step")
    seed, chapter = parse_seed_and_chapter(data, default_chapter, problems)

    return AttendFixture(
        input=x,
        head=head,
        layout=canonical.layout,
        layout_description=canonical.description(),
        value_width=mode,
        upstream=(seeded_upstream((batch, tokens, width_out), seed) if given_upstream is None
                  else given_upstream),
        step=step,
        tolerance=tolerance,
        samples=samples,
        seed=seed,
        chapter=chapter,
        layer=layer,
        causal=features.causal,
        architecture=features.architecture,
        sources=sources,
    )


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


LAYER_TOP_KEYS = ("heads", "kv_heads", "causal", "rope", "scale", "architecture")
ROPE_KEYS = ("theta", "dims", "layout")
UPSTREAM_OUTPUT = "output"
MAX_HEADS = 4096


class LayerParts(Record):
    """The layer and the layouts its parameters were given in (for the gradients' layouts)."""

    layer: MultiHeadLayer
    branch_layouts: tuple[str, str, str]  # "qkv" or "torch" per branch
    packed: str | None  # "in_proj", "c_attn", "query_key_value" or None
    out_layout: str | None  # "out_proj", "c_proj" or None


class Features(Record):
    """What a fixture says about the function beyond its weights (:func:`parse_features`)."""

    heads: int | None
    kv_heads: int | None
    causal: bool
    rope: Rope | None
    scale: float | None
    architecture: str | None

    @property
    def kv_groups(self) -> int:
        """Query heads per K/V head (1 without ``kv_heads``)."""
        if self.kv_heads is None or self.heads is None or self.heads % self.kv_heads:
            return 1
        return self.heads // self.kv_heads


def _count(data: dict[str, Any], key: str) -> int | None:
    if key not in data:
        return None
    raw = data[key]
    if not is_json_int(raw):
        raise FixtureError(f"$.{key}", f"expected an integer, got {json_type_name(raw)}")
    if not 1 <= raw <= MAX_HEADS:
        raise FixtureError(f"$.{key}", f"{key} must be between 1 and {MAX_HEADS}")
    return int(raw)


def _number(raw: Any, location: str) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise FixtureError(location, f"expected a number, got {json_type_name(raw)}")
    value = float(raw)
    if not (value > 0.0 and value < float("inf")):
        raise FixtureError(location, f"must be a finite positive number, got {raw!r}")
    return value


def _rope(raw: Any) -> Rope:
    if not isinstance(raw, dict):
        raise FixtureError("$.rope", f"expected an object, got {json_type_name(raw)}")
    refuse_unknown_keys(raw, ROPE_KEYS, "$.rope")
    for key in ("theta", "dims"):
        if key not in raw:
            raise FixtureError("$.rope", f'missing key "{key}"')
    dims = raw["dims"]
    if not is_json_int(dims) or dims < 2 or dims % 2:
        raise FixtureError("$.rope.dims", "expected an even integer of at least 2 (the rotated "
                           "coordinates of each head)")
    layout = raw.get("layout", "half")
    if layout not in ROPE_LAYOUTS:
        shown = f'"{layout}"' if isinstance(layout, str) else json_type_name(layout)
        raise FixtureError("$.rope.layout", f'expected "half" or "interleaved", got {shown}')
    return Rope(_number(raw["theta"], "$.rope.theta"), int(dims), str(layout))


def parse_features(data: dict[str, Any], heads: int | None, causal: bool) -> Features:
    """``heads``, ``kv_heads``, ``causal``, ``rope``, ``scale`` and ``architecture``, with
    the command line's ``--heads`` and ``--causal``. Raises
    :class:`~qkvcli.reading.problems.FixtureError` (also for a command line that
    contradicts the fixture)."""
    given = _count(data, "heads")
    if heads is not None and given is not None and heads != given:
        raise FixtureError("$.heads", f"the fixture says {given} heads, --heads says {heads}: "
                           "drop --heads (the fixture describes the layer)")
    heads = given if heads is None else heads
    kv_heads = _count(data, "kv_heads")
    if kv_heads is not None and (heads or 1) % kv_heads:
        raise FixtureError("$.kv_heads", f"kv_heads must divide heads {heads or 1}, got {kv_heads}")
    said = data.get("causal")
    if said is not None and not isinstance(said, bool):
        raise FixtureError("$.causal", f"expected true or false, got {json_type_name(said)}")
    if causal and said is False:
        raise FixtureError("$.causal", 'the fixture says "causal": false, --causal says true: '
                           "drop --causal (the fixture describes the layer)")
    rope = _rope(data["rope"]) if data.get("rope") is not None else None
    scale = _number(data["scale"], "$.scale") if data.get("scale") is not None else None
    architecture = data.get("architecture")
    if architecture is not None and not isinstance(architecture, str):
        raise FixtureError("$.architecture", f"expected a string, got {json_type_name(architecture)}")
    return Features(heads, kv_heads, bool(said) or causal, rope, scale, architecture)


def parse_layer(
    data: dict[str, Any], head: AttentionHead, canonical: CanonicalWeights,
    heads_override: int | None, max_elements: int, base_dir: StrPath | None,
    features: Features | None = None,
) -> LayerParts | None:
    """The layer the fixture describes, or ``None`` for a single head.

    Raises :class:`~qkvcli.reading.problems.FixtureError` at ``$.heads`` or at the
    output projection's location.
    """
    if features is None:
        features = parse_features(data, heads_override, False)
    heads = features.heads
    out = read_out_projection(data["weights"], max_elements, base_dir)
    if (heads is None and out is None and canonical.layout not in ("c_attn", "query_key_value")
            and features.kv_heads is None):
        return None
    heads = 1 if heads is None else heads
    try:
        layer = MultiHeadLayer.build(head, heads, None if out is None else out.weight,
                                     None if out is None else out.bias, features.kv_heads)
    except QkvError as error:
        location = "$.heads" if out is None or "heads" in str(error) else out.location
        if "rope" in str(error):
            location = "$.rope"
        raise FixtureError(location, str(error)) from None
    packed = {"packed": "in_proj", "c_attn": "c_attn",
              "query_key_value": "query_key_value"}.get(canonical.layout)
    given = tuple(branch.given for branch in canonical.branches)
    return LayerParts(layer, (given[0], given[1], given[2]), packed,
                      None if out is None else out.layout)


_SOURCED_KEYS = {f"{prefix}_{part}": f"{part[0]}_{role}" for prefix, role in (
    ("in_proj", "packed"), ("c_attn", "packed"), ("query_key_value", "packed"),
    ("out_proj", "out"), ("c_proj", "out")) for part in ("weight", "bias")}


def checkpoint_sources(weights: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """``(vocabulary name, tensor name)`` of each parameter of the (validated) ``weights``
    that names a checkpoint tensor (``w_query``, ``b_query``, ``w_packed``, ``w_out``...):
    how the user's framework calls it. Inline, ``npy`` and generated tensors have none."""
    def tensor_name(value: Any) -> str | None:
        named = isinstance(value, dict) and "safetensors" in value
        return value["tensor"] if named and isinstance(value.get("tensor"), str) else None

    branches = [weights.get(branch) for branch in BRANCHES]
    given = [*((f"w_{b}", value) for b, value in zip(BRANCHES, branches, strict=True)),
             *((f"b_{b}", value.get("bias") if isinstance(value, dict) else None)
               for b, value in zip(BRANCHES, branches, strict=True)),
             *((name, weights.get(key)) for key, name in _SOURCED_KEYS.items())]
    return tuple((name, tensor) for name, value in given
                 if (tensor := tensor_name(value)) is not None)


def relative_sources(sources: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """``sources`` (vocabulary name, checkpoint tensor name) with the tensor names' common
    dotted prefix removed, the layer's place in the model, so each name is relative to the
    layer (``q_proj.weight``, BERT's ``self.query.weight`` and ``output.dense.weight``);
    every name keeps at least its module and parameter (``c_attn.weight``)."""
    if not sources:
        return ()
    parts = [tensor.split(".") for _, tensor in sources]
    common, keep = 0, min(len(p) for p in parts) - 2
    while common < keep and all(p[common] == parts[0][common] for p in parts):
        common += 1
    return tuple((name, ".".join(p[common:])) for (name, _), p in zip(sources, parts, strict=True))


def parse_upstream_output(
    raw: Any, shape: tuple[int, int, int], max_elements: int, base_dir: StrPath | None
) -> Array | None:
    """``upstream.output`` if given, checked against the final output's ``shape``."""
    if raw is None:
        return None
    location = f"$.upstream.{UPSTREAM_OUTPUT}"
    grad = parse_tensor(raw, location, max_elements, base_dir=base_dir)
    return expect_shape(grad, shape, "the final output's [batch,tokens,E_out]", location)


__all__ = ["LAYER_TOP_KEYS", "OUT_KEYS", "UPSTREAM_OUTPUT", "LayerParts", "checkpoint_sources",
           "parse_layer", "parse_upstream_output", "relative_sources"]
