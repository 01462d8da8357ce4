"""Renderers: pure functions from evidence records to text, and the one dispatcher to them.

:func:`render` (and :func:`render_pieces`, the same text in pieces) serve the library and
the CLI alike: the chapter's :class:`~qkvcli.check.chapter26_evidence.Evidence` as ``text``
(the chapter's report), ``trace`` (the diagram trace) or ``json``; a gradient check,
an attention head or layer, the variance table and a ``qkv check`` result as ``text``
or ``json``. :func:`figure` gives the rich view of any of them. Nothing here prints,
reads files or exits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from qkvcli.render.views import CHAPTERS, VIEWS, record_of, view_of

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
    view = view_of(evidence)
    if fmt not in formats_of(evidence):
        raise ValueError(f"unknown format {fmt!r} for {view}; expected one of "
                         f"{', '.join(formats_of(evidence))}")
    if view == "evidence":
        from qkvcli.render import report

        stream = {"text": report.iter_text, "trace": report.iter_trace, "json": report.iter_json}
        return stream[fmt](evidence, tensors)  # type: ignore[arg-type]
    if view == "chapter":
        from qkvcli.render.chapters import dispatch

        return dispatch.pieces(evidence, fmt)
    if view == "gradcheck":
        return iter([gradcheck_text(evidence, fmt, dtype)])
    whole: dict[str, Callable[[Any], str]]
    if view == "attend":
        from qkvcli.render import attend

        whole = {"text": attend.render_attend_text, "json": attend.render_attend_json}
    elif view == "variance":
        from qkvcli.render import variance

        whole = {"text": variance.render_variance_text, "json": variance.render_variance_json}
    else:
        from qkvcli.render import check

        whole = {"text": check.render_check_text,
                 "json": check.render_check_json}
    extra: dict[str, Any] = {} if precision is None or fmt not in PRECISION_FORMATS[view] else {
        "precision": precision}
    if view == "attend":
        extra["tensors"] = tensors
    return iter([whole[fmt](evidence, **extra)])


def gradcheck_text(result: Any, fmt: str, dtype: str) -> str:
    """``qkv gradcheck``'s table (``text``) or document (``json``, with ``dtype``)."""
    if fmt == "json":
        from qkvcli.render.gradcheck import render_gradcheck_json

        return render_gradcheck_json(result, dtype=dtype)
    from qkvcli.render.gradcheck import render_gradcheck_text

    text = render_gradcheck_text(result)
    if dtype != "float64":
        text += f"dtype={dtype} (analytic gradients; central differences in float64)\n"
    return text


def figure(evidence: object, options: RichOptions) -> RenderableType:
    """The rich view of ``evidence`` (any record :func:`render` takes), laid out with
    ``options``. Imports rich: only the rich paths call it."""
    view = view_of(evidence)
    if view == "evidence":
        from qkvcli.render.rich.view import render_rich

        return render_rich(evidence, options)  # type: ignore[arg-type]
    if view == "chapter":
        from qkvcli.render.chapters import dispatch

        return dispatch.figure(evidence, options)
    if view == "gradcheck":
        from qkvcli.render.rich.gradcheck import render_gradcheck_rich

        return render_gradcheck_rich(evidence, options)  # type: ignore[arg-type]
    if view == "attend":
        from qkvcli.render.rich.attend import attend_renderable

        return attend_renderable(evidence, options)  # type: ignore[arg-type]
    if view == "variance":
        from qkvcli.render.rich.variance import variance_renderable

        return variance_renderable(evidence, options)  # type: ignore[arg-type]
    from qkvcli.render.rich.check import render_check_rich

    return render_check_rich(evidence, options)  # type: ignore[arg-type]
