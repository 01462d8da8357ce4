"""Chapters 27 and 28's report, trace, JSON and figure: pure functions of a head's evidence.

The chapter's facts are built once (:func:`facts`): the JSON is their one walk, and the
text and the trace are layout tables over them (:func:`~qkvcli.render.facts.report`),
which keep the course's bytes for each chapter's bundled fixture (``tests/golden/ch27``,
``ch28``). Their lines differ by chapter, so each chapter has its own two tables, drawn
from the same rows. The figure is one function, the chapter's parts added to what both
share. Every published name of the two chapters lives here, each chapter's in its
:class:`ChapterWords`.

The course prints a zero as ``0.000000`` whatever its sign, as
:func:`~qkvcli.render.numbers.fmt_vector` spells a vector (``-inf`` stays).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from qkvcli.chapters.head import CausalEvidence, HeadChapterEvidence, SelfAttentionEvidence
from qkvcli.core.record import Record
from qkvcli.core.results import ShapeProbe
from qkvcli.render.chapters.entries import (
    KEPT_TEXT,
    KEPT_TRACE,
    REPLAY,
    TRACED,
    chapter_checks,
    error_lines,
    invariance,
    refusals,
    rejected,
    shape_of,
)
from qkvcli.render.chapters.entries import json_document as json_document_of
from qkvcli.render.chapters.rows import (
    Table,
    fields,
    gradcheck,
    per,
    refused_facts,
    tensor_lines,
    tensors,
)
from qkvcli.render.facts import Fact, Part, report, scalar, section, shape, tensor, verdict
from qkvcli.render.numbers import fmt_bool, fmt_float, fmt_shape, fmt_vector

if TYPE_CHECKING:
    from rich.console import RenderableType

    from qkvcli.render.rich.options import RichOptions


class ChapterWords(Record):
    """A head chapter's published words: its prediction, what comes next, its history as
    the course states it, and its rejected cases' names (``error_keys``: on the report's
    ``errors=`` line; ``error_kinds``: each expected error in the trace's ``kind=``;
    ``fact_names``: a case's facts the trace names otherwise than its error's fields, or
    does not publish: :func:`~.rows.refused_facts`)."""

    prediction: str
    next: str
    next_chapter: str
    history: tuple[tuple[str, str], ...]
    error_keys: dict[str, str]
    error_kinds: dict[str, str]
    closing: str
    fact_names: dict[str, str | None]


SELF_ATTENTION = ChapterWords(
    prediction="each query scores every key, then one probability row mixes the value rows",
    next="mask future key positions before row normalization",
    next_chapter="28-causal-masking",
    history=(("earlier", "recurrent-fixed-context"),
             ("bridge", "additive-encoder-decoder-alignment"),
             ("transformer", "scaled-dot-product-self-attention"),
             ("comparison", "all-sequence-positions")),
    error_keys={"query-rank": "query_rank", "batch-mismatch": "batch", "token-mismatch": "tokens",
                "empty-tokens": "empty", "query-key-width": "width"},
    error_kinds={"OperandRank": "input-rank", "OperandBatchMismatch": "batch-mismatch",
                 "OperandTokenMismatch": "token-mismatch", "EmptyTokenAxis": "empty-token-axis",
                 "QueryKeyWidthMismatch": "query-key-width-mismatch"},
    closing="No mask yet: chapter 28 hides the keys after each query before the softmax.",
    fact_names={},
)
CAUSAL = ChapterWords(
    prediction=("each query keeps its diagonal and earlier keys, while future keys receive "
                "zero probability"),
    next="add relative position information without changing the causal boundary",
    next_chapter="29-rope",
    history=(("earlier", "recurrent-autoregressive-state"), ("visibility", "available-prefix"),
             ("transformer", "parallel-known-targets"),
             ("decoder_rule", "no-subsequent-positions"), ("generation", "sequential")),
    error_keys={"attention-empty-tokens": "empty_tokens", "softmax-rank": "softmax_rank",
                "softmax-shape": "softmax_shape", "query-rank": "query_rank",
                "token-mismatch": "token_mismatch", "released-score": "released_score"},
    error_kinds={"EmptyTokenAxis": "empty-tokens", "CausalSoftmaxRank": "causal-softmax-rank",
                 "CausalSoftmaxNonSquare": "causal-softmax-non-square",
                 "OperandRank": "score-input-rank", "OperandTokenMismatch": "score-token-mismatch",
                 "ReleasedOperand": "released-operand"},
    closing="Chapter 29 turns Q and K by position (RoPE) without moving the causal boundary.",
    fact_names={"OperandRank.operand": "input", "EmptyTokenAxis.tokens": None},
)
MASK_RULE = "lower-triangular-inclusive"
"""Chapter 28's mask, as its config names it."""


