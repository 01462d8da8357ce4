"""The one table of published check names: each report's internal check ids, each mapped
to its published ``name``, the ``family`` (the idea it judges, one spelling across every
report) and the ``operation`` it judged.

Every JSON writer reads :func:`published` (through
:func:`qkvcli.render.document.check_entry`), so a check's name and family are spelled
once, here. Names are kebab-case and unique within a document; ``qkv check`` keeps the
names its text report prints (``head-prefix``, ``multi-head-errors``...), the other
reports publish the idea's own name. The text and trace reports of the chapters keep
the course's spellings (``row_sums=``, ``prefix_invariance=``: the anchors' bytes); only
the JSON (and the page drawn from it) speaks this vocabulary.

The families (ideas), each with what it claims, follow as constants; then the
operations; then the table. Words of the chapters' entries (``claim``) are the words
their figures use: those entries have no other detail.
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

# --- the families: one idea each ------------------------------------------------------

FORWARD = "forward"
"""The forward pass gives what it must: finite outputs of the right shapes (qkv's
engine), or the same outputs as qkv within the tolerance (an implementation)."""
REVERSE = "reverse"
"""The reverse pass gives what it must: finite gradients shaped like their tensors, or
the same gradients as qkv within the tolerance."""
SHAPES = "shapes"
"""Outputs keep the batch and token axes of the input, empty axes (an empty batch, no
tokens) included."""
REJECTED_INPUTS = "rejected-inputs"
"""Every bad input is refused, with the exact error it must raise (run's and the
chapters' ``errors``, chapters 27 and 28's ``rejected_inputs``, ``qkv check``'s
``errors``: one idea)."""
REPLAY = "replay"
"""The same input run twice gives the same bits."""
GRADCHECK = "gradcheck"
"""The analytic gradients agree with central differences of the forward."""
PURITY = "purity"
"""An implementation leaves the arrays it is given unchanged."""
INDEPENDENCE = "independence"
"""Changing one projection's weights changes only its own output (and each upstream
gradient only its own weight gradient)."""
INITIALIZATION = "initialization"
"""Seeded initialization is reproducible, independent per weight and transactional."""
EXPECT = "expect"
"""A fixture's ``expect`` section: the quantities it names are as expected."""
PREFIX = "prefix"
"""Under the causal mask, changing the last token's input leaves every earlier output
bit for bit and changes the last (chapter 28's ``prefix_invariance``, chapter 30's and
attend's ``prefix``, ``qkv check``'s ``head-prefix`` and ``multi-head-prefix``)."""
SINGLE_TOKEN = "single-token"
"""One token: its one weight is exactly 1 and no gradient reaches the query's or the
key's parameters."""
ROW_SUMS = "row-sums"
"""Each query's attention weights are a distribution: non-negative and summing to 1
(attend publishes it as ``weights`` before schema 2)."""
FUTURE_ZERO = "future-zero"
"""Under the causal mask every weight on a later key is exactly 0 (chapter 28's
``masked_rows``, attend's ``mask``: the same claim)."""
CAUSAL = "causal"
"""A causal multi-head layer's weights: each head's later keys weigh exactly 0 and each
row sums to 1 (both claims at once, chapter 30's alone)."""
MASK = "mask"
"""An implementation places the causal mask right: ``causal=true`` hides exactly the
later positions, after the scores and before the softmax, ``causal=false`` hides none.
A claim about where the mask goes, not only about the weights it leaves, so not
:data:`FUTURE_ZERO`."""
SOFTMAX = "softmax"
"""An implementation's softmax: rows of weights non-negative and summing to 1, and
large scores that do not overflow."""
SCALING = "scaling"
"""Scores are divided by ``sqrt(d_k)`` (chapter 27's scale probe: the scale softens a
peaked row; ``qkv check``'s scaling: the scores are ``Q K^T / sqrt(d_k)``)."""
BATCH_ISOLATION = "batch-isolation"
"""Items of a batch do not see each other: a batch of two gives each half bit for bit
as alone."""
SUFFIX_GRADIENT = "suffix-gradient"
"""Under the causal mask a gradient seeded on the earlier outputs sends exactly 0 to
the later tokens' query, key and value."""
TAPE_FINITE = "tape-finite"
"""Every array of the reverse pass is finite (the mask's ``-inf`` never reaches it)."""
HULL = "hull"
"""Each output is the weights' mixture of the value rows, so it lies in their convex
hull."""
POSITION_ZERO = "position-zero"
"""RoPE turns the token at position 0 by nothing: its vector is the input's, exactly."""
NORMS = "norms"
"""RoPE keeps each vector's norm."""
RELATIVE_DOT = "relative-dot"
"""RoPE depends on relative positions only: moving every position by one offset keeps
the dot products of the turned tokens (chapter 29's and ``qkv check``'s
``relative-dot``) and so a layer's weights (chapter 30's ``common-offset``)."""
HEAD_ISOLATION = "head-isolation"
"""Before the output projection the heads are apart: changing one head's query columns
or one K/V head's value columns moves no other head's weights or merged columns."""
SPLIT_MERGE = "split-merge"
"""Splitting into heads and merging them back give the heads' outputs and the merged
tensor, bit for bit."""
PARAMETERS = "parameters"
"""A layer's parameters are distinct arrays, none sharing memory with another."""
PROTOCOL = "protocol"
"""An implementation speaks the protocol: every request answered in its format."""

