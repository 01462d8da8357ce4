"""Chapter 29's report, RoPE: text and trace (the anchors' bytes), JSON, figure.

Pure functions of :class:`~qkvcli.chapters.ch29.RopeEvidence`; every published name and
all the chapter's wording live here. Numbers are fixed point with six decimals, a zero
never signed (the reference writes ``-0.0`` as ``0.000000``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from qkvcli.attention.errors import RotaryRefusal
from qkvcli.chapters.ch29 import NAME, RopeEvidence
from qkvcli.core.results import Refusal
from qkvcli.render.facts import (
    Part,
    entries,
    fixed,
    json_of,
    layout,
    report,
    said,
    scalar,
    section,
    shape,
    tensor,
    values,
    vector,
    verdict,
)
from qkvcli.render.numbers import fmt_bool, fmt_float, fmt_shape

if TYPE_CHECKING:
    from rich.table import Table

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
FACTS = {"OddFeatureWidth": ("width",), "InvalidRopeBase": ("base",),
         "RotaryInputRank": ("rank",), "RotaryWidthMismatch": ("expected", "actual"),
         "PositionOffsetOverflow": ("tokens",),
         "PositionRangeExceeded": ("offset", "tokens", "capacity"), "ReleasedBuffer": ("stage",)}
"""The facts the chapter publishes of each refusal, in order."""
ROWS = ("position", "feature")
AXES = {**dict.fromkeys(("query", "key", "rotated_query", "rotated_key", "shifted_query",
                         "shifted_key", "upstream_query", "upstream_key", "query_gradient",
                         "key_gradient"), ROWS),
        "inverse_frequencies": ("pair",), **dict.fromkeys(("angles", "cosines", "sines"),
                                                         ("position", "pair")),
        "dot_grid": ("query", "key"), "shifted_dot_grid": ("query", "key")}
"""Each tensor's axes, by name."""
TRACED_ERRORS = ("odd-width", "input-rank", "width-mismatch", "position-range",
                 "offset-overflow", "released-input")
"""The rejected inputs the trace draws (the table's own refusals of a zero width and a
bad base are in the report only)."""


_fixed = fixed


def _ints(values: Any) -> str:
    return "[" + ",".join(str(int(v)) for v in values) + "]"


def _base(value: float) -> str:
    return fmt_float(value, 0)


def _counts(evidence: RopeEvidence) -> dict[str, int]:
    return {c.tensor: len(c.checks) for c in evidence.gradcheck.tensors}


def _replay(evidence: RopeEvidence) -> str:
    return "bitwise" if evidence.replay_bitwise else "mismatch"


TEXT: tuple[tuple[str, Any], ...] = (
    ("chapter", lambda e: NAME),
    ("prediction", lambda e: PREDICTION),
    ("config", (("features", "config.features"), ("pairs", "config.pairs"),
                ("positions", "config.positions"), ("base", "config.base", _base),
                ("layout", "config.layout"),
                ("offset", lambda e: f"{e.fixture.offset}->{e.fixture.offset + e.fixture.shift}"))),
    ("inverse_frequencies", ("tensors.inverse_frequencies", vector)),
    *((name, f"tensors.{name}") for name in ("query", "key", "angles", "cosines", "sines")),
    ("rotated_query", ("tensors.rotated_query", vector)),
    ("rotated_key", ("tensors.rotated_key", vector)),
    ("norms", (("input", "norms.input"), ("rotated", "norms.rotated"),
               ("shifted", "norms.shifted"), ("preserved", "norms.preserved"))),
    ("dot_grid", "tensors.dot_grid"),
    ("shifted_dot_grid", (("", "tensors.shifted_dot_grid"),
                          ("common_shift_preserved", "common_shift_preserved"))),
    ("position_zero_identity", "position_zero_identity"),
    ("upstream", (("query", "tensors.upstream_query", vector),
                  ("key", "tensors.upstream_key", vector), ("loss", "loss"))),
    ("query_gradient", ("tensors.query_gradient", vector)),
    ("key_gradient", ("tensors.key_gradient", vector)),
    ("shapes", ("shapes", lambda probes: " ".join(
        f"{probe['case']}:{said(probe['output'])}" for probe in probes))),
    ("errors", ("errors", lambda errors: " ".join(
        f"{ERROR_KEYS[e['case']]}:{said(e['rejected'])}" for e in errors))),
    ("gradcheck", (("query_checks", lambda e: _counts(e)["query"]),
                   ("key_checks", lambda e: _counts(e)["key"]),
                   ("tolerance", lambda e: fixed(e.fixture.tolerance)),
                   ("passed", lambda e: fmt_bool(e.gradcheck.passed)))),
    ("history", ("history", lambda history: " ".join(f"{k}:{v}" for k, v in history.items()))),
    ("proof", (("tape_finite", "tape_finite"), ("norm_preserved", "norms.preserved"),
               ("relative_dot", "common_shift_preserved"), ("replay", _replay))),
    ("next", lambda e: NEXT),
)
"""The text report's lines: each key, and its facts (a path said by its kind, a path and
its spelling, or labelled parts)."""


