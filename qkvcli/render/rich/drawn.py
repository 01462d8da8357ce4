"""A report's facts (:mod:`qkvcli.render.facts`) drawn as the rich views draw them.

A fact becomes a cell by its kind (:func:`cell_of`); a section's facts, one line of
``name value`` items (:func:`config_row`); entries or check entries, the one list of
PASS/FAIL words, each with a name and its evidence (:func:`listed`, :func:`checks_card`);
a tensor, its tables (:func:`tensor_tables`). The views read what a report's facts hold
through these, and keep only what they alone draw.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from rich.box import Box
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from qkvcli.render.facts import Fact, Facts
from qkvcli.render.numbers import fmt_bool, fmt_float, fmt_shape
from qkvcli.render.rich.layout import Flow, Part, card, verdict_line, verdicts
from qkvcli.render.rich.options import RichOptions
from qkvcli.render.rich.tables import Summarise, batched_tables, matrix_table
from qkvcli.render.tensors import summarise


def value(fact: Any) -> Any:
    """A fact's value (a value published as it is: itself)."""
    return fact.value if isinstance(fact, Fact) else fact


def cell_of(fact: Any, options: RichOptions) -> str:
    """``fact`` as a cell: a verdict ``true`` or ``false`` (a claim's PASS/FAIL word is
    :func:`listed`'s), a shape ``[..]`` (``rejected`` for none), a tensor its shape, a
    float at the view's precision, the rest as ``str`` gives it (made safe for the stream)."""
    kind, found = (fact.kind, fact.value) if isinstance(fact, Fact) else ("", fact)
    if kind == "verdict":
        return fmt_bool(found)
    if kind == "shape":
        return "rejected" if found is None else fmt_shape(found)
    if kind == "tensor":
        return fmt_shape(np.shape(found))
    if isinstance(found, float):
        return fmt_float(found, options.precision)
    return options.safe(str(found))


def config_row(section: Facts, names: Iterable[str], options: RichOptions) -> Flow:
    """The facts ``names`` of ``section`` on one line as ``name value`` items, the text
    report's config, wrapped only between items."""
    return Flow([Text.assemble((name, "dim"), f" {cell_of(section[name], options)}")
                 for name in names])


def listed(items: Iterable[Mapping[str, Any]], name: Callable[[Mapping[str, Any]], str | Text],
           detail: Callable[[Mapping[str, Any]], str | Text],
           passed: str = "passed") -> Table:
    """Entries (or check entries) as the verdicts list: each one's PASS/FAIL word (its
    ``passed`` verdict), ``name`` and ``detail``."""
    return verdicts((bool(value(item[passed])), name(item), detail(item)) for item in items)


def checks_card(checks: Sequence[Mapping[str, Any]], options: RichOptions) -> Part:
    """The Checks card of a report's ``checks`` entries: each check by its published name
    with its evidence, the card's word PASS when every one passed."""
    return card("Checks", all(check["passed"] for check in checks),
                listed(checks, lambda c: c["name"], lambda c: options.safe(c["detail"])))


def checks_verdict(checks: Sequence[Mapping[str, Any]]) -> Text:
    """The verdict line of a report's ``checks`` entries: PASS when every one passed, and
    how many did."""
    done = sum(1 for check in checks if check["passed"])
    return verdict_line(done == len(checks), done, len(checks))


def tensor_tables(fact: Fact, name: str, box: Box, options: RichOptions,
                  style: str | None = None, *, edge: bool = True,
                  summaries: Summarise = summarise,
                  marks: Collection[tuple[int, ...]] = ()) -> list[RenderableType]:
    """A tensor fact as its tables: a ``[batch, token, feature]`` tensor one table per batch
    item (rows ``t0 ..``), a weight one table (rows by index, ``d_model rows`` and
    ``d_head columns`` in its notes), each of ``marks`` marked
    (:func:`~qkvcli.render.rich.tables.matrix_table`)."""
    array = np.asarray(fact.value)
    if array.ndim == 3:
        return batched_tables(array, name, box, options, style, edge, summaries, marks)
    return [matrix_table(array, name, "", box, options, ("d_model rows", "d_head columns"),
                         style, edge, summaries=summaries, marks=marks)]