# --- the operations: what a check judged ---------------------------------------------

PROJECTIONS = "projections"
"""Chapter 26's query, key and value projections (``qkv run`` on a chapter 26 fixture,
``qkv check``'s projections)."""
HEAD = "head"
"""One attention head (chapters 27 and 28, ``qkv check``'s head)."""
ROPE = "rope"
"""Rotary position embedding (chapter 29, ``qkv check``'s RoPE)."""
MULTI_HEAD = "multi-head"
"""Multi-head attention (chapter 30, ``qkv check``'s multi-head layer)."""
LAYER = "layer"
"""A real model's attention layer, or one head run as a layer of one head (``qkv attend``)."""
CACHED_STEP = "cached-step"
"""A cached step equals the last row of the causal pass over its prefix, within the
tolerance, and the cache holds that pass's rotated keys and values (chapter 37)."""
CACHE_GROWTH = "cache-growth"
"""A step adds one position to the cache (``[B,H,t,d_h]`` to ``[B,H,t+1,d_h]``) inside
storage ``[B,H,C,d_h]`` made once."""
CACHE_OFFSET = "cache-offset"
"""A step turns its query and key by RoPE at the cache's length, its absolute position."""
WORK_COUNTS = "work-counts"
"""The rows each projection reads step by step, for whole prefixes, and reuses from the
cache follow their formulas."""
CACHE_RESET = "cache-reset"
"""A reset forgets every position and keeps the storage (the same arrays, the same bits)."""
KV_CACHE = "kv-cache"
"""A layer with its KV cache, one token a step (chapter 37)."""
IMPLEMENTATION = "implementation"
"""The implementation as a program speaking the protocol (``qkv check``'s protocol)."""

OPERATIONS: tuple[str, ...] = (PROJECTIONS, HEAD, ROPE, MULTI_HEAD, LAYER, KV_CACHE,
                                IMPLEMENTATION)
FAMILIES: tuple[str, ...] = (
    FORWARD, REVERSE, SHAPES, REJECTED_INPUTS, REPLAY, GRADCHECK, PURITY, INDEPENDENCE,
    INITIALIZATION, EXPECT, PREFIX, SINGLE_TOKEN, ROW_SUMS, FUTURE_ZERO, CAUSAL, MASK, SOFTMAX,
    SCALING, BATCH_ISOLATION, SUFFIX_GRADIENT, TAPE_FINITE, HULL, POSITION_ZERO, NORMS,
    RELATIVE_DOT, HEAD_ISOLATION, SPLIT_MERGE, PARAMETERS, PROTOCOL, CACHED_STEP, CACHE_GROWTH,
    CACHE_OFFSET, WORK_COUNTS, CACHE_RESET,
)
"""Every family, the schema's ``family`` enumeration."""
OUTCOMES: tuple[str, ...] = ("passed", "failed", "not-run", "no-backward", "command")
"""A check entry's ``outcome`` codes (``core.results.OUTCOMES``)."""


class Published(Record):
    """A check as the JSON publishes it: its ``name``, ``family`` and ``operation``, and
    for a chapter's check the words its figure uses (``claim``: its detail)."""

    name: str
    family: str
    operation: str
    claim: str = ""


def _same(operation: str, *ids: str) -> dict[str, Published]:
    """Checks whose published name is their family's, internal ids spelled ``_`` or ``-``."""
    return {i: Published(i.replace("_", "-"), i.replace("_", "-"), operation) for i in ids}


# the reports' keys: each plan's in the one plan table (qkvcli.check.plans), and its names here

