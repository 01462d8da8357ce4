"""The chapters' rich figures: the kit they share, and the figure of a one-head chapter (27, 28).

A figure's formulas and worked lines read :mod:`qkvcli.stages`: a panel names its stage's
formula (:data:`~qkvcli.stages.table.STAGES`), and a line such as
``o0 = 0.014166 [3,-3] + 0.985834 [1,3] = [1.028332,2.915004]`` is the stage's terms at
one index (:mod:`qkvcli.stages.terms`), so a stage is described in one place for the
page, the figure and the diagnosis. Every number is spelled at the caller's
``precision`` (:class:`~qkvcli.render.rich.options.RichOptions`).

The one-head figure draws the records of the chapter's trace: Q, K and V told apart by
border (query solid, key dashed, value double: :mod:`qkvcli.render.rich.boxes`), the
scores, each query's probability row (a masked key shown ``blocked``) with its sum, each
query's mixture of value rows, the reverse pass, the probes, the rejected inputs, the
history and the checks, then the verdict line. Cards sit side by side when the width
allows and stack when it does not (:mod:`qkvcli.render.rich.layout`). Imports rich: only
the chapters' ``figure`` functions import this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from rich.box import Box
from rich.cells import cell_len
from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from qkvcli.core.results import FamilyCheck
from qkvcli.render.numbers import fmt_float, fmt_general, fmt_shape
from qkvcli.render.rich.boxes import CARD, KEY, LETTERS, QUERY, ROLE_SENTENCES, ROLE_STYLES, VALUE
from qkvcli.render.rich.layout import Fitted, Flow, Part, Row, lines, status, titled, verdict_line
from qkvcli.render.rich.options import RichOptions
from qkvcli.render.rich.tables import batched_tables, grid, matrix_table, pick, shown
from qkvcli.stages.table import STAGES, plain
from qkvcli.stages.terms import Derivation, exact_sum, mixture, scaled, scores
from qkvcli.stages.terms import masked as hide

BORDERS = (("query", QUERY, "solid"), ("key", KEY, "dashed"), ("value", VALUE, "double"))
BAR_WIDTH = 8
SETTING = 12
"""Significant digits of a setting in a figure's words (a base, a tolerance): all of it."""
GRADIENT_STAGES = {"query": "scores reverse (queries)", "key": "scores reverse (keys)",
                   "value": "mixture reverse (values)"}
"""The reverse step that makes each branch's gradient."""


# --- the kit: numbers, formulas and worked lines from the stages ---------------------------

def numbers(values: Any, options: RichOptions, between: str = ",", per_line: int | None = None) -> str:
    """Every value of ``values`` (flat), each by :func:`~qkvcli.render.numbers.fmt_float`
    at the figure's precision, joined by ``between``; ``per_line``: that many a line, a
    line ending with its ``between``."""
    found = [fmt_float(float(v), options.precision) for v in np.asarray(values).reshape(-1)]
    step = per_line or max(len(found), 1)
    return f"{between}\n".join(between.join(found[i:i + step]) for i in range(0, len(found), step))


def notation(text: str, options: RichOptions) -> str:
    """A stage's formula as the stream can show it (ASCII: ``K^T``, ``sqrt``, ``sum``)."""
    return plain(text) if options.ascii else text


def formula(options: RichOptions, *names: str) -> str:
    """The formulas of the stages ``names`` (:data:`~qkvcli.stages.table.STAGES`), joined."""
    return "; ".join(notation(STAGES[name].formula, options) for name in names)


def element(name: str, options: RichOptions) -> Text:
    """How one element of stage ``name``'s output is made, as a dim caption."""
    return Text(notation(STAGES[name].element, options), style="dim")


def worked(lhs: str, derivation: Derivation, options: RichOptions) -> Text:
    """``lhs = a*b + c*d = v``: one element from its stage's terms (a sum's terms, each its
    operands' product; past ``max_columns`` terms, the rest as their sum), or ``lhs = formula with
    fact = v, ... = v`` for a number made from a few facts (indented rows are details)."""
    def spell(value: Any) -> str:
        return notation(value, options) if isinstance(value, str) else fmt_float(value, options.precision)

    def factor(value: float) -> str:
        said = spell(value)
        return f"({said})" if said.startswith("-") else said

    if derivation.terms_total == "sum":
        rows = [row for row in derivation.rows if row.part in ("term", "rest")]
        kept = rows if options.full else rows[:options.max_columns]
        parts = [options.symbols.times.join(map(factor, row.operands)) if row.operands
                 else spell(row.value) for row in kept]
        if len(kept) < len(rows):  # the others as their sum, so the line still adds up
            parts.append(f"{spell(exact_sum(float(row.value) for row in rows[len(kept):]))} (the rest)")
        body = " + ".join(parts) or "0"
    else:
        body = notation(derivation.formula, options) + " with " + ", ".join(
            f"{notation(row.label, options)} = {spell(row.value)}" for row in derivation.rows
            if not row.label.startswith(" "))
    return Text(f"{lhs} = {body} = {spell(derivation.value)}")


