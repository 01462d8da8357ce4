"""What is wrong in a fixture: :class:`FixtureError` and the :class:`Problems` collector.

The bottom of the fixtures layer: every reader of fixture-like JSON (fixtures, layouts,
tensor sources, ``qkv attend``) raises :class:`FixtureError`, which carries the JSON
location (``$.weights.key``) of what is wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from qkvcli.core.errors import QkvError

T = TypeVar("T")


MAX_PROBLEMS = 100

class FixtureError(QkvError):
    """A fixture that cannot be used: ``location`` is a JSON path such as ``$.weights.key``.

    The message is ``"<location>: <message>"``, or just ``message`` when ``location`` is empty
    (a problem of the whole file, such as invalid JSON).
    """

    def __init__(self, location: str, message: str) -> None:
        self.location = location
        self.message = message
        super().__init__(f"{location}: {message}" if location else message)


class TooManyProblems(QkvError):
    """Raised inside collection once ``limit`` problems are recorded (caught by the collector)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(f"stopped after {limit} problems")


class Problems:
    """Where validation reports what is wrong in a fixture.

    Fail-fast (the default, used by ``parse_fixture``) raises the first problem, so it is
    always the one the single-error path reports. Collecting (used by ``fixture_problems``)
    records it and lets validation go on with the next independent part; checks that
    depend on a failed part are skipped by the caller.
    """

    def __init__(self, collect: bool = False, limit: int = MAX_PROBLEMS) -> None:
        self.collect = collect
        self.limit = limit
        self.errors: list[FixtureError] = []

    def add(self, error: FixtureError) -> None:
        """Record ``error``; raises it when fail-fast, :class:`TooManyProblems` at the limit."""
        if not self.collect:
            raise error
        self.errors.append(error)
        if len(self.errors) >= self.limit:
            raise TooManyProblems(self.limit)

    def attempt(self, func: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
        """``func(*args, **kwargs)``, or ``None`` after recording the :class:`FixtureError`."""
        try:
            return func(*args, **kwargs)
        except FixtureError as error:
            self.add(error)
            return None
