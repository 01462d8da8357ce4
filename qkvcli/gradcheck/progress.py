"""Progress reporting of a gradient check: the callback's type and a counter across tensors."""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[int, int], None]
"""``progress(done, total)``: called after each checked coordinate or direction."""


class Ticker:
    """Counts finished checks across tensors and reports them to ``progress``."""

    def __init__(self, progress: Progress | None, total: int) -> None:
        self.progress = progress
        self.total = total
        self.done = 0

    def tick(self) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, self.total)
