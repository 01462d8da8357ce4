"""What chapters 27 and 28's renderers share: the course's number spellings and JSON pieces.

The course prints a zero as ``0.000000`` whatever its sign, so :func:`vec` folds ``-0.0``
into ``0.0`` before :func:`~qkvcli.render.numbers.fmt_vector` spells it (``-inf``
stays). The figure's pieces are :mod:`qkvcli.render.chapters.figure`'s (rich).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from qkvcli.render.numbers import fmt_shape, fmt_vector

if TYPE_CHECKING:
    from qkvcli.gradcheck.records import GradcheckResult


def vec(values: Any) -> str:
    """``[v,v,...]`` at six decimals, every value flat, a zero unsigned."""
    return fmt_vector(np.asarray(values, dtype=np.float64) + 0.0)


def tensor(values: Any, sep: str = " ") -> str:
    """``shape:[1,2,2] values:[...]`` (``sep="|"``: the trace's ``shape=[..]|values=[..]``)."""
    array = np.asarray(values, dtype=np.float64)
    if sep == " ":
        return f"shape:{fmt_shape(array.shape)} values:{vec(array)}"
    return f"shape={fmt_shape(array.shape)}{sep}values={vec(array)}"


def mixture_terms(terms: Any) -> str:
    """One query's terms ``A[i,j] V[j]`` (``[T,d_v]``) as ``[[..],[..]]``."""
    return "[" + ",".join(vec(row) for row in np.asarray(terms)) + "]"


def case_facts(fields: tuple[tuple[str, object], ...]) -> str:
    """A rejected case's facts as the trace writes them: ``|operand=query|rank=2``."""
    return "".join(f"|{key}={value}" for key, value in fields)


def gradcheck_summary_json(check: GradcheckResult) -> dict[str, Any]:
    """The gradient check's settings, counts, verdict and every coordinate."""
    from qkvcli.render.document import coordinate_json

    return {
        "passed": check.passed,
        "step": check.step,
        "tolerance": check.tolerance,
        "tensors": [{"tensor": t.tensor, "shape": list(t.shape), "checked": len(t.checks),
                     "passed": t.passed, "checks": [coordinate_json(c) for c in t.checks]}
                    for t in check.tensors],
    }


CHECK_TITLES = {
    "row_sums": "rows sum to 1", "scale_probe": "scale softens the focus",
    "single_token": "one token: probability 1, no Q/K gradient",
    "batch_isolation": "batch items isolated", "empty_batch": "empty batch shapes",
    "gradcheck": "gradient check", "rejected_inputs": "bad inputs rejected",
    "replay": "replays bit for bit", "prefix_invariance": "a later token leaves earlier outputs",
    "suffix_gradient": "no gradient to unseen positions",
    "masked_rows": "future keys weigh exactly 0", "tape_finite": "reverse pass finite",
}
"""How the figure's checks card names each family."""
