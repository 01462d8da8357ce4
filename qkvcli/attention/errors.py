"""Errors of attention heads and layers.

Construction errors of the attention head beyond the chapter's (see :mod:`qkvcli.core.errors`).

Construction errors of the multi-head layer: the head count and the output projection.

The refusals of chapters 29 and 30: a RoPE table of fixed position capacity, an operand
it cannot turn, a layer input without tokens.

The refusals of chapter 37's layer-local KV cache (:mod:`qkvcli.attention.cache`): a cache
it cannot make, a step it will not take (the request, the cache's binding to the layer, a
full cache), a score the softmax cannot read, an append it will not write. The messages
are the course's (``attention/incremental.rs``), word for word.
"""

from __future__ import annotations

from qkvcli.core.errors import QkvError, Refused, format_float_debug, format_shape


class KeyWidthMismatch(QkvError):
    def __init__(self, query: int, key: int) -> None:
        self.query = query
        self.key = key
        super().__init__(
            f"query and key widths must match for the dot product, got query {query}, key {key}"
        )


class BiasShapeMismatch(QkvError):
    def __init__(self, branch: str, expected: int, actual: tuple[int, ...]) -> None:
        self.branch = branch
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"{branch} bias must have shape [{expected}] (the branch's output width), "
            f"got {format_shape(actual)}"
        )


class OutputGradientShapeMismatch(QkvError):
    """The upstream ``grad_output`` does not have the output's shape ``[batch, tokens, d_v]``."""

    def __init__(self, expected: tuple[int, ...], actual: tuple[int, ...]) -> None:
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"output gradient must have shape {format_shape(expected)}, "
            f"got {format_shape(actual)}"
        )


class WindowError(QkvError):
    """A sliding window that is not a positive number of keys."""

    def __init__(self, window: object) -> None:
        self.window = window
        super().__init__(f"window must be a positive integer (the keys a query sees), got {window!r}")


class HeadCountMismatch(QkvError):
    """The head count does not divide the query/key width and the value width."""

    def __init__(self, heads: int, width_qk: int, width_v: int) -> None:
        self.heads = heads
        self.width_qk = width_qk
        self.width_v = width_v
        super().__init__(
            f"heads must be at least 1 and divide the query/key width {width_qk} and the value "
            f"width {width_v}, got {heads}"
        )


class OutProjectionShapeMismatch(Refused):
    """The output projection's weight or bias does not fit the concatenated heads."""


class GroupedWidthMismatch(QkvError):
    """Grouped-query projections whose query width is not ``groups`` times the key width."""

    def __init__(self, query: int, key: int, groups: int) -> None:
        self.query = query
        self.key = key
        self.groups = groups
        super().__init__(
            f"grouped-query attention with {groups} query heads per K/V head needs a query "
            f"projection {groups} times as wide as the key projection, got query {query}, "
            f"key {key}"
        )


class ScaleError(QkvError):
    """A score factor that is not a finite positive number."""

    def __init__(self, scale: float) -> None:
        self.scale = scale
        super().__init__(f"scale must be finite and positive, got {scale!r}")


class KvHeadsMismatch(Refused):
    """``kv_heads`` that does not divide the heads, or projections that do not fit it."""


class QkNormError(Refused):
    """A norm of Q and K whose weights, span, eps or offset cannot be computed."""


class ValueInputError(Refused):
    """A value input the projections cannot read: Q and K of unequal input widths."""


# --- chapters 29 and 30: the refusals of a RoPE table of fixed capacity and of a layer's
# input, in the chapters' order (their ``kind`` published in chapter 29's trace and JSON)


class RotaryRefusal(QkvError):
    """A rotary table or operand the chapter refuses; ``kind`` names the refusal."""

    kind = ""


class ZeroFeatureWidth(RotaryRefusal):
    kind = "zero-feature-width"

    def __init__(self) -> None:
        super().__init__("rotary feature width must be nonzero")


class OddFeatureWidth(RotaryRefusal):
    kind = "odd-feature-width"

    def __init__(self, width: int) -> None:
        self.width = width
        super().__init__(f"rotary feature width must be even, got {width}")


class ZeroPositionCapacity(RotaryRefusal):
    kind = "zero-position-capacity"

    def __init__(self) -> None:
        super().__init__("rotary position capacity must be nonzero")


class InvalidRopeBase(RotaryRefusal):
    kind = "invalid-base"

    def __init__(self, base: float) -> None:
        self.base = base
        super().__init__(f"rotary frequency base must be finite and positive, got {base!r}")


class RotaryInputRank(RotaryRefusal):
    kind = "input-rank"

    def __init__(self, rank: int) -> None:
        self.rank = rank
        super().__init__(
            f"rotary input needs at least rank two [..., tokens, features], got rank {rank}")


