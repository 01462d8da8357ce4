"""The rich figure of a one-head chapter (27, 28), in chapter 26's visual language.

The records of the chapter's trace, drawn: Q, K and V told apart by border (query
solid, key dashed, value double: :mod:`qkvcli.render.rich.boxes`), the scores ``S``
and ``Z``, each query's probability row (a masked key shown ``blocked``) with its sum,
each query's mixture of value rows, the reverse pass, the probes, the rejected inputs,
the history and the checks, then the verdict line. Cards sit side by side when the
width allows and stack when it does not (:mod:`qkvcli.render.rich.layout`). Imports
rich: only the chapters' ``figure`` functions import this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from qkvcli.core.results import FamilyCheck
from qkvcli.render.numbers import fmt_float, fmt_shape
from qkvcli.render.rich.boxes import CARD, KEY, LETTERS, QUERY, ROLE_SENTENCES, ROLE_STYLES, VALUE
from qkvcli.render.rich.layout import Flow, Part, Row, lines, status, titled
from qkvcli.render.rich.options import RichOptions
from qkvcli.render.rich.tables import batched_tables, grid, matrix_table, pick, shown
from qkvcli.render.wording import VERDICT, verdict_counts

BORDERS = (("query", QUERY, "solid"), ("key", KEY, "dashed"), ("value", VALUE, "double"))
BAR_WIDTH = 8
CHECK_TITLES = {
    "row_sums": "rows sum to 1", "scale_probe": "scale softens the focus",
    "single_token": "one token: probability 1, no Q/K gradient",
    "batch_isolation": "batch items isolated", "empty_batch": "empty batch shapes",
    "gradcheck": "gradient check", "rejected_inputs": "bad inputs rejected",
    "replay": "replays bit for bit", "prefix_invariance": "a later token leaves earlier outputs",
    "suffix_gradient": "no gradient to unseen positions",
    "masked_rows": "future keys weigh exactly 0", "tape_finite": "reverse pass finite",
}
"""How the figure's checks card names each family."""


def legend(options: RichOptions) -> Flow:
    """One sample of each border the figure uses, as chapter 26's legend draws them."""
    items = [Text("Borders:", style="dim")]
    for role, box, word in BORDERS:
        glyph = box.fallback.top if options.ascii else box.top
        item = Text(glyph * 2, style=ROLE_STYLES[role])
        item.append(f" {role} ({word})")
        items.append(item)
    return Flow([Text.assemble(items[0], " ", items[1]), *items[2:]])


def operands_row(p: Any, options: RichOptions) -> Row:
    """Q, K and V, each in its border, one table per batch item."""
    parts = []
    for (role, box, word), tensor in zip(BORDERS, (p.query, p.key, p.value), strict=True):
        letter = LETTERS[role]
        body = lines(Text(ROLE_SENTENCES[role], style=f"bold {ROLE_STYLES[role]}"),
                     Text(f"shape({letter}) = {fmt_shape(tensor.shape)}", style="dim"),
                     *batched_tables(tensor, letter, box, options, ROLE_STYLES[role]))
        parts.append(Part(body, titled(f"{role.capitalize()} ({word})"), box, ROLE_STYLES[role]))
    return Row(parts)


def scores_row(p: Any, options: RichOptions, masked: bool) -> Row:
    """``S = Q K^T`` and ``Z`` (after the mask when there is one) of the first batch item."""
    if p.query.shape[0] == 0:
        return Row([Part(Text("no batch items: no scores", style="dim"), titled("Scores"))])
    z_title = "Z = S / sqrt(d_k), future keys -inf" if masked else "Z = S / sqrt(d_k)"
    z = p.masked_scores if masked else p.scaled_scores
    return Row([
        Part(matrix_table(p.scores[0], "S b=0", "q", CARD, options, ("queries", "keys")),
             titled("Dot products S = Q K^T")),
        Part(lines(matrix_table(z[0], "Z b=0", "q", CARD, options, ("queries", "keys")),
                   Text(f"scale = {fmt_float(p.scale, options.precision)}", style="dim")),
             titled(z_title)),
    ])


def probability_part(p: Any, options: RichOptions, masked: bool) -> Part:
    """Each query's probability row over the keys (bars, ``blocked`` where masked) and its sum."""
    if p.query.shape[0] == 0:
        return Part(Text("no batch items", style="dim"), titled("Probability rows"))
    tokens = int(p.query.shape[1])
    rows = pick(tokens, options.max_rows, options.full)
    keys = pick(tokens, options.max_columns, options.full)
    table = Table(box=CARD, header_style="bold")
    table.add_column("A b=0", style="dim", no_wrap=True)
    for key in keys:
        table.add_column(options.symbols.ellipsis if key is None else f"k{key}", justify="right",
                         no_wrap=True)
    table.add_column("sum", justify="right", no_wrap=True)
    for row in rows:
        if row is None:
            table.add_row(options.symbols.ellipsis, *(options.symbols.ellipsis for _ in keys), "")
            continue
        cells: list[Text | str] = []
        for key in keys:
            if key is None:
                cells.append(options.symbols.ellipsis)
            elif masked and bool(np.isneginf(p.mask[row, key])):
                cells.append(Text("blocked", style="dim"))
            else:
                weight = float(p.probabilities[0, row, key])
                cells.append(Text(f"{fmt_float(weight, options.precision)} "
                                  f"{options.bar(weight, BAR_WIDTH)}"))
        table.add_row(f"q{row}", *cells, fmt_float(float(p.row_sums[0, row]), options.precision))
    note = None
    if shown(rows) < tokens or shown(keys) < tokens:
        note = Text(f"{shown(rows)} of {tokens} rows and {shown(keys)} of {tokens} keys shown; "
                    "--full shows them all", style="dim")
    what = "softmax over the visible keys" if masked else "softmax over every key"
    return Part(lines(table, note), titled(f"Probability rows A ({what})"))


