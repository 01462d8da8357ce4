"""The evidence explorer: one self-contained HTML page where every number opens its derivation.

:func:`explorer_page` draws the page ``--html FILE`` writes for any report, looked up by
its view in :data:`qkvcli.render.views.PAGES` as every other format is;
``docs/explorer.md`` states the page's contract. Pure functions: nothing here reads argv,
writes files or exits.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any

from qkvcli.render.explorer.page import PageAsked
from qkvcli.render.views import PAGES, view_of


def explorer_page(evidence: object, *, precision: int, title: str,
                  replay: Mapping[str, str] | None = None, spec: str = "IMPL",
                  chapter: str = "", cases: Sequence[Any] = ()) -> str:
    """The explorer page of ``evidence`` (a run's, attend's, gradcheck's or check's record)
    as HTML text, with :class:`~qkvcli.render.explorer.page.PageAsked`'s settings. The
    page's title is ``title`` and what it judged: a chapter's id, attend's fixture, or the
    implementation and the chapters of its operations. Raises ``TypeError`` for a record
    the explorer does not draw."""
    view = view_of(evidence)
    if view not in PAGES:
        raise TypeError(f"the explorer draws no page of {view}")
    module, function = PAGES[view].split(":")
    asked = PageAsked(precision, title, replay or {}, spec, chapter, tuple(cases))
    drawn: str = getattr(importlib.import_module(module), function)(evidence, asked)
    return drawn


def check_page(result: Any, asked: PageAsked) -> str:
    """``qkv check``'s page (:func:`qkvcli.render.explorer.check.check_page`)."""
    from qkvcli.render.explorer.check import check_page as page

    return page(result, asked.precision, asked.title, asked.replay, asked.spec, asked.cases)


def chapter_page(evidence: Any, asked: PageAsked) -> str:
    """A later chapter's page: its JSON document's, with the engine's operands the
    document leaves out (:func:`~qkvcli.render.explorer.derive.engine_operands`);
    chapter 37's, a cache's steps rather than one pass's tensors, is its own."""
    from qkvcli.render.chapters.dispatch import document
    from qkvcli.render.explorer.derive import engine_operands
    from qkvcli.render.explorer.document import document_page

    published = document(evidence)
    if "steps" in published:
        from qkvcli.render.explorer.incremental import incremental_page

        return incremental_page(published, evidence.fixture, asked.precision, asked.title)
    extra, tables = engine_operands(evidence)
    return document_page(published, asked.precision, asked.title, extra, tables)
