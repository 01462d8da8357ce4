"""Chapter 29's report, RoPE: text and trace (the anchors' bytes), JSON, figure.

Pure functions of :class:`~qkvcli.chapters.ch29.RopeEvidence`; every published name and
all the chapter's wording live here. Numbers are fixed point with six decimals, a zero
never signed (the reference writes ``-0.0`` as ``0.000000``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from qkvcli.chapters.ch29 import NAME, RejectedRotaryInput, RopeEvidence
from qkvcli.render.numbers import fmt_bool, fmt_float, fmt_shape, fmt_vector

if TYPE_CHECKING:
    import numpy.typing as npt

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

TRACED_ERRORS = ("odd-width", "input-rank", "width-mismatch", "position-range",
                 "offset-overflow", "released-input")
"""The rejected inputs the trace draws (the table's own refusals of a zero width and a
bad base are in the report only)."""


def vector(values: npt.ArrayLike) -> str:
    """``[v,...]`` in fixed point, six decimals, ``-0.0`` written as ``0.000000``."""
    return fmt_vector(np.asarray(values, dtype=np.float64) + 0.0)


def tensor(values: npt.ArrayLike) -> str:
    """``shape:[..] values:[..]``."""
    array = np.asarray(values)
    return f"shape:{fmt_shape(array.shape)} values:{vector(array)}"


def _fixed(value: float, decimals: int) -> str:
    return fmt_float(value + 0.0, decimals)


def _ints(values: Any) -> str:
    return "[" + ",".join(str(int(v)) for v in values) + "]"


def _base(value: float) -> str:
    return f"{value:.0f}"


def text(evidence: RopeEvidence) -> str:
    """The chapter's text report, ``key=value`` lines ending with a newline."""
    f, p, t = evidence.fixture, evidence.primary, evidence.primary.tables
    table = f.table
    errors = " ".join(f"{ERROR_KEYS[e.case]}:{fmt_bool(e.rejected)}" for e in evidence.errors)
    shapes = " ".join(f"{probe.case}:{_shape(probe.output_shape)}"
                      for probe in evidence.probes)
    counts = {c.tensor: len(c.checks) for c in evidence.gradcheck}
    lines = [
        f"chapter={NAME}",
        f"prediction={PREDICTION}",
        f"config=features:{table.features} pairs:{table.pairs} positions:{table.positions} "
        f"base:{_base(table.base)} layout:{table.layout} offset:{f.offset}->{f.offset + f.shift}",
        f"inverse_frequencies={vector(t.inverse_frequencies)}",
        f"query={tensor(p.query)}",
        f"key={tensor(p.key)}",
        f"angles={tensor(t.angles)}",
        f"cosines={tensor(t.cosines)}",
        f"sines={tensor(t.sines)}",
        f"rotated_query={vector(p.rotated_query)}",
        f"rotated_key={vector(p.rotated_key)}",
        f"norms=input:{vector(p.input_norms)} rotated:{vector(p.rotated_norms)} "
        f"shifted:{vector(p.shifted_norms)} preserved:{fmt_bool(p.norm_preserved)}",
        f"dot_grid={tensor(p.dot_grid)}",
        f"shifted_dot_grid={tensor(p.shifted_dot_grid)} "
        f"common_shift_preserved:{fmt_bool(p.common_shift_preserved)}",
        f"position_zero_identity={fmt_bool(p.position_zero_identity)}",
        f"upstream=query:{vector(p.upstream_query)} key:{vector(p.upstream_key)} "
        f"loss:{_fixed(p.loss, 6)}",
        f"query_gradient={vector(p.query_gradient)}",
        f"key_gradient={vector(p.key_gradient)}",
        f"shapes={shapes}",
        f"errors={errors}",
        f"gradcheck=query_checks:{counts['query']} key_checks:{counts['key']} "
        f"tolerance:{_fixed(f.tolerance, 6)} passed:{fmt_bool(evidence.gradcheck_passed)}",
        "history=" + " ".join(f"{key}:{value}" for key, value in HISTORY),
        f"proof=tape_finite:{fmt_bool(p.tape_finite)} norm_preserved:{fmt_bool(p.norm_preserved)} "
        f"relative_dot:{fmt_bool(p.common_shift_preserved)} "
        f"replay:{'bitwise' if evidence.replay_bitwise else 'mismatch'}",
        f"next={NEXT}",
    ]
    return "\n".join(lines) + "\n"


def _shape(shape: tuple[int, ...] | None) -> str:
    return "rejected" if shape is None else fmt_shape(shape)


def _error_line(error: RejectedRotaryInput) -> str:
    facts = "".join(f"|{key}={value}" for key, value in error.facts)
    return (f"ERROR|case={error.case}|kind={error.expected}{facts}"
            f"|rejected={fmt_bool(error.rejected)}")


