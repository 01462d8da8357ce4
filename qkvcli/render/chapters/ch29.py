"""Chapter 29's report, RoPE: text and trace (the anchors' bytes), JSON, figure.

Pure functions of :class:`~qkvcli.chapters.ch29.RopeEvidence`; every published name and
all the chapter's wording live here. Numbers are fixed point with six decimals, a zero
never signed (the reference writes ``-0.0`` as ``0.000000``).
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from qkvcli.attention.errors import RotaryRefusal
from qkvcli.chapters.ch29 import NAME, RopeEvidence
from qkvcli.render.chapters.entries import (
    REPLAY,
    TRACED,
    chapter_checks,
    error_lines,
    refusals,
    rejected,
    shape_of,
    worded,
)
from qkvcli.render.chapters.entries import json_document as json_document_of
from qkvcli.render.chapters.rows import (
    Table,
    fields,
    gradcheck,
    opening,
    per,
    refused_facts,
    tensor_lines,
    tensors,
)
from qkvcli.render.facts import (
    entries,
    report,
    said,
    scalar,
    section,
    shape,
    tensor,
    values,
    verdict,
)
from qkvcli.render.numbers import fmt_bool, fmt_float, fmt_general, fmt_shape, fmt_vector

if TYPE_CHECKING:
    from qkvcli.render.rich.options import RichOptions

PREDICTION = ("position zero is the identity; equal shifts preserve every fixed query-key "
              "dot product")
NEXT = "split the position-aware feature axis into multiple attention heads"
NEXT_CHAPTER = "30-multi-head-attention"
HISTORY = (
    ("earlier", "recurrent-order-in-state"),
    ("transformer", "absolute-vectors-added-to-embeddings"),
    ("rotary", "absolute-qk-rotations-relative-dot"),
    ("modern_example", "llama-rope-each-layer"),
    ("causal_boundary", "separate-mask"),
)
"""Where RoPE stands in the history of position information, as the chapter tells it."""

ERROR_KEYS = {
    "zero-width": "zero_width", "odd-width": "odd_width", "invalid-base": "invalid_base",
    "input-rank": "rank", "width-mismatch": "width_mismatch", "position-range": "range",
    "offset-overflow": "overflow", "released-input": "released",
}
"""Each rejected input's key on the report's ``errors=`` line."""

KINDS = {refusal.__name__: refusal.kind for refusal in RotaryRefusal.__subclasses__()}
"""Each rotary refusal's name in the trace's and the JSON's ``kind``."""
HIDDEN = {"PositionOffsetOverflow.offset": None}
"""A refusal's field the chapter does not publish (:func:`~.rows.refused_facts`)."""
ROWS = ("position", "feature")
"""A table of positions' axes: Q, K, their turns and gradients."""
TRACED_ERRORS = ("odd-width", "input-rank", "width-mismatch", "position-range",
                 "offset-overflow", "released-input")
"""The rejected inputs the trace draws (the table's own refusals of a zero width and a
bad base are in the report only)."""


def _ints(values: Any) -> str:
    return "[" + ",".join(str(int(v)) for v in values) + "]"