def _shaped(probe: ShapeProbe, name: str) -> tuple[int, ...]:
    """The shape of a shape probe's result ``name`` (``()`` when it had none); ``mask``:
    each batch item's masked scores ``[T,T]``."""
    if name == "mask":
        return _shaped(probe, "masked_scores")[1:]
    return probe.shape(name) or ()


def words(evidence: HeadChapterEvidence) -> ChapterWords:
    return CAUSAL if isinstance(evidence, CausalEvidence) else SELF_ATTENTION


# --- the course's spellings -------------------------------------------------------------

def mixture_terms(terms: Any) -> str:
    """One query's terms ``A[i,j] V[j]`` (``[T,d_v]``) as ``[[..],[..]]``."""
    return "[" + ",".join(fmt_vector(row) for row in np.asarray(terms)) + "]"


def mask_text(mask: Any) -> str:
    """The single-token mask as the course writes it: ``0`` or ``-inf`` per entry."""
    flat = np.asarray(mask).reshape(-1)
    return "[" + ",".join("-inf" if np.isneginf(m) else "0" for m in flat) + "]"


# --- the text and the trace: tables over the facts -------------------------------------

def _rows(key: str, count: int, parts: tuple[tuple[str, str, Any], ...]) -> Table:
    """One line per query ``i`` of batch item 0 (``key``: with ``{}``, the query's number
    is in it; else the line's first part)."""
    named = "{}" in key
    return per(key.format if named else key, range(count),
               (*(() if named else (("query", lambda e, i: i),)), *parts))


ROW = lambda value, i: fmt_vector(value[0, i])  # noqa: E731
SUM = lambda value, i: fmt_float(value[0, i])  # noqa: E731
TERMS = lambda value, i: mixture_terms(value[i])  # noqa: E731
BRANCHES = ("query", "key", "value")
CONFIG = fields("config", "batch tokens d_k d_v scale")
OPENING: Table = (("chapter", lambda e: e.chapter), ("prediction", lambda e: words(e).prediction))
BACKWARD = fields("tensors", "query_gradient key_gradient value_gradient", fmt_vector)
GRADIENTS = tensor_lines("query_gradient key_gradient value_gradient", spell=fmt_vector)
SINGLE = fields("single_token", "probabilities output query_gradient_zero key_gradient_zero",
                probabilities=fmt_vector, output=fmt_vector)
UPSTREAM: Table = (("upstream", (("", "tensors.upstream", fmt_vector),
                                 ("", "loss", lambda loss: f"loss={fmt_float(loss)}"))),)
HISTORY: Table = (("history", (("", "history.*"),)),)
ROW_SUMS = ("row_sums", ("tensors.row_sums", fmt_vector))
CLOSING: Table = (("next", lambda e: words(e).next),)
PROOF = (("row_sum_tolerance", lambda e: fmt_float(e.primary.row_sum_tolerance, 12)),
         *gradcheck(BRANCHES, "gradient_tolerance", "gradcheck"))
NEXT: Table = (("NEXT", (("chapter", "next"),)),)


def _self_attention_text(evidence: SelfAttentionEvidence) -> Table:
    return (
        *OPENING, ("config", (*CONFIG, *fields("config", "masked softmax_axis"))),
        *tensor_lines("query key value dot_products scaled_scores probabilities"), ROW_SUMS,
        *_rows("mixture_query_{}", len(evidence.primary.terms), (
            ("terms", "tensors.mixture_terms", TERMS), ("output", "tensors.output", ROW))),
        *tensor_lines("output"),
        ("scale_probe", fields("scale_probe", "unscaled_focus scaled_focus orthogonal_probability "
                                              "softened")),
        ("single_token", SINGLE), ("batch_probe", (("", "batch_probe.*"),)),
        ("empty_batch", fields("empty_batch", "probabilities output value_width_probe")),
        *UPSTREAM, *GRADIENTS, ("gradcheck", gradcheck(BRANCHES)),
        ("errors", rejected(SELF_ATTENTION.error_keys)), *HISTORY,
        ("same_fixture_replays_bitwise", "replay_bitwise"), *CLOSING,
    )


