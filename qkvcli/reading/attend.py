"""What ``qkv attend`` reads beyond the chapter's format, and :class:`AttendFixture`, the record.

An attend fixture is a chapter fixture (:mod:`qkvcli.reading.fixture`: the document's
keys, the input, the upstream gradients and the settings are read by the chapter's own
readers, :mod:`qkvcli.reading.parse` and :mod:`qkvcli.reading.settings`) with more:

- the weights' layouts and biases, and an output projection (``out_proj_*`` or
  ``c_proj_*``): :mod:`qkvcli.reading.layouts`;
- the function's keys, ``value_width``, ``heads``, ``kv_heads``, ``causal``, ``rope``
  (from ``theta``, or ``frequencies`` given as a table: ESM's stored ``inv_freq``),
  ``scale``, ``architecture``, ``window``, ``softcap``, ``alibi`` (with
  ``alibi_scaled`` and ``alibi_rounding``), ``clip_qkv`` and
  ``qk_norm`` (with its weights ``q_norm_weight`` and ``k_norm_weight``, and a
  LayerNorm's optional biases ``q_norm_bias`` and ``k_norm_bias``), and the command
  line's ``--heads`` and ``--causal`` against them (:func:`read_function`);
- ``value_input``, the input the value projection reads when it is not the queries' and
  keys' (MobileBERT's layer input beside its bottleneck): ``[batch, tokens, d_v_in]``,
  the input's batch and tokens, the value weight's input width. The layer's input is
  then the two joined on the last axis, ``input``'s columns first
  (:attr:`AttendFixture.input`), and the query and key weights read ``input``'s width,
  the value weight ``value_input``'s. Without it every weight reads ``input``;
- ``upstream.output``, ``U`` of the head's objective ``L = <O, U>`` shaped like the final
  output. Without it, ``U`` is drawn from SplitMix64(seed), uniform in ``[-1, 1)``,
  row-major (:func:`seeded_upstream`): deterministic, and uneven enough that a gradient
  mixing up axes cannot pass by symmetry. The chapter's ``upstream.query/key/value`` are
  checked for shape only: the head's objective does not use them.

Unnamed branches read from checkpoint tensors take the tensors' names
(:func:`~qkvcli.reading.weights.default_names`). A fixture runs as a layer when it gives
``heads`` (or ``--heads`` does), ``kv_heads``, an output projection, GPT-2's packed
``c_attn`` or GPT-NeoX's ``query_key_value``; ``heads`` is 1 then unless it says.
Otherwise it is one head.

The record holds plain arrays and says what they compute: the parameters in our
``[d_model, d_out]`` layout and how the fixture gave them (:class:`LayerParameters`),
and the function (:class:`LayerFunction`). :func:`read_attend_fixture` reads the whole
document into it in one pass; the engine then judges what it describes, once, as it
builds the layer (:func:`qkvcli.attention.fixture.layer_of`; reading may not import the
engine).

Reading order (first failure wins): document keys; ``value_width``; the function's keys
(``heads``, ``kv_heads``, ``causal``, ``rope``, ``scale``, ``architecture``,
``window``, ``softcap``, ``alibi``, ``clip_qkv``, ``qk_norm``, and the command line
against them); weights (structure, layouts, ranks, bias shapes; then names; then each
branch's widths non-zero and one model width, which the input is read against, or with
``value_input`` one of the query and key weights); the output projection's structure;
the q/k norm's weights; input (rank, width, finite); ``value_input`` (rank, the input's
batch and tokens, the value weight's input width, finite); the sizes it makes qkv
derive; the chapter's ``upstream`` (shapes only); ``upstream.output``; ``gradcheck``; the
step against every value (each tensor source refuses a value that is not finite);
``seed``; ``chapter``. The projection widths these checks use are the
arrays' own; whether they fit a head and a layer is the engine's to judge, after.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from qkvcli.core.arrays import Array, check_finite
from qkvcli.core.errors import ProjectionError, QkvError
from qkvcli.core.names import ALIBI_ROUNDINGS, BRANCHES, QK_NORM_AFTER, QK_NORM_KINDS, QK_NORM_SPANS
from qkvcli.core.record import Record
from qkvcli.core.rope import Rope
from qkvcli.core.splitmix import SplitMix64
from qkvcli.core.weights import check_branches, check_model_widths
from qkvcli.gradcheck.settings import DEFAULT_STEP, DEFAULT_TOLERANCE
from qkvcli.reading.files import StrPath
from qkvcli.reading.fixture import LAYER_TOP_KEYS, TOP_KEYS
from qkvcli.reading.json_values import is_json_int, json_type_name, keyed_object
from qkvcli.reading.layouts import (
    LAYOUT_DESCRIPTIONS,
    NORM_KEYS,
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
from qkvcli.reading.load import BUNDLED_NAME
from qkvcli.reading.parse import read_document, read_input, read_upstream
from qkvcli.reading.problems import FixtureError, Problems
from qkvcli.reading.rope import positive_number, read_rope
from qkvcli.reading.settings import parse_gradcheck, parse_seed_and_chapter
from qkvcli.reading.tensors import parse_tensor
from qkvcli.reading.weights import check_name, default_names

EXAMPLES = {"chapter": BUNDLED_NAME, "primer": "primer-worked-example.json"}  # --example
UPSTREAM_OUTPUT = "output"
MAX_HEADS = 4096
QK_NORM_KEYS = ("kind", "span", "eps", "offset", "after")
PACKED_LAYOUTS = {"packed": "in_proj", "c_attn": "c_attn", "query_key_value": "query_key_value",
                  "qkv_proj": "qkv_proj", "codegen_qkv_proj": "codegen_qkv_proj"}


class NormSpec(Record):
    """A fixture's ``qk_norm``: how Q and K are normalised (its weights are parameters)."""

    span: str  # "head": each head alone, weight [d_k] or [n, d_k]; "layer": a token's width
    eps: float  # added to the mean square (the variance)
    offset: float = 0.0  # added to the weight before it multiplies (Gemma 3's 1 + weight)
    kind: str = "rms"  # "rms": RMSNorm; "layer": LayerNorm (the mean subtracted first)
    after: str = "projection"  # "rope": the rotated Q and K normalised (Hunyuan V1)


