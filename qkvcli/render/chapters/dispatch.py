"""The views of a later chapter's evidence, through the renderer the one table names
(:data:`qkvcli.render.views.CHAPTERS`).

:func:`qkvcli.render.render_pieces` and :func:`qkvcli.render.figure` hand a chapter's
evidence here; each chapter's renderer has ``text``, ``trace``, ``json_document`` and
``figure(evidence, width, options)``. Below a failing text report :func:`failure_lines`
names the checks that failed (a passing report keeps the course's bytes).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import RenderableType

    from qkvcli.render.rich.options import RichOptions
    from qkvcli.render.views import Asked


def renderer(evidence: object) -> ModuleType:
    """The module that renders ``evidence``. Raises ``TypeError`` for other records."""
    from qkvcli.render.views import CHAPTERS, record_of

    name = record_of(evidence)
    if name not in CHAPTERS:
        raise TypeError(f"{type(evidence).__name__} is no chapter's evidence")
    return importlib.import_module(CHAPTERS[name])


def pieces(evidence: object, fmt: str, asked: Asked | None = None) -> Iterator[str]:
    """``evidence`` as ``text``, ``trace`` or ``json`` (a chapter's report takes nothing
    ``asked``: its bytes are the course's)."""
    if fmt == "json":
        from qkvcli.render.document import dumps

        return iter([dumps(document(evidence))])
    return iter([getattr(renderer(evidence), fmt)(evidence)])


def document(evidence: object) -> dict[str, Any]:
    """The chapter's JSON document (it starts with the one head, ``report``: ``run``)."""
    found: dict[str, Any] = renderer(evidence).json_document(evidence)
    return found


class ChapterFigure:
    """A chapter's figure drawn at the width the console offers when it is printed (the
    chapter's ``figure(evidence, width, options)`` is called then), so the CLI's width
    check and the printed figure agree."""

    def __init__(self, evidence: object, options: RichOptions) -> None:
        self.evidence = evidence
        self.options = options

    def drawn(self, width: int) -> Any:
        return renderer(self.evidence).figure(self.evidence, width, options=self.options)

    def __rich_console__(self, console: Any, options: Any) -> Iterator[Any]:
        yield self.drawn(options.max_width)

    def __rich_measure__(self, console: Any, options: Any) -> Any:
        from rich.measure import Measurement

        return Measurement.get(console, options, self.drawn(options.max_width))


def figure(evidence: object, options: RichOptions) -> RenderableType:
    """The chapter's rich figure (see :class:`ChapterFigure`)."""
    return ChapterFigure(evidence, options)


def failure_lines(evidence: Any) -> str:
    """``failed: name, name`` and the verdict, for below a failing text report."""
    from qkvcli.render.wording import verdict

    checks = tuple(evidence.checks)
    failed = [check.name for check in checks if not check.passed]
    return f"failed: {', '.join(failed)}\n{verdict(not failed, len(checks) - len(failed), len(checks))}\n"