_HEAD_CLAIMS = {
    "row_sums": Published("row-sums", ROW_SUMS, HEAD, "rows sum to 1, and each output is its "
                          "row's mixture of the value rows"),
    "scale_probe": Published("scale-probe", SCALING, HEAD, "dividing by sqrt(d_k) softens a "
                             "peaked row"),
    "single_token": Published("single-token", SINGLE_TOKEN, HEAD, "one token: probability 1, "
                              "no gradient to Q or K"),
    "batch_isolation": Published("batch-isolation", BATCH_ISOLATION, HEAD, "batch of two: "
                                 "halves bit for bit equal"),
    "empty_batch": Published("empty-batch", SHAPES, HEAD, "an empty batch gives empty weights "
                             "and outputs of the right shapes"),
    "gradcheck": Published("gradcheck", GRADCHECK, HEAD),
    "rejected_inputs": Published("rejected-inputs", REJECTED_INPUTS, HEAD),
    "replay": Published("replay", REPLAY, HEAD),
    "masked_rows": Published("future-zero", FUTURE_ZERO, HEAD, "future keys weigh exactly 0"),
    "prefix_invariance": Published("prefix", PREFIX, HEAD, "a later token changed: every "
                                   "earlier output bit for bit unchanged, the later one changed"),
    "suffix_gradient": Published("suffix-gradient", SUFFIX_GRADIENT, HEAD, "prefix seed: dQ, "
                                 "dK, dV exactly 0 at the later positions"),
    "tape_finite": Published("tape-finite", TAPE_FINITE, HEAD, "reverse pass: every array "
                             "finite, -inf never reaches it"),
}

_SHARED_FAMILIES = {"forward": FORWARD, "reverse": REVERSE, "shapes": SHAPES,
                    "errors": REJECTED_INPUTS, "replay": REPLAY, "purity": PURITY,
                    "gradcheck": GRADCHECK, "prefix": PREFIX, "single-token": SINGLE_TOKEN}
"""``qkv check``'s families every kind shares, by the name after the kind's prefix."""
_ATTENTION = ("prefix", "single-token")
_KINDS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("", PROJECTIONS, ("forward", "reverse", "shapes", "errors", "replay", "purity",
                       "gradcheck")),
    ("head-", HEAD, ("forward", "reverse", "shapes", "errors", "replay", "purity",
                     "gradcheck", *_ATTENTION)),
    ("rope-", ROPE, ("reverse", "shapes", "errors", "replay", "purity", "gradcheck")),
    ("multi-head-", MULTI_HEAD, ("reverse", "shapes", "errors", "replay", "purity",
                                 "gradcheck", *_ATTENTION)),
)
"""Each kind of ``qkv check``: its names' prefix, its operation, the shared families it
publishes under that prefix (RoPE's and multi-head's forward are ``rope`` and
``multi-head``, below)."""