def mixture_line(lhs: str, weights: Any, values: Any, index: tuple[int, ...], output: Any,
                 options: RichOptions) -> Text:
    """``o0 = 0.014166 [3,-3] + 0.985834 [1,3] = [1.028332,2.915004]``: one output row as
    the mixture stage's terms (:func:`~qkvcli.stages.terms.mixture`) at each of its
    coordinates, a key's weight times its value row (keys after the query left out; past
    ``max_columns`` keys, the others' share summed)."""
    made = [mixture(weights, values, (*index, c), float(output[c]), limit=int(np.shape(weights)[-1]))
            for c in range(len(output))]
    if not made:
        return Text(f"{lhs} = []")
    keys = [row.operands[0] for row in made[0].rows]
    kept = len(keys) if options.full else min(len(keys), options.max_columns)
    parts = [f"{fmt_float(weight, options.precision)} "
             f"[{numbers([d.rows[j].operands[1] for d in made], options)}]"
             for j, weight in enumerate(keys[:kept])]
    if kept < len(keys):  # the other keys' share as one row, so the line still adds up
        rest = [exact_sum(float(row.value) for row in d.rows[kept:]) for d in made]
        parts.append(f"[{numbers(rest, options)}] (the rest)")
    return Text(f"{lhs} = " + " + ".join(parts) + f" = [{numbers(output, options)}]")


def whole(table: Table) -> Table:
    """``table`` (a rich ``Table`` of ``no_wrap`` columns) measured as wide as it draws:
    each column's minimum is its widest line, so a layout chooser (``Fitted``) never
    picks a table that would cut a number to fit. Gives the same table."""
    for column in table.columns:
        found = [line for cell in (column.header, *column.cells) for line in str(cell).splitlines()]
        column.min_width = max((cell_len(line) for line in found), default=0)
    return table


def card(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]], *,
         box: Box = CARD, style: str | None = None, left: Sequence[int] = (),
         wrap: bool = False) -> Table:
    """A table of ``rows`` under ``headers``, right-justified but the columns ``left``;
    no column wraps and the table is measured whole (:func:`whole`) unless ``wrap``."""
    table = Table(title=title, box=box, border_style=style)
    for i, header in enumerate(headers):
        table.add_column(header, justify="left" if i in left else "right", no_wrap=not wrap)
    for row in rows:
        table.add_row(*row)
    return table if wrap else whole(table)


def heading(title: str, detail: str, passed: bool) -> Text:
    """The figure's first line: its title, what the fixture holds, and the verdict word."""
    return Text.assemble((title, "bold"), f"  {detail}  ", status(passed))


def fact_lines(facts: Sequence[tuple[str, str]]) -> Fitted:
    """``label  detail`` lines, each detail beside its label (the labels never wrap, so a
    detail's longest word is measured beside them whole), or under it when narrow."""
    beside = Table.grid(padding=(0, 2))
    beside.add_column(no_wrap=True, min_width=max((cell_len(label) for label, _ in facts), default=0))
    beside.add_column()
    for label, detail in facts:
        beside.add_row(label, detail)
    under = Group(*(Group(Text(label), Padding(Text(detail), (0, 0, 0, 2))) for label, detail in facts))
    return Fitted([beside, under])


def showed(title: str, facts: Sequence[tuple[str, str]]) -> tuple[RenderableType, ...]:
    """What a figure's probes showed: ``title``, then :func:`fact_lines` of ``facts``."""
    return titled(title), fact_lines(facts)


def checks_table(checks: Sequence[FamilyCheck]) -> Table:
    """Each family and its verdict word."""
    table = Table(title="checks", box=CARD)
    table.add_column("check")
    table.add_column("result")
    for check in checks:
        table.add_row(check.name, status(check.passed))
    return table


def verdict_text(checks: Sequence[FamilyCheck]) -> Text:
    """The verdict line, as chapter 26's figure ends."""
    done = sum(1 for check in checks if check.passed)
    return verdict_line(done == len(checks), done, len(checks))