def _self_attention_trace(evidence: SelfAttentionEvidence) -> Table:
    p, single = evidence.primary, evidence.single
    batch, tokens, _ = p.query.shape
    return (
        ("META", (("shape", "tensors.query", shape_of),
                  *fields("config", "key_width=d_k value_width=d_v scale softmax_axis masked"))),
        *tensor_lines("query key value dot_products scaled_scores", True),
        *_rows("PROBABILITY_ROW", tokens if batch else 0, (
            ("values", "tensors.probabilities", ROW), ("sum", "tensors.row_sums", SUM))),
        *_rows("MIXTURE_ROW", len(p.terms), (
            ("probabilities", "tensors.probabilities", ROW),
            ("terms", "tensors.mixture_terms", TERMS), ("output", "tensors.output", ROW))),
        ("BACKWARD", (("seed", "tensors.upstream", fmt_vector), *BACKWARD)),
        ("BATCH_SHAPE", (("batches", lambda e: e.batch.input[0]), ("", "batch_probe.*"))),
        ("SINGLE_TOKEN", (
            ("shape", lambda e: fmt_shape(single.query.shape)),
            *fields("single_token", "query key value", fmt_vector),
            ("raw", lambda e: fmt_vector(single.scores)),
            ("scaled", lambda e: fmt_vector(single.scaled_scores)), *SINGLE)),
        *error_lines(range(len(evidence.errors))),
        ("HISTORY", (("", "history.*"),)),
        ("PROOF", (*PROOF, REPLAY, ("unmasked", lambda e: fmt_bool(
            not p.mask.size or bool((p.mask == 0.0).all()))))),
        *NEXT,
    )


# --- chapter 28 -------------------------------------------------------------------------

def _future(zero: bool) -> str:
    """``exact-zero`` when every future key weighs exactly 0, else ``nonzero``."""
    return "exact-zero" if zero else "nonzero"


def _arrow(name: str) -> Any:
    """A perturbed row's ``before->after`` (``name``: ``key`` or ``value``)."""
    return lambda x: f"{fmt_vector(x[f'{name}_before'].value)}->{fmt_vector(x[f'{name}_after'].value)}"


def _invariance(words: tuple[str, ...], labelled: str, between: str) -> Any:
    """The suffix perturbation's prefix proof (:func:`~.entries.invariance`)."""
    return lambda x: invariance(x["unchanged_positions"], x["position"], x["last_changed"].value,
                                words, labelled, between)


CAUSAL_PROOF: tuple[Part, ...] = (
    ("future_probabilities", "future_probabilities_zero", _future),
    ("prefix_outputs", "suffix_perturbation.unchanged_positions",
     lambda same: "bitwise" if all(same) else "changed"), REPLAY)


def _causal_text(evidence: CausalEvidence) -> Table:
    return (
        *OPENING, ("config", (*CONFIG, *fields("config", "mask"))),
        *tensor_lines("query key value mask raw_scores scaled_scores probabilities"), ROW_SUMS,
        *tensor_lines("output"),
        ("suffix_perturbation", tuple((name, "suffix_perturbation", _arrow(name))
                                      for name in ("key", "value"))),
        ("perturbed_output", ("suffix_perturbation.perturbed_output", fmt_vector)),
        ("prefix_invariance", ("suffix_perturbation", _invariance(KEPT_TEXT, ":", " "))),
        *UPSTREAM, *GRADIENTS,
        ("prefix_seed", (("", "prefix_gradient.seed", fmt_vector),
                         ("", "prefix_gradient.suffix_zero",
                          lambda zero: "suffix_gradient_zero=" + fmt_bool(zero)))),
        ("single_token", SINGLE),
        ("empty_batch", fields("empty_batch", "probabilities output valid")),
        ("errors", rejected(CAUSAL.error_keys)), ("gradcheck", gradcheck(BRANCHES)), *HISTORY,
        ("proof", (("tape_finite", "tape_finite"), *CAUSAL_PROOF)), *CLOSING,
    )