PUBLISHED: dict[str, dict[str, Published]] = {
    RUN: {
        **_same(PROJECTIONS, "forward", "reverse", "shapes", "initialization", "independence",
                "replay", "gradcheck", "expect"),
        "errors": Published("rejected-inputs", REJECTED_INPUTS, PROJECTIONS),
    },
    CH27: {key: _HEAD_CLAIMS[key] for key in (
        "row_sums", "scale_probe", "single_token", "batch_isolation", "empty_batch",
        "gradcheck", "rejected_inputs", "replay")},
    CH28: {key: _HEAD_CLAIMS[key] for key in (
        "row_sums", "masked_rows", "prefix_invariance", "suffix_gradient", "single_token",
        "empty_batch", "tape_finite", "gradcheck", "rejected_inputs", "replay")},
    CH29: {
        "position_zero": Published("position-zero", POSITION_ZERO, ROPE, "position 0 turns "
                                   "by nothing: exactly the input"),
        "norms": Published("norms", NORMS, ROPE, "every turned vector keeps its norm"),
        "relative_dot": Published("relative-dot", RELATIVE_DOT, ROPE, "a common shift of "
                                  "every position keeps every dot product"),
        "shapes": Published("shapes", SHAPES, ROPE, "empty and leading axes keep their shapes"),
        "errors": Published("rejected-inputs", REJECTED_INPUTS, ROPE),
        "gradcheck": Published("gradcheck", GRADCHECK, ROPE),
        "tape_finite": Published("tape-finite", TAPE_FINITE, ROPE, "reverse pass: every "
                                 "array finite"),
        "replay": Published("replay", REPLAY, ROPE),
    },
    CH30: {
        "causal": Published("causal", CAUSAL, MULTI_HEAD, "every head: future keys weigh "
                            "exactly 0, every row sums to 1"),
        "prefix": Published("prefix", PREFIX, MULTI_HEAD, "a later token changed: every "
                            "earlier output bit for bit unchanged, the later one changed"),
        "head_isolation": Published("head-isolation", HEAD_ISOLATION, MULTI_HEAD, "one "
                                    "head's W_Q or W_V columns changed: no other head moves"),
        "split_merge": Published("split-merge", SPLIT_MERGE, MULTI_HEAD, "split into heads "
                                 "and merged back, bit for bit"),
        "common_offset": Published("common-offset", RELATIVE_DOT, MULTI_HEAD, "a common "
                                   "offset of every position keeps the weights"),
        "shapes": Published("shapes", SHAPES, MULTI_HEAD, "empty and probe inputs keep their "
                            "shapes"),
        "parameters": Published("parameters", PARAMETERS, MULTI_HEAD, "every parameter its "
                                "own array"),
        "errors": Published("rejected-inputs", REJECTED_INPUTS, MULTI_HEAD),
        "gradcheck": Published("gradcheck", GRADCHECK, MULTI_HEAD),
        "tape_finite": Published("tape-finite", TAPE_FINITE, MULTI_HEAD, "reverse pass: "
                                 "every array finite"),
        "replay": Published("replay", REPLAY, MULTI_HEAD),
    },
    CH37: {
        "steps": Published("cached-steps", CACHED_STEP, KV_CACHE, "every step equals the last "
                           "row of the causal pass over its prefix; the cache holds that "
                           "pass's rotated keys and values"),
        "growth": Published("growth", CACHE_GROWTH, KV_CACHE, "each step adds one position "
                            "inside the storage made once"),
        "offset": Published("offset", CACHE_OFFSET, KV_CACHE, "each step turns Q and K at the "
                            "cache's length"),
        "work": Published("work", WORK_COUNTS, KV_CACHE, "rows read step by step, for whole "
                          "prefixes and reused follow their formulas"),
        "reset": Published("reset", CACHE_RESET, KV_CACHE, "length 0, the same storage, its "
                           "values untouched"),
        "replay": Published("replay", REPLAY, KV_CACHE),
        "errors": Published("rejected-inputs", REJECTED_INPUTS, KV_CACHE),
    },
    ATTEND: {
        **_same(LAYER, "forward", "hull", "reverse", "gradcheck", "shapes", "replay", "prefix",
                "single_token"),
        "attention": Published("row-sums", ROW_SUMS, LAYER),
        "mask": Published("future-zero", FUTURE_ZERO, LAYER),
        "scale_probe": Published("scale-probe", SCALING, LAYER),
        "head_isolation": Published("head-isolation", HEAD_ISOLATION, LAYER),
        "position_zero": Published("position-zero", POSITION_ZERO, LAYER),
        "decode": Published("cached-steps", CACHED_STEP, LAYER),
    },
    CHECK: {
        **{f"{prefix}{idea}": Published(f"{prefix}{idea}", _SHARED_FAMILIES[idea], operation)
           for prefix, operation, ideas in _KINDS for idea in ideas},
        "rope": Published("rope", FORWARD, ROPE),
        "multi-head": Published("multi-head", FORWARD, MULTI_HEAD),
        "independence": Published("independence", INDEPENDENCE, PROJECTIONS),
        "scaling": Published("scaling", SCALING, HEAD),
        "softmax": Published("softmax", SOFTMAX, HEAD),
        "mask": Published("mask", MASK, HEAD),
        "position-zero": Published("position-zero", POSITION_ZERO, ROPE),
        "relative-dot": Published("relative-dot", RELATIVE_DOT, ROPE),
        "head-isolation": Published("head-isolation", HEAD_ISOLATION, MULTI_HEAD),
        "cache-steps": Published("cache-steps", CACHED_STEP, KV_CACHE),
        "cache-refusals": Published("cache-refusals", REJECTED_INPUTS, KV_CACHE),
        "cache-errors": Published("cache-errors", REJECTED_INPUTS, KV_CACHE),
        "cache-replay": Published("cache-replay", REPLAY, KV_CACHE),
        "cache-purity": Published("cache-purity", PURITY, KV_CACHE),
        "protocol": Published("protocol", PROTOCOL, IMPLEMENTATION),
    },
}
"""Each report's checks by internal id (``run``: chapter 26's; a
chapter's by its plan; ``attend``'s by its evidence; ``check``'s by family name)."""


def published(report: str, check: str) -> Published:
    """The published form of ``report``'s check ``check``. Raises ``KeyError`` for a check
    the table lacks (a new check must be named here before any JSON prints it)."""
    return PUBLISHED[report][check]