NORMS = fields("norms", "input rotated shifted preserved")
CHECKS = ("query", "key")
TEXT: Table = (
    *opening(NAME, PREDICTION),
    ("config", (*fields("config", "features pairs positions base layout",
                        base=partial(fmt_float, precision=0)),
                ("offset", lambda e: f"{e.fixture.offset}->{e.fixture.offset + e.fixture.shift}"))),
    *tensor_lines("inverse_frequencies", spell=fmt_vector),
    *tensor_lines("query key angles cosines sines"),
    *tensor_lines("rotated_query rotated_key", spell=fmt_vector),
    ("norms", NORMS),
    *tensor_lines("dot_grid"),
    ("shifted_dot_grid", (("", "tensors.shifted_dot_grid"),
                          ("common_shift_preserved", "common_shift_preserved"))),
    ("position_zero_identity", "position_zero_identity"),
    ("upstream", (*fields("tensors", "query=upstream_query key=upstream_key", fmt_vector),
                  ("loss", "loss"))),
    *tensor_lines("query_gradient key_gradient", spell=fmt_vector),
    ("shapes", ("shapes", lambda probes: " ".join(
        f"{probe['case']}:{said(probe['output'])}" for probe in probes))),
    ("errors", rejected(ERROR_KEYS)),
    ("gradcheck", gradcheck(CHECKS)),
    ("history", (("", "history.*"),)),
    ("proof", (("tape_finite", "tape_finite"), ("norm_preserved", "norms.preserved"),
               ("relative_dot", "common_shift_preserved"), REPLAY)),
    ("next", lambda e: NEXT),
)
"""The text report's lines: each key, and its facts (a path said by its kind, a path and
its spelling, or labelled parts)."""


def text(evidence: RopeEvidence) -> str:
    """The chapter's text report, ``key=value`` lines ending with a newline."""
    return report(facts(evidence), evidence, TEXT)


PROBE_LINES = {"rank3": "RANK3", "rank4": "RANK4", "empty_leading": "EMPTY_LEADING",
               "empty_tokens": "EMPTY_TOKENS"}


def trace(evidence: RopeEvidence) -> str:
    """The chapter's diagram trace, ``KIND|key=value`` lines ending with a newline: what
    the figure draws, piece by piece (one line per pair, position, probe and traced
    refusal between the table's own)."""
    t, pairs = evidence.primary.tables, evidence.fixture.table.pair_features()
    count = range(len(t.positions))

    def probe(x: Any) -> str:
        offset = f"|offset={x['offset']}" if x["case"] == "empty_tokens" else ""
        return (f"input_shape={fmt_shape(x['input'])}{offset}|output_shape={said(x['output'])}"
                f"|valid={said(x['valid'])}")

    def row(path: str) -> tuple[str, Any]:
        return (path, lambda value, i: fmt_vector(value[i]))

    table: Table = (
        ("META", (("input_shape", "tensors.query", shape_of),
                  ("table_shape", "tensors.cosines", shape_of),
                  ("dot_shape", "tensors.dot_grid", shape_of),
                  *fields("config", "features pairs positions base layout"),
                  ("rotation", lambda e: "counterclockwise"),
                  ("token_axis", lambda e: "penultimate"), ("feature_axis", lambda e: "final"))),
        *tensor_lines("query key", True),
        *per("FREQUENCY", range(len(pairs)), (
            ("pair", lambda e, i: i), ("features", lambda e, i: _ints(pairs[i])),
            ("theta", "tensors.inverse_frequencies", lambda value, i: fmt_vector(value[i:i + 1])))),
        *per("POSITION", count, (
            ("position", lambda e, i: t.positions[i]),
            *((name, *row(f"tensors.{name}")) for name in ("angles", "cosines", "sines")),
            ("query_before", *row("tensors.query")),
            ("query_after", *row("tensors.rotated_query")))),
        *tensor_lines("rotated_query rotated_key", True),
        ("NORM", NORMS),
        *per("DOT_ROW", count, (
            ("query_position", lambda e, i: t.positions[i]),
            ("relative_offsets", "config.token_positions",
             lambda positions, i: _ints(k - positions[i] for k in positions)),
            ("values", *row("tensors.dot_grid")))),
        ("COMMON_SHIFT", (
            ("before_positions", "config.token_positions", _ints),
            ("after_positions", lambda e: _ints(p + e.fixture.shift for p in t.positions)),
            *fields("tensors", "before_grid=dot_grid after_grid=shifted_dot_grid", fmt_vector),
            ("tolerance", "invariant_tolerance", lambda v: fmt_float(v, 12)),
            ("preserved", "common_shift_preserved"))),
        ("BACKWARD", (*fields("tensors", "query_seed=upstream_query key_seed=upstream_key", fmt_vector),
                      ("loss", "loss"), *fields("tensors", "query_gradient key_gradient", fmt_vector))),
        *per(lambda i: PROBE_LINES[evidence.probes[i].case], range(len(evidence.probes)),
             (("", "shapes", lambda value, i: probe(value[i])),)),
        *error_lines(i for i, e in enumerate(evidence.errors) if e.case in TRACED_ERRORS),
        ("HISTORY", (("", "history.*"),)),
        ("PROOF", (
            worded("position_zero", "position_zero_identity", "bitwise-identity", "changed"),
            worded("norms", "norms.preserved", "preserved", "changed"),
            worded("relative_dot", "common_shift_preserved", "common-shift-preserved", "mismatch"),
            ("tape_finite", "tape_finite"), *gradcheck(CHECKS, "gradient_tolerance", "gradcheck"),
            REPLAY)),
        ("NEXT", (("chapter", lambda e: NEXT_CHAPTER),)))
    return report(facts(evidence), evidence, table, True, TRACED)