def _causal_trace(evidence: CausalEvidence) -> Table:
    return (
        ("META", (*((f"{name}_shape", f"tensors.{path}", shape_of) for name, path in (
            ("input", "query"), ("score", "raw_scores"), ("mask", "mask"), ("output", "output"))),
            *fields("config", "tokens key_width=d_k value_width=d_v scale softmax_axis mask"))),
        *tensor_lines("query key value mask raw_scores scaled_scores", True),
        *_rows("CAUSAL_ROW", len(evidence.primary.terms), (
            ("visibility", "tensors.mask", lambda mask, i: "[" + ",".join(
                "blocked" if np.isneginf(m) else "allowed" for m in mask[i]) + "]"),
            ("masked_scores", "tensors.masked_scores", ROW),
            ("probabilities", "tensors.probabilities", ROW), ("sum", "tensors.row_sums", SUM),
            ("terms", "tensors.mixture_terms", TERMS), ("output", "tensors.output", ROW))),
        ("SUFFIX_PERTURBATION", (("position", "suffix_perturbation.position"), *fields(
            "suffix_perturbation", "key_before key_after value_before value_after", fmt_vector))),
        ("PERTURBED_OUTPUT", "suffix_perturbation.perturbed_output"),
        ("PREFIX_INVARIANCE", (("changed_position", "suffix_perturbation.position"),
                               ("", "suffix_perturbation", _invariance(KEPT_TRACE, "=", "|")))),
        ("BACKWARD", (("seed", "tensors.upstream", fmt_vector), ("loss", "loss"), *BACKWARD)),
        ("PREFIX_GRADIENT", (*fields("prefix_gradient", "seed query_gradient key_gradient "
                                                        "value_gradient", fmt_vector),
                             ("suffix_zero", "prefix_gradient.suffix_zero"))),
        ("SINGLE_TOKEN", (("mask", lambda e: mask_text(e.single.mask)), *SINGLE)),
        ("EMPTY_BATCH", fields("empty_batch", "query_shape=query key_shape=key value_shape=value "
                                              "mask_shape=mask probability_shape=probabilities "
                                              "output_shape=output valid")),
        *error_lines(range(len(evidence.errors))),
        ("HISTORY", tuple(("earlier_visibility" if key == "visibility" else key, f"history.{key}")
                          for key, _ in CAUSAL.history)),
        ("PROOF", (("mask_future", "tensors.mask", lambda mask: "negative-infinity"
                    if np.isneginf(mask).any() else "none"),
                   ("tape_finite", "tape_finite"),
                   CAUSAL_PROOF[0], *PROOF, *CAUSAL_PROOF[1:])),
        *NEXT,
    )


# --- the views the dispatcher calls -----------------------------------------------------

def text(evidence: HeadChapterEvidence) -> str:
    """The chapter's report (the course's ``expected.txt`` for its fixture)."""
    return report(facts(evidence), evidence, _table(evidence, False))


def trace(evidence: HeadChapterEvidence) -> str:
    """The diagram trace: what the figure shows, one record a line."""
    return report(facts(evidence), evidence, _table(evidence, True), True, TRACED)


def _table(evidence: HeadChapterEvidence, trace: bool) -> Table:
    if isinstance(evidence, CausalEvidence):
        return (_causal_trace if trace else _causal_text)(evidence)
    assert isinstance(evidence, SelfAttentionEvidence)
    return (_self_attention_trace if trace else _self_attention_text)(evidence)


