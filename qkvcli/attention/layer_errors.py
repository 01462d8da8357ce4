"""Construction errors of the multi-head layer: the head count and the output projection."""

from __future__ import annotations

from qkvcli.core.errors import QkvError


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


class OutProjectionShapeMismatch(QkvError):
    """The output projection's weight or bias does not fit the concatenated heads."""

    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(detail)
