"""The rich view of ``qkv attend`` (imported on rich paths only).

Per batch item the scores ``S = Q K^T`` beside the scaled scores ``Z`` the softmax reads,
the weights ``A`` beside the output ``O``; a multi-head layer one heat map per head
(:mod:`qkvcli.render.rich.heatmap`). Then the reverse pass (the loss and one row per
gradient), the checks, the teacher's notes and the verdict, in the text view's words
(:mod:`qkvcli.render.attend`). No number is ever cut: tables side by side stack before a
key is elided, and an elided key or feature is named with the way to see it (``--full``).
PASS/FAIL and note labels are words, never colour alone.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from rich import box
from rich.console import Group, RenderableType
from rich.text import Text

from qkvcli.attention.records import AttendEvidence
from qkvcli.core.arrays import Array
from qkvcli.core.text import escape_controls
from qkvcli.render.attend import (
    REVERSE,
    default_name,
    facts,
    formula_of,
    published_name,
    rope_words,
    upstream_source,
)
from qkvcli.render.facts import find
from qkvcli.render.numbers import fmt_float, fmt_general, fmt_shape
from qkvcli.render.rich.drawn import checks_card, checks_verdict, config_row
from qkvcli.render.rich.heatmap import heatmaps
from qkvcli.render.rich.layout import Fitted, Flow, Part, Row, beside, card, lines
from qkvcli.render.rich.options import RichOptions
from qkvcli.render.rich.tables import (
    Column,
    Extra,
    column_limits,
    elision_note,
    noted,
    pick,
    query_key_table,
    table,
)
from qkvcli.stages.applied import formula_in
from qkvcli.stages.table import STAGES

CONFIG = ("batch", "tokens", "d_model", "d_k", "d_v", "causal", "value_width", "kv_heads",
          "heads", "e_out")
"""The config facts the header's first line says, as the text report's ``config=``."""
SYMBOLS = {
    "upstream_output": "U = dO", "heads_output_gradient": "dH", "weights_gradient": "dA",
    "scaled_scores_gradient": "dZ", "scores_gradient": "dS", "query_gradient": "dQ",
    "key_gradient": "dK", "value_gradient": "dV", "input_gradient": "dX",
    "query_weight_gradient": "dW_Q", "key_weight_gradient": "dW_K",
    "value_weight_gradient": "dW_V", "query_bias_gradient": "db_Q", "key_bias_gradient": "db_K",
    "value_bias_gradient": "db_V", "in_proj_weight_gradient": "dW_in",
    "in_proj_bias_gradient": "db_in", "c_attn_weight_gradient": "dW_c_attn",
    "c_attn_bias_gradient": "db_c_attn", "out_proj_weight_gradient": "dW_out",
    "out_proj_bias_gradient": "db_out", "c_proj_weight_gradient": "dW_c_proj",
    "c_proj_bias_gradient": "db_c_proj",
}
"""The chapter's symbol for each gradient the text view prints, by published name."""
REVERSE_STAGES = ("mixture reverse (weights)", "mixture reverse (values)", "softmax reverse",
                  "scale reverse", "scores reverse (queries)", "scores reverse (keys)",
                  "projection reverse (input)")
"""The reverse steps the card lists, each by its stage's formula, in attend's names (U is
dO; the paths into dX start from dQ, dK, dV)."""
NAMES = {"U": "dO", "U_Q": "dQ", "U_K": "dK", "U_V": "dV"}
SMALL_VALUES = 12
"""A gradient of at most this many values is shown whole in the reverse table (a learner
recomputes dQ, dK, dV of two tokens by hand); a larger one by its largest value and norm."""
BAR_WIDTH = 10
PRECISION = 6
"""Decimals of every value unless the options ask for others: the text view's, so that
a small gradient (dW_Q ``0.000123``) is not shown as ``0.0001``."""