def facts(evidence: HeadChapterEvidence) -> dict[str, Any]:
    """The chapter's facts (:mod:`qkvcli.render.facts`) after the JSON's head: every
    tensor with its axes named, probe, case and verdict, in a declared order (chapter
    28's tensors add the mask and the masked scores, and its own probes)."""
    from qkvcli.render.document import coordinate_json

    p, single, e, g, said = (evidence.primary, evidence.single, evidence.empty,
                             evidence.gradcheck, words(evidence))
    batch, tokens, d_k = p.query.shape
    rows, square = ("batch", "token", "feature"), ("batch", "query", "key")

    def shapes(probe: ShapeProbe, *names: str, **more: Any) -> dict[str, Fact]:
        """A shape probe's operands (``query``, ``key``, ``value``) and results ``names``,
        each published as ``name=result``."""
        operands = zip(("query", "key", "value"), evidence.operands(probe), strict=True)
        return {**{name: shape(dims) for name, dims in operands},
                **{label: shape(_shaped(probe, name or label))
                   for label, _, name in (word.partition("=") for word in names)}, **more}

    own: dict[str, Any] = {}
    empty = shapes(e)
    if isinstance(evidence, CausalEvidence):
        x = evidence.prefix
        own = {"future_probabilities_zero": verdict(evidence.future_zero),
               "tape_finite": verdict(p.tape_finite),
               "suffix_perturbation": section(
                   position=x.position, **tensors(rows, True, key_before=x.key_before,
                                                  key_after=x.key_after, value_before=x.value_before,
                                                  value_after=x.value_after),
                   perturbed_output=tensor(x.perturbed_output, rows),
                   unchanged_positions=list(x.unchanged), last_changed=verdict(x.last_changed)),
               "prefix_gradient": section(
                   seed=tensor(x.seed, rows, given=True), suffix_start=x.suffix_start,
                   **tensors(rows, query_gradient=x.grad_query, key_gradient=x.grad_key,
                             value_gradient=x.grad_value), suffix_zero=verdict(x.suffix_zero))}
        empty = shapes(e, "mask", "probabilities=weights", "output", valid=verdict(e.kept))
    elif isinstance(evidence, SelfAttentionEvidence):
        s = evidence.scale
        own = {"scale_probe": section(d_k=s.d_k, **{name: scalar(getattr(s, name)) for name in (
            "scale", "unscaled_focus", "scaled_focus", "orthogonal_probability")},
            softened=verdict(s.softened))}
        empty = shapes(e, "probabilities=weights", "output", value_width_probe=shape(
            _shaped(evidence.value_width, "output")))
    scores = ({"mask": tensor(p.mask, ("query", "key")), "raw_scores": tensor(p.scores, square),
               "scaled_scores": tensor(p.scaled_scores, square),
               "masked_scores": tensor(p.masked_scores, square)}
              if isinstance(evidence, CausalEvidence)
              else tensors(square, dot_products=p.scores, scaled_scores=p.scaled_scores))
    return {
        "checks": chapter_checks(evidence.chapter, evidence),
        "config": section(batch=int(batch), tokens=int(tokens), d_k=int(d_k),
                          d_v=int(p.value.shape[2]), scale=scalar(p.scale),
                          **({"mask": MASK_RULE} if isinstance(evidence, CausalEvidence)
                             else {"masked": verdict(False)}),
                          softmax_axis="key", source=evidence.source),
        "tensors": section(
            **tensors(rows, True, query=p.query, key=p.key, value=p.value), **scores,
            probabilities=tensor(p.probabilities, square),
            row_sums=tensor(p.row_sums, ("batch", "query")),
            mixture_terms=tensor(p.terms, ("query", "key", "feature")),
            output=tensor(p.output, rows), upstream=tensor(p.upstream, rows, given=True),
            **tensors(rows, query_gradient=p.grad_query, key_gradient=p.grad_key,
                      value_gradient=p.grad_value)),
        "loss": scalar(p.loss),
        **own,
        "single_token": section(
            **tensors(rows, True, query=single.query, key=single.key, value=single.value),
            probabilities=tensor(single.probabilities, square),
            output=tensor(single.output, rows),
            query_gradient_zero=verdict(single.query_gradient_zero),
            key_gradient_zero=verdict(single.key_gradient_zero)),
        **({"batch_probe": section(**shapes(evidence.batch, "probabilities=weights", "output",
                                            isolated=verdict(evidence.batch_isolated)))}
           if isinstance(evidence, SelfAttentionEvidence) else {}),
        "empty_batch": section(**empty),
        "gradcheck": {"passed": g.passed, "step": g.step, "tolerance": g.tolerance,
                      "tensors": [{"tensor": c.tensor, "shape": list(c.shape),
                                   "checked": len(c.checks), "passed": c.passed,
                                   "checks": [coordinate_json(k) for k in c.checks]}
                                  for c in g.tensors]},
        "errors": refusals(evidence.errors, ("case", "kind", "facts", "rejected", "raised",
                                             "message"), raised=lambda c: c.raised,
                           kind=lambda c: said.error_kinds.get(c.expected, c.expected),
                           facts=lambda c: refused_facts(c, said.fact_names)),
        "history": dict(said.history),
        "replay_bitwise": verdict(evidence.replay_bitwise),
        "next": said.next_chapter,
    }