def text(evidence: RopeEvidence) -> str:
    """The chapter's text report, ``key=value`` lines ending with a newline."""
    return report(facts(evidence), evidence, TEXT)


def _shape(shape: tuple[int, ...] | None) -> str:
    return "rejected" if shape is None else fmt_shape(shape)


def _error_line(error: Refusal) -> str:
    facts = "".join(f"|{key}={value}" for key, value in facts_of(error))
    return (f"ERROR|case={error.case}|kind={KINDS[error.expected]}{facts}"
            f"|rejected={fmt_bool(error.rejected)}")


def facts_of(error: Refusal) -> tuple[tuple[str, Any], ...]:
    """The facts the chapter publishes of a refusal: :data:`FACTS` of its expected error."""
    shown = FACTS.get(error.expected, ())
    return tuple((key, value) for key, value in error.fields if key in shown)


PROBE_LINES = {"rank3": "RANK3", "rank4": "RANK4", "empty_leading": "EMPTY_LEADING",
               "empty_tokens": "EMPTY_TOKENS"}


def _traced(path: str) -> tuple[Part, ...]:
    """A tensor in the trace: ``shape=[..]|values=[..]``."""
    return (("shape", path, lambda v: fmt_shape(np.shape(v))), ("values", path, vector))


def _proof(claim: bool, held: str, broken: str) -> str:
    return held if claim else broken


TRACE_HEAD: tuple[tuple[str, Any], ...] = (
    ("META", (("input_shape", "tensors.query", lambda v: fmt_shape(np.shape(v))),
              ("table_shape", "tensors.cosines", lambda v: fmt_shape(np.shape(v))),
              ("dot_shape", "tensors.dot_grid", lambda v: fmt_shape(np.shape(v))),
              ("features", "config.features"), ("pairs", "config.pairs"),
              ("positions", "config.positions"), ("base", "config.base"),
              ("layout", "config.layout"), ("rotation", lambda e: "counterclockwise"),
              ("token_axis", lambda e: "penultimate"), ("feature_axis", lambda e: "final"))),
    ("QUERY", _traced("tensors.query")),
    ("KEY", _traced("tensors.key")),
)
TRACE_MIDDLE: tuple[tuple[str, Any], ...] = (
    ("ROTATED_QUERY", _traced("tensors.rotated_query")),
    ("ROTATED_KEY", _traced("tensors.rotated_key")),
    ("NORM", (("input", "norms.input"), ("rotated", "norms.rotated"),
              ("shifted", "norms.shifted"), ("preserved", "norms.preserved"))),
)
TRACE_TAIL: tuple[tuple[str, Any], ...] = (
    ("COMMON_SHIFT", (
        ("before_positions", "config.token_positions", _ints),
        ("after_positions", lambda e: _ints(p + e.fixture.shift for p in e.primary.tables.positions)),
        ("before_grid", "tensors.dot_grid", vector),
        ("after_grid", "tensors.shifted_dot_grid", vector),
        ("tolerance", "invariant_tolerance", lambda v: fixed(v, 12)),
        ("preserved", "common_shift_preserved"))),
    ("BACKWARD", (("query_seed", "tensors.upstream_query", vector),
                  ("key_seed", "tensors.upstream_key", vector), ("loss", "loss"),
                  ("query_gradient", "tensors.query_gradient", vector),
                  ("key_gradient", "tensors.key_gradient", vector))),
)
TRACE_END: tuple[tuple[str, Any], ...] = (
    ("HISTORY", tuple((key, "history." + key) for key, _ in HISTORY)),
    ("PROOF", (
        ("position_zero", "position_zero_identity",
         lambda v: _proof(v, "bitwise-identity", "changed")),
        ("norms", "norms.preserved", lambda v: _proof(v, "preserved", "changed")),
        ("relative_dot", "common_shift_preserved",
         lambda v: _proof(v, "common-shift-preserved", "mismatch")),
        ("tape_finite", "tape_finite"),
        ("query_checks", lambda e: _counts(e)["query"]),
        ("key_checks", lambda e: _counts(e)["key"]),
        ("gradient_tolerance", lambda e: fixed(e.fixture.tolerance)),
        ("gradcheck", lambda e: fmt_bool(e.gradcheck.passed)),
        ("replay", _replay))),
    ("NEXT", (("chapter", lambda e: NEXT_CHAPTER),)),
)
"""The trace's lines around those drawn once per pair, position, probe and refused input."""


