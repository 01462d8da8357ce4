"""The one wording of the chapter's checks, and the one wording of every verdict line.

Text, JSON and rich list the same ``name``, ``passed`` and ``detail`` for the chapter's
checks, so they cannot drift: all three call :func:`check_rows`. Every verdict that no
anchor fixes (attend, gradcheck, check, the batch summary, the rich views) is worded by
:func:`verdict`: ``verdict: PASS (8 of 8 checks passed)``. The chapter's text and trace
are the course's formats and carry none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from qkvcli.core.record import Record
from qkvcli.render.numbers import fmt_bool, fmt_exact

if TYPE_CHECKING:
    from qkvcli.check.chapter26_evidence import Evidence
    from qkvcli.check.expect import ExpectResult, Mismatch
    from qkvcli.gradcheck.records import GradcheckResult


class Check(Record):
    """A judgement as every view lists it: its published name, whether it passed, and its
    one-line wording."""

    name: str
    passed: bool
    detail: str


VERDICT = "verdict: "
"""How every verdict line starts; :func:`verdict_counts` ends it."""


def verdict_counts(passed: int, total: int, *, unread: int = 0, fixtures: int = 0) -> str:
    """``(7 of 8 checks passed)``: the end of every verdict line. A batch with ``unread``
    of its ``fixtures`` unreadable says so first: ``(9 of 16 fixtures could not be read;
    55 of 57 checks passed)`` (their checks never ran, so they are in neither count)."""
    checks = f"{passed} of {total} checks passed"
    if unread:
        return f"({unread} of {fixtures} fixtures could not be read; {checks})"
    return f"({checks})"


def verdict(ok: bool, passed: int, total: int, *, unread: int = 0, fixtures: int = 0) -> str:
    """``verdict: PASS (8 of 8 checks passed)`` or ``verdict: FAIL (7 of 8 checks passed)``.

    Takes whether the whole run passed and how many of how many counted checks passed
    (and, for a batch, how many of its fixtures could not be read: :func:`verdict_counts`);
    the rich views style the same words (:data:`VERDICT`, :func:`verdict_counts`).
    """
    counts = verdict_counts(passed, total, unread=unread, fixtures=fixtures)
    return f"{VERDICT}{'PASS' if ok else 'FAIL'} {counts}"


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
    return rejected_words(evidence.errors.rejected_count, len(evidence.errors.cases()))


def _initialization(evidence: Evidence) -> str:
    i = evidence.initialization
    return (f"seed {i.seed}: reproducible={fmt_bool(i.reproducible)} "
            f"independent={fmt_bool(i.independent)} transactional={fmt_bool(i.transactional)}")


def _independence(evidence: Evidence) -> str:
    ind = evidence.independence
    other = ""
    if ind.other is not None:
        from qkvcli.render.findings import FINDING_WORDS

        words = FINDING_WORDS.get(ind.other.code, "{0}")  # call-failed: what it said
        other = f"; but {words.format(*ind.other.facts)}"
    if not ind.applicable:
        return "not applicable: the input has no non-zero feature column" + other
    return (f"W_Q[{ind.row},0]+1: query changed={fmt_bool(ind.query_changed)}, "
            f"key unchanged={fmt_bool(ind.key_unchanged)}, "
            f"value unchanged={fmt_bool(ind.value_unchanged)}" + other)


FAMILY_WORDS: dict[str, tuple[str, str]] = {
    "replay": ("two runs agree bit for bit", "two runs differ"),
}
"""The words of a family every report judges alike, passed and failed: one table, keyed
by family, for chapter 26's text, the later chapters' JSON and attend's views."""


def family_words(family: str, passed: bool) -> str:
    """``family``'s words in :data:`FAMILY_WORDS`, passed or failed."""
    held, broken = FAMILY_WORDS[family]
    return held if passed else broken


def rejected_words(rejected: int, total: int) -> str:
    """``6 of 6 bad inputs rejected exactly``: the rejected inputs in every chapter's words."""
    return f"{rejected} of {total} bad inputs rejected exactly"


def _replay(evidence: Evidence) -> str:
    return family_words("replay", evidence.replay_bitwise)


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
    return f"{head}, step {fmt_exact(result.step)}, tolerance {fmt_exact(result.tolerance)}"


def _gradcheck(evidence: Evidence) -> str:
    return gradcheck_detail(evidence.gradcheck)


SHOWN_MISMATCHES = 3


def _count(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def mismatch_words(mismatch: Mismatch) -> str:
    """``query[0,1,1]: expected 2.0, got 3.0`` (the loss has no coordinate)."""
    where = f"[{','.join(map(str, mismatch.coordinate))}]" if mismatch.coordinate else ""
    return (f"{mismatch.name}{where}: expected {fmt_exact(mismatch.expected)}, "
            f"got {fmt_exact(mismatch.actual)}")


def expect_detail(result: ExpectResult) -> str:
    """The ``expect`` check in one line: what matched, or the first few mismatches."""
    quantities = _count(len(result.names), "quantity", "quantities")
    if result.passed:
        return (f"{quantities}, {_count(result.values, 'value', 'values')} as expected "
                f"(tolerance {fmt_exact(result.tolerance)})")
    shown = "; ".join(mismatch_words(m) for m in result.mismatches[:SHOWN_MISMATCHES])
    more = len(result.mismatches) - SHOWN_MISMATCHES
    extra = f"; and {more} more" if more > 0 else ""
    verb = "differs" if len(result.mismatches) == 1 else "differ"
    return (f"{len(result.mismatches)} of {quantities} {verb}: {shown}{extra} "
            f"(tolerance {fmt_exact(result.tolerance)})")


def _expect(evidence: Evidence) -> str:
    assert evidence.expect is not None  # the verdict exists only with an expect section
    return expect_detail(evidence.expect)


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
    """The lines a text report adds after the reference's: one per failed check,
    ``failed=gradcheck 23 of 24 coordinates ...`` (a report saved to a file then says
    why without stderr); empty when every check passed. The chapter's text report never
    ends with a ``verdict:`` line, passing or not (the anchor fixes its bytes): its
    verdict is the exit status, and ``qkv run`` names the failed checks on stderr."""
    return "".join(f"failed={check.name} {check.detail}\n"
                   for check in check_rows(evidence) if not check.passed)