def scores_row(evidence: AttendEvidence, batch: int, options: RichOptions) -> Fitted:
    """Batch item ``batch``'s scores ``S`` beside its scaled scores ``Z``: every key, the
    two stacked, before any key is elided (layouts tried widest first)."""
    c = evidence.config
    # Short titles of equal height line the tables up; the mask is explained under Z.
    titles = (("scores", f"batch {batch}: scores S = Q K^T", None),
              ("scaled_scores", f"batch {batch}: Z = S * {fmt_general(c.scale, 6)}" if c.scale_given
               else f"batch {batch}: Z = S / sqrt({c.d_k})",
               "-inf: masked (causal)" if c.causal else None))
    return Fitted([beside(query_key_table(evidence.primary[name][batch], title, options, limit,
                                          caption) for name, title, caption in titles)
                   for limit in column_limits(c.tokens, options)])


def _values(values: Array, options: RichOptions, picked: Sequence[int | None] | None = None) -> str:
    """``[v, v, ...]`` row-major (``picked``: those indices, an ellipsis for a gap), the
    values apart so a long list wraps between them."""
    flat = values.reshape(-1)
    return "[" + ", ".join(options.symbols.ellipsis if i is None else
                           fmt_float(float(flat[i]), options.precision)
                           for i in (range(flat.size) if picked is None else picked)) + "]"


def _reverse_table(evidence: AttendEvidence, options: RichOptions, small: bool) -> RenderableType:
    """One row per gradient, in the text's order: its symbol (and a checkpoint parameter's
    framework name: ``dW_Q q_proj_weight_gradient``), shape, largest magnitude, norm and
    (``small``) the values of each gradient of at most :data:`SMALL_VALUES` values."""
    tensors, rows = evidence.primary.tensors, []
    for name in (name for name in REVERSE if name in tensors):
        values = np.asarray(tensors[name], dtype=np.float64)
        flat = values.reshape(-1)
        default, shown_name = (f(name, evidence.config) for f in (default_name, published_name))
        symbol = SYMBOLS.get(default, default)
        rows.append([symbol if shown_name == default else f"{symbol} {shown_name}",
                     fmt_shape(values.shape),
                     *(fmt_float(float(f(flat)) if flat.size else 0.0, options.precision)
                       for f in (lambda v: np.max(np.abs(v)), np.linalg.norm)),
                     *([_values(values, options) if values.size <= SMALL_VALUES or options.full
                        else ""] if small else [])])
    columns = [Column("gradient", "word"), Column("shape", "word"),
               Column("max |value|", "number"), Column("norm", "number"), Column("values")]
    return table(columns[:5 if small else 4], rows, box=box.SIMPLE_HEAVY, pad_edge=False)


def reverse_summary(evidence: AttendEvidence, options: RichOptions) -> Part:
    """The reverse pass's card: the loss, each gradient's row (its values too when small
    ones fit the screen), and the formula of each reverse step."""
    tensors = evidence.primary.tensors
    small = options.full or any(
        np.asarray(tensors[name]).size <= SMALL_VALUES for name in REVERSE if name in tensors)
    # one formula per item: a line wraps between formulas
    rules = (f"{upstream_source(evidence)};",
             *(options.math(formula_in(STAGES[stage], NAMES)) + "," for stage in REVERSE_STAGES),
             "every value: -f text or -f json")
    return card("Reverse pass", next(c.passed for c in evidence.checks if c.name == "reverse"),
                Text(f"L = <O,U> = {fmt_float(evidence.primary.loss, options.precision)}"),
                Fitted([*([_reverse_table(evidence, options, True)] if small else []),
                        _reverse_table(evidence, options, False)]),
                Flow([Text(rule, style="dim") for rule in rules], gap=1))