def trace(evidence: RopeEvidence) -> str:
    """The chapter's diagram trace, ``KIND|key=value`` lines ending with a newline: what
    the figure draws, piece by piece."""
    found = facts(evidence)

    def laid(table: tuple[tuple[str, Any], ...]) -> list[str]:
        return layout(found, evidence, table, "|", "=", "|")

    p, t = evidence.primary, evidence.primary.tables
    lines = laid(TRACE_HEAD)
    for pair, features in enumerate(evidence.fixture.table.pair_features()):
        lines.append(f"FREQUENCY|pair={pair}|features={_ints(features)}"
                     f"|theta={vector(t.inverse_frequencies[pair:pair + 1])}")
    for row, position in enumerate(t.positions):
        lines.append(
            f"POSITION|position={position}|angles={vector(t.angles[row])}"
            f"|cosines={vector(t.cosines[row])}|sines={vector(t.sines[row])}"
            f"|query_before={vector(p.query[row])}|query_after={vector(p.rotated_query[row])}")
    lines += laid(TRACE_MIDDLE)
    for row, position in enumerate(t.positions):
        offsets = [key - position for key in t.positions]
        lines.append(f"DOT_ROW|query_position={position}|relative_offsets={_ints(offsets)}"
                     f"|values={vector(p.dot_grid[row])}")
    lines += laid(TRACE_TAIL)
    for probe in found["shapes"].value:
        offset = f"|offset={probe['offset']}" if probe["case"] == "empty_tokens" else ""
        lines.append(f"{PROBE_LINES[probe['case']]}|input_shape={fmt_shape(probe['input'])}"
                     f"{offset}|output_shape={said(probe['output'])}"
                     f"|valid={said(probe['valid'])}")
    lines += [_error_line(e) for e in evidence.errors if e.case in TRACED_ERRORS]
    return "\n".join(lines + laid(TRACE_END)) + "\n"


# --- JSON -----------------------------------------------------------------------------------

JSON_KEYS = ("qkv_version", "schema_version", "report", "chapter", "passed", "checks", "config",
             "tensors", "norms", "loss", "position_zero_identity", "common_shift_preserved",
             "invariant_tolerance", "shapes", "errors", "gradcheck", "tape_finite",
             "replay_bitwise", "history")
"""The JSON report's keys, in order (docs/reading-the-report.md explains each)."""


def facts(evidence: RopeEvidence) -> dict[str, Any]:
    """The chapter's facts (:mod:`qkvcli.render.facts`) under :data:`JSON_KEYS` after
    the head: what the JSON publishes and the text and trace say."""
    from qkvcli.render.chapters.entries import chapter_checks
    from qkvcli.render.document import gradcheck_json

    f, p, t = evidence.fixture, evidence.primary, evidence.primary.tables
    table = f.table
    given = {"query": p.query, "key": p.key}
    computed = {
        "inverse_frequencies": t.inverse_frequencies, "angles": t.angles,
        "cosines": t.cosines, "sines": t.sines, "rotated_query": p.rotated_query,
        "rotated_key": p.rotated_key, "shifted_query": p.shifted_query,
        "shifted_key": p.shifted_key, "dot_grid": p.dot_grid,
        "shifted_dot_grid": p.shifted_dot_grid,
    }
    upstream = {"upstream_query": p.upstream_query, "upstream_key": p.upstream_key}
    gradients = {"query_gradient": p.query_gradient, "key_gradient": p.key_gradient}
    return {
        "checks": chapter_checks(NAME, evidence),
        "config": section(features=table.features, pairs=table.pairs,
                          positions=table.positions, base=scalar(float(table.base)),
                          layout=table.layout, offset=f.offset, shift=f.shift,
                          shifted_offset=f.offset + f.shift, token_positions=list(t.positions)),
        "tensors": section(
            **{name: tensor(value, AXES[name], given=True) for name, value in given.items()},
            **{name: tensor(value, AXES[name]) for name, value in computed.items()},
            **{name: tensor(value, AXES[name], given=True) for name, value in upstream.items()},
            **{name: tensor(value, AXES[name]) for name, value in gradients.items()}),
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
        "errors": entries([
            {"case": e.case, "kind": KINDS[e.expected], "rejected": verdict(e.rejected),
             "facts": dict(facts_of(e)), "message": e.message} for e in evidence.errors]),
        "gradcheck": gradcheck_json(evidence.gradcheck),
        "tape_finite": verdict(p.tape_finite),
        "replay_bitwise": verdict(evidence.replay_bitwise),
        "history": dict(HISTORY),
    }