def closing(checks: Sequence[FamilyCheck]) -> tuple[RenderableType, ...]:
    """The checks, a blank line and the verdict: how chapters 29, 30 and 37 end."""
    return checks_table(checks), Text(), verdict_text(checks)


def facts_part(title: str, rows: Sequence[tuple[bool | None, str, str]],
               passed: bool | None = None) -> Part:
    """A card of ``(verdict, label, detail)`` rows; a ``None`` verdict shows no word."""
    body = grid(*((status(ok) if ok is not None else Text(""), label, detail)
                  for ok, label, detail in rows), nowrap=(0, 1))
    return Part(body, titled(title, passed))


# --- the one-head figure (chapters 27, 28) ---------------------------------------------------

def legend(options: RichOptions) -> Flow:
    """One sample of each border the figure uses, as chapter 26's legend draws them."""
    items = [Text("Borders:", style="dim")]
    for role, box, word in BORDERS:
        glyph = box.fallback.top if options.ascii else box.top
        item = Text(glyph * 2, style=ROLE_STYLES[role])
        item.append(f" {role} ({word})")
        items.append(item)
    return Flow([Text.assemble(items[0], " ", items[1]), *items[2:]])


def branches(tensors: Sequence[Any], options: RichOptions, gradient: bool = False) -> Row:
    """Q, K and V (or, ``gradient``, dQ, dK and dV with the reverse step that makes each),
    each in its branch's border, one table per batch item."""
    parts = []
    for (role, box, word), tensor in zip(BORDERS, tensors, strict=True):
        letter, style = LETTERS[role], ROLE_STYLES[role]
        said = ((Text(formula(options, GRADIENT_STAGES[role]), style="dim"),) if gradient else
                (Text(ROLE_SENTENCES[role], style=f"bold {style}"),
                 Text(f"shape({letter}) = {fmt_shape(tensor.shape)}", style="dim")))
        name = f"d{letter}" if gradient else letter
        parts.append(Part(lines(*said, *batched_tables(tensor, name, box, options, style)),
                          titled(f"dL/d{letter}" if gradient else f"{role.capitalize()} ({word})"),
                          box, style))
    return Row(parts)


def scores_row(p: Any, options: RichOptions, masked: bool) -> Row:
    """The scores and the scaled scores (after the mask when there is one) of the first
    batch item, each with its stage's terms at the last query's first key."""
    if p.query.shape[0] == 0:
        return Row([Part(Text("no batch items: no scores", style="dim"), titled("Scores"))])
    last = int(p.query.shape[1]) - 1
    at = (0, last, 0)
    raw, z = float(p.scores[at]), float(p.scaled_scores[at])
    scaled_title = formula(options, "scale", "mask") if masked else formula(options, "scale")
    table = p.masked_scores if masked else p.scaled_scores
    letter = "Z~" if masked and options.ascii else ("Z\u0303" if masked else "Z")
    hidden = None
    if masked and last > 0:  # the first query's last key: after it, so hidden
        hidden = worked(f"{letter}[0,0,{last}]", hide(float(p.scaled_scores[0, 0, last]), True,
                                                      float(table[0, 0, last])), options)
    return Row([
        Part(lines(matrix_table(p.scores[0], "S b=0", "q", CARD, options, ("queries", "keys")),
                   worked(f"S[0,{last},0]", scores(p.query, p.key, at, raw), options)),
             titled(f"Dot products {formula(options, 'scores')}")),
        Part(lines(matrix_table(table[0], f"{letter} b=0", "q", CARD, options, ("queries", "keys")),
                   worked(f"Z[0,{last},0]", scaled(raw, p.scale, z), options), hidden),
             titled(scaled_title)),
    ])


