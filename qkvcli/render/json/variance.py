"""``qkv variance --format json``: the sampled rows, with the version that made them."""

from __future__ import annotations

from typing import Any

from qkvcli import __version__
from qkvcli.learn.variance import VarianceResult
from qkvcli.render.json.evidence import dumps


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
