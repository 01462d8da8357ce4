"""``qkv variance`` as an aligned text table or JSON."""

from __future__ import annotations

from typing import Any

from qkvcli.learn.variance import VarianceResult
from qkvcli.render.json.evidence import dumps

HEADER = ("d_k", "var(q.k)", "std(q.k)", "var(q.k)/d_k", "var(q.k/sqrt(d_k))", "std_err")
EXPLAIN = (
    "q, k: independent standard normals (SplitMix64 + Box-Muller); var(q.k) grows like d_k, "
    "dividing by sqrt(d_k) keeps it near 1; std_err: standard error of the ratio, "
    "sqrt((2 + 6/d_k)/samples)"
)


def variance_cells(result: VarianceResult) -> list[tuple[str, ...]]:
    """The table's cells, row by row (shared by the text and rich views)."""
    return [
        (str(r.d_k), f"{r.variance:.4f}", f"{r.std:.4f}", f"{r.ratio:.4f}",
         f"{r.scaled_variance:.4f}", f"{r.std_error:.4f}")
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
    return {
        "kind": "variance",
        "seed": result.seed,
        "samples": result.samples,
        "rows": [
            {"d_k": r.d_k, "variance": r.variance, "std": r.std, "ratio": r.ratio,
             "scaled_variance": r.scaled_variance, "std_error": r.std_error}
            for r in result.rows
        ],
    }


def render_variance_json(result: VarianceResult) -> str:
    return dumps(variance_json(result))
