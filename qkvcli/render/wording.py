"""The one wording of the chapter's checks: a :class:`Check` row per verdict, for every view.

Text, JSON and rich list the same ``name``, ``passed`` and ``detail``, so they cannot
drift: all three call :func:`check_rows`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from qkvcli.evidence.records import Check
from qkvcli.render.numbers import fmt_bool

if TYPE_CHECKING:
    from qkvcli.evidence.records import Evidence
    from qkvcli.gradcheck.records import GradcheckResult


def _forward(evidence: Evidence) -> str:
    if evidence.forward_ok:
        return "three [batch,tokens,d_head] outputs, all finite"
    return "an output is not finite or has the wrong shape"


def _reverse(evidence: Evidence) -> str:
    if evidence.reverse_ok:
        return "loss and all four gradients finite and shaped like their tensors"
    return "the loss or a gradient is not finite"


def _shapes(evidence: Evidence) -> str:
    if evidence.shapes.passed:
        return "batch and token axes preserved, empty axes included"
    return "a probe produced an unexpected shape"


def _errors(evidence: Evidence) -> str:
    e = evidence.errors
    return f"{e.rejected_count} of {len(e.cases())} bad inputs rejected exactly"


def _initialization(evidence: Evidence) -> str:
    i = evidence.initialization
    return (f"seed {i.seed}: reproducible={fmt_bool(i.reproducible)} "
            f"independent={fmt_bool(i.independent)} transactional={fmt_bool(i.transactional)}")


def _independence(evidence: Evidence) -> str:
    ind = evidence.independence
    if not ind.applicable:
        return "not applicable: the input has no non-zero feature column"
    return (f"W_Q[{ind.row},0]+1: query changed={fmt_bool(ind.query_changed)}, "
            f"key unchanged={fmt_bool(ind.key_unchanged)}, "
            f"value unchanged={fmt_bool(ind.value_unchanged)}")


def _replay(evidence: Evidence) -> str:
    return "two runs agree bit for bit" if evidence.replay_bitwise else "two runs differ"


def ran_full_everywhere(result: GradcheckResult) -> bool:
    """Whether every tensor was checked at every coordinate (the chapter's own check)."""
    if not result.tensors:
        return result.mode == "full"
    return all(tensor.mode == "full" for tensor in result.tensors)


def gradcheck_detail(result: GradcheckResult) -> str:
    """``24 coordinates, step 1e-06, tolerance 1e-06``; another mode is named with its counts."""
    failed = sum(not c.passed for t in result.tensors for c in t.checks)
    if ran_full_everywhere(result):  # the chapter's wording
        head = (f"{failed} of {result.count} coordinates failed" if failed
                else f"{result.count} coordinates")
    else:  # another mode ran: name it and what it checked
        head = (f"{failed} of {result.count} checks failed ({result.summary})" if failed
                else result.summary)
    return f"{head}, step {result.step!r}, tolerance {result.tolerance!r}"


def _gradcheck(evidence: Evidence) -> str:
    return gradcheck_detail(evidence.gradcheck)


def _expect(evidence: Evidence) -> str:
    assert evidence.expect is not None  # the verdict exists only with an expect section
    return evidence.expect.detail


DETAILS: dict[str, Callable[[Evidence], str]] = {
    "forward": _forward,
    "reverse": _reverse,
    "shapes": _shapes,
    "errors": _errors,
    "initialization": _initialization,
    "independence": _independence,
    "replay": _replay,
    "gradcheck": _gradcheck,
    "expect": _expect,
}


def check_rows(evidence: Evidence) -> tuple[Check, ...]:
    """Every verdict of ``evidence`` in declared order, with its one-line detail."""
    return tuple(Check(v.name, v.passed, DETAILS[v.name](evidence)) for v in evidence.checks)


def failure_lines(evidence: Evidence) -> str:
    """The lines a *failing* text report ends with: the verdict and each failed check.

    ``verdict=FAIL failed:gradcheck`` then ``failed=gradcheck 23 of 24 coordinates ...``;
    a report saved to a file then says why without stderr. Empty when every check passed.
    """
    failed = [check for check in check_rows(evidence) if not check.passed]
    if not failed:
        return ""
    lines = [f"verdict=FAIL failed:{','.join(check.name for check in failed)}"]
    lines += [f"failed={check.name} {check.detail}" for check in failed]
    return "\n".join(lines) + "\n"