class NormKeys(Protocol):
    """What a q/k norm's fixture keys are made of (a fixture's or a config's norm)."""

    @property
    def kind(self) -> str: ...
    @property
    def span(self) -> str: ...
    @property
    def eps(self) -> float: ...
    @property
    def offset(self) -> float: ...
    @property
    def after(self) -> str: ...


class LayerPieces(Protocol):
    """The pieces a real layer adds to attention, wherever they are held (a fixture's
    :class:`LayerFunction`, a config's function, attend's evidence)."""

    @property
    def window(self) -> int | None: ...
    @property
    def softcap(self) -> float | None: ...
    @property
    def alibi(self) -> tuple[float, ...] | None: ...
    @property
    def alibi_scaled(self) -> bool: ...
    @property
    def alibi_rounding(self) -> str | None: ...
    @property
    def clip_qkv(self) -> float | None: ...
    @property
    def qk_norm(self) -> NormKeys | None: ...


def pieces_document(function: LayerPieces) -> dict[str, Any]:
    """``function``'s pieces as a fixture spells them, in the fixture format's order, each
    only when present (``init`` writes them; attend's JSON reports them under ``config``)."""
    found: dict[str, Any] = {}
    if function.window is not None:
        found["window"] = function.window
    if function.softcap is not None:
        found["softcap"] = function.softcap
    if function.alibi is not None:
        found["alibi"] = list(function.alibi)
        if function.alibi_scaled:
            found["alibi_scaled"] = True
        if function.alibi_rounding is not None:
            found["alibi_rounding"] = function.alibi_rounding
    if function.clip_qkv is not None:
        found["clip_qkv"] = function.clip_qkv
    norm = function.qk_norm
    if norm is not None:
        named = {} if norm.kind == "rms" else {"kind": norm.kind}  # RMSNorm: the default
        after = {} if norm.after == "projection" else {"after": norm.after}  # the default
        found["qk_norm"] = {**named, "span": norm.span, "eps": norm.eps, "offset": norm.offset,
                            **after}
    return found