# --- JSON -----------------------------------------------------------------------------------

JSON_KEYS = ("qkv_version", "schema_version", "report", "chapter", "passed", "checks", "config",
             "tensors", "norms", "loss", "position_zero_identity", "common_shift_preserved",
             "invariant_tolerance", "shapes", "errors", "gradcheck", "tape_finite",
             "replay_bitwise", "history")
"""The JSON report's keys, in order (docs/reading-the-report.md explains each)."""


def facts(evidence: RopeEvidence) -> dict[str, Any]:
    """The chapter's facts (:mod:`qkvcli.render.facts`) under :data:`JSON_KEYS` after
    the head: what the JSON publishes and the text and trace say."""
    from qkvcli.render.document import gradcheck_json

    f, p, t = evidence.fixture, evidence.primary, evidence.primary.tables
    table = f.table
    return {
        "checks": chapter_checks(NAME, evidence),
        "config": section(features=table.features, pairs=table.pairs,
                          positions=table.positions, base=scalar(float(table.base)),
                          layout=table.layout, offset=f.offset, shift=f.shift,
                          shifted_offset=f.offset + f.shift, token_positions=list(t.positions)),
        "tensors": section(
            **tensors(ROWS, True, query=p.query, key=p.key),
            inverse_frequencies=tensor(t.inverse_frequencies, ("pair",)),
            **tensors(("position", "pair"), angles=t.angles, cosines=t.cosines, sines=t.sines),
            **tensors(ROWS, rotated_query=p.rotated_query, rotated_key=p.rotated_key,
                      shifted_query=p.shifted_query, shifted_key=p.shifted_key),
            **tensors(("query", "key"), dot_grid=p.dot_grid, shifted_dot_grid=p.shifted_dot_grid),
            **tensors(ROWS, True, upstream_query=p.upstream_query, upstream_key=p.upstream_key),
            **tensors(ROWS, query_gradient=p.query_gradient, key_gradient=p.key_gradient)),
        "norms": section(input=values(p.input_norms), rotated=values(p.rotated_norms),
                         shifted=values(p.shifted_norms), preserved=verdict(p.norm_preserved)),
        "loss": scalar(p.loss),
        "position_zero_identity": verdict(p.position_zero_identity),
        "common_shift_preserved": verdict(p.common_shift_preserved),
        "invariant_tolerance": f.invariant_tolerance,
        "shapes": entries([
            {"case": probe.case, "input": list(probe.input), "offset": probe.offset,
             "output": shape(probe.shape("rope")), "valid": verdict(probe.kept),
             "refusal": probe.refusal or None} for probe in evidence.probes]),
        "errors": refusals(evidence.errors, ("case", "kind", "rejected", "facts", "message"),
                           kind=lambda e: KINDS[e.expected], facts=lambda e: refused_facts(e, HIDDEN)),
        "gradcheck": gradcheck_json(evidence.gradcheck),
        "tape_finite": verdict(p.tape_finite),
        "replay_bitwise": verdict(evidence.replay_bitwise),
        "history": dict(HISTORY),
    }