def json_document(evidence: HeadChapterEvidence) -> dict[str, Any]:
    """The JSON report: the head, then :func:`facts`."""
    return json_document_of(evidence.chapter, evidence, facts(evidence))


def figure(evidence: HeadChapterEvidence, width: int,
           options: RichOptions | None = None) -> RenderableType:
    """The chapter's figure: the trace's records drawn (Q, K, V, the scores, each query's
    probabilities and visible keys, the mixture, the reverse pass, the chapter's probes,
    the rejected inputs, the history and the checks), every number at ``options``'
    precision. ``width`` is the console's; the layout adapts to it when printed."""
    from qkvcli.render.chapters import figure as drawn
    from qkvcli.render.rich.options import RichOptions

    options = options or RichOptions()
    n = options.precision  # every number of the figure at the caller's precision
    p, single, e, said = evidence.primary, evidence.single, evidence.empty, words(evidence)

    def row(values: Any) -> str:
        return f"[{drawn.numbers(values, options)}]"

    one = (f"probability {row(single.probabilities)}, output {row(single.output)}, "
           "no gradient to Q or K")
    if isinstance(evidence, CausalEvidence):
        x = evidence.prefix
        later = drawn.facts_part("A later token", [
            (None, "perturbed", f"position {x.position} of batch item 0: key "
             f"{row(x.key_before)} -> {row(x.key_after)}, value {row(x.value_before)} -> "
             f"{row(x.value_after)}"),
            *((same, f"position {i}", "bitwise unchanged" if same else "changed")
              for i, same in enumerate(x.unchanged)),
            (x.last_changed, f"position {x.position}",
             f"{'changed' if x.last_changed else 'unchanged'}: now "
             f"{row(x.perturbed_output[0, x.position])}"),
            (x.suffix_zero, "prefix seed", f"zero from position {x.suffix_start}: dQ, dK, dV "
             f"there {'exactly 0' if x.suffix_zero else 'not 0'}"),
        ], x.invariant and x.suffix_zero)
        probes = drawn.facts_part("Probes", [
            (evidence.future_zero, "future keys", f"weigh {_future(evidence.future_zero)}"),
            (single.holds, "single token", f"mask {mask_text(single.mask)}, {one}"),
            (e.kept, "empty batch", f"A {fmt_shape(_shaped(e, 'weights'))}, "
             f"O {fmt_shape(_shaped(e, 'output'))}, "
             f"mask {fmt_shape(_shaped(e, 'mask'))}"),
            (p.tape_finite, "reverse pass", "every array finite: -inf never reaches it"),
        ])
        cards = [later, probes]
    else:
        assert isinstance(evidence, SelfAttentionEvidence)
        s, b = evidence.scale, evidence.batch
        probes = drawn.facts_part("Probes", [
            (s.holds, "scale probe", f"unscaled focus {fmt_float(s.unscaled_focus, n)}, "
             f"scaled {fmt_float(s.scaled_focus, n)}, orthogonal key "
             f"{fmt_float(s.orthogonal_probability, n)}: "
             f"{'softened' if s.softened else 'not softened'}"),
            (single.holds, "single token", one),
            (evidence.batch_isolated, "batch of two", f"{fmt_shape(evidence.operands(b)[0])} in, "
             f"{fmt_shape(_shaped(b, 'output'))} out, halves bit for bit equal"),
            (evidence.empty_holds, "empty batch", f"A {fmt_shape(_shaped(e, 'weights'))}, O "
             f"{fmt_shape(_shaped(e, 'output'))}; value width 1 gives "
             f"{fmt_shape(_shaped(evidence.value_width, 'output'))}"),
        ])
        cards = [probes]
    return drawn.head_figure(evidence, options, isinstance(evidence, CausalEvidence), cards,
                             (said.prediction, said.history, said.closing))
