"""The one wording of every judged family, and the one wording of every verdict line.

:data:`WORDS` is the one table of a family's words, keyed by the published family
(:mod:`qkvcli.render.names`): what it says when the family held and when it broke, in
every report that judges it, each a function of the judgement
(:class:`~qkvcli.core.results.FamilyCheck`) and the :class:`Voice` speaking (the report,
the operation judged, the evidence measured). Run's rows (:func:`check_rows`), the
chapters' entries, ``qkv check``'s passing families and attend's checks all read it
through :func:`said`, so text, JSON and rich list the same ``detail``. ``qkv check`` says
a broken family by its finding instead (:mod:`qkvcli.render.check`), each finding code
in the words :data:`FINDING_WORDS` gives it.

Every verdict that no anchor fixes (attend, gradcheck, check, the batch summary, the rich
views) is worded by :func:`verdict`: ``verdict: PASS (8 of 8 checks passed)``. The
chapter's text and trace are the course's formats and carry none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias

from qkvcli.core.record import Record
from qkvcli.render.names import ATTEND, CH37, CHECK, RUN, published
from qkvcli.render.numbers import fmt_bool, fmt_exact, fmt_general

if TYPE_CHECKING:
    from qkvcli.check.chapter26_evidence import Evidence
    from qkvcli.check.expect import ExpectResult, Mismatch
    from qkvcli.core.results import FamilyCheck
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


# --- who speaks: the report, the operation it judged, and the operation's nouns ---------


class KindWords(Record):
    """How ``qkv check``'s shared families speak of one operation: its forward and
    backward, what they give, the modes each fixture runs in, what its probes are, what
    its bad requests and its calls are called."""

    forward: str
    backward: str = ""
    results: str = ""
    gradients: str = ""
    modes: str = ""
    probes: str = "an empty batch, no tokens and one token"
    requests: str = ""
    calls: str = ""


KIND_WORDS = {
    "projections": KindWords("forward", "backward", "query, key and value",
                             "grad_input and the three weight gradients",
                             probes="empty batch and token axes", calls="calls"),
    "head": KindWords("head_forward", "head_backward", "scores, weights and output",
                      "grad_input and the three weight gradients", ", causal and not",
                      requests="head", calls="head calls"),
    "rope": KindWords("rope", "rope_reverse", requests="RoPE", calls="RoPE calls"),
    "multi-head": KindWords("mha_forward", "mha_backward", "weights, merged and output",
                            "grad_input and the four weight gradients",
                            ", with and without the mask and RoPE", requests="multi-head",
                            calls="multi-head calls"),
    "kv-cache": KindWords("cache_steps", probes="", requests="cache", calls="cache_steps calls"),
}
"""The nouns of each operation ``qkv check`` judges, by its published operation."""
ROTATION = "each adjacent pair by (offset + t) base^(-2i/d)"


class Voice(Record):
    """Who says a family's words: the ``report`` (``run``, a chapter's id, ``attend``,
    ``check``), the published ``operation`` it judged, and the ``evidence`` it measured
    (run's, a chapter's, attend's). ``qkv check``'s facts are the judgement's own: its
    evidence is how its clauses are said (:func:`qkvcli.render.check.say`)."""

    report: str
    operation: str
    evidence: Any = None

    @property
    def nouns(self) -> KindWords:
        """The operation's nouns (:data:`KIND_WORDS`)."""
        return KIND_WORDS[self.operation]


Word: TypeAlias = "str | Callable[[FamilyCheck, Voice], str]"
"""A family's words: fixed, or a function of the judgement and the voice."""
Pair: TypeAlias = "Word | tuple[Word, Word]"
"""Words when the family held and when it broke (one word: the same both ways)."""
CHAPTERS = "chapters"
ENGINE = "engine"
""":data:`WORDS`' keys beside the reports': any chapter's, and any report's but
``qkv check``'s (run, the chapters, attend: qkv's engine or a real layer)."""


FINDING_WORDS = {
    "changed-argument": "{0} changed its argument {1} from {2} to {3}",
    "moved": "changing {0} changed {1} from {2} to {3}",
    "reshaped": "changing {0} changed the shape of {1}",
    "unmoved": "changing {0} left {1} unchanged",
    "replay-differs": "second {0} differs: {1} was {2}, then {3}",
    "replay-failed": "second {0} failed: {1}",
    "probe-failed": "{0} on the {1} {2} failed: {3}",
    "probe-shape": "{0} {1}: {2} has shape {3}, expected {4}",
    "not-identity": ("turned as if at position 0, {0} = {1}, expected the input's {2}: position 0 is "
                     "not the identity"),
    "prefix-moved": ("changing the last token's input changed {0} from {1} to {2}: an earlier "
                     "position sees a later key"),
    "last-unmoved": "changing the last token's input left {0}[:,{1}] unchanged",
    "one-token": "with one token, {0} = {1}, expected exactly {2}",
    "shift-moved": ("moving every position by {0} changed {1} from {2} to {3}: the rotated "
                    "tokens' dot products depend on more than their distance"),
    "step-differs": ("the cached step at position {0} gives {1} = {2}, the causal pass over its "
                     "prefix {3}"),
    "cache-differs": "the cache holds {0} = {1}, the causal pass over the prefix {2}",
    "length-differs": "after the step at position {0} the cache holds {1} positions, expected {2}",
    "cache-slip": "{0}: {1}",
    "refusal-failed": ("the run with {0} failed instead of refusing the step and going on: "
                       "{1}"),
    "refusal-differs": "the run with {0} gives {1} = {2}, a cache that refuses the step {3}",
}
"""The words of each finding code of :data:`~qkvcli.check.result.FINDINGS`, from its
facts: ``qkv check``'s findings and chapter 26's independence (a cross pair it found)."""


# --- the words that take more than a line ------------------------------------------------


def _fixtures(count: int) -> str:
    return f"{count} fixture" if count == 1 else f"{count} fixtures"


def _both(check: FamilyCheck, voice: Voice) -> str:
    """The operations a family called: the forward, and the backward when offered."""
    words = voice.nouns
    return f"{words.forward} and {words.backward}" if check.backward else words.forward


def _agree(results: str, turn: str) -> Callable[[FamilyCheck, Voice], str]:
    """``qkv check``'s forward or reverse: ``results`` agree with qkv (RoPE: it ``turn``s)."""
    def word(c: FamilyCheck, v: Voice) -> str:
        within, on = fmt_exact(c.tolerance), _fixtures(c.fixtures)
        if v.operation == "rope":
            return f"{turn} {ROTATION}, within {within} of qkv, on {on}"
        return f"{getattr(v.nouns, results)} agree with qkv within {within} on {on}{v.nouns.modes}"
    return word


def _check_errors(c: FamilyCheck, v: Voice) -> str:
    on = _fixtures(c.fixtures)
    if c.name == "cache-refusals":
        return (f"a step of two tokens, a step into a full cache and a step whose score "
                f"overflows are refused and leave the cache as it was, on {on}")
    if not v.nouns.requests:
        backward = "; 4 bad backward requests" if c.backward else ""
        return f"4 bad forward requests{backward} rejected on {on}"
    where = f" on {on}" if c.fixtures > 1 or v.nouns.requests == "head" else ""
    return f"{c.calls} bad {v.nouns.requests} requests rejected{where}"


def rejected_words(rejected: int, total: int) -> str:
    """``6 of 6 bad inputs rejected exactly``: the rejected inputs in every chapter's words."""
    return f"{rejected} of {total} bad inputs rejected exactly"


def gradcheck_detail(result: GradcheckResult) -> str:
    """``24 coordinates, step 1e-06, tolerance 1e-06``; another mode is named with its counts."""
    failed = sum(not c.passed for t in result.tensors for c in t.checks)
    modes = {tensor.mode for tensor in result.tensors} or {result.mode}
    if modes == {"full"}:  # every coordinate of every tensor: the chapter's wording
        head = (f"{failed} of {result.count} coordinates failed" if failed
                else f"{result.count} coordinates")
    else:  # another mode ran: name it and what it checked
        head = (f"{failed} of {result.count} checks failed ({result.summary})" if failed
                else result.summary)
    return f"{head}, step {fmt_exact(result.step)}, tolerance {fmt_exact(result.tolerance)}"


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


def _initialization(c: FamilyCheck, v: Voice) -> str:
    i = v.evidence.initialization
    return (f"seed {i.seed}: reproducible={fmt_bool(i.reproducible)} "
            f"independent={fmt_bool(i.independent)} transactional={fmt_bool(i.transactional)}")


def _independence(c: FamilyCheck, v: Voice) -> str:
    ind = v.evidence.independence
    other = ""
    if ind.other is not None:
        words = FINDING_WORDS.get(ind.other.code, "{0}")  # call-failed: what it said
        other = f"; but {words.format(*ind.other.facts)}"
    if not ind.applicable:
        return "not applicable: the input has no non-zero feature column" + other
    return (f"W_Q[{ind.row},0]+1: query changed={fmt_bool(ind.query_changed)}, "
            f"key unchanged={fmt_bool(ind.key_unchanged)}, "
            f"value unchanged={fmt_bool(ind.value_unchanged)}" + other)


def _layer(v: Voice) -> bool:
    """Whether attend judged a multi-head layer (per head), not one head."""
    return v.evidence.config.heads is not None


def _attend_rows(c: FamilyCheck, v: Voice) -> str:
    a, failing = v.evidence.attention, [str(h.head) for h in v.evidence.heads if not h.passed]
    per_head = f"{len(v.evidence.heads)} heads" + (f", failing: {','.join(failing)}"
                                                    if failing else "")
    return (f"{f'per head ({per_head}): ' if _layer(v) else ''}min weight "
            f"{fmt_general(a.min_attention, 6)} >= 0; max |row sum - 1| "
            f"{fmt_general(a.max_row_deviation)} <= {fmt_general(a.tolerance)} (4 T eps)")


def _attend_mask(c: FamilyCheck, v: Voice) -> str:
    m = v.evidence.mask
    if not m.applicable:
        return "not applicable: no causal mask"
    return (f"causal{', per head' if _layer(v) else ''}: largest weight above the diagonal "
            f"{fmt_exact(m.max_masked_attention)} (must be exactly 0)")


def _attend_hull(c: FamilyCheck, v: Voice) -> str:
    h = v.evidence.hull
    residual = f"{fmt_general(h.barycentric_residual)} <= {fmt_general(h.tolerance)}"
    box = f"{h.box_violations} coordinates outside [min_j v_j, max_j v_j]"
    if _layer(v):
        return (f"per head: O_h = sum_j A_ij v_j recomputed term by term (largest residual "
                f"{residual}); box test: {box}")
    return (f"O = sum_j A_ij v_j recomputed term by term (residual {residual}); with the "
            "weights checked above this places each output in the convex hull of the value "
            f"rows; box test (necessary only): {box}")


def _decode_words(v: Voice) -> str:
    """attend's ``cached-steps`` in the decode view's words (imported when said: the
    decode renderer loads attend's records, which no other report needs)."""
    from qkvcli.render.decode import decode_details

    words: str = decode_details(v.evidence.decode)["decode"][0]
    return words


def _relative_dot(check: FamilyCheck) -> str:
    from qkvcli.check.rotary import SHIFT

    return (f"moving every position by {SHIFT} keeps every dot product of the rotated "
            f"tokens within {fmt_exact(check.tolerance)}, on {_fixtures(check.fixtures)}")


def _claim(c: FamilyCheck, v: Voice) -> str:
    """A chapter's family in the words its figure uses (the names table's ``claim``)."""
    return published(v.report, c.name).claim


FAMILY_WORDS: dict[str, tuple[str, str]] = {
    "replay": ("two runs agree bit for bit", "two runs differ")}
"""The words of a family every report but ``qkv check`` says alike, held and broken."""


def family_words(family: str, passed: bool) -> str:
    """``family``'s words in :data:`FAMILY_WORDS`, passed or failed."""
    held, broken = FAMILY_WORDS[family]
    return held if passed else broken


# --- the one table ------------------------------------------------------------------------

WORDS: dict[str, dict[str, Pair]] = {
    "forward": {
        CHECK: _agree("results", "turns"),
        RUN: ("three [batch,tokens,d_head] outputs, all finite",
              "an output is not finite or has the wrong shape"),
        ATTEND: (lambda c, v: (f"weights [B,H,T,T], output [B,T,E_out={v.evidence.config.e_out}]"
                               if _layer(v) else "scores [B,T,T], output [B,T,d_v]") + ", all finite",
                 "a forward tensor is not finite or misshapen")},
    "reverse": {
        CHECK: _agree("gradients", "turns back"),
        RUN: ("loss and all four gradients finite and shaped like their tensors",
              "the loss or a gradient is not finite"),
        ATTEND: (lambda c, v: "every gradient finite" if _layer(v) else
                 "dA, dZ, dS, dQ, dK, dV, dX and parameter gradients finite and shaped",
                 lambda c, v: "a gradient is not finite" + ("" if _layer(v) else " or misshapen"))},
    "shapes": {
        CHECK: lambda c, v: (f"{_both(c, v)} keep" if c.backward else f"{v.nouns.forward} keeps")
        + f" {v.nouns.probes} on {_fixtures(c.fixtures)}",
        RUN: ("batch and token axes preserved, empty axes included",
              "a probe produced an unexpected shape"),
        ATTEND: ("empty batch and empty token axes run forward and reverse",
                 "an empty-axis probe gave an unexpected shape")},
    "rejected-inputs": {
        CHECK: _check_errors,
        RUN: lambda c, v: rejected_words(v.evidence.errors.rejected_count,
                                         len(v.evidence.errors.cases())),
        CH37: lambda c, v: (f"{sum(e.rejected for e in v.evidence.errors)} of "
                            f"{len(v.evidence.errors)} bad steps refused exactly, the cache unchanged"),
        CHAPTERS: lambda c, v: rejected_words(sum(e.rejected for e in v.evidence.errors),
                                              len(v.evidence.errors))},
    "replay": {
        CHECK: lambda c, v: f"two calls of {_both(c, v)} agree bit for bit on {_fixtures(c.fixtures)}",
        CH37: ("a reset cache given the same tokens agrees bit for bit",
               "the replay after a reset differs"),
        ENGINE: FAMILY_WORDS["replay"]},
    "purity": {CHECK: lambda c, v: f"arguments unchanged after all {c.calls} {v.nouns.calls}"},
    "gradcheck": {
        CHECK: lambda c, v: (f"{c.coordinates} coordinates on {_fixtures(c.fixtures)}{v.nouns.modes}"
                             + (f"; worst {v.evidence(c.worst)}" if c.worst is not None else "")),
        ATTEND: lambda c, v: (f"{'whole layer: ' if _layer(v) else ''}"
                              f"{gradcheck_detail(v.evidence.gradcheck)}"),
        ENGINE: lambda c, v: gradcheck_detail(v.evidence.gradcheck)},
    "prefix": {
        CHECK: lambda c, v: ("changing the last token's input leaves every earlier output bit "
                             f"for bit, causal, on {_fixtures(c.fixtures)} with two tokens or more"),
        ATTEND: ("the last token's input changed: every earlier output bit for bit",
                 "the last token's input changed an earlier output: a later key is seen")},
    "single-token": {
        CHECK: lambda c, v: ("one token: every weight exactly 1"
                             f"{' and no gradient to W_Q or W_K' if c.backward else ''}, on "
                             f"{_fixtures(c.fixtures)}"),
        ATTEND: ("one token: every weight exactly 1, no gradient to the query's or the key's "
                 "parameters", "one token: a weight is not exactly 1, or the query's or the "
                 "key's parameters get a gradient")},
    "independence": {
        CHECK: lambda c, v: ("changing each of W_Q, W_K, W_V changes only its own output"
                             + ("; changing each upstream gradient changes only its own weight "
                                "gradient" if c.backward else
                                " (weight gradients not checked: no backward)")
                             + f" ({_fixtures(c.fixtures)})"),
        RUN: _independence},
    "initialization": {RUN: _initialization},
    "expect": {RUN: lambda c, v: expect_detail(v.evidence.expect)},
    "scaling": {
        CHECK: lambda c, v: f"scores are Q K^T / sqrt(d_k) on {_fixtures(c.fixtures)} with d_k >= 2",
        ATTEND: ("two orthogonal unit tokens: the score scale softens a peaked row exactly when "
                 "it shrinks the scores",
                 "two orthogonal unit tokens: the score scale and the focus disagree")},
    "softmax": {CHECK: lambda c, v: (
        f"rows of weights are >= 0 and sum to 1 on {_fixtures(c.fixtures)}; "
        + ("large scores do not overflow" if c.calls else "large scores not probed "
           "(the non-causal head is wrong already, see head-forward)"))},
    "mask": {CHECK: lambda c, v: (
        "causal=true hides exactly the later positions, after the scores and before the "
        f"softmax; causal=false hides none ({_fixtures(c.fixtures)} with two tokens or more)")},
    "row-sums": {ATTEND: _attend_rows},
    "future-zero": {ATTEND: _attend_mask},
    "hull": {ATTEND: _attend_hull},
    "position-zero": {
        CHECK: lambda c, v: ("every token turned as if at position 0 is the input's own, bit "
                             f"for bit, on {_fixtures(c.fixtures)}"),
        ATTEND: ("queries and keys turned from position 0 keep their first token exactly "
                 "(times a RoPE scaling's attention factor)",
                 "RoPE at position 0 changed the first token: it is not the identity")},
    "relative-dot": {CHECK: lambda c, v: _relative_dot(c)},
    "head-isolation": {
        CHECK: lambda c, v: ("changing one head's W_Q or W_V columns changes only that head's "
                             f"weights or merged columns ({_fixtures(c.fixtures)})"),
        ATTEND: ("one head's W_Q or one K/V head's W_V columns changed: no other head's weights "
                 "or merged columns move (first 16 tokens)",
                 "changing one head's columns moved another head's weights or merged columns")},
    "cached-step": {
        CHECK: lambda c, v: (
            "each step is the last row of the causal pass over its prefix within "
            f"{fmt_exact(c.tolerance)}, the cache grows by one a step and holds the turned keys "
            f"and unturned values, on {_fixtures(c.fixtures)}"),
        ATTEND: lambda c, v: _decode_words(v)},
    "protocol": {CHECK: lambda c, v: c.finding},  # the conversation's own words
}
"""Every family's words, by published family, then by who says them: ``qkv check``
(held only: a broken family is said by its finding), ``run``, ``attend``, one chapter,
any chapter (:data:`CHAPTERS`) or any report but ``check`` (:data:`ENGINE`). A chapter's
family with no words here is said by its claim (:func:`_claim`): the same words held
or broken."""


def said(report: str, evidence: Any, check: FamilyCheck) -> str:
    """``check``'s one line in ``report`` (:data:`WORDS`): its family's words when it held
    or when it broke, said of ``evidence`` (:class:`Voice`). Raises ``KeyError`` for a
    check the names table or :data:`WORDS` lacks."""
    found = published(report, check.name)
    words = WORDS.get(found.family, {})
    chapter = report not in (RUN, ATTEND, CHECK)
    speakers = (report, CHAPTERS if chapter else report, ENGINE if report != CHECK else report)
    pair = next((words[key] for key in speakers if key in words), _claim if chapter else None)
    if pair is None:
        raise KeyError(f"no words for {report}'s {check.name} ({found.family})")
    word = pair[0 if check.passed else 1] if isinstance(pair, tuple) else pair
    return word if isinstance(word, str) else word(check, Voice(report, found.operation, evidence))


def check_rows(evidence: Evidence) -> tuple[Check, ...]:
    """Every verdict of chapter 26's ``evidence`` in declared order, with its one line."""
    return tuple(Check(v.name, v.passed, said(RUN, evidence, v)) for v in evidence.checks)


def failure_lines(evidence: Evidence) -> str:
    """The lines a text report adds after the reference's: one per failed check,
    ``failed=gradcheck 23 of 24 coordinates ...`` (a report saved to a file then says
    why without stderr); empty when every check passed. The chapter's text report never
    ends with a ``verdict:`` line, passing or not (the anchor fixes its bytes): its
    verdict is the exit status, and ``qkv run`` names the failed checks on stderr."""
    return "".join(f"failed={check.name} {check.detail}\n"
                   for check in check_rows(evidence) if not check.passed)
