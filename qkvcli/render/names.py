"""The one table of published check names: each report's internal check ids, each mapped
to its published ``name``, the ``family`` (the idea it judges, one spelling across every
report) and the ``operation`` it judged.

Every JSON writer reads :func:`published` (through
:func:`qkvcli.render.document.check_entry`), so a check's name and family are spelled
once, here. Names are kebab-case and unique within a document; ``qkv check`` keeps the
names its text report prints (``head-prefix``, ``multi-head-errors``...), the other
reports publish the idea's own name. The chapters' text and trace keep the course's
spellings (``row_sums=``: the anchors' bytes); only the JSON (and the page drawn from it)
speaks this vocabulary. A chapter's check the one wording table
(:data:`qkvcli.render.wording.WORDS`) gives no words of its own is said by its ``claim``
here, the words its figure uses.
"""

from __future__ import annotations

from qkvcli.check.plans import ATTEND as ATTEND
from qkvcli.check.plans import CH27 as CH27
from qkvcli.check.plans import CH28 as CH28
from qkvcli.check.plans import CH29 as CH29
from qkvcli.check.plans import CH30 as CH30
from qkvcli.check.plans import CH37 as CH37
from qkvcli.check.plans import CHECK as CHECK
from qkvcli.check.plans import RUN as RUN
from qkvcli.core.record import Record

# --- the families (ideas) and the operations, each with what it claims ---------------

FAMILIES: dict[str, str] = {
    "forward": ("The forward pass gives what it must: finite outputs of the right shapes (qkv's engine), "
                "or the same outputs as qkv within the tolerance (an implementation)."),
    "reverse": ("The reverse pass gives what it must: finite gradients shaped like their tensors, or the "
                "same gradients as qkv within the tolerance."),
    "shapes": ("Outputs keep the batch and token axes of the input, empty axes (an empty batch, no tokens) "
               "included."),
    "rejected-inputs": ("Every bad input is refused, with the exact error it must raise (run's and the "
                        "chapters' ``errors``, chapters 27 and 28's ``rejected_inputs``, ``qkv check``'s "
                        "``errors``: one idea)."),
    "replay": "The same input run twice gives the same bits.",
    "gradcheck": "The analytic gradients agree with central differences of the forward.",
    "purity": "An implementation leaves the arrays it is given unchanged.",
    "independence": ("Changing one projection's weights changes only its own output (and each upstream "
                     "gradient only its own weight gradient)."),
    "initialization": "Seeded initialization is reproducible, independent per weight and transactional.",
    "expect": "A fixture's ``expect`` section: the quantities it names are as expected.",
    "prefix": ("Under the causal mask, changing the last token's input leaves every earlier output bit for "
               "bit and changes the last (chapter 28's ``prefix_invariance``, chapter 30's and attend's "
               "``prefix``, ``qkv check``'s ``head-prefix`` and ``multi-head-prefix``)."),
    "single-token": ("One token: its one weight is exactly 1 and no gradient reaches the query's or the "
                     "key's parameters."),
    "row-sums": ("Each query's attention weights are a distribution: non-negative and summing to 1 (attend "
                 "publishes it as ``weights`` before schema 2)."),
    "future-zero": ("Under the causal mask every weight on a later key is exactly 0 (chapter 28's "
                    "``masked_rows``, attend's ``mask``: the same claim)."),
    "causal": ("A causal multi-head layer's weights: each head's later keys weigh exactly 0 and each row "
               "sums to 1 (both claims at once, chapter 30's alone)."),
    "mask": ("An implementation places the causal mask right: ``causal=true`` hides exactly the later "
             "positions, after the scores and before the softmax, ``causal=false`` hides none. A claim "
             "about where the mask goes, not only about the weights it leaves, so not :data:`FUTURE_ZERO`."),
    "softmax": ("An implementation's softmax: rows of weights non-negative and summing to 1, and large "
                "scores that do not overflow."),
    "scaling": ("Scores are divided by ``sqrt(d_k)`` (chapter 27's scale probe: the scale softens a peaked "
                "row; ``qkv check``'s scaling: the scores are ``Q K^T / sqrt(d_k)``)."),
    "batch-isolation": ("Items of a batch do not see each other: a batch of two gives each half bit for "
                        "bit as alone."),
    "suffix-gradient": ("Under the causal mask a gradient seeded on the earlier outputs sends exactly 0 to "
                        "the later tokens' query, key and value."),
    "tape-finite": "Every array of the reverse pass is finite (the mask's ``-inf`` never reaches it).",
    "hull": "Each output is the weights' mixture of the value rows, so it lies in their convex hull.",
    "position-zero": "RoPE turns the token at position 0 by nothing: its vector is the input's, exactly.",
    "norms": "RoPE keeps each vector's norm.",
    "relative-dot": ("RoPE depends on relative positions only: moving every position by one offset keeps "
                     "the dot products of the turned tokens (chapter 29's and ``qkv check``'s "
                     "``relative-dot``) and so a layer's weights (chapter 30's ``common-offset``)."),
    "head-isolation": ("Before the output projection the heads are apart: changing one head's query "
                       "columns or one K/V head's value columns moves no other head's weights or merged "
                       "columns."),
    "split-merge": ("Splitting into heads and merging them back give the heads' outputs and the merged "
                    "tensor, bit for bit."),
    "parameters": "A layer's parameters are distinct arrays, none sharing memory with another.",
    "protocol": "An implementation speaks the protocol: every request answered in its format.",
    "cached-step": ("A cached step equals the last row of the causal pass over its prefix, within the "
                    "tolerance, and the cache holds that pass's rotated keys and values (chapter 37)."),
    "cache-growth": ("A step adds one position to the cache (``[B,H,t,d_h]`` to ``[B,H,t+1,d_h]``) inside "
                     "storage ``[B,H,C,d_h]`` made once."),
    "cache-offset": "A step turns its query and key by RoPE at the cache's length, its absolute position.",
    "work-counts": ("The rows each projection reads step by step, for whole prefixes, and reuses from the "
                    "cache follow their formulas."),
    "cache-reset": ("A reset forgets every position and keeps the storage (the same arrays, the same "
                    "bits)."),
}
"""Every family, the idea a check judges, one spelling across every report, and what it
claims: the schema's ``family`` enumeration."""
OPERATIONS: dict[str, str] = {
    "projections": ("Chapter 26's query, key and value projections (``qkv run`` on a chapter 26 fixture, "
                    "``qkv check``'s projections)."),
    "head": "One attention head (chapters 27 and 28, ``qkv check``'s head).",
    "rope": "Rotary position embedding (chapter 29, ``qkv check``'s RoPE).",
    "multi-head": "Multi-head attention (chapter 30, ``qkv check``'s multi-head layer).",
    "layer": "A real model's attention layer, or one head run as a layer of one head (``qkv attend``).",
    "kv-cache": "A layer with its KV cache, one token a step (chapter 37).",
    "implementation": "The implementation as a program speaking the protocol (``qkv check``'s protocol).",
}
"""Every operation a check judged: the schema's ``operation`` enumeration."""
OUTCOMES: tuple[str, ...] = ("passed", "failed", "not-run", "no-backward", "command")
"""A check entry's ``outcome`` codes (``core.results.OUTCOMES``)."""