def mixture_lines(p: Any, options: RichOptions, masked: bool) -> list[Text]:
    """``o0 = 0.014166 [3,-3] + 0.985834 [1,3] = [1.028332,2.915004]``: each kept query's
    weighted value rows of the first batch item (masked keys left out)."""
    found = []
    rows = pick(int(p.terms.shape[0]), options.max_rows, options.full)
    for row in rows:
        if row is None:
            found.append(Text(f"{options.symbols.ellipsis} --full shows every query", style="dim"))
            continue
        keys = [j for j in range(p.terms.shape[1])
                if not (masked and bool(np.isneginf(p.mask[row, j])))]
        shown_keys = keys if options.full else keys[:options.max_columns]
        parts = [f"{fmt_float(float(p.probabilities[0, row, j]), options.precision)} "
                 f"{_row(p.value[0, j], options)}" for j in shown_keys]
        if len(shown_keys) < len(keys):
            parts.append(options.symbols.ellipsis)
        found.append(Text(f"o{row} = " + " + ".join(parts) + f" = {_row(p.output[0, row], options)}"))
    return found


def _row(values: Any, options: RichOptions) -> str:
    return "[" + ",".join(fmt_float(float(v), options.precision) for v in values) + "]"


def mixture_part(p: Any, options: RichOptions, masked: bool = False) -> Part:
    """Each query's output, a probability-weighted mixture of the value rows: the terms
    of the first batch item's queries, then every output."""
    body = lines(Text("O[i] = sum over j of A[i,j] V[j]", style="dim"),
                 *mixture_lines(p, options, masked),
                 *batched_tables(p.output, "O", VALUE, options, ROLE_STYLES["value"]))
    return Part(body, titled("Mixture of value rows"), VALUE, ROLE_STYLES["value"])


def backward_rows(p: Any, options: RichOptions) -> list[Row]:
    """``U``, then the gradients it sends back to Q, K and V."""
    upstream = Part(lines(Text(f"L = <O,U> = {fmt_float(p.loss, options.precision)}"),
                          *batched_tables(p.upstream, "U", CARD, options)),
                    titled("Reverse pass: the seed U"))
    grads = []
    for (role, box, _), grad in zip(BORDERS, (p.grad_query, p.grad_key, p.grad_value),
                                    strict=True):
        letter = LETTERS[role]
        grads.append(Part(lines(*batched_tables(grad, f"d{letter}", box, options,
                                                ROLE_STYLES[role])),
                          titled(f"dL/d{letter}"), box, ROLE_STYLES[role]))
    return [Row([upstream]), Row(grads)]


def facts_part(title: str, rows: Sequence[tuple[bool | None, str, str]],
               passed: bool | None = None) -> Part:
    """A card of ``(verdict, label, detail)`` rows; a ``None`` verdict shows no word."""
    body = grid(*((status(ok) if ok is not None else Text(""), label, detail)
                  for ok, label, detail in rows), nowrap=(0, 1))
    return Part(body, titled(title, passed))


def checks_part(checks: Sequence[FamilyCheck], passed: bool) -> Part:
    """Every family of the chapter with its verdict."""
    return facts_part("Checks", [(c.passed, c.name, CHECK_TITLES.get(c.name, "")) for c in checks],
                      passed)


def verdict_text(checks: Sequence[FamilyCheck]) -> Text:
    """The verdict line, as chapter 26's figure ends."""
    done = sum(1 for check in checks if check.passed)
    line = Text(VERDICT, style="bold")
    line.append_text(status(done == len(checks)))
    line.append(" " + verdict_counts(done, len(checks)))
    return line


def head_figure(evidence: Any, options: RichOptions, prediction: str, masked: bool,
                cards: Sequence[RenderableType], closing: str) -> Group:
    """The whole figure: heading, legend, operands, scores, probabilities, mixture,
    reverse pass, the chapter's ``cards``, checks and verdict; ``closing`` names what the
    next chapter adds."""
    p = evidence.primary
    return lines(
        Text(f"qkv {options.symbols.dot} chapter {options.safe(evidence.chapter)}", style="bold"),
        Text(prediction, style="bold underline"),
        legend(options),
        Text(""),
        operands_row(p, options),
        scores_row(p, options, masked),
        Row([probability_part(p, options, masked)]),
        Row([mixture_part(p, options, masked)]),
        *backward_rows(p, options),
        Text(""),
        Text("Check the chapter's claims", style="bold underline"),
        *cards,
        Row([checks_part(evidence.checks, evidence.passed)]),
        Text(closing, style="dim"),
        verdict_text(evidence.checks),
    )