class LayerFunction(Record):
    """What a fixture says its layer computes beyond its parameters (:func:`read_function`)."""

    heads: int | None  # None: one head, run as such (no heads axis); else a layer of heads
    kv_heads: int | None  # grouped-query attention's K/V heads; None: one per query head
    causal: bool  # the fixture's "causal", or --causal
    rope: Rope | None
    scale: float | None  # the score factor; None: 1/sqrt(d_k)
    independent: bool  # "value_width": "independent": d_v is the value weight's own
    architecture: str | None  # the model the fixture says it was read from
    window: int | None = None  # a sliding window: causal, the latest keys; else two-sided
    softcap: float | None = None  # the scaled scores become softcap * tanh(Z / softcap)
    alibi: tuple[float, ...] | None = None  # one ALiBi slope per head: slope_h * j added
    clip_qkv: float | None = None  # the projections clamped to [-clip_qkv, clip_qkv]
    qk_norm: NormSpec | None = None  # Q and K normalised (weights: LayerParameters)
    alibi_scaled: bool = False  # the ALiBi bias added before the scale (Falcon)
    alibi_rounding: str | None = None  # "bfloat16": slopes, positions, products rounded

    @property
    def kv_groups(self) -> int:
        """Query heads per K/V head (1 without ``kv_heads``)."""
        if self.kv_heads is None or self.heads is None or self.heads % self.kv_heads:
            return 1
        return self.heads // self.kv_heads

    @property
    def value_width(self) -> str:
        """The fixture's ``value_width``: ``"independent"`` or ``"shared"``."""
        return "independent" if self.independent else "shared"


class LayerParameters(Record):
    """A layer's parameters in our layout (``Y = X W + b``), and how the fixture gave them."""

    weights: tuple[Array, Array, Array]  # [d_model, d_out] each: query, key, value
    biases: tuple[Array | None, Array | None, Array | None]
    names: tuple[str, str, str]
    layout: str  # the weights' spelling: a key of reading.layouts.LAYOUT_DESCRIPTIONS
    branch_layouts: tuple[str, str, str]  # per branch "qkv" ([in, out]) or "torch" ([out, in])
    out_weight: Array | None = None  # [H*d_v, E_out]
    out_bias: Array | None = None
    out_layout: str | None = None  # "out_proj" (torch) or "c_proj" (Conv1D)
    sources: tuple[tuple[str, str], ...] = ()  # (name, checkpoint tensor): checkpoint_sources
    norm_query: Array | None = None  # a q/k norm's weights, [d_k], [H, d_k] or [H*d_k]
    norm_key: Array | None = None
    norm_query_bias: Array | None = None  # a q/k LayerNorm's biases, shaped as the weights
    norm_key_bias: Array | None = None
    # where each branch's weight was read (a packed form's tensor for all three)
    locations: tuple[str, str, str] = ("$.weights.query", "$.weights.key", "$.weights.value")
    value_input: bool = False  # the value weight reads the fixture's value_input

    @property
    def packed(self) -> str | None:
        """The packed projection the weights were given as (``in_proj``, ``c_attn``,
        ``query_key_value``), or ``None``."""
        return PACKED_LAYOUTS.get(self.layout)

    @property
    def layout_description(self) -> str:
        """A one-line description of the weights' layout, for reports (and, with a value
        input, which columns of the layer's input the value weight reads)."""
        if self.value_input:
            shared = int(self.weights[0].shape[0])
            return (f"{LAYOUT_DESCRIPTIONS[self.layout]}; value reads value_input, the "
                    f"layer's input columns {shared}: (query and key read input, columns "
                    f":{shared})")
        return LAYOUT_DESCRIPTIONS[self.layout]

    def arrays(self) -> tuple[Array, ...]:
        """Every parameter given: the weights, the biases, the output projection."""
        return (*self.weights, *(t for t in (*self.biases, self.out_weight, self.out_bias,
                                             self.norm_query, self.norm_key)
                                 if t is not None))