class RotaryWidthMismatch(RotaryRefusal):
    kind = "feature-width-mismatch"

    def __init__(self, expected: int, actual: int) -> None:
        self.expected = expected
        self.actual = actual
        super().__init__(f"rotary input feature width must be {expected}, got {actual}")


class PositionOffsetOverflow(RotaryRefusal):
    kind = "position-offset-overflow"

    def __init__(self, offset: int, tokens: int) -> None:
        self.offset = offset
        self.tokens = tokens
        super().__init__(f"rotary position interval overflows: offset {offset} plus {tokens} "
                         f"tokens passes 2^53, the last position binary64 holds exactly")


class PositionRangeExceeded(RotaryRefusal):
    kind = "position-range-exceeded"

    def __init__(self, offset: int, tokens: int, capacity: int) -> None:
        self.offset = offset
        self.tokens = tokens
        self.capacity = capacity
        super().__init__(f"rotary position interval [{offset}, {offset + tokens}) exceeds "
                         f"capacity {capacity}")


class ReleasedBuffer(RotaryRefusal):
    kind = "autodiff-stage"

    def __init__(self, stage: str) -> None:
        self.stage = stage
        super().__init__(f"{stage}: the operand's buffer was released; nothing to read")


class EmptyLayerInput(QkvError):
    """A layer input without tokens: a causal row needs at least its own token."""

    def __init__(self) -> None:
        super().__init__("multi-head attention needs at least one token, got an empty token axis")


# --- chapter 37: the KV cache -----------------------------------------------------------


def debug_float(value: float) -> str:
    """``value`` as the course's debug formatting prints it: ``100.0``, ``1e-7``, ``inf``
    (Python's ``repr`` writes the exponent as ``e-07``)."""
    text = format_float_debug(value)
    if "e" in text:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}e{int(exponent)}"
    return text


def _debug_shape(shape: tuple[int, ...]) -> str:
    """A shape as the course's debug formatting prints a vector: ``[1, 2, 1, 2]``."""
    return "[" + ", ".join(str(size) for size in shape) + "]"


class CacheRefusal(QkvError):
    """A KV cache that cannot be made, or a step it refuses: the cache is left as it was."""


class ZeroCacheBatch(CacheRefusal):
    def __init__(self) -> None:
        super().__init__("KV cache batch size must be nonzero")


class ZeroCacheCapacity(CacheRefusal):
    def __init__(self) -> None:
        super().__init__("KV cache capacity must be nonzero")


class CapacityExceedsPositions(CacheRefusal):
    def __init__(self, capacity: int, max_positions: int) -> None:
        self.capacity = capacity
        self.max_positions = max_positions
        super().__init__(f"KV cache capacity {capacity} exceeds RoPE position capacity "
                         f"{max_positions}")


class IncrementalInputRank(CacheRefusal):
    def __init__(self, rank: int) -> None:
        self.rank = rank
        super().__init__("incremental attention input must have rank three "
                         f"[batch, 1, model_width], got rank {rank}")


class SingleTokenRequired(CacheRefusal):
    def __init__(self, tokens: int) -> None:
        self.tokens = tokens
        super().__init__(f"incremental attention needs exactly one new token, got {tokens}")


class IncrementalBatchMismatch(CacheRefusal):
    def __init__(self, cache: int, input: int) -> None:
        self.cache = cache
        self.input = input
        super().__init__(f"incremental attention input batch {input} must match cache "
                         f"batch {cache}")


class IncrementalWidthMismatch(CacheRefusal):
    def __init__(self, expected: int, actual: int) -> None:
        self.expected = expected
        self.actual = actual
        super().__init__("incremental attention input width must equal model width "
                         f"{expected}, got {actual}")


class CacheModelWidthMismatch(CacheRefusal):
    def __init__(self, layer: int, cache: int) -> None:
        self.layer = layer
        self.cache = cache
        super().__init__(f"KV cache model width {cache} must match attention layer width {layer}")


class CacheHeadCountMismatch(CacheRefusal):
    def __init__(self, layer: int, cache: int) -> None:
        self.layer = layer
        self.cache = cache
        super().__init__(f"KV cache head count {cache} must match attention layer head "
                         f"count {layer}")


class CacheHeadWidthMismatch(CacheRefusal):
    def __init__(self, layer: int, cache: int) -> None:
        self.layer = layer
        self.cache = cache
        super().__init__(f"KV cache head width {cache} must match attention layer head "
                         f"width {layer}")


class CacheLayerMismatch(CacheRefusal):
    def __init__(self) -> None:
        super().__init__("KV cache parameter identity does not match this attention layer")


class CacheLayerRevisionMismatch(CacheRefusal):
    def __init__(self, parameter: int, cache: int, layer: int) -> None:
        self.parameter = parameter
        self.cache = cache
        self.layer = layer
        super().__init__(f"KV cache parameter revision {cache} at stable index {parameter} "
                         f"does not match layer revision {layer}")