class Published(Record):
    """A check as the JSON publishes it: its ``name``, ``family`` and ``operation``, and
    for a chapter's check the words its figure uses (``claim``: its detail)."""

    name: str
    family: str
    operation: str
    claim: str = ""


Row = tuple[str, ...]
"""One check of a report: its id there, then (each left out, or ``""``, for the usual)
its published name (the id, ``_`` spelled ``-``), its family (the name) and the words
of its claim."""


def _report(operation: str, *rows: Row) -> dict[str, Published]:
    """A report's checks by id, each as it is published, every one judging ``operation``."""
    found = {}
    for row in rows:
        check, name, family, claim = (*row, "", "", "")[:4]
        name = name or check.replace("_", "-")
        found[check] = Published(name, family or name, operation, claim)
    return found


# the reports' keys: each plan's in the one plan table (qkvcli.check.plans), and its names here

HEAD_CHECKS = _report(
    "head",
    ("row_sums", "", "", "rows sum to 1, and each output is its row's mixture of the value rows"),
    ("scale_probe", "", "scaling", "dividing by sqrt(d_k) softens a peaked row"),
    ("single_token", "", "", "one token: probability 1, no gradient to Q or K"),
    ("batch_isolation", "", "", "batch of two: halves bit for bit equal"),
    ("empty_batch", "", "shapes", "an empty batch gives empty weights and outputs of the right "
     "shapes"),
    ("gradcheck",), ("rejected_inputs",), ("replay",),
    ("masked_rows", "future-zero", "", "future keys weigh exactly 0"),
    ("prefix_invariance", "prefix", "", "a later token changed: every earlier output bit for "
     "bit unchanged, the later one changed"),
    ("suffix_gradient", "", "", "prefix seed: dQ, dK, dV exactly 0 at the later positions"),
    ("tape_finite", "", "", "reverse pass: every array finite, -inf never reaches it"),
)
"""Chapters 27 and 28's checks: each chapter publishes some of them."""
SHARED = {"forward": "forward", "reverse": "reverse", "shapes": "shapes",
          "errors": "rejected-inputs", "replay": "replay", "purity": "purity",
          "gradcheck": "gradcheck", "prefix": "prefix", "single-token": "single-token"}
