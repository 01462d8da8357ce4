"""Errors of attention heads and layers.

Construction errors of the attention head beyond the chapter's (see :mod:`qkvcli.core.errors`).

Construction errors of the multi-head layer: the head count and the output projection.
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