class CacheRopeMismatch(CacheRefusal):
    def __init__(self, cache_feature_width: int, layer_feature_width: int,
                 cache_max_positions: int, layer_max_positions: int, cache_base: float,
                 layer_base: float) -> None:
        self.cache_feature_width = cache_feature_width
        self.layer_feature_width = layer_feature_width
        self.cache_max_positions = cache_max_positions
        self.layer_max_positions = layer_max_positions
        self.cache_base = cache_base
        self.layer_base = layer_base
        super().__init__(
            f"KV cache RoPE configuration ({cache_feature_width} features, "
            f"{cache_max_positions} positions, base {debug_float(cache_base)}) does not match "
            f"layer configuration ({layer_feature_width} features, {layer_max_positions} "
            f"positions, base {debug_float(layer_base)})")


class CacheFull(CacheRefusal):
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        super().__init__(f"KV cache is full at capacity {capacity}")


LOGIT_KINDS = ("NaN", "positive infinity", "negative infinity")
"""How the softmax names a logit it cannot read."""


class IncrementalProjectionRefusal(CacheRefusal):
    """A projection of the step's one token that is not finite: ``stage`` is ``Q/K/V``
    (``branch`` ``query``, ``key`` or ``value``) or ``output`` (``branch`` empty);
    ``operation`` the product (``matmul``) or the bias added to it (``add``) that made the
    first such value, at its flat index in that projection's ``[B,1,width]``."""

    def __init__(self, stage: str, branch: str, operation: str, index: int,
                 value: float) -> None:
        self.stage = stage
        self.branch = branch
        self.operation = operation
        self.index = index
        self.value = value
        where = f"{branch} projection: " if branch else ""
        super().__init__(f"incremental {stage} projection: {where}{operation} produced "
                         f"non-finite value {debug_float(value)} at flat index {index}")


class IncrementalSoftmaxRefusal(CacheRefusal):
    """A score the step's softmax cannot read: ``group`` is the row (``b*H + h``),
    ``position`` the key it scores, ``what`` one of :data:`LOGIT_KINDS`."""

    def __init__(self, group: int, position: int, what: str) -> None:
        self.group = group
        self.position = position
        self.what = what
        super().__init__(f"incremental softmax: logit at group {group}, class {position} "
                         f"is {what}")


class AppendedShapeMismatch(CacheRefusal):
    """The rotated key or the value to append is not ``[B,H,1,d_h]``."""

    def __init__(self, branch: str, expected: tuple[int, ...], actual: tuple[int, ...]) -> None:
        self.branch = branch
        self.expected = expected
        self.actual = actual
        super().__init__(f"appended {branch} must have shape {_debug_shape(expected)}, got "
                         f"{_debug_shape(actual)}")


class NonFiniteAppend(CacheRefusal):
    """The first value of the key (``branch`` ``key value``) or value (``value``) to
    append that is not finite, at its flat index."""

    def __init__(self, branch: str, index: int, value: float) -> None:
        self.branch = branch
        self.index = index
        self.value = value
        super().__init__(f"appended {branch} at flat index {index} must be finite, got "
                         f"{debug_float(value)}")


class CacheChanged(QkvError):
    """A step that was refused but changed the cache anyway (its storage, length or
    binding): not the refusal the course asks for, whatever its error."""

    def __init__(self, refusal: str) -> None:
        self.refusal = refusal
        super().__init__(f"a refused step changed the KV cache: {refusal}")


class DecodeRefusal(QkvError):
    """A layer and input that a KV cache cannot decode one token at a time
    (:func:`qkvcli.attention.decode.check_decodable`). ``reason``: ``no-causal-mask``
    (every token sees later ones), ``two-sided-window`` (the same, by a window of
    ``window`` keys on either side), ``no-token``, ``no-batch``, or
    ``length-dependent-rope`` (a RoPE scaling of kind ``scaling`` whose frequencies change
    past ``original`` positions, and the sequence reaches ``positions``)."""

    def __init__(self, reason: str, window: int | None = None, scaling: str | None = None,
                 original: int = 0, positions: int = 0) -> None:
        self.reason = reason
        self.window = window
        self.scaling = scaling
        self.original = original
        self.positions = positions
        super().__init__("a KV cache cannot decode this layer: " + {
            "no-causal-mask": "it has no causal mask (give --causal, or \"causal\": true in "
                              "the fixture), so every token sees later ones, which no cache "
                              "of earlier tokens holds",
            "two-sided-window": f"its window of {window} keys is two-sided (no causal mask), "
                                f"so every token sees up to {(window or 1) - 1} later ones, "
                                "which no cache of earlier tokens holds",
            "no-token": "the input has no token",
            "no-batch": "the input has no batch item",
            "length-dependent-rope": f"its RoPE scaling {scaling!r} changes every frequency "
                                     f"once a sequence passes {original} positions and this "
                                     f"one reaches {positions}: a key cached at an earlier "
                                     "step keeps another rotation than the full pass gives it",
        }[reason])