"""``qkv check``'s families every kind shares, by the name after the kind's prefix."""
KINDS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("", "projections", ("forward", "reverse", "shapes", "errors", "replay", "purity",
                         "gradcheck")),
    ("head-", "head", ("forward", "reverse", "shapes", "errors", "replay", "purity", "gradcheck",
                       "prefix", "single-token")),
    ("rope-", "rope", ("reverse", "shapes", "errors", "replay", "purity", "gradcheck")),
    ("multi-head-", "multi-head", ("reverse", "shapes", "errors", "replay", "purity", "gradcheck",
                                   "prefix", "single-token")),
)
"""Each kind of ``qkv check``: its names' prefix, its operation, the shared families it
publishes under that prefix (RoPE's and multi-head's forward are ``rope`` and
``multi-head``, below)."""
TAPE_FINITE = ("tape_finite", "", "", "reverse pass: every array finite")

PUBLISHED: dict[str, dict[str, Published]] = {
    RUN: _report("projections", ("forward",), ("reverse",), ("shapes",), ("initialization",),
                 ("independence",), ("replay",), ("gradcheck",), ("expect",),
                 ("errors", "rejected-inputs")),
    CH27: {key: HEAD_CHECKS[key] for key in (
        "row_sums", "scale_probe", "single_token", "batch_isolation", "empty_batch",
        "gradcheck", "rejected_inputs", "replay")},
    CH28: {key: HEAD_CHECKS[key] for key in (
        "row_sums", "masked_rows", "prefix_invariance", "suffix_gradient", "single_token",
        "empty_batch", "tape_finite", "gradcheck", "rejected_inputs", "replay")},
    CH29: _report(
        "rope", ("position_zero", "", "", "position 0 turns by nothing: exactly the input"),
        ("norms", "", "", "every turned vector keeps its norm"),
        ("relative_dot", "", "", "a common shift of every position keeps every dot product"),
        ("shapes", "", "", "empty and leading axes keep their shapes"),
        ("errors", "rejected-inputs"), ("gradcheck",), TAPE_FINITE, ("replay",)),
    CH30: _report(
        "multi-head",
        ("causal", "", "", "every head: future keys weigh exactly 0, every row sums to 1"),
        ("prefix", "", "", "a later token changed: every earlier output bit for bit unchanged, "
         "the later one changed"),
        ("head_isolation", "", "", "one head's W_Q or W_V columns changed: no other head moves"),
        ("split_merge", "", "", "split into heads and merged back, bit for bit"),
        ("common_offset", "", "relative-dot", "a common offset of every position keeps the "
         "weights"),
        ("shapes", "", "", "empty and probe inputs keep their shapes"),
        ("parameters", "", "", "every parameter its own array"),
        ("errors", "rejected-inputs"), ("gradcheck",), TAPE_FINITE, ("replay",)),
    CH37: _report(
        "kv-cache",
        ("steps", "cached-steps", "cached-step", "every step equals the last row of the causal "
         "pass over its prefix; the cache holds that pass's rotated keys and values"),
        ("growth", "", "cache-growth", "each step adds one position inside the storage made "
         "once"),
        ("offset", "", "cache-offset", "each step turns Q and K at the cache's length"),
        ("work", "", "work-counts", "rows read step by step, for whole prefixes and reused "
         "follow their formulas"),
        ("reset", "", "cache-reset", "length 0, the same storage, its values untouched"),
        ("replay",), ("errors", "rejected-inputs")),
    ATTEND: _report(
        "layer", ("forward",), ("hull",), ("reverse",), ("gradcheck",), ("shapes",), ("replay",),
        ("prefix",), ("single_token",), ("attention", "row-sums"), ("mask", "future-zero"),
        ("scale_probe", "", "scaling"), ("head_isolation",), ("position_zero",),
        ("decode", "cached-steps", "cached-step")),
    CHECK: {
        **{check: found for prefix, operation, ideas in KINDS for check, found in _report(
            operation, *((f"{prefix}{idea}", "", SHARED[idea]) for idea in ideas)).items()},
        **_report("rope", ("rope", "", "forward"), ("position-zero",), ("relative-dot",)),
        **_report("multi-head", ("multi-head", "", "forward"), ("head-isolation",)),
        **_report("projections", ("independence",)),
        **_report("head", ("scaling",), ("softmax",), ("mask",)),
        **_report("kv-cache", ("cache-steps", "", "cached-step"),
                  *((f"cache-{name}", "", family) for name, family in (
                      ("refusals", "rejected-inputs"), ("errors", "rejected-inputs"),
                      ("replay", "replay"), ("purity", "purity")))),
        **_report("implementation", ("protocol",)),
    },
}
"""Each report's checks by internal id (``run``: chapter 26's; a
chapter's by its plan; ``attend``'s by its evidence; ``check``'s by family name)."""


def published(report: str, check: str) -> Published:
    """The published form of ``report``'s check ``check``. Raises ``KeyError`` for a check
    the table lacks (a new check must be named here before any JSON prints it)."""
    return PUBLISHED[report][check]
