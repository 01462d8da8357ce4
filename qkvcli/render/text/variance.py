"""``qkv variance`` as an aligned text table (JSON: :mod:`qkvcli.render.json.variance`)."""

from __future__ import annotations

from qkvcli.learn.variance import VarianceResult

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
