"""The explorer page of any report, drawn from the facts it publishes: its JSON document,
or its facts value itself (attend's page, whose tensors stay arrays).

The page shows the document's checks, every tensor under ``tensors`` (an attention
matrix as heat maps too, :data:`~qkvcli.render.explorer.derive.MAPS`) and every
coordinate of its gradient check, each number keyed by its place in the JSON report and
opening the terms :mod:`qkvcli.render.explorer.derive` finds for it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from html import escape
from typing import Any

import numpy as np

from qkvcli.core.arrays import Array
from qkvcli.render.explorer.checks import checks_section, counted, entries_of
from qkvcli.render.explorer.derive import BRANCHES, MAPS, document_derivers
from qkvcli.render.explorer.page import GRADCHECK_ROWS, Deriver, Page, PageAsked, branch_of, index_text
from qkvcli.render.facts import Fact, json_of
from qkvcli.render.numbers import fmt_error, fmt_general
from qkvcli.render.wording import verdict
from qkvcli.stages.terms import Derivation, gradcheck_point


def _tensors(document: Mapping[str, Any]) -> Mapping[str, Any]:
    published = document.get("tensors")
    published = published.value if isinstance(published, Fact) else published
    return published if isinstance(published, Mapping) else {}


def tensors_of(document: Mapping[str, Any], digests: bool = False) -> dict[str, Array]:
    """Every tensor under the document's ``tensors``, as arrays: a JSON document's
    ``{"shape", "values"}``, or a facts value's tensor facts as they are (a GPT-2 layer's
    stay numpy arrays), but those a view gives as digests alone (a packed layer's split
    views) only with ``digests``."""
    found: dict[str, Array] = {}
    for name, tensor in _tensors(document).items():
        if isinstance(tensor, Fact) and tensor.kind == "tensor":
            if digests or tensor.policy != "none":
                found[name] = np.asarray(tensor.value)
        elif isinstance(tensor, Mapping) and "shape" in tensor and "values" in tensor:
            found[name] = np.array(tensor["values"], dtype=np.float64).reshape(tensor["shape"])
    return found


def given_of(document: Mapping[str, Any]) -> set[str]:
    """The names of a facts value's tensors that the fixture gave (none for JSON)."""
    return {name for name, tensor in _tensors(document).items()
            if isinstance(tensor, Fact) and tensor.given}


def _gradcheck_entries(document: Mapping[str, Any]) -> tuple[Mapping[str, Any], list[Any]]:
    """The gradient check's settings and its tensors' entries (``qkv gradcheck``'s
    document is the check itself)."""
    check = document.get("gradcheck")
    check = json_of(check) if isinstance(check, Fact) else check  # a facts value's record
    if isinstance(check, Mapping):
        return check, list(check.get("tensors", []))
    listed = document.get("tensors")
    if isinstance(listed, list):
        return document, listed
    return {}, []


def gradcheck_rows(page: Page, document: Mapping[str, Any], caption: str = "") -> str:
    """Every checked coordinate of the document (up to :data:`GRADCHECK_ROWS` a tensor):
    analytic, numerical and scaled error, each opening the comparison; ``caption``
    (escaped) says the settings (default: the step and tolerance)."""
    settings, entries = _gradcheck_entries(document)
    if not entries:
        return ""
    step, tolerance = float(settings.get("step", 0.0)), float(settings.get("tolerance", 0.0))
    settings_text = f"step {fmt_general(step)}, tolerance {fmt_general(tolerance)}"
    out = ['<section class="group gradcheck"><h2>Gradient check</h2>',
           f'<p class="caption">{caption or settings_text}</p>']
    for entry in entries:
        name = str(entry.get("tensor", ""))
        checks = list(entry.get("checks", []))
        shown, rows = checks[:GRADCHECK_ROWS], []
        scientific = {field: page.tiny(float(c[field]) for c in shown)
                      for field in ("analytic", "numerical")}
        for check in shown:
            direction = check.get("direction")
            if direction is not None:
                where, label = str(direction), f"direction {direction}"
            else:
                where = index_text(check.get("coordinate", []))
                label = f"[{where}]"
            analytic, numerical = float(check["analytic"]), float(check["numerical"])
            error, passed = float(check["scaled_error"]), bool(check["passed"])
            derivation = gradcheck_point(analytic, numerical, step, error, tolerance, passed)
            heading = f"gradient check of {name} at {label}"
            key = f"gradcheck.{name}"
            cells = [page.number(key, where, value, derivation, field=field, heading=heading,
                                 scientific=scientific.get(field, False))
                     for field, value in (("analytic", analytic), ("numerical", numerical),
                                          ("scaled_error", fmt_error(error)))]
            word = "✔ PASS" if passed else "✘ FAIL"
            rows.append(f'<tr><th scope="row">{label}</th><td>{cells[0]}</td><td>{cells[1]}'
                        f"</td><td>{cells[2]}</td><td>{word}</td></tr>")
        passed = bool(entry.get("passed", True))
        more = (f'<p class="caption">showing {len(shown)} of {len(checks)} coordinates (the '
                "JSON report lists every one)</p>" if len(shown) < len(checks) else "")
        mode = f", {escape(str(entry['mode']))}" if "mode" in entry else ""
        out.append(
            f"<details{' open' if not passed else ''}><summary><code>{escape(name)}</code>: "
            f"{len(checks)} checked{mode}, {'all pass' if passed else 'FAILED'}</summary>"
            '<table class="values gc"><thead><tr><th>coordinate</th><th>analytic</th>'
            "<th>numerical</th><th>scaled error</th><th></th></tr></thead><tbody>"
            + "".join(rows) + f"</tbody></table>{more}</details>")
    out.append("</section>")
    return "".join(out)


