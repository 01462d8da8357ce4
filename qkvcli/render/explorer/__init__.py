"""The evidence explorer: one self-contained HTML page where every number opens its derivation.

:func:`explorer_page` turns the evidence of ``qkv run``/``report`` (the chapter's
projections), ``qkv attend`` (a head or a layer) or ``qkv check`` (an implementation's
judgement) into the page ``--html FILE`` writes; ``docs/explorer.md`` states the page's
contract. Pure functions: nothing here reads argv, writes files or exits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from qkvcli.render import view_of


def explorer_page(evidence: object, *, precision: int, title: str,
                  replay: Mapping[str, str] | None = None, spec: str = "IMPL",
                  chapter: str = "", cases: Sequence[Any] = ()) -> str:
    """The explorer page of ``evidence`` (a run's, attend's or check's record) as HTML text.

    ``precision``: decimals of every number (the report's); ``title`` names the page
    (``qkv run``); for ``qkv check``, ``replay`` maps a failing fixture's label to the
    file name ``--save-failures`` gives it, ``spec`` is how the command names the
    implementation and ``cases`` the fixtures it was checked on (a failing finding's
    expected value opens the engine's terms on its fixture); for ``qkv gradcheck``,
    ``chapter`` is the id of the chapter whose gradients it checked, which its record
    does not hold (attend's page draws the weights under the other mask behind a causal
    toggle when its evidence holds them). The page's title is ``title`` and what it
    judged: a chapter's id, attend's fixture, or the implementation and the chapters of
    its operations. Raises ``TypeError`` for a record the explorer does not draw.
    """
    view = view_of(evidence)
    if view == "evidence":
        from qkvcli.render.explorer.document import document_page
        from qkvcli.render.report import evidence_json

        return document_page(evidence_json(evidence, "full"), precision, title)  # type: ignore[arg-type]
    if view == "attend":
        from qkvcli.render.explorer.attend import attend_page

        return attend_page(evidence, precision, title)  # type: ignore[arg-type]
    if view == "check":
        from qkvcli.render.explorer.check import check_page

        return check_page(evidence, precision, title,  # type: ignore[arg-type]
                          replay or {}, spec, cases)
    if view == "chapter":
        from qkvcli.render.chapters.dispatch import document
        from qkvcli.render.explorer.derive import engine_operands
        from qkvcli.render.explorer.document import document_page

        published = document(evidence)
        if "steps" in published:  # chapter 37: a cache's steps, not one pass's tensors
            from qkvcli.render.explorer.incremental import incremental_page

            return incremental_page(published, getattr(evidence, "fixture", None),
                                    precision, title)
        extra, tables = engine_operands(evidence)
        return document_page(published, precision, title, extra, tables)
    if view == "gradcheck":
        from qkvcli.render.explorer.document import document_page
        from qkvcli.render.gradcheck import gradcheck_document

        checked = gradcheck_document(evidence)  # type: ignore[arg-type]
        return document_page({**checked, "chapter": chapter} if chapter else checked,
                             precision, title)
    raise TypeError(f"the explorer draws no page of {view}")