class AttendFixture(Record):
    """A fixture for ``qkv attend`` read whole (:func:`read_attend_fixture`): plain arrays,
    and what they compute. The engine judges them as it builds the layer
    (:func:`qkvcli.attention.fixture.layer_of`).

    ``input`` is the layer's input: the fixture's ``input``, with ``value_input``'s
    columns joined after it when the fixture gives one (``parameters.value_input``)."""

    input: Array
    parameters: LayerParameters
    function: LayerFunction
    upstream: Array  # U of L = <O, U>, shaped like the final output [batch, tokens, E_out]
    step: float = DEFAULT_STEP
    tolerance: float = DEFAULT_TOLERANCE
    samples: int | None = None
    seed: int = DEFAULT_SEED
    chapter: str = "custom"
    upstream_given: bool = False  # U is the fixture's upstream.output, not SplitMix64(seed)'s

    def perturbed(self) -> tuple[Array, ...]:
        """Every tensor the gradient check perturbs: the input and every parameter."""
        return (self.input, *self.parameters.arrays())


def read_attend_fixture(
    data: Any, default_chapter: str = "custom", max_elements: int = DEFAULT_MAX_ELEMENTS,
    base_dir: StrPath | None = None, heads: int | None = None, causal: bool = False,
) -> AttendFixture:
    """Read parsed JSON for ``qkv attend`` whole, in the module's order, into plain arrays.

    ``heads`` (``--heads``) sets the heads of a fixture that does not say; against a
    fixture's other ``"heads"`` it is an error. ``causal`` (``--causal``) masks a fixture
    that does not say; against ``"causal": false`` it is an error. ``base_dir`` is where
    tensor paths resolve. The engine has not judged the result:
    :func:`qkvcli.attention.fixture.layer_of` does, as it builds the layer.

    Raises :class:`~qkvcli.reading.problems.FixtureError`.
    """
    problems = Problems()  # fail-fast: a reader returns None only after raising
    document = read_document(data, TOP_KEYS + LAYER_TOP_KEYS, problems)
    assert document is not None
    function = read_function(document, heads, causal, max_elements, base_dir)
    weights = document["weights"]
    canonical = canonicalize(weights, max_elements, base_dir, OUT_KEYS + NORM_KEYS,
                             function.heads, function.kv_heads)
    parameters = read_parameters(weights, canonical)
    value_input = document.get("value_input")
    d_model = _model_width(parameters, value_input is not None)
    parameters, function = read_layer(weights, parameters, function, max_elements, base_dir)
    query, _, value = parameters.weights
    x = read_input(document["input"], d_model, max_elements, problems, base_dir)
    assert x is not None
    if value_input is not None:  # the layer's input: the two joined, input's columns first
        values = read_value_input(value_input, x.shape, int(value.shape[0]), max_elements,
                                  base_dir)
        check_derived("layer input", "[B,T,d_model + d_v_in] (input and value_input joined)",
                      (*x.shape[:2], x.shape[2] + values.shape[2]), "$.value_input",
                      max_elements)
        x = np.concatenate([x, values], axis=-1)
        parameters = parameters._replace(value_input=True)
    batch, tokens, _ = x.shape
    d_k, d_v = int(query.shape[1]), int(value.shape[1])
    # Refused before anything allocates them: projections, scores and the upstream U.
    # A layer's projections are full width (H*d_k); its scores are [B,H,T,T].
    check_projection_size(batch, tokens, max(d_k, d_v), "$.input", max_elements)
    check_scores_size(batch, function.heads, tokens, "$.input", max_elements)
    width = d_v if function.heads is None else _output_width(parameters, function)
    output = (batch, tokens, width)  # the final output's, and U's
    if function.heads is not None:
        check_derived("layer output", "[B,T,E_out]", output, "$.input", max_elements)

    raw_upstream = document.get("upstream")
    # the chapter's upstream gradients: checked, not kept (L = <O, U> does not use them)
    read_upstream(raw_upstream, tuple((batch, tokens, w) for w in (d_k, d_k, d_v)), max_elements,
                  problems, base_dir, (*BRANCHES, UPSTREAM_OUTPUT), axes=None)
    given = read_upstream_output((raw_upstream or {}).get(UPSTREAM_OUTPUT), output, max_elements,
                                 base_dir)
    step, tolerance, samples = parse_gradcheck(document.get("gradcheck"), problems)
    check_step_fits(step, (x, *parameters.arrays()), "$.gradcheck.step")
    seed, chapter = parse_seed_and_chapter(document, default_chapter, problems)
    upstream = seeded_upstream(output, seed) if given is None else given
    return AttendFixture(x, parameters, function, upstream, step, tolerance, samples, seed,
                         chapter, upstream_given=given is not None)