def _numbered(explain: Deriver | None) -> Callable[[tuple[int, ...], bool], Derivation | None]:
    """A deriver as a heat map's, whose keys are numbered or not alike."""
    return lambda at, _: explain(at) if explain is not None else None


def document_page(document: Mapping[str, Any], precision: int, title: str,
                  extra: Mapping[str, Array] | None = None,
                  tables: Callable[[int], tuple[Array, Array]] | None = None) -> str:
    """The explorer page of a report's JSON ``document`` (one self-contained HTML text).

    ``extra``: the engine's arrays of the same pass that the document leaves out (inputs
    the fixture gave are shown as tensors too; the others are operands of terms);
    ``tables``: the engine's RoPE cosines and sines from an offset (chapter 29)."""
    page = Page(title, precision)
    arrays = tensors_of(document)
    extra = extra or {}
    config = document.get("config")
    config = config if isinstance(config, Mapping) else {}
    explained, given = document_derivers(arrays, config, extra, tables)
    batches = config.get("batch", 1)
    page.select("batch", "batch item", int(batches) if isinstance(batches, int) else 1)
    checks = entries_of(document)
    if checks:
        page.sections.append(checks_section(checks))
    maps = [name for name in MAPS if name in arrays and arrays[name].ndim >= 3
            and arrays[name].shape[-1] == arrays[name].shape[-2]]
    softmax_input = arrays.get("masked_scores", extra.get("masked",
                                                          arrays.get("scaled_scores")))
    if maps:
        page.weights_section(
            "each row a query's probabilities over the keys; a masked key's weight is struck "
            "through", (page.heatmap(name, arrays[name], softmax_input,
                                     _numbered(explained.get(name))) for name in maps))
    shown = {name: extra[name] for name in extra if name in given and name not in arrays}
    shown.update(arrays)
    page.sections.extend(tensor_sections(tensor_blocks(page, shown, explained, given),
                                         "query_weight" in arrays))
    return finished(page, document)


def tensor_blocks(page: Page, arrays: Mapping[str, Array], explained: Mapping[str, Deriver],
                  given: Collection[str]) -> dict[str, str]:
    """Each tensor's block, by name: its numbers, each opening its deriver's terms, or
    saying the fixture gave it (``given``)."""
    return {name: page.tensor(name, values, explained.get(name), given=name in given,
                              axes=axes_of(name, values.ndim))
            for name, values in arrays.items()}


def finished(page: Page, document: Mapping[str, Any], caption: str = "") -> str:
    """The page, ended by the document's gradient check (``caption``: its settings in
    words) and headed by its verdict: of its checks, or of the gradient check's
    coordinates where it has no checks (``qkv gradcheck``)."""
    page.sections.append(gradcheck_rows(page, document, caption))
    checks = entries_of(document)
    passed = bool(document.get("passed", all(bool(check.get("passed")) for check in checks)))
    if checks:
        said = verdict(passed, *counted(checks))
    else:
        _, entries = _gradcheck_entries(document)
        coordinates = [c for entry in entries for c in entry.get("checks", [])]
        said = verdict(passed, sum(bool(c.get("passed")) for c in coordinates), len(coordinates))
    chapter = document.get("chapter")
    heading = f"{page.title}: {chapter}" if chapter else page.title
    return page.html(heading, said, passed)


def tensor_sections(blocks: Mapping[str, str], columns: bool) -> list[str]:
    """The tensors' blocks in the document's order; with ``columns`` (a document that
    publishes the projections' weights), each branch's own side by side between the
    tensors before them and those after (where the paths meet)."""
    if not blocks:
        return []
    if not columns:
        return ['<section class="group"><h2>Tensors</h2>' + "".join(blocks.values())
                + "</section>"]
    names = list(blocks)
    first = next((i for i, name in enumerate(names) if branch_of(name)), len(names))
    after = [name for name in names[first:] if not branch_of(name)]

    def group(heading: str, members: list[str], css: str = "group") -> str:
        return (f'<section class="{css}"><h2>{heading}</h2>'
                + "".join(blocks[name] for name in members) + "</section>")

    sections = [group("Input", names[:first])] if first else []
    sections.append('<section class="group branches"><h2 class="sr">The three branches</h2>'
                    + "".join(group(f"{b} branch", [n for n in names if branch_of(n) == b],
                                    f"branch branch-{b}") for _, b in BRANCHES)
                    + "</section>")
    return sections + ([group("Where the paths meet", after)] if after else [])


AXES = {"mixture_terms": ("query", "key"), "mask": ("query", "key")}
"""Tensors whose leading axis is not the batch: what their tables are split by."""


def axes_of(name: str, ndim: int) -> tuple[str, ...]:
    """The axes a tensor's tables are split by (``batch``, then ``head`` for 4-D)."""
    if name in AXES:
        return AXES[name][:max(ndim - 2, 0)]
    return ("batch", "head")[:max(ndim - 2, 0)]


def evidence_page(evidence: Any, asked: PageAsked) -> str:
    """Chapter 26's page: its full JSON document's."""
    from qkvcli.render.report import evidence_json

    return document_page(evidence_json(evidence, "full"), asked.precision, asked.title)


def gradcheck_page(evidence: Any, asked: PageAsked) -> str:
    """``qkv gradcheck``'s page: its document's, headed by the chapter it checked."""
    from qkvcli.render.gradcheck import gradcheck_document

    checked = gradcheck_document(evidence)
    return document_page({**checked, "chapter": asked.chapter} if asked.chapter else checked,
                         asked.precision, asked.title)

