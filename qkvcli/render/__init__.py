"""Renderers: pure functions from evidence records to text, and the one dispatcher to them.

:func:`render` (and :func:`render_pieces`, the same text in pieces) serve the library and
the CLI alike: the chapter's :class:`~qkvcli.check.chapter26_evidence.Evidence` as ``text``
(the chapter's report), ``trace`` (the diagram trace) or ``json``; a gradient check,
an attention head or layer, the variance table and a ``qkv check`` result as ``text``
or ``json``. :func:`figure` gives the rich view of any of them. Nothing here prints,
reads files or exits.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from qkvcli.render.views import CHAPTERS, FIGURES, RENDERERS, VIEWS, Asked, record_of, view_of

__all__ = ["CHAPTERS", "FORMATS", "VIEWS", "figure", "formats_of", "record_of", "render",
           "render_pieces", "verdict_line", "view_of"]

if TYPE_CHECKING:
    from rich.console import RenderableType

    from qkvcli.render.rich.options import RichOptions

FORMATS = ("text", "trace", "json")
"""Every format :func:`render` knows (``trace`` only for the chapter's evidence)."""
PRECISION_FORMATS: dict[str, tuple[str, ...]] = {
    "evidence": (), "gradcheck": (), "attend": ("text",), "variance": ("text",), "check": (),
    "chapter": (),
}
"""The text formats of each view that take ``precision`` (the rich view always does)."""


def verdict_line(passed: int, total: int, *, passed_all: bool | None = None,
                 unread: int = 0, fixtures: int = 0) -> str:
    """``verdict: PASS (N of M checks passed)``, or ``FAIL``: the one verdict wording
    outside the anchored chapter report. ``passed_all`` overrides ``passed == total``
    (a batch with a fixture that could not be read fails whatever its checks did), and
    ``unread`` of ``fixtures`` could not be read (named in the counts when not 0)."""
    from qkvcli.render.wording import verdict

    return verdict(passed == total if passed_all is None else passed_all, passed, total,
                   unread=unread, fixtures=fixtures)


def formats_of(evidence: object) -> tuple[str, ...]:
    """The formats :func:`render` gives for ``evidence``."""
    return FORMATS if view_of(evidence) in ("evidence", "chapter") else ("text", "json")


def render(evidence: object, fmt: str = "text", *, tensors: str = "summary",
           precision: int | None = None, dtype: str = "float64") -> str:
    """``evidence`` as ``fmt``, whole: ``"".join(render_pieces(...))``.

    The library's one entry point to the renderers:
    ``qkvcli.render.render(qkvcli.build_evidence(qkvcli.load_fixture("f.json")))``.
    See :func:`render_pieces` for the arguments and errors.
    """
    return "".join(render_pieces(evidence, fmt, tensors=tensors, precision=precision,
                                 dtype=dtype))


def render_pieces(evidence: object, fmt: str = "text", *, tensors: str = "summary",
                  precision: int | None = None, dtype: str = "float64") -> Iterator[str]:
    """``evidence`` as ``fmt``, in pieces (a large report never sits in memory whole).

    ``tensors`` (``full``, ``summary``, ``none``: :mod:`qkvcli.render.tensors`) is how
    much of each tensor the chapter's evidence shows; ``precision``, the decimals where
    the format takes them (:data:`PRECISION_FORMATS`; ``None``: the format's own);
    ``dtype``, the type of a gradient check's analytic gradients (named unless float64).
    Raises :class:`ValueError` for a format ``evidence`` has not (the rich view is a
    renderable, not text: see :func:`figure`) and ``TypeError`` for an unknown record.
    """
    import importlib

    view = view_of(evidence)
    if fmt not in formats_of(evidence):
        raise ValueError(f"unknown format {fmt!r} for {view}; expected one of "
                         f"{', '.join(formats_of(evidence))}")
    asked = Asked(tensors, precision if fmt in PRECISION_FORMATS[view] else None, dtype)
    pieces: Iterator[str] = importlib.import_module(RENDERERS[view]).pieces(evidence, fmt, asked)
    return pieces


def figure(evidence: object, options: RichOptions) -> RenderableType:
    """The rich view of ``evidence`` (any record :func:`render` takes), laid out with
    ``options``. Imports rich: only the rich paths call it."""
    import importlib

    module, function = FIGURES[view_of(evidence)].split(":")
    drawn: RenderableType = getattr(importlib.import_module(module), function)(evidence, options)
    return drawn
