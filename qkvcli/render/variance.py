"""``qkv variance``: text and JSON.

``qkv variance`` as an aligned text table (JSON: :mod:`qkvcli.render.variance`).

``qkv variance --format json``: the sampled rows, with the version that made them.
"""

from __future__ import annotations

from typing import Any

from qkvcli import __version__
from qkvcli.learn.variance import VarianceResult
from qkvcli.render.report import dumps

HEADER = ("d_k", "var(q.k)", "std(q.k)", "var(q.k/sqrt(d_k))", "std_err", "z")
EXPLAIN = (
    "q, k: independent standard normals (SplitMix64 + Box-Muller); var(q.k) grows like d_k, "
    "dividing by sqrt(d_k) keeps it near 1 (var(q.k/sqrt(d_k)) = var(q.k)/d_k); std_err: "
    "its standard error, sqrt((2 + 6/d_k)/samples); z = (var(q.k/sqrt(d_k)) - 1)/std_err: "
    "within about +-2 the sample agrees with 1"
)


def variance_cells(result: VarianceResult) -> list[tuple[str, ...]]:
    """The table's cells, row by row (shared by the text and rich views)."""
    return [
        (str(r.d_k), f"{r.variance:.4f}", f"{r.std:.4f}", f"{r.scaled_variance:.4f}",
         f"{r.std_error:.4f}", f"{r.z:+.2f}")
        for r in result.rows
    ]


def render_variance_text(result: VarianceResult) -> str:
    """Right-aligned columns, then one line of settings and one of explanation."""
    rows = [HEADER, *variance_cells(result)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    lines = ["  ".join(cell.rjust(widths[i]) for i, cell in enumerate(row)) for row in rows]
    lines.append("")
    lines.append(f"samples={result.samples} per row, seed={result.seed}")
    lines.append(EXPLAIN)
    return "\n".join(lines) + "\n"


def variance_json(result: VarianceResult) -> dict[str, Any]:
    """``{"qkv_version", "kind", "seed", "samples", "rows"}``; each row keeps ``ratio`` and
    ``scaled_variance`` (equal by ``var(x/c) = var(x)/c^2``, computed both ways) and adds
    ``z``, the ratio's distance from 1 in standard errors."""
    return {
        "qkv_version": __version__,
        "kind": "variance",
        "seed": result.seed,
        "samples": result.samples,
        "rows": [
            {"d_k": r.d_k, "variance": r.variance, "std": r.std, "ratio": r.ratio,
             "scaled_variance": r.scaled_variance, "std_error": r.std_error, "z": r.z}
            for r in result.rows
        ],
    }


def render_variance_json(result: VarianceResult) -> str:
    """:func:`variance_json` as indented JSON text ending in a newline."""
    return dumps(variance_json(result))