def _output_table(output: Array, batch: int, options: RichOptions, limit: int) -> RenderableType:
    """Each query's output vector ``[o_0, o_1, ...]`` (``output``: ``[T, d_v]``), at most
    ``limit`` features shown."""
    tokens, width = (int(n) for n in output.shape)
    features = pick(width, limit, options.full)
    queries = pick(tokens, options.max_rows, options.full)
    ellipsis = options.symbols.ellipsis
    rows = [(ellipsis, ellipsis) if i is None else (f"t{i}", _values(output[i], options, features))
            for i in queries]
    # a vector is one line: as wide as its widest, or rich measures it by its widest value
    made = table([Column("query", "word"), Column("output", "line")], rows,
                 box=box.SIMPLE_HEAVY, title=f"batch {batch}: output O", title_justify="left",
                 padding=(0, 0, 0, 1))
    return noted(made, elision_note(("queries", "t", queries, tokens),
                                    ("features", "", features, width)))


def attention_row(evidence: AttendEvidence, batch: int, options: RichOptions) -> Fitted:
    """Batch item ``batch``'s weights ``A`` (rows: queries; then each row's sum and its
    largest weight as a bar) beside its output ``O``: every key with the bar, every key
    without it, then fewer keys; the two stack before a key is elided."""
    weights = evidence.primary["attention"][batch]
    total: Extra = ("sum", lambda row: fmt_float(float(np.sum(row)), options.precision), True)
    bar: Extra = ("largest", lambda row: options.bar(float(np.max(row)) if row.size else 0.0,
                                                     BAR_WIDTH), False)
    output = Fitted([_output_table(evidence.primary["output"][batch], batch, options, limit)
                     for limit in column_limits(evidence.config.d_v, options)])
    limits = column_limits(evidence.config.tokens, options)
    return Fitted([beside([query_key_table(weights, f"batch {batch}: weights A (rows: queries, "
                                           "columns: keys)", options, limit, extra=extra), output])
                   for limit, extra in [(limits[0], (total, bar)),
                                        *((limit, (total,)) for limit in limits)]])


def attend_renderable(evidence: AttendEvidence, options: RichOptions | None = None) -> Group:
    """Everything a learner reads first: setup, scores, attention and output per batch (heat
    maps per head for a layer), the reverse pass, checks, notes and the verdict.

    Takes the evidence and the display options (:data:`PRECISION` decimals unless given);
    gives a renderable that shows every number whole at any width the CLI prints it at.
    Raises nothing for valid evidence.
    """
    options = options or RichOptions(precision=PRECISION)
    c, found = evidence.config, facts(evidence)
    config, scale = find(found, "config"), fmt_float(c.scale, options.precision)
    bias = ", ".join(branch for branch, flag in config["bias"].items() if flag)
    header = lines(
        Text(formula_of(c), style="bold"),
        config_row(config, [name for name in CONFIG if name in config], options),
        Text((f"scale {scale} (given)" if c.scale_given else f"scale 1/sqrt({c.d_k}) = {scale}")
             + (f"; rope {rope_words(c.rope)}" if c.rope is not None else "")
             + f"; bias on {bias or 'no branch'}; {found['parameter_count']} parameters"),
        Text(f"layout {c.layout}: {c.layout_description}"))
    # Cards in a Row, not bare Panels: a Panel measures as wide as its longest line, which
    # made the CLI widen the whole view for a line of prose that could wrap.
    return Group(
        Row([card(Text(f"attend: {escape_controls(evidence.chapter)}"), None, header,
                  box=box.ROUNDED)]),
        *([heatmaps(evidence, options)] if c.heads is not None else []),
        *(row(evidence, b, options) for b in range(c.batch if c.heads is None else 0)
          for row in (scores_row, attention_row)),
        Row([reverse_summary(evidence, options)]),
        Row([checks_card(found["checks"], options)]),
        *(Row([card(Text(f"note: {note['code']}"), None, Text(options.safe(note["text"])),
                    box=box.ROUNDED, style="yellow")]) for note in found["notes"]),
        checks_verdict(found["checks"]))