def json_document(evidence: RopeEvidence) -> dict[str, Any]:
    """The JSON report as a dictionary with :data:`JSON_KEYS` in order: the head, then
    :func:`facts` by the one walk (floats are numbers, tensors ``{"shape", "values"}``)."""
    from qkvcli.render.document import head

    return {**head("run", chapter=NAME, passed=evidence.passed), **json_of(facts(evidence))}


# --- the figure -----------------------------------------------------------------------------


def whole(table: Table) -> Table:
    """``table`` (a rich ``Table`` of ``no_wrap`` columns) measured as wide as it draws:
    each column's minimum is its widest line, so a layout chooser (``Fitted``) never
    picks a table that would cut a number to fit. Gives the same table."""
    from rich.cells import cell_len

    for column in table.columns:
        found = [line for cell in (column.header, *column.cells) for line in str(cell).splitlines()]
        column.min_width = max((cell_len(line) for line in found), default=0)
    return table


def figure(evidence: RopeEvidence, width: int, options: RichOptions | None = None) -> Any:
    """The chapter's picture as a rich renderable, in the order of :func:`trace`: the
    pairs and their frequencies (beside the checks from 120 columns), each position's
    angle turning each pair of Q (solid border) and K (dashed), the dot products by
    relative offset, then the norms, the common shift, position zero, the reverse, the
    shapes, the refused inputs and the history, and the verdict line.

    Laid out for the width rich offers when it is printed, down to 40 columns: below
    80 the angles stand once in a table of their own and Q's and K's pairs wrap between
    their two numbers; below 60 the angle, cos and sin of a pair share a cell and each
    fact stands under its label. Measured as its narrowest layout."""
    from rich.console import Group
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    from qkvcli.render.chapters.figure import verdict_text
    from qkvcli.render.rich.boxes import CARD, KEY, QUERY
    from qkvcli.render.rich.layout import Fitted, status, titled

    f, p, t = evidence.fixture, evidence.primary, evidence.primary.tables
    table = f.table
    pairs = list(enumerate(table.pair_features()))

    def number(value: Any) -> str:
        return _fixed(float(value), 4)

    def row(values: Any) -> str:
        return " ".join(number(v) for v in np.asarray(values).reshape(-1))

    def pair_text(values: Any) -> str:
        return ",".join(number(v) for v in values)

    head = Text.assemble(
        ("Chapter 29 - RoPE", "bold"),
        f"  {table.features} features in {table.pairs} {table.layout} pairs, base "
        f"{_fixed(table.base, 2)}, a table of {table.positions} positions; tokens at "
        f"positions {f.offset}-{f.offset + len(t.positions) - 1}, shifted by {f.shift}  ",
        status(evidence.passed))
    frequencies = Table(title="pairs and their frequencies", box=CARD)
    frequencies.add_column("pair")
    frequencies.add_column("features")
    frequencies.add_column("theta_i = base^(-2i/d)", justify="right")
    for pair, features in pairs:
        frequencies.add_row(str(pair), _ints(features), _fixed(float(t.inverse_frequencies[pair]), 6))

    def position_cell(r: int, pair: int) -> str:
        return str(t.positions[r]) if pair == 0 else ""

    def angle_cells(r: int, pair: int) -> list[str]:
        return [number(t.angles[r, pair]), number(t.cosines[r, pair]), number(t.sines[r, pair])]

    def turned(title: str, before: Any, after: Any, box: Any, style: str) -> Table:
        # one row per (position, pair): each pair is a point in a plane, turned by its angle
        grid = Table(title=title, box=box, border_style=style)
        for column in ("position", "pair", "angle", "cos", "sin", "before", "after"):
            grid.add_column(column, justify="right", no_wrap=True)
        for r in range(len(t.positions)):
            for pair, (a, b) in pairs:
                grid.add_row(position_cell(r, pair), str(pair), *angle_cells(r, pair),
                             pair_text(before[r, [a, b]]), pair_text(after[r, [a, b]]))
        return whole(grid)

    def angles(stacked: bool) -> Table:
        # the angles of Q and K are the same (one table of positions), so drawn once;
        # ``stacked`` puts a pair's angle, cos and sin one above the other in one cell
        grid = Table(title="each position's angle, for Q and K alike", box=CARD)
        grid.add_column("position", justify="right", no_wrap=True)
        grid.add_column("pair", justify="right", no_wrap=True)
        for name in ("angle\ncos\nsin",) if stacked else ("angle", "cos", "sin"):
            grid.add_column(name, justify="right", no_wrap=True)
        for r in range(len(t.positions)):
            for pair, _ in pairs:
                cells = angle_cells(r, pair)
                grid.add_row(position_cell(r, pair), str(pair),
                             *(("\n".join(cells),) if stacked else cells))
        return whole(grid)

    def points(title: str, before: Any, after: Any, box: Any, style: str,
               stacked: bool) -> Table:
        # ``stacked`` writes a pair's two numbers one above the other
        grid = Table(title=title, box=box, border_style=style)
        for column in ("position", "pair", "before", "after"):
            grid.add_column(column, justify="right", no_wrap=True)
        for r in range(len(t.positions)):
            for pair, (a, b) in pairs:
                cells = [before[r, [a, b]], after[r, [a, b]]]
                grid.add_row(position_cell(r, pair), str(pair), *(
                    "\n".join(number(v) for v in cell) if stacked else pair_text(cell)
                    for cell in cells))
        return whole(grid)

    def dots(stacked: bool) -> Table:
        # ``stacked`` writes each offset under its dot product, the query's position alone
        grid = Table(title="rot(Q).rot(K) by relative offset", box=CARD)
        grid.add_column("query at\nposition" if stacked else "query at", no_wrap=True)
        for position in t.positions:
            grid.add_column(f"key {position}", justify="right", no_wrap=True)
        for r, position in enumerate(t.positions):
            grid.add_row(str(position) if stacked else f"position {position}", *(
                f"{number(v)}{chr(10) if stacked else ' '}({key_position - position:+d})"
                for v, key_position in zip(p.dot_grid[r], t.positions, strict=True)))
        return whole(grid)

    q_title, k_title = "Q turned by its position (solid)", "K turned by its position (dashed)"
    q_args = (p.query, p.rotated_query, QUERY, "cyan")
    k_args = (p.key, p.rotated_key, KEY, "magenta")
    rotation = Fitted([
        Group(turned(q_title, *q_args), turned(k_title, *k_args)),
        *(Group(angles(stacked), points(q_title, *q_args, stacked),
                points(k_title, *k_args, stacked)) for stacked in (False, True)),
    ])
    facts = [
        ("norms kept", f"{fmt_bool(p.norm_preserved)}  (|q| {row(p.input_norms)})"),
        ("common shift", f"+{f.shift}: every dot product kept within "
         f"{_fixed(f.invariant_tolerance, 12)}: {fmt_bool(p.common_shift_preserved)}"),
        ("position zero", f"identity: {fmt_bool(p.position_zero_identity)}"),
        ("reverse", f"L = <rot(Q),U_Q> + <rot(K),U_K> = {_fixed(p.loss, 6)}; "
         "dQ, dK = U turned back"),
        ("shapes", " ".join(f"{probe.case} {_shape(probe.shape('rope'))}"
                            for probe in evidence.probes)),
        ("refused", " ".join(f"{e.case}{'' if e.rejected else ' (NOT refused)'}"
                             for e in evidence.errors)),
        ("history", "; ".join(f"{key.replace('_', ' ')}: {value}" for key, value in HISTORY)),
    ]
    # the labels never wrap, so a detail's longest word is measured beside them whole
    beside = Table.grid(padding=(0, 2))
    beside.add_column(no_wrap=True, min_width=max(len(label) for label, _ in facts))
    beside.add_column()
    for label, detail in facts:
        beside.add_row(label, detail)
    under = Group(*(Group(Text(label), Padding(Text(detail), (0, 0, 0, 2)))
                    for label, detail in facts))
    checks = Table(title="checks", box=CARD)
    checks.add_column("check")
    checks.add_column("result")
    for check in evidence.checks:
        checks.add_row(check.name, status(check.passed))
    cards: Any = Group(frequencies, checks)
    if width >= 120:  # side by side when both fit
        both = Table.grid(padding=(0, 1))
        both.add_row(frequencies, checks)
        cards = Fitted([both, cards])
    return Group(head, cards, rotation, Fitted([dots(False), dots(True)]), titled("what the rotation kept"),
                 Fitted([beside, under]), Text(), verdict_text(evidence.checks))
