"""Errors of attention heads and layers.

Construction errors of the attention head beyond the chapter's (see :mod:`qkvcli.core.errors`).

Construction errors of the multi-head layer: the head count and the output projection.

The refusals of chapters 29 and 30: a RoPE table of fixed position capacity, an operand
it cannot turn, a layer input without tokens.
"""

from __future__ import annotations

from qkvcli.core.errors import QkvError, Refused, format_shape


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