def json_document(evidence: RopeEvidence) -> dict[str, Any]:
    """The JSON report, :data:`JSON_KEYS` in order: the head, then :func:`facts`."""
    return json_document_of(NAME, evidence, facts(evidence))


# --- the figure -----------------------------------------------------------------------------


def figure(evidence: RopeEvidence, width: int, options: RichOptions | None = None) -> Any:
    """The chapter's picture as a rich renderable, in the order of :func:`trace`: the
    pairs and their frequencies (beside the checks from 120 columns), each position's
    angle turning each pair of Q (solid border) and K (dashed), the dot products by
    relative offset, then the norms, the common shift, position zero, the reverse, the
    shapes, the refused inputs and the history, and the verdict line. Formulas and worked
    lines are the stages' (:mod:`qkvcli.render.chapters.figure`), numbers at ``options``'
    precision.

    Laid out for the width rich offers when it is printed, down to 40 columns: below
    80 the angles stand once in a table of their own and Q's and K's pairs wrap between
    their two numbers; below 60 the angle, cos and sin of a pair share a cell and each
    fact stands under its label. Measured as its narrowest layout."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from qkvcli.render.chapters import figure as kit
    from qkvcli.render.rich.boxes import KEY, QUERY
    from qkvcli.render.rich.layout import Fitted
    from qkvcli.render.rich.options import RichOptions
    from qkvcli.stages.terms import rotation, scores

    options = options or RichOptions()
    n = options.precision  # every number of the figure at the caller's precision
    f, p, t = evidence.fixture, evidence.primary, evidence.primary.tables
    table, positions = f.table, t.positions
    pairs = list(enumerate(table.pair_features()))
    spots = [(r, pair, a, b) for r in range(len(positions)) for pair, (a, b) in pairs]


    def angle_cells(r: int, pair: int) -> list[str]:
        return [fmt_float(grid[r, pair], n) for grid in (t.angles, t.cosines, t.sines)]

    def place(r: int, pair: int) -> list[str]:
        return [str(positions[r]) if pair == 0 else "", str(pair)]

    def where(stacked: bool) -> list[str]:
        return ["pos" if stacked else "position", "pair"]

    def turned(title: str, before: Any, after: Any, box: Any, style: str, angled: bool,
               stacked: bool) -> Table:
        # one row per (position, pair): each pair a point in a plane, turned by its angle;
        # ``stacked`` writes a pair's two numbers one above the other
        between = "\n" if stacked else ","
        return kit.card(title, [*where(stacked), *(["angle", "cos", "sin"] if angled else []),
                            "before", "after"],
                    [[*place(r, pair), *(angle_cells(r, pair) if angled else []),
                      kit.numbers(before[r, [a, b]], options, between),
                      kit.numbers(after[r, [a, b]], options, between)] for r, pair, a, b in spots],
                    box=box, style=style)

    def angles(stacked: bool) -> Table:
        # the angles of Q and K are the same (one table of positions), so drawn once;
        # ``stacked`` puts a pair's angle, cos and sin one above the other in one cell
        return kit.card("each position's angle, for Q and K alike",
                    [*where(stacked), *(["angle\ncos\nsin"] if stacked else ["angle", "cos", "sin"])],
                    [[*place(r, pair), *(["\n".join(angle_cells(r, pair))] if stacked
                                         else angle_cells(r, pair))] for r, pair, _, _ in spots])

    def dots(stacked: bool | None) -> Table:
        # ``stacked`` writes each offset under its dot product, the query's position alone;
        # ``None``: one row per query and key
        title = f"{kit.formula(options, 'scores')}: rot(Q).rot(K) by relative offset"
        if stacked is None:
            return kit.card(title, ["query", "key", "rot(Q).rot(K)"],
                        [[str(q) if k == positions[0] else "", f"{k} ({k - q:+d})", fmt_float(v, n)]
                         for r, q in enumerate(positions)
                         for v, k in zip(p.dot_grid[r], positions, strict=True)])
        return kit.card(title,
                    ["query at\nposition" if stacked else "query at",
                     *(f"key {k}" for k in positions)],
                    [[str(q) if stacked else f"position {q}",
                      *(f"{fmt_float(v, n)}{chr(10) if stacked else ' '}({k - q:+d})"
                        for v, k in zip(p.dot_grid[r], positions, strict=True))]
                     for r, q in enumerate(positions)], left=(0,))

    q_args = ("Q turned by its position (solid)", p.query, p.rotated_query, QUERY, "cyan")
    k_args = ("K turned by its position (dashed)", p.key, p.rotated_key, KEY, "magenta")
    rotation_layouts = Fitted([
        Group(turned(*q_args, True, False), turned(*k_args, True, False)),
        *(Group(angles(stacked), turned(*q_args, False, stacked), turned(*k_args, False, stacked))
          for stacked in (False, True))])
    last = len(positions) - 1
    layout = "half" if table.layout == "half" else "interleaved"
    shown_rows = ([kit.worked(f"rot(Q)[{last},0]", rotation(
        p.query, t.cosines, t.sines, (last, 0), float(p.rotated_query[last, 0]), layout,
        ("Q", "rot(Q)"), position=positions[last]), options),
        kit.worked(f"rot(Q).rot(K)[{last},0]", scores(
            p.rotated_query, p.rotated_key, (last, 0), float(p.dot_grid[last, 0]),
            ("rot(Q)", "rot(K)")), options)] if positions else [])
    frequencies = kit.card("pairs and their frequencies",
                       ["pair", "features", kit.formula(options, "rope frequency")],
                       [[str(pair), _ints(features), fmt_float(t.inverse_frequencies[pair], n)]
                        for pair, features in pairs], left=(0, 1))
    checks = kit.closing(evidence.checks)[0]
    cards: Any = Group(frequencies, checks)
    if width >= 120:  # side by side when both fit
        both = Table.grid(padding=(0, 1))
        both.add_row(frequencies, checks)
        cards = Fitted([both, cards])
    return Group(
        kit.heading("Chapter 29 - RoPE", f"{table.features} features in {table.pairs} "
                f"{table.layout} pairs, base {fmt_general(table.base, kit.SETTING)}, a table of "
                f"{table.positions} positions; tokens at positions {f.offset}-"
                f"{f.offset + len(positions) - 1}, shifted by {f.shift}", evidence.passed),
        cards, kit.element("rope", options), rotation_layouts, *shown_rows,
        Fitted([dots(False), dots(True), dots(None)]),
        *kit.showed("what the rotation kept", [
            ("norms kept", f"{fmt_bool(p.norm_preserved)}  (|q| {kit.numbers(p.input_norms, options, ' ')})"),
            ("common shift", f"+{f.shift}: every dot product kept within "
             f"{fmt_float(f.invariant_tolerance, 12)}: {fmt_bool(p.common_shift_preserved)}"),
            ("position zero", f"identity: {fmt_bool(p.position_zero_identity)}"),
            ("reverse", f"{kit.formula(options, 'loss')} over rot(Q) and rot(K) = {fmt_float(p.loss, n)}; "
             f"{kit.formula(options, 'rope reverse')}"),
            ("shapes", " ".join(f"{probe.case} {said(shape(probe.shape('rope')))}"
                                for probe in evidence.probes)),
            ("refused", " ".join(f"{e.case}{'' if e.rejected else ' (NOT refused)'}"
                                 for e in evidence.errors)),
            ("history", "; ".join(f"{key.replace('_', ' ')}: {value}" for key, value in HISTORY)),
        ]), Text(), kit.verdict_text(evidence.checks))
