"""``qkv variance``: the sampled rows as an aligned text table, and as JSON.

The text is a right-aligned table, a line of settings and one of explanation (the rich
view, :mod:`qkvcli.render.rich.variance`, shares its cells' wording); the JSON holds
the rows under the one head (:func:`~qkvcli.render.document.head`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from qkvcli.learn.variance import VarianceResult
from qkvcli.render.document import dumps, head
from qkvcli.render.views import Asked

HEADER = ("d_k", "var(q.k)", "std(q.k)", "var(q.k/sqrt(d_k))", "std_err", "z")
EXPLAIN = (
    "q, k: independent standard normals (SplitMix64 + Box-Muller); var(q.k) grows like d_k, "
    "dividing by sqrt(d_k) keeps it near 1 (var(q.k/sqrt(d_k)) = var(q.k)/d_k); std_err: "
    "its standard error, sqrt((2 + 6/d_k)/samples); z = (var(q.k/sqrt(d_k)) - 1)/std_err: "
    "within about +-2 the sample agrees with 1"
)


PRECISION = 4
"""Decimals of the variances and the standard error unless the caller asks for others
(four show a variance near 1 to the sampling error's scale); ``z`` keeps two."""


def variance_cells(result: VarianceResult, precision: int = PRECISION) -> list[tuple[str, ...]]:
    """The table's cells, row by row: ``d_k``, then the variances, the standard deviation
    and the standard error to ``precision`` decimals, then ``z`` to two."""
    p = precision
    return [
        (str(r.d_k), f"{r.variance:.{p}f}", f"{r.std:.{p}f}", f"{r.scaled_variance:.{p}f}",
         f"{r.std_error:.{p}f}", f"{r.z:+.2f}")
        for r in result.rows
    ]


def render_variance_text(result: VarianceResult, precision: int = PRECISION) -> str:
    """Right-aligned columns, then one line of settings and one of explanation.

    Takes the result and ``precision``, the decimals of the table's numbers (default
    :data:`PRECISION`, 4; ``z`` always has two); gives the text ending in a newline.
    """
    rows = [HEADER, *variance_cells(result, precision)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    lines = ["  ".join(cell.rjust(widths[i]) for i, cell in enumerate(row)) for row in rows]
    lines.append("")
    lines.append(f"samples={result.samples} per row, seed={result.seed}")
    lines.append(EXPLAIN)
    return "\n".join(lines) + "\n"


def variance_json(result: VarianceResult) -> dict[str, Any]:
    """The head (``report``: ``variance``), then ``seed``, ``samples`` and ``rows``; each
    row keeps ``ratio`` and ``scaled_variance`` (equal by ``var(x/c) = var(x)/c^2``,
    computed both ways) and adds ``z``, the ratio's distance from 1 in standard errors."""
    return head(
        "variance",
        seed=result.seed,
        samples=result.samples,
        rows=[
            {"d_k": r.d_k, "variance": r.variance, "std": r.std, "ratio": r.ratio,
             "scaled_variance": r.scaled_variance, "std_error": r.std_error, "z": r.z}
            for r in result.rows
        ],
    )


def render_variance_json(result: VarianceResult) -> str:
    """:func:`variance_json` as indented JSON text ending in a newline."""
    return dumps(variance_json(result))


def pieces(result: VarianceResult, fmt: str, asked: Asked) -> Iterator[str]:
    """The table as ``text`` (at ``asked.precision``, else :data:`PRECISION`) or ``json``."""
    if fmt == "json":
        return iter([render_variance_json(result)])
    return iter([render_variance_text(
        result, PRECISION if asked.precision is None else asked.precision)])