def probability_part(p: Any, options: RichOptions, masked: bool) -> Part:
    """Each query's probability row over the keys (bars, ``blocked`` where masked) and its sum."""
    if p.query.shape[0] == 0:
        return Part(Text("no batch items", style="dim"), titled("Probability rows"))
    tokens = int(p.query.shape[1])
    rows = pick(tokens, options.max_rows, options.full)
    keys = pick(tokens, options.max_columns, options.full)
    ellipsis = options.symbols.ellipsis
    table = Table(box=CARD, header_style="bold")
    table.add_column("A b=0", style="dim", no_wrap=True)
    for key in keys:
        table.add_column(ellipsis if key is None else f"k{key}", justify="right", no_wrap=True)
    table.add_column("sum", justify="right", no_wrap=True)
    for row in rows:
        if row is None:
            table.add_row(ellipsis, *(ellipsis for _ in keys), "")
            continue
        cells: list[Text | str] = []
        for key in keys:
            if key is None:
                cells.append(ellipsis)
            elif masked and bool(np.isneginf(p.mask[row, key])):
                cells.append(Text("blocked", style="dim"))
            else:
                weight = float(p.probabilities[0, row, key])
                cells.append(Text(f"{fmt_float(weight, options.precision)} {options.bar(weight, BAR_WIDTH)}"))
        table.add_row(f"q{row}", *cells, fmt_float(p.row_sums[0, row], options.precision))
    note = None
    if shown(rows) < tokens or shown(keys) < tokens:
        note = Text(f"{shown(rows)} of {tokens} rows and {shown(keys)} of {tokens} keys shown; "
                    "--full shows them all", style="dim")
    what = "softmax over the visible keys" if masked else "softmax over every key"
    return Part(lines(element("softmax", options), table, note),
                titled(f"Probability rows A ({what})"))


def mixture_part(p: Any, options: RichOptions) -> Part:
    """Each query's output, a probability-weighted mixture of the value rows: the terms
    of the first batch item's queries, then every output."""
    found = []
    for row in pick(int(p.terms.shape[0]), options.max_rows, options.full):
        found.append(Text(f"{options.symbols.ellipsis} --full shows every query", style="dim")
                     if row is None else
                     mixture_line(f"o{row}", p.probabilities, p.value, (0, row), p.output[0, row],
                                  options))
    body = lines(element("mixture", options), *found,
                 *batched_tables(p.output, "O", VALUE, options, ROLE_STYLES["value"]))
    return Part(body, titled(f"Mixture of value rows {formula(options, 'mixture')}"), VALUE,
                ROLE_STYLES["value"])


def backward_rows(p: Any, options: RichOptions) -> list[Row]:
    """``U`` and the loss it seeds, then the gradients it sends back to Q, K and V."""
    upstream = Part(lines(Text(f"{formula(options, 'loss')} = {fmt_float(p.loss, options.precision)}"),
                          *batched_tables(p.upstream, "U", CARD, options)),
                    titled("Reverse pass: the seed U"))
    return [Row([upstream]), branches((p.grad_query, p.grad_key, p.grad_value), options, True)]


def head_figure(evidence: Any, options: RichOptions, masked: bool, own: Sequence[Part],
                words: tuple[str, Sequence[tuple[str, str]], str]) -> Group:
    """The whole figure: heading, legend, operands, scores, probabilities, mixture,
    reverse pass, the chapter's ``own`` cards and the rejected inputs two a row, the
    history and the proof, checks and verdict. ``words``: the chapter's prediction, its
    history and what the next chapter adds."""
    from qkvcli.render.chapters.entries import detail

    p, g = evidence.primary, evidence.gradcheck
    prediction, history, ending = words
    cards = [*own, facts_part("Rejected inputs", [
        (c.rejected, c.case, c.message or "not refused") for c in evidence.errors])]
    proof = facts_part("Proof", [
        (p.rows_sum_to_one, "row sums", f"within {fmt_float(p.row_sum_tolerance, 12)}"),
        (g.passed, "gradient check", f"{g.checked('query')}+{g.checked('key')}+"
         f"{g.checked('value')} coordinates, tolerance {fmt_general(g.tolerance, SETTING)}"),
        (evidence.replay_bitwise, "replay", "bit for bit")])
    checks = facts_part("Checks", [(c.passed, c.name, detail(evidence.chapter, evidence, c))
                                   for c in evidence.checks], evidence.passed)
    return lines(
        Text(f"qkv {options.symbols.dot} chapter {options.safe(evidence.chapter)}", style="bold"),
        Text(prediction, style="bold underline"),
        legend(options),
        Text(""),
        branches((p.query, p.key, p.value), options),
        scores_row(p, options, masked),
        Row([probability_part(p, options, masked)]),
        Row([mixture_part(p, options)]),
        *backward_rows(p, options),
        Text(""),
        Text("Check the chapter's claims", style="bold underline"),
        *(Row(cards[i:i + 2]) for i in range(0, len(cards), 2)),
        Row([facts_part("History", [(None, key, value) for key, value in history]), proof]),
        Row([checks]),
        Text(ending, style="dim"),
        verdict_text(evidence.checks),
    )
