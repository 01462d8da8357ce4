"""The one table of what the renderers draw: each record, by qualified class name, and
its view, the report it is drawn as (every format dispatches by it: the text formats,
the rich figure, the explorer); each later chapter's evidence and the module that
renders it, and what a caller asks of a format. Plain strings and one record, nothing
else imported: start-up is part of the product."""

from __future__ import annotations

from qkvcli.core.record import Record

CHAPTERS = {
    "qkvcli.chapters.head.HeadChapterEvidence": "qkvcli.render.chapters.head",
    "qkvcli.chapters.ch29.RopeEvidence": "qkvcli.render.chapters.ch29",
    "qkvcli.chapters.ch30.MultiHeadEvidence": "qkvcli.render.chapters.ch30",
    "qkvcli.chapters.ch37.IncrementalEvidence": "qkvcli.render.chapters.ch37",
}
"""Each later chapter's evidence and the module that renders it (``text``, ``trace``,
``json_document``, ``figure``)."""
VIEWS = {
    "qkvcli.check.chapter26_evidence.Evidence": "evidence",
    "qkvcli.gradcheck.records.GradcheckResult": "gradcheck",
    "qkvcli.attention.records.AttendEvidence": "attend",
    "qkvcli.learn.variance.VarianceResult": "variance",
    "qkvcli.check.result.CheckResult": "check",
    **dict.fromkeys(CHAPTERS, "chapter"),
}
"""The records the renderers take, by qualified class name, and each one's view (looked
up along the MRO, so rendering one never imports the others' modules: start-up is part
of the product). The one table every format dispatches by: the text formats, the rich
figure, the explorer."""


RENDERERS = {
    "evidence": "qkvcli.render.report", "gradcheck": "qkvcli.render.gradcheck",
    "attend": "qkvcli.render.attend", "variance": "qkvcli.render.variance",
    "check": "qkvcli.render.check", "chapter": "qkvcli.render.chapters.dispatch",
}
"""Each view's module: its ``pieces(evidence, fmt, asked)`` gives the text formats."""
FIGURES = {
    "evidence": "qkvcli.render.rich.view:render_rich",
    "gradcheck": "qkvcli.render.rich.gradcheck:render_gradcheck_rich",
    "attend": "qkvcli.render.rich.attend:attend_renderable",
    "variance": "qkvcli.render.rich.variance:variance_renderable",
    "check": "qkvcli.render.rich.check:render_check_rich",
    "chapter": "qkvcli.render.chapters.dispatch:figure",
}
"""Each view's rich figure, ``function(evidence, options)``: imported only when drawn."""
PAGES = {
    "evidence": "qkvcli.render.explorer.document:evidence_page",
    "gradcheck": "qkvcli.render.explorer.document:gradcheck_page",
    "attend": "qkvcli.render.explorer.attend:attend_page",
    "check": "qkvcli.render.explorer:check_page",
    "chapter": "qkvcli.render.explorer:chapter_page",
}
"""Each view's explorer page, ``function(evidence, asked)`` (``asked``: a
:class:`qkvcli.render.explorer.page.PageAsked`): imported only when drawn."""


class Asked(Record):
    """What a caller asked of the text formats: how much of each tensor (``tensors``),
    the decimals (``precision``, ``None``: the format's own) and the gradients' type."""

    tensors: str = "summary"
    precision: int | None = None
    dtype: str = "float64"


def record_of(evidence: object) -> str:
    """The qualified name of the record of :data:`VIEWS` ``evidence`` is (or derives from).
    Raises ``TypeError``."""
    for cls in type(evidence).__mro__:
        name = f"{cls.__module__}.{cls.__qualname__}"
        if name in VIEWS:
            return name
    raise TypeError(f"nothing renders a {type(evidence).__name__}")


def view_of(evidence: object) -> str:
    """Which report ``evidence`` is drawn as (a value of :data:`VIEWS`). Raises
    ``TypeError``."""
    return VIEWS[record_of(evidence)]