def _model_width(parameters: LayerParameters, value_input: bool = False) -> int:
    """``d_model``, the one input width of the three weights, which the input must have:
    each branch's widths non-zero, then the three alike (:mod:`qkvcli.core.weights`' rules,
    which the engine applies again as it builds the head); with ``value_input`` the query's
    and key's alike (the value weight reads ``value_input``). Raises :class:`FixtureError`
    at the branch, or at ``$.weights`` for widths that differ."""
    query, key, value = (int(w.shape[0]) if w.ndim == 2 else 0 for w in parameters.weights)
    try:
        check_branches(parameters.weights)
        if not value_input:
            check_model_widths(parameters.weights)
    except ProjectionError as error:
        where = parameters.locations[BRANCHES.index(error.projection)]
        raise FixtureError(where, str(error)) from None
    except QkvError as error:
        hint = ('; a value projected from an input of its own needs "value_input" (the '
                "input the value weight reads)") if query == key != value else ""
        raise FixtureError("$.weights", f"{error}{hint}") from None
    if query != key:
        raise FixtureError("$.weights", f"with value_input, the query and key weights read "
                           f"input: their model widths must match, got query {query}, key "
                           f"{key}")
    return query


def read_value_input(raw: Any, shape: tuple[int, ...], width: int, max_elements: int,
                     base_dir: StrPath | None) -> Array:
    """``$.value_input``: any tensor source, of rank three, the input's batch and tokens
    (``shape``) and the value weight's input width ``width``, finite. Raises
    :class:`FixtureError` at ``$.value_input``."""
    location = "$.value_input"
    array = parse_tensor(raw, location, max_elements, base_dir=base_dir)
    wanted = (int(shape[0]), int(shape[1]), width)
    if array.ndim != 3:
        raise FixtureError(location, "value_input must have rank three [batch,tokens,d_v_in], "
                           f"got rank {array.ndim}")
    if array.shape != wanted:
        raise FixtureError(location, f"value_input must be [{','.join(map(str, wanted))}] (the "
                           "input's batch and tokens, the value weight's input width), got "
                           f"[{','.join(map(str, array.shape))}]")
    try:
        check_finite(array, "value_input")
    except QkvError as error:
        raise FixtureError(location, str(error)) from None
    return array


