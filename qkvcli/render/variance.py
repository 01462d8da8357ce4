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
from qkvcli.render.facts import columns, entries, json_of, scalar
from qkvcli.render.numbers import fmt_float, fmt_signed
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


def facts(result: VarianceResult) -> dict[str, Any]:
    """The sampled rows as facts: ``seed``, ``samples`` and each row's ``d_k``, variances,
    standard deviation, ``ratio`` and ``scaled_variance`` (equal by ``var(x/c) =
    var(x)/c^2``, computed both ways), standard error and ``z``, the ratio's distance from
    1 in standard errors."""
    return {"seed": result.seed, "samples": result.samples, "rows": entries([
        {"d_k": r.d_k, **{name: scalar(getattr(r, name)) for name in (
            "variance", "std", "ratio", "scaled_variance", "std_error", "z")}}
        for r in result.rows])}


def variance_cells(result: VarianceResult, precision: int = PRECISION) -> list[tuple[str, ...]]:
    """The table's cells, row by row: ``d_k``, then the variances, the standard deviation
    and the standard error to ``precision`` decimals, then ``z`` to two, signed."""
    return [(str(row["d_k"]), *(fmt_float(row[name].value, precision) for name in (
        "variance", "std", "scaled_variance", "std_error")), fmt_signed(row["z"].value, 2))
            for row in facts(result)["rows"].value]


def render_variance_text(result: VarianceResult, precision: int = PRECISION) -> str:
    """Right-aligned columns, then one line of settings and one of explanation.

    Takes the result and ``precision``, the decimals of the table's numbers (default
    :data:`PRECISION`, 4; ``z`` always has two); gives the text ending in a newline.
    """
    lines = columns([HEADER, *variance_cells(result, precision)], range(len(HEADER)))
    return "\n".join([*lines, "", f"samples={result.samples} per row, seed={result.seed}",
                      EXPLAIN]) + "\n"


def pieces(result: VarianceResult, fmt: str, asked: Asked) -> Iterator[str]:
    """The table as ``text`` (at ``asked.precision``, else :data:`PRECISION`) or ``json``:
    the head (``report``: ``variance``), then :func:`facts`."""
    if fmt == "json":
        return iter([dumps(head("variance", **json_of(facts(result))))])
    return iter([render_variance_text(
        result, PRECISION if asked.precision is None else asked.precision)])
