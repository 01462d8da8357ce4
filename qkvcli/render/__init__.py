"""Renderers: pure functions from :class:`~qkvcli.evidence.build.Evidence` to text.

``text`` and ``trace`` follow the reference's report and diagram trace; ``json`` holds
everything, machine-readable. Nothing here prints, reads files or exits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from qkvcli.evidence.records import Evidence

FORMATS = ("text", "trace", "json")


def render(evidence: Evidence, fmt: str = "text") -> str:
    """``evidence`` as ``fmt``: ``text`` (the chapter's report), ``trace`` or ``json``.

    The library's one entry point to the renderers:
    ``qkvcli.render.render(qkvcli.build_evidence(qkvcli.load_fixture("f.json")))``.
    Raises :class:`ValueError` for another format (the rich figure is a renderable, not
    text: see :func:`qkvcli.render.rich.view.render_rich`).
    """
    if fmt == "text":
        from qkvcli.render.report import render_text

        return render_text(evidence)
    if fmt == "trace":
        from qkvcli.render.report import render_trace

        return render_trace(evidence)
    if fmt == "json":
        from qkvcli.render.report import render_json

        return render_json(evidence)
    raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