def _output_width(parameters: LayerParameters, function: LayerFunction) -> int:
    """A layer's ``E_out`` as its arrays give it: the output projection's width, else the
    heads' concatenation ``H*d_v`` (``d_v`` the value width over the K/V heads). Whether
    the heads divide the widths is the engine's to judge."""
    if parameters.out_weight is not None:
        return int(parameters.out_weight.shape[1])
    heads = function.heads or 1
    return heads * (int(parameters.weights[2].shape[1]) // (function.kv_heads or heads))


def _count(data: dict[str, Any], key: str) -> int | None:
    if key not in data:
        return None
    raw = data[key]
    if not is_json_int(raw):
        raise FixtureError(f"$.{key}", f"expected an integer, got {json_type_name(raw)}")
    if not 1 <= raw <= MAX_HEADS:
        raise FixtureError(f"$.{key}", f"{key} must be between 1 and {MAX_HEADS}")
    return int(raw)


def read_function(data: dict[str, Any], heads: int | None, causal: bool,
                  max_elements: int = DEFAULT_MAX_ELEMENTS,
                  base_dir: StrPath | None = None) -> LayerFunction:
    """``value_width``, ``heads``, ``kv_heads``, ``causal``, ``rope``, ``scale``,
    ``architecture``, ``window``, ``softcap``, ``alibi`` (``alibi_scaled``,
    ``alibi_rounding``), ``clip_qkv`` and ``qk_norm``, in that order,
    with the command line's ``--heads`` and ``--causal``; a ``rope``'s ``frequencies``
    tensor is read with ``max_elements`` and from ``base_dir``.
    ``heads`` is the one said (``None``: not said) until :func:`read_layer` knows
    whether the fixture is a layer. Raises :class:`FixtureError` (also for a command line
    that contradicts the fixture)."""
    independent = value_width_mode(data) == "independent"
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
    rope = (read_rope(data["rope"], max_elements, base_dir) if data.get("rope") is not None
            else None)
    scale = positive_number(data["scale"], "$.scale") if data.get("scale") is not None else None
    architecture = data.get("architecture")
    if architecture is not None and not isinstance(architecture, str):
        raise FixtureError("$.architecture", f"expected a string, got {json_type_name(architecture)}")
    window = _window(data.get("window"))
    softcap = positive_number(data["softcap"], "$.softcap") if data.get("softcap") is not None else None
    alibi = _alibi(data.get("alibi"))
    scaled, rounding = _alibi_form(data, alibi is not None)
    return LayerFunction(heads, kv_heads, bool(said) or causal, rope, scale, independent,
                         architecture, window, softcap, alibi,
                         positive_number(data["clip_qkv"], "$.clip_qkv")
                         if data.get("clip_qkv") is not None else None,
                         _qk_norm(data.get("qk_norm")), scaled, rounding)


def _alibi_form(data: dict[str, Any], alibi: bool) -> tuple[bool, str | None]:
    """``alibi_scaled`` (true or false: the bias added before the scale) and
    ``alibi_rounding`` (``"bfloat16"``), both only with the ``alibi`` they describe."""
    scaled, rounding = data.get("alibi_scaled"), data.get("alibi_rounding")
    for key, value in (("alibi_scaled", scaled), ("alibi_rounding", rounding)):
        if value is not None and not alibi:
            raise FixtureError(f"$.{key}", f'{key} describes an ALiBi bias: the fixture needs "alibi"')
    if scaled is not None and not isinstance(scaled, bool):
        raise FixtureError("$.alibi_scaled", f"expected true or false, got {json_type_name(scaled)}")
    if rounding is not None and rounding not in ALIBI_ROUNDINGS:
        raise FixtureError("$.alibi_rounding", '"bfloat16" (slopes, positions and their products '
                           "rounded to bfloat16), got " + (repr(rounding) if isinstance(
                               rounding, str) else json_type_name(rounding)))
    return bool(scaled), None if rounding is None else str(rounding)


def _qk_norm(raw: Any) -> NormSpec | None:
    """``qk_norm``: ``{"kind": "rms" | "layer", "span": "head" | "layer", "eps": positive,
    "offset": number, "after": "projection" | "rope"}`` (``kind`` optional, ``"rms"``;
    ``offset`` optional, 0; ``after`` optional, ``"projection"``: the norm comes before
    RoPE, ``"rope"``: it normalises the rotated Q and K, each head alone; ``None``: no
    norm)."""
    if raw is None:
        return None
    keyed_object(raw, "$.qk_norm", QK_NORM_KEYS, ("span", "eps"))
    kind = raw.get("kind", "rms")
    if kind not in QK_NORM_KINDS:
        raise FixtureError("$.qk_norm.kind", '"rms" (RMSNorm) or "layer" (LayerNorm), got '
                           + (repr(kind) if isinstance(kind, str) else json_type_name(kind)))
    span = raw["span"]
    if span not in QK_NORM_SPANS:
        raise FixtureError("$.qk_norm.span", '"head" (each head alone) or "layer" (a token\'s '
                           f"whole query and key widths), got {json_type_name(span)}"
                           if not isinstance(span, str) else
                           f'"head" (each head alone) or "layer" (a token\'s whole query '
                           f"and key widths), got {span!r}")
    offset = raw.get("offset", 0)
    if isinstance(offset, bool) or not isinstance(offset, int | float) or not (
            abs(offset) < float("inf")):
        raise FixtureError("$.qk_norm.offset", f"expected a finite number, got "
                           f"{json_type_name(offset)}")
    eps = positive_number(raw["eps"], "$.qk_norm.eps")
    after = raw.get("after", "projection")
    if after not in QK_NORM_AFTER:
        raise FixtureError("$.qk_norm.after", '"projection" (the norm before RoPE) or "rope" '
                           "(the rotated Q and K normalised), got "
                           + (repr(after) if isinstance(after, str) else json_type_name(after)))
    if after == "rope" and span != "head":
        raise FixtureError("$.qk_norm.after", 'a norm after RoPE normalises each rotated head '
                           'alone: it needs "span": "head"')
    return NormSpec(str(span), eps, float(offset), str(kind), str(after))


def _alibi(raw: Any) -> tuple[float, ...] | None:
    """``alibi``: a non-empty list of finite numbers, one slope per head (``None``: none)."""
    if raw is None:
        return None
    if not isinstance(raw, list) or not raw or len(raw) > MAX_HEADS:
        raise FixtureError("$.alibi", f"expected a list of 1 to {MAX_HEADS} slopes, one per "
                           f"head, got {json_type_name(raw)}")
    slopes = []
    for i, value in enumerate(raw):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise FixtureError(f"$.alibi[{i}]", f"expected a number, got {json_type_name(value)}")
        try:
            slope = float(value)
        except OverflowError:
            slope = float("inf")
        if not np.isfinite(slope):
            raise FixtureError(f"$.alibi[{i}]", "must be a finite number")
        slopes.append(slope)
    return tuple(slopes)


def _window(raw: Any) -> int | None:
    """``window``: a positive integer (``None``: none). With the causal mask a query sees
    the ``window`` latest keys, itself included; without it the window is two-sided, the
    keys less than ``window`` positions away on either side (``|i - j| < window``)."""
    if raw is None:
        return None
    if not is_json_int(raw) or raw < 1:
        raise FixtureError("$.window", f"expected a positive integer, got {json_type_name(raw)}"
                           if not is_json_int(raw) else f"must be at least 1, got {raw}")
    # a window longer than any input qkv reads sees every key it could: no window at all
    return int(min(raw, 1 << 62))


def read_parameters(weights: dict[str, Any], canonical: CanonicalWeights) -> LayerParameters:
    """The weights and biases of ``canonical`` (read from ``weights``), named: each
    branch's ``name``, else its checkpoint tensor's (:func:`checkpoint_sources`), else the
    chapter's. Raises :class:`FixtureError` at the first invalid name."""
    sources = checkpoint_sources(weights)
    given = dict(sources)
    defaults = default_names([given.get(f"w_{branch}") for branch in BRANCHES])
    names = []
    for branch, default in zip(canonical.branches, defaults, strict=True):
        name = default if branch.name is None else branch.name
        check_name(name, f"{branch.location}.name")
        names.append(name)
    q, k, v = canonical.branches
    return LayerParameters((q.weight, k.weight, v.weight), (q.bias, k.bias, v.bias),
                           (names[0], names[1], names[2]), canonical.layout,
                           (q.given, k.given, v.given), sources=sources,
                           locations=(q.location, k.location, v.location))


def read_layer(
    weights: dict[str, Any], parameters: LayerParameters, function: LayerFunction,
    max_elements: int, base_dir: StrPath | None,
) -> tuple[LayerParameters, LayerFunction]:
    """The output projection of ``weights``, if any, added to ``parameters``; and whether
    the fixture is a layer, said by ``function.heads`` (1 for a layer that does not say).
    Raises :class:`FixtureError`."""
    out = read_out_projection(weights, max_elements, base_dir)
    if out is not None:
        parameters = parameters._replace(out_weight=out.weight, out_bias=out.bias,
                                         out_layout=out.layout)
    parameters = _read_norm(weights, parameters, function, max_elements, base_dir)
    layer = (function.heads is not None or out is not None or function.kv_heads is not None
             or function.softcap is not None or function.alibi is not None
             or function.clip_qkv is not None or function.qk_norm is not None
             or parameters.layout in ("c_attn", "query_key_value", "qkv_proj",
                                      "codegen_qkv_proj"))
    if layer and function.heads is None:
        function = function._replace(heads=1)
    return parameters, function


def _read_norm(weights: dict[str, Any], parameters: LayerParameters, function: LayerFunction,
               max_elements: int, base_dir: StrPath | None) -> LayerParameters:
    """``q_norm_weight`` and ``k_norm_weight``, both with ``qk_norm`` and never without,
    and a LayerNorm's ``q_norm_bias`` and ``k_norm_bias``, both or neither. Each is a
    tensor of rank one (shared by the heads, or over the layer's width), of rank two (a
    row per head), or a list of rank-one tensor objects, one per head, stacked into rows
    (StableLM's ``norms.{h}``); the widths are the layer's to judge."""
    given = [key for key in NORM_KEYS if key in weights]
    if function.qk_norm is None:
        if given:
            raise FixtureError(f"$.weights.{given[0]}", 'a norm\'s weight needs "qk_norm" '
                               "(its span and eps)")
        return parameters
    arrays: list[Array | None] = []
    for key in NORM_KEYS:
        if key not in weights:
            if key.endswith("_bias"):
                arrays.append(None)
                continue
            raise FixtureError("$.weights", f'missing key "{key}" ("qk_norm" needs it)')
        arrays.append(_norm_tensor(weights[key], f"$.weights.{key}", max_elements, base_dir))
    biases = [key for key, array in zip(NORM_KEYS[2:], arrays[2:], strict=True) if array is not None]
    if biases and function.qk_norm.kind != "layer":
        raise FixtureError(f"$.weights.{biases[0]}", 'a bias needs "qk_norm" of kind "layer" '
                           "(an RMSNorm has none)")
    if len(biases) == 1:
        missing = next(key for key in NORM_KEYS[2:] if key not in biases)
        raise FixtureError("$.weights", f'missing key "{missing}" ({biases[0]} needs it)')
    return parameters._replace(norm_query=arrays[0], norm_key=arrays[1],
                               norm_query_bias=arrays[2], norm_key_bias=arrays[3])


def _norm_tensor(raw: Any, location: str, max_elements: int, base_dir: StrPath | None) -> Array:
    """A norm's weight or bias: a tensor of rank one or two, or a non-empty list of tensor
    objects (not numbers) of rank one and one width, stacked into rows."""
    if isinstance(raw, list) and raw and all(isinstance(item, dict) for item in raw):
        rows: list[Array] = []
        for h, item in enumerate(raw):
            row = parse_tensor(item, f"{location}[{h}]", max_elements, base_dir=base_dir)
            if row.ndim != 1:
                raise FixtureError(f"{location}[{h}]", f"each head's row must have rank one, "
                                   f"got rank {row.ndim}")
            if rows and row.shape != rows[0].shape:
                raise FixtureError(f"{location}[{h}]", f"each head's row must be "
                                   f"[{rows[0].shape[0]}] as the first, got [{row.shape[0]}]")
            rows.append(row)
        return np.stack(rows)
    array = parse_tensor(raw, location, max_elements, base_dir=base_dir)
    if array.ndim not in (1, 2):
        raise FixtureError(location, f"{location.rsplit('.', 1)[-1]} must have rank one or "
                           f"two, got rank {array.ndim}")
    return array


def read_upstream_output(
    raw: Any, shape: tuple[int, int, int], max_elements: int, base_dir: StrPath | None
) -> Array | None:
    """``upstream.output`` if given, checked against the final output's ``shape``."""
    if raw is None:
        return None
    location = f"$.upstream.{UPSTREAM_OUTPUT}"
    grad = parse_tensor(raw, location, max_elements, base_dir=base_dir)
    return expect_shape(grad, shape, "the final output's [batch,tokens,E_out]", location)


def seeded_upstream(shape: tuple[int, int, int], seed: int) -> Array:
    """``U``: SplitMix64(seed) unit draws mapped to ``[-1, 1)``, row-major, shaped ``shape``."""
    count = shape[0] * shape[1] * shape[2]
    return (2.0 * SplitMix64(seed).next_unit_block(count) - 1.0).reshape(shape)


_SOURCED_KEYS = {f"{prefix}_{part}": f"{part[0]}_{role}" for prefix, role in (
    ("in_proj", "packed"), ("c_attn", "packed"), ("query_key_value", "packed"),
    ("qkv_proj", "packed"), ("codegen_qkv_proj", "packed"),
    ("out_proj", "out"), ("c_proj", "out")) for part in ("weight", "bias")} | {
    "q_norm_weight": "norm_query", "k_norm_weight": "norm_key",
    "q_norm_bias": "norm_query_bias", "k_norm_bias": "norm_key_bias"}


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