PROBE_LINES = {"rank3": "RANK3", "rank4": "RANK4", "empty_leading": "EMPTY_LEADING",
               "empty_tokens": "EMPTY_TOKENS"}


def trace(evidence: RopeEvidence) -> str:
    """The chapter's diagram trace, ``KIND|key=value`` lines ending with a newline: what
    the figure draws, piece by piece."""
    f, p, t = evidence.fixture, evidence.primary, evidence.primary.tables
    table = f.table
    lines = [
        f"META|input_shape={fmt_shape(p.query.shape)}|table_shape={fmt_shape(t.cosines.shape)}"
        f"|dot_shape={fmt_shape(p.dot_grid.shape)}|features={table.features}|pairs={table.pairs}"
        f"|positions={table.positions}|base={_fixed(table.base, 6)}|layout={table.layout}"
        "|rotation=counterclockwise|token_axis=penultimate|feature_axis=final",
        f"QUERY|shape={fmt_shape(p.query.shape)}|values={vector(p.query)}",
        f"KEY|shape={fmt_shape(p.key.shape)}|values={vector(p.key)}",
    ]
    for pair, features in enumerate(table.pair_features()):
        lines.append(f"FREQUENCY|pair={pair}|features={_ints(features)}"
                     f"|theta={vector(t.inverse_frequencies[pair:pair + 1])}")
    for row, position in enumerate(t.positions):
        lines.append(
            f"POSITION|position={position}|angles={vector(t.angles[row])}"
            f"|cosines={vector(t.cosines[row])}|sines={vector(t.sines[row])}"
            f"|query_before={vector(p.query[row])}|query_after={vector(p.rotated_query[row])}")
    lines += [
        f"ROTATED_QUERY|shape={fmt_shape(p.rotated_query.shape)}|values={vector(p.rotated_query)}",
        f"ROTATED_KEY|shape={fmt_shape(p.rotated_key.shape)}|values={vector(p.rotated_key)}",
        f"NORM|input={vector(p.input_norms)}|rotated={vector(p.rotated_norms)}"
        f"|shifted={vector(p.shifted_norms)}|preserved={fmt_bool(p.norm_preserved)}",
    ]
    for row, position in enumerate(t.positions):
        offsets = [key - position for key in t.positions]
        lines.append(f"DOT_ROW|query_position={position}|relative_offsets={_ints(offsets)}"
                     f"|values={vector(p.dot_grid[row])}")
    shifted = [position + f.shift for position in t.positions]
    lines += [
        f"COMMON_SHIFT|before_positions={_ints(t.positions)}|after_positions={_ints(shifted)}"
        f"|before_grid={vector(p.dot_grid)}|after_grid={vector(p.shifted_dot_grid)}"
        f"|tolerance={_fixed(f.invariant_tolerance, 12)}"
        f"|preserved={fmt_bool(p.common_shift_preserved)}",
        f"BACKWARD|query_seed={vector(p.upstream_query)}|key_seed={vector(p.upstream_key)}"
        f"|loss={_fixed(p.loss, 6)}|query_gradient={vector(p.query_gradient)}"
        f"|key_gradient={vector(p.key_gradient)}",
    ]
    for probe in evidence.probes:
        offset = f"|offset={probe.offset}" if probe.case == "empty_tokens" else ""
        lines.append(f"{PROBE_LINES[probe.case]}|input_shape={fmt_shape(probe.input_shape)}"
                     f"{offset}|output_shape={_shape(probe.output_shape)}"
                     f"|valid={fmt_bool(probe.valid)}")
    lines += [_error_line(e) for e in evidence.errors if e.case in TRACED_ERRORS]
    counts = {c.tensor: len(c.checks) for c in evidence.gradcheck}
    lines += [
        "HISTORY|" + "|".join(f"{key}={value}" for key, value in HISTORY),
        f"PROOF|position_zero={'bitwise-identity' if p.position_zero_identity else 'changed'}"
        f"|norms={'preserved' if p.norm_preserved else 'changed'}"
        f"|relative_dot={'common-shift-preserved' if p.common_shift_preserved else 'mismatch'}"
        f"|tape_finite={fmt_bool(p.tape_finite)}|query_checks={counts['query']}"
        f"|key_checks={counts['key']}|gradient_tolerance={_fixed(f.tolerance, 6)}"
        f"|gradcheck={fmt_bool(evidence.gradcheck_passed)}"
        f"|replay={'bitwise' if evidence.replay_bitwise else 'mismatch'}",
        f"NEXT|chapter={NEXT_CHAPTER}",
    ]
    return "\n".join(lines) + "\n"
