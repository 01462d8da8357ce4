"""``qkv check``: the judgements in words, as plain text and as JSON.

The text is one line per family (PASS, FAIL or N/A), the failures, each slip they name
(:func:`named_slips`, so the last lines of a failing report say what went wrong), then
the verdict
(:func:`~qkvcli.render.wording.verdict`). The JSON is the one head
(:func:`~qkvcli.render.document.head`, ``report``: ``check``), then :func:`facts`
(``implementation``, ``fixtures``, ``passed``, ``checks``, ``failures``, ``slips``,
``worst``, and ``"stderr"`` for a ``--command`` program), which the text, the rich view
and the page all read.
Each check is the one entry (``{"name", "family", "operation", "passed", "outcome",
"detail"}``, :func:`~qkvcli.render.document.check_entry`): ``outcome`` ``no-backward``
or ``command`` marks a family that does not apply, with ``passed`` true when it does not
count (purity with ``--command``) and false when it fails the check (reverse and
gradcheck without backward); ``not-run`` a family that could not run (``SKIP``: neither
passed nor failed, not counted; the failure that stopped it is).
Every ``detail`` is worded here, by :func:`family_detail`, from the judgement's code
and facts, and each finding by :func:`failure_detail` from its code and facts (the
families' :class:`~qkvcli.check.result.Clause` codes in :data:`CLAUSE_WORDS`,
nested clauses said by :func:`say`); only the protocol's verdict arrives as text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from qkvcli.check.cases import Case
from qkvcli.check.diagnose import Precision
from qkvcli.check.result import CheckResult
from qkvcli.core.results import Clause, Failure, FamilyCheck
from qkvcli.render.document import checks_json, dumps, head
from qkvcli.render.explorer.checks import counted, published_word
from qkvcli.render.facts import Fact, Facts, Table, entries, json_of, report, scalar, section, shape
from qkvcli.render.facts import verdict as fact_verdict
from qkvcli.render.names import CHECK
from qkvcli.render.numbers import fmt_exact, fmt_general
from qkvcli.render.relation_words import (
    CLAUSE_RELATION_WORDS,
    ON_EVERY_FIXTURE,
    ON_THIS_FIXTURE,
    leak_words,
    relations,
)
from qkvcli.render.views import Asked
from qkvcli.render.wording import FINDING_WORDS, verdict
from qkvcli.render.wording import said as said_of

NO_BACKWARD = "not applicable: no backward"
COMMAND_PURITY = "not applicable: a --command program cannot change qkv's arrays"


def _passed_detail(check: FamilyCheck) -> str:
    """What a passing family established: its words in the one table (its clauses, a
    gradient check's worst coordinate, said by :func:`say`)."""
    return said_of(CHECK, say, check)


NOT_RUN_WHY = {  # words for each code of check.result.NOT_RUN
    "stopped": "the implementation stopped answering (see protocol)",
    "forward": "its forward failed (see forward)",
    "backward": "its backward failed (see reverse)",
    "head_forward": "its head_forward failed (see head-forward)",
    "head_backward": "its head_backward failed (see head-reverse)",
    "rope": "its rope failed (see rope)",
    "rope_reverse": "its rope_reverse failed (see rope-reverse)",
    "cache_steps": "its cache_steps failed (see cache-steps)",
    "mha_forward": "its mha_forward failed (see multi-head)",
    "mha_backward": "its mha_backward failed (see multi-head-reverse)",
    "head": "its non-causal head_forward is wrong already (see head-forward)",
    "cache-steps": ("its cache_steps is wrong already (see cache-steps): a refused step's "
                    "values cannot be judged against qkv's"),
    "no-fixture": "no fixture given has what its claim needs (a batch item and the tokens it reads)",
    "head-precision": ("its head_forward is right but for its precision (see head-forward): "
                       "at this tolerance its results cannot show the family's claim"),
    **{f"{prefix}{why}": words.format(operation, family)
       for prefix, operation, family in (("", "forward", "forward"),
                                         ("head-", "head_forward", "head-forward"),
                                         ("rope-", "rope", "rope"),
                                         ("multi-head-", "mha_forward", "multi-head"))
       for why, words in (("shape", "its {0}'s answer has the wrong shape (see {1})"),
                          ("lossy", "{0} agrees only to a lossy precision (see {1}): central "
                                    "differences of it would measure the rounding, not the backward"))},
}


LETTERS = {"query": "Q", "key": "K", "value": "V"}


def _listed(names: tuple[str, ...]) -> str:
    """``query``, ``key and value``, ``query, key and value``."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + f" and {names[-1]}"


def _precision(names: tuple[str, ...], fault: Precision, tolerance: float) -> str:
    listed = _listed(names)
    agree = "agrees" if len(names) == 1 else "agree"
    if fault.cause == "float64":
        return (f"{listed} {agree} to {fmt_general(fault.error, 2)}, float64 rounding: a tolerance of "
                f"{fmt_exact(tolerance)} is below float64 precision")
    if fault.cause in ("decimals", "digits"):
        unit = "decimal places" if fault.cause == "decimals" else "significant digits"
        written = "is" if len(names) == 1 else "are"
        return (f"{listed} {written} written with {fault.places} {unit} (largest scaled "
                f"error {fmt_general(fault.error, 2)}): write each float's shortest round-trip spelling")
    return (f"{listed} {agree} only to {fmt_general(fault.error, 2)} and every value is a float32: "
            "float32 arithmetic")


def _paths(branches: tuple[str, ...]) -> str:
    if len(branches) == 1:
        return f"the {branches[0]} path"
    return f"the {_listed(branches)} paths"


def _path_counts(missing: tuple[str, ...], doubled: tuple[str, ...]) -> str:
    parts = [f"misses {_paths(missing)}"] if missing else []
    parts += [f"counts {_paths(doubled)} twice"] if doubled else []
    return "grad_input " + " and ".join(parts)


def _point(where: str, analytic: float, numerical: float, error: float, note: str) -> str:
    return (f"{where}: analytic {fmt_exact(analytic)}, numerical {fmt_exact(numerical)}, scaled error "
            f"{fmt_general(error)}" + (f" ({note})" if note else ""))


SLIP_WORDS = {
    "unscaled": "scores are Q K^T: the 1/sqrt(d_k) scaling is missing",
    "by-d_k": "scores are divided by d_k instead of sqrt(d_k)",
    "by-root-d_model": "scores are divided by sqrt(d_model) instead of sqrt(d_k)",
    "transposed-scores": "scores are K Q^T instead of Q K^T (S transposed)",
    "diagonal": "the causal mask hides the diagonal too (a position must see itself)",
    "hides-past": ("the causal mask hides the earlier positions instead of the later ones: "
                   "each position sees itself and the future"),
    "after-softmax": "the mask is applied after the softmax: masked rows no longer sum to 1",
    "no-mask": "causal=true is ignored: later positions are seen",
    "always-mask": "the mask is applied with causal=false too",
    "query-axis": ("the softmax is taken over the query axis (each key's column sums to 1) "
                   "instead of over each query's row"),
    "global-max": ("the softmax subtracts the maximum of the whole tensor, not of each row: "
                   "rows far below it lose their precision or underflow"),
    "unstable": "the softmax does not subtract the row maximum before exp",
    "no-rowsum": "the softmax backward lacks its row-sum term (dZ = A * dA)",
    "rowsum-axis": ("the softmax backward takes its row sum over the query axis "
                    "(sum(dA * A) over i instead of over j)"),
    "elementwise": ("the softmax backward keeps only the Jacobian's diagonal: dZ = A (1 - A) dA "
                    "instead of A * (dA - rowsum(dA * A))"),
    "dv-uses-a": "grad_value is computed with A instead of A^T (dV = A dO)",
    "dk-uses-ds": "grad_key is computed with dS instead of dS^T (dK = dS Q)",
    "ignores-mask": ("the backward ignores the causal mask: its gradients are exactly the "
                     "unmasked head's"),
    "first-item": ("the weight gradients come from the first batch item alone, not summed "
                   "over the batch"),
    "last-item": ("the weight gradients come from the last batch item alone (each item "
                  "overwrites the last), not summed over the batch"),
    "half-split": ("RoPE pairs coordinate i with i + d/2 (half-split) instead of the "
                   "adjacent 2i with 2i+1"),
    "from-one": "RoPE counts positions from 1: the first token is turned, not left as it is",
    "turned-back": "RoPE turns the other way (sin with the wrong sign)",
    "frequency": "RoPE's angles use base^(-i/d) instead of base^(-2i/d)",
    "not-inverted": "rope_reverse turns forward again instead of back",
    "split-no-transpose": ("the heads are split by a bare reshape [B,T,d] -> [B,H,T,d_h] "
                           "without the transpose: tokens and heads leak into each other"),
    "merge-no-transpose": ("the heads are merged by a bare reshape [B,H,T,d_h] -> [B,T,d] "
                           "without the transpose"),
    "wo-before-merge": ("W_O is applied to each head before the merge (each head through its "
                        "own block of W_O alone): the heads never mix"),
    "scale-d_model": "each head's scores are divided by sqrt(d_model) instead of sqrt(d_h)",
    "rope-half-split": ("RoPE pairs coordinate i with i + d_h/2 (half-split) instead of the "
                        "adjacent 2i with 2i+1"),
    "no-rope": "rope=true is ignored: queries and keys are not turned",
    "rope-always": "RoPE is applied with rope=false too",
    "base-ignored": "RoPE ignores the base it is given and uses 10000",
    "base-squared": "RoPE's angles use the base squared: (base^2)^(-2i/d)",
    "cos-sin-swapped": "RoPE swaps cos and sin: each pair is turned by pi/2 minus its angle",
    "offset-ignored": "RoPE ignores the offset: positions start at 0 whatever offset is given",
    "float32-angles": "RoPE's angles, cosines and sines are computed in float32",
    "strided-heads": ("head h takes the strided columns h, h + H, h + 2H, ... instead of the "
                      "contiguous block h d_h .. (h+1) d_h - 1"),
    "merge-reversed": "the heads are merged in reverse order (the last head's output first)",
    "one-softmax": ("one softmax normalises each query's scores over every head's keys "
                    "together, instead of one softmax per head"),
    "mask-one-head": "the causal mask is applied to head 0 only",
    "rope-on-value": "RoPE turns the values too (only queries and keys are turned)",
    "wo-gradient-transposed": "grad_w_output is transposed: (C^T dY)^T instead of C^T dY",
    "input-first-head": "grad_input comes from head 0 alone, not summed over the heads",
    "input-last-head": ("grad_input comes from the last head alone (each head overwrites the "
                        "last), not summed over the heads"),
    "rope-backward-ignored": ("the backward does not turn dQ and dK back through RoPE: its "
                              "gradients are the rotated queries' and keys'"),
    "rope-backward-not-inverted": ("the backward turns dQ and dK forward through RoPE again "
                                   "instead of back"),
    "unscaled-weights": "weights are the softmax of the unscaled scores Q K^T",
    "not-scaled": "scores are not Q K^T / sqrt(d_k)",
    "mask-moves-scores": "scores with causal=true are not the scores before the mask",
}
"""The words of each head slip the head families name (the codes of
:data:`~qkvcli.check.diagnose.FORWARD_BUGS`, ``BACKWARD_BUGS``, and the scaling's
and mask's own)."""


def _slips(slips: tuple[str, ...], either: tuple[str, str] = ON_THIS_FIXTURE) -> str:
    """One slip's words; several that the fixture cannot tell apart, each, as either
    (``either``: the words around them; on one fixture, the same numbers there)."""
    if len(slips) == 1:
        return _slip_words(slips[0])
    return (either[0] + "; or ".join(map(_slip_words, slips))
            + (either[1] or " (the same numbers here)"))


def _slip_words(slip: str) -> str:
    """A slip's words; a multi-head layer's RoPE slip (``rope-base-ignored``) is worded
    as the rotation's own (``base-ignored``) when it has no words of its own."""
    return SLIP_WORDS.get(slip) or SLIP_WORDS[slip.removeprefix("rope-")]


def _leak(positions: tuple[Clause, ...]) -> int | None:
    """The offset of a causal mask that leaks, where a ``leaks-future`` position holds one."""
    return next((clause.facts[4] for clause in positions
                 if clause.code == "leaks-future" and len(clause.facts) > 4), None)


def _mask_positions(slips: tuple[str, ...], positions: tuple[Clause, ...]) -> str:
    said = "; ".join(map(say, positions))
    if not slips and _leak(positions) is not None:
        return f"{leak_words(_leak(positions) or 0)}: the mask {said}"
    if not slips:
        return f"the mask {said}"
    return _slips(slips) + (f": the mask {said}" if said else "")


def _overflow(largest: float, said: str | None = None) -> str:
    return (f"large scores (up to {fmt_general(largest)}) overflow: the softmax does not "
            "subtract the row maximum before exp" + ("" if said is None else f" ({said})"))


CLAUSE_WORDS: dict[str, str | Callable[..., str]] = {
    **CLAUSE_RELATION_WORDS,
    "slip-kept-after-reset": ("the cache kept positions from an earlier run (its length is "
                              "{0} after the first step, a fresh cache's {1}): reset did not "
                              "empty it"),
    "slip-keys-at-zero": ("the cache holds the keys unturned: RoPE at position 0, not at the "
                          "cache's length"),
    "slip-query-cached": "the cache holds the turned queries where the turned keys belong",
    "slip-values-turned": "the cache holds the values turned by RoPE: only Q and K turn",
    "slip-refused-changed": ("a refused step changed the cache's length: the append comes "
                             "before the check"),
    "value-differs": lambda name, where, got, expected, error, tolerance: (
        f"{name}{where} = {fmt_exact(got)}, expected {fmt_exact(expected)} (scaled error "
        f"{fmt_general(error)} > {fmt_exact(tolerance)})"),
    "shape-differs": "{0} has shape {1}, expected {2}",
    "forward-differs": lambda mismatch, why: mismatch if why is None else f"{mismatch}; {why}",
    "reverse-differs": lambda whys, mismatch: "; ".join(map(say, whys)) + f": {mismatch}",
    "wrong-shape": "{0} has the wrong shape",
    "precision": _precision,
    "path-counts": _path_counts,
    "borrowed-weight": lambda branch, other: (
        f"grad_input's {branch} path uses W_{LETTERS[other]} instead of W_{LETTERS[branch]} "
        f"(dL/d{LETTERS[branch]} W_{LETTERS[other]}^T)"),
    "borrowed-gradient": lambda branch, other: (
        f"grad_input's {branch} path uses dL/d{LETTERS[other]} instead of "
        f"dL/d{LETTERS[branch]} (dL/d{LETTERS[other]} W_{LETTERS[branch]}^T)"),
    "swapped-weights": lambda first, second: (
        f"grad_input's {first} and {second} paths swap W_{LETTERS[first]} and "
        f"W_{LETTERS[second]}"),
    "through-weight": lambda branch: (
        f"grad_input sends every path through W_{LETTERS[branch]}^T "
        f"(dX = (dQ + dK + dV) W_{LETTERS[branch]}^T)"),
    "not-three-paths": "grad_input is not dQ W_Q^T + dK W_K^T + dV W_V^T",
    "other-branch-gradient": lambda branch, other: (
        f"grad_w_{branch} uses the {other} branch's gradient dL/d{LETTERS[other]}"),
    "summed-paths": "grad_w_{0} sums all three paths instead of staying branch-local",
    "not-branch-local": lambda branch: f"grad_w_{branch} is not X^T dL/d{LETTERS[branch]}",
    "computed-with": lambda branch, other: (
        f"{branch} equals X W_{LETTERS[other]}: computed with the {other} weight"),
    "rejected-valid": "{0} rejected a valid input {1}: {2}",
    "call-failed": "{0}",
    "gradient-shape": "{0} has the wrong shape for a gradient check",
    "point": _point,
    "point-on": "{0} {1}",
    "gradcheck-worst": "worst {0} > tolerance {1}",
    "check-call-failed": "{0} failed during the check: {1}",
    "slip": _slips,
    "slip-differs": lambda slips, mismatch: f"{_slips(slips)}: {mismatch}",
    "mask-positions": _mask_positions,
    "diagonal-hidden": ("the causal mask hides the diagonal too: with one token {0} its "
                        "weights are not finite ({1}), since query 0's only key is hidden and "
                        "a row hidden everywhere with -inf is 0/0"),
    "forward-wrong-too": "{0} (its {1} is wrong on this fixture too, see {2}: {3} judges "
                         "the backward against it)",
    "hides-earlier": "hides earlier positions (weights{0} = 0: query {1} cannot see key {2})",
    "hides-diagonal": "hides the diagonal (weights{0} = 0: query {1} cannot see itself)",
    "hides-later": ("hides later positions with causal=false (weights{0} = 0: query {1} "
                    "cannot see key {2})"),
    "leaks-future": ("leaks future positions (weights{0} = {3}: query {1} sees the later "
                     "key {2})"),
    "masked-after-softmax": ("masks after the softmax (exactly the later keys get 0, but row "
                             "{0} sums to {1}, not 1)"),
    "mask-differs": ("causal=true results are not the softmax of the scores with the later "
                     "positions hidden: {0}"),
    "row-sums": "rows of weights sum to {0} to {1} (min weight {2}), not 1",
    "overflow": _overflow,
    "overflow-said": _overflow,
    "large-call-failed": "head_forward failed on large scores: {0}",
    "large-differs": lambda largest, found: (
        f"on large scores (up to {fmt_general(largest)}): {found}"),
    "no-reply": lambda request, operation, seconds: (
        f"request {request} ({operation}): no reply within {fmt_general(seconds, 6)} s "
        "(--timeout)"),
}
"""The words of each clause code the value, gradient-check and head families find: a
format string of the facts, or a function of them (a nested clause given worded)."""


def say(clause: Clause) -> str:
    """A clause in words (its nested clauses worded first)."""
    return _words(clause.code, clause.facts)


def _words(code: str, facts: tuple[Any, ...]) -> str:
    shown = tuple(say(f) if isinstance(f, Clause) else f for f in facts)
    words = CLAUSE_WORDS.get(code) or FINDING_WORDS[code]
    if isinstance(words, str):  # a float in a format string: as it was found
        return words.format(*(fmt_exact(f) if isinstance(f, float) else f for f in shown))
    return words(*shown)


REQUEST_WORDS = {
    "rank-2": "rank-2 input {0}",
    "input-width": "input width {0} != weight rows {1}",
    "model-widths": "weights with different model widths {0}/{1}/{0}",
    "head-widths": "weights with different head widths {0}/{1}/{0}",
    "backward-rank-2": "backward with a rank-2 input {0}",
    "backward-input-width": "backward with input width {0} != weight rows {1}",
    "backward-grad-key": "backward with grad_key {0} for {1} tokens",
    "backward-grad-value": "backward with grad_value {0} for head width {1}",
    "key-width": "key width {0} != query width {1}",
    "grad-output": "grad_output {0} for {1} tokens",
    "rope-odd-width": "an odd width {0}",
    "rope-zero-width": "no width",
    "rope-rank-1": "a rank-1 input {0}",
    "rope-base": "base {0}",
    "rope-offset": "offset {0}",
    "rope-reverse-odd-width": "rope_reverse with an odd width {0}",
    "mha-heads": "{0} heads for d_model {1}",
    "mha-no-heads": "no heads",
    "mha-odd-head": "heads of odd width {0} with RoPE",
    "mha-output-rows": "W_O with {0} rows for d_model {1}",
}
"""The words of each bad request the ``errors`` family sends (its codes and facts)."""


def failure_detail(failure: Failure) -> str:
    """A failure's finding (worded from its code and facts), the words for a missing
    backward, or why a family did not run."""
    if failure.not_run:
        return f"not run: {NOT_RUN_WHY[failure.not_run]}"
    if failure.code == "accepted":
        return "silently accepted: " + ", ".join(REQUEST_WORDS[code].format(*facts)
                                                 for code, facts in failure.facts)
    if failure.code:
        return _words(failure.code, failure.facts)
    return NO_BACKWARD if failure.no_backward else failure.detail


def _coordinate(failure: Failure) -> str | None:
    """The published coordinate: head-errors names its first accepted request in words
    (the errors family its code), as the JSON has always shown."""
    if failure.family == "head-errors" and failure.code == "accepted":
        code, facts = failure.facts[0]
        return REQUEST_WORDS[code].format(*facts)
    return failure.coordinate


def family_detail(check: FamilyCheck) -> str:
    """The one-line detail of a family's check: what passed, where it first failed (and
    on how many more fixtures), or why it does not apply."""
    if check.outcome == "no-backward":
        return NO_BACKWARD
    if check.outcome == "command":
        return COMMAND_PURITY
    if check.first is None:
        return _passed_detail(check)
    if check.first.not_run == "stopped" or check.first.not_run.endswith("lossy"):  # said once
        return failure_detail(check.first)
    where = f"{check.first.fixture}: " if check.first.fixture is not None else ""
    more = check.more
    tail = f" (and {more} more {'fixture' if more == 1 else 'fixtures'})" if more > 0 else ""
    return f"{where}{failure_detail(check.first)}{tail}"


def uncounted(check: FamilyCheck) -> bool:
    """Whether a check is neither a pass nor a failure (N/A and SKIP): JUnit's skipped."""
    return published_word({"outcome": check.outcome, "passed": check.passed}) in ("N/A", "SKIP")


def _text(found: Facts) -> Table:
    """The text's lines: the implementation and fixtures, a line per family (its name,
    its word, its detail, aligned), the failures, each slip named, then the verdict."""
    width = max(len(check["name"]) for check in found["checks"])
    failures = found["failures"].value
    return (
        ("implementation", "implementation"),
        ("fixtures", ("fixtures", ",".join)),
        *(("", ("checks", lambda checks, i=i: f"{checks[i]['name']:<{width}}  "
                f"{published_word(checks[i]):<4}  {checks[i]['detail']}"))
          for i in range(len(found["checks"]))),
        *((("failures", ("failures", len)),) if failures else ()),
        *(("", ("failures", lambda found, i=i: "  " + found[i]["check"] + (
            f" [{found[i]['fixture']}]" if found[i]["fixture"] is not None else "")
            + " " + found[i]["detail"])) for i in range(len(failures))),
        *(("", ("slips", lambda slips, i=i: f"slip: {slips[i]['slip']} "
                f"({', '.join(slips[i]['checks'])})")) for i in range(len(found["slips"]))),
        ("", lambda found: verdict(found["passed"].value, *counted(found["checks"]))),
    )


SLIP_CODES = frozenset({
    "slip", "path-counts", "borrowed-weight", "borrowed-gradient", "swapped-weights",
    "through-weight",
    "other-branch-gradient", "summed-paths", "computed-with", "precision", "overflow",
    "overflow-said", "diagonal-hidden", "masked-after-softmax"})
"""The clause codes that name a slip (what the code did wrong), beside those that say
where a value differs; every ``slip-*`` clause (a KV cache's) names one too."""
SAME_SLIP = {"diagonal-hidden": "mask:diagonal", "masked-after-softmax": "mask:after-softmax"}
SAME_SLIP.update({"by-d_k": "divisor:d_h", "by-root-d_model": "divisor:root d_model"})
"""A family's slip code, or a catalogued slip, that names the slip a relation's variant
names (the mask family's own finding and the forward's ``mask:diagonal``; a head's scores
divided by ``d_k`` and its reverse's ``divisor:d_h``): one slip, one line."""


def _same(slips: Any) -> Any:
    """The key of a catalogued slip (one slip: the variant code that names it too)."""
    if isinstance(slips, tuple) and len(slips) == 1 and isinstance(slips[0], str):
        return SAME_SLIP.get(slips[0], slips)
    return slips


GENERIC_SLIPS = frozenset({("not-scaled",)})
"""Slips that say a tensor is wrong, not how (the scaling family's "scores are not
Q K^T / sqrt(d_k)"): where another check names a slip of the same tensor on the same
fixture, that is the one slip, and the summary says it once."""


def _slip_names(code: str, facts: tuple[Any, ...],
                either: tuple[str, str] = ON_THIS_FIXTURE) -> Iterator[tuple[Any, str]]:
    """The slips a finding names, in the order the finding holds them: each as what
    tells it apart from another (its codes, not the numbers it was found with) and its
    words (``either``: around slips the fixtures cannot tell apart)."""
    if code in ("slip-differs", "mask-positions"):  # the slips alone, not the mismatch
        if facts[0]:
            yield _same(facts[0]), _slips(facts[0], either)
        elif code == "mask-positions" and (offset := _leak(facts[1])) is not None:
            yield f"mask:from:{offset}", leak_words(offset)  # a forward's variant's key too
        return
    if code in SLIP_CODES or code.startswith("slip-"):
        yield SAME_SLIP.get(code, _same(facts[0]) if code == "slip" else code), (
            _slips(facts[0], either) if code == "slip" else _words(code, facts))
        return
    if code in ("relation-differs", "relations"):  # the relations alone, not the mismatch
        if facts[0]:
            variants = [c.facts[1] for c in facts[0] if c.code == "variant"]
            key = (variants[0] if len(variants) == len(facts[0]) == 1
                   else tuple(facts[0]))
            yield key, relations(facts[0], either)
        return
    for fact in facts:
        if isinstance(fact, tuple):  # the slips of one finding's tensors: one slip
            found = [named for clause in fact if isinstance(clause, Clause)
                     for named in _slip_names(clause.code, clause.facts, either)]
            if len(found) > 1:
                yield tuple(key for key, _ in found), "; ".join(said for _, said in found)
            else:
                yield from found
        elif isinstance(fact, Clause):
            yield from _slip_names(fact.code, fact.facts, either)


def _named(failure: Failure,
           either: tuple[str, str] = ON_THIS_FIXTURE) -> list[tuple[Any, str]]:
    """The slips one failure names (none for a family that did not run)."""
    if not failure.code or failure.not_run:
        return []
    return list(_slip_names(failure.code, failure.facts, either))


def _tensor(failure: Failure) -> tuple[str | None, str]:
    """The fixture and the tensor a failure is at (its coordinate without the index)."""
    return failure.fixture, (failure.coordinate or "").split("[", 1)[0]


def named_slips(failures: Sequence[Failure]) -> list[dict[str, Any]]:
    """Each slip the failures name, once, in the words of its first finding, with the
    checks that named it, in the order of the failures: what a failing report repeats
    above its verdict, where the last lines on a screen still show it. Several slips
    one fixture cannot tell apart are said as holding on every failing fixture (the
    diagnosis names only what they agree on); a :data:`GENERIC_SLIPS` finding is the
    slip another check names at its tensor on its fixture."""
    named = [(failure, _named(failure, ON_EVERY_FIXTURE)) for failure in failures]
    specific: dict[tuple[str | None, str], Any] = {}
    for failure, found in named:
        for slip, _ in found:
            if slip not in GENERIC_SLIPS:
                specific.setdefault(_tensor(failure), slip)
    words: dict[Any, str] = {}
    checks: dict[Any, list[str]] = {}
    for failure, found in named:
        for slip, said in found:
            if slip in GENERIC_SLIPS and _tensor(failure) in specific:
                slip = specific[_tensor(failure)]
            words.setdefault(slip, said)
            if failure.family not in checks.setdefault(slip, []):
                checks[slip].append(failure.family)
    return [{"slip": said, "checks": checks[slip]} for slip, said in words.items()]


COMPARED = {"value-differs": ("engine", 0, 2, 3), "point": ("central-difference", 0, 1, 2),
            "step-differs": ("causal-pass", 1, 2, 3), "cache-differs": ("causal-pass", 0, 1, 2),
            "refusal-differs": ("refusing-cache", 1, 2, 3)}
"""The clause codes that compare two numbers: what each compares the implementation's
number with (qkv's engine on the fixture, the central difference of its own forward, the
engine's causal pass over the prefix, a cache that refuses the step), and where the
clause holds the tensor and coordinate and the two numbers."""


def _numbers(code: str, facts: tuple[Any, ...], tolerance: float | None) -> Fact | None:
    """The numbers one clause compares, as a section (``None``: it compares none, or
    compares shapes); ``tolerance``, the family's, where the clause holds none."""
    if code not in COMPARED:
        return None
    against, at, first, second = COMPARED[code]
    try:
        actual, expected = float(facts[first]), float(facts[second])
    except (TypeError, ValueError):  # a shape, spelled
        return None
    where = f"{facts[0]}{facts[1]}" if code == "value-differs" else str(facts[at])
    tensor, _, index = where.partition("[")
    names = ("analytic", "numerical") if code == "point" else ("actual", "expected")
    found: dict[str, Any] = {
        "against": against, "tensor": tensor,
        "coordinate": shape(tuple(int(i) for i in index[:-1].split(",") if i)),
        **({"position": int(facts[0])} if code == "step-differs" else {}),
        names[0]: scalar(actual), names[1]: scalar(expected)}
    if code in ("value-differs", "point"):
        found["scaled_error"] = scalar(float(facts[4 if code == "value-differs" else 3]))
    else:
        found["absolute_error"] = scalar(abs(actual - expected))
    bound = float(facts[5]) if code == "value-differs" else tolerance
    found["tolerance"] = None if bound is None else scalar(bound)
    return section(**found, **({"note": facts[4]} if code == "point" and facts[4] else {}))


def _compared(facts: Sequence[Any], tolerance: float | None) -> Fact | None:
    """The first comparison of two numbers among ``facts`` (clauses and tuples of them,
    nested ones too, depth first); a gradient check's worst point is judged by the
    tolerance its finding holds."""
    for fact in facts:
        found = None
        if isinstance(fact, Clause):
            inner = fact.facts[1] if fact.code == "gradcheck-worst" else tolerance
            found = _numbers(fact.code, fact.facts, tolerance) or _compared(fact.facts, inner)
        elif isinstance(fact, (tuple, list)):
            found = _compared(fact, tolerance)
        if found is not None:
            return found
    return None


def facts(result: CheckResult) -> dict[str, Any]:
    """The judgement's facts after the JSON's head: the implementation and the fixtures'
    labels, the verdict, each family once in ``checks`` (the one entry shape), each
    failure (its check, family, fixture, coordinate, words, the slips it names and the
    numbers it compared), each slip the failures name with the checks that named it, each
    passing gradient check's worst point, and a ``--command`` program's ``stderr``."""
    from qkvcli.render.names import published

    # a cache's refusals are compared within the cache steps' tolerance
    bounds = {c.name: c.tolerance for c in result.checks if c.tolerance > 0}
    found: dict[str, Any] = {
        "implementation": result.implementation, "fixtures": list(result.fixtures),
        "passed": fact_verdict(result.passed),
        "checks": checks_json("check", result.checks, family_detail),
        "failures": entries([{
            "check": f.family, "family": published("check", f.family).family,
            "fixture": f.fixture, "coordinate": _coordinate(f), "detail": failure_detail(f),
            "slips": [said for _, said in _named(f)],
            "compared": _compared((Clause(f.code, f.facts),) if f.code else (),
                                  bounds.get(f.family, bounds.get("cache-steps")))}
                               for f in result.failures]),
        "slips": named_slips(result.failures),
        "worst": entries([{"check": c.name, "fixture": c.worst.facts[0],
                           "compared": _compared(c.worst.facts[1:], c.tolerance)}
                          for c in result.checks if c.passed and c.worst is not None])}
    if result.command:
        found["stderr"] = result.stderr
    return found


def check_json(result: CheckResult) -> dict[str, Any]:
    """The document: the head, then :func:`facts`."""
    return head("check", **json_of(facts(result)))


# --- reproducing a failure: the fixture and the requests of one failing case ------------

REPLAY_CHAPTER = "qkv-check-failure"


def failing_fixture(case: Case) -> dict[str, Any]:
    """``case`` as a qkv fixture (``qkv run FILE``, ``qkv check IMPL FILE`` replay it):
    every value a float, each written in its shortest round-trip spelling."""
    names = ("query", "key", "value")

    def nested(values: Any) -> Any:
        # An empty nested list cannot show its inner axes: such a tensor is written flat.
        if values.size == 0:
            return {"shape": list(values.shape), "values": []}
        return values.tolist()

    return {
        "chapter": REPLAY_CHAPTER,
        "input": nested(case.input),
        "weights": {name: {"values": w.tolist()} for name, w in zip(names, case.weights,
                                                                      strict=True)},
        "upstream": {name: nested(u) for name, u in zip(names, case.upstream, strict=True)},
        "gradcheck": {"step": case.step, "tolerance": case.tolerance},
    }


def replay_requests(case: Case, operations: tuple[str, ...]) -> str:
    """The protocol lines (hello, each operation offered on ``case``, bye) a ``--command``
    program can be fed to replay the case: ``PROGRAM < FILE``."""
    from qkvcli.protocol.wire import encode, encode_tensor

    names = ("query", "key", "value")
    tensors = {"input": case.input, **{f"w_{n}": w for n, w in zip(names, case.weights, strict=True)}}
    upstream = {f"grad_{n}": u for n, u in zip(names, case.upstream, strict=True)}
    requests: list[dict[str, Any]] = [{"op": "hello", "version": 1}]
    if "forward" in operations:
        requests.append({"op": "forward", **tensors})
    if "backward" in operations:
        requests.append({"op": "backward", **tensors, **upstream})
    for causal in (False, True):
        if "head_forward" in operations:
            requests.append({"op": "head_forward", **tensors, "causal": causal})
        if "head_backward" in operations:
            requests.append({"op": "head_backward", **tensors, "causal": causal,
                             "grad_output": case.upstream[2]})
    requests.append({"op": "bye"})
    lines = []
    for ident, request in enumerate(requests):
        fields = {key: encode_tensor(value) if hasattr(value, "shape") else value
                  for key, value in request.items()}
        lines.append(encode({"id": ident, **fields}).decode("utf-8"))
    return "".join(lines)


def pieces(result: CheckResult, fmt: str, asked: Asked) -> Iterator[str]:
    """The result as ``text`` (:func:`_text`'s lines) or ``json``: same result, same bytes."""
    if fmt == "json":
        return iter([dumps(check_json(result))])
    found = facts(result)
    return iter([report(found, found, _text(found))])
