"""Chapters 27 and 28's report, trace, JSON and figure: pure functions of a head's evidence.

The text and the trace keep the course's bytes for each chapter's bundled fixture
(``tests/golden/ch27``, ``ch28``): their lines differ by chapter, so each chapter has
its own two functions, drawn from the same pieces. The JSON and the figure are one
function each, the chapter's parts added to what both share. Every published name of
the two chapters lives here, each chapter's in its :class:`ChapterWords`.

The course prints a zero as ``0.000000`` whatever its sign, so :func:`vec` folds ``-0.0``
into ``0.0`` before :func:`~qkvcli.render.numbers.fmt_vector` spells it (``-inf`` stays).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from qkvcli.chapters.head import CausalEvidence, HeadChapterEvidence, SelfAttentionEvidence
from qkvcli.core.record import Record
from qkvcli.core.results import Refusal, ShapeProbe
from qkvcli.render.facts import Fact, Part, entries, json_of, layout, scalar, section, shape, verdict
from qkvcli.render.facts import tensor as fact_tensor
from qkvcli.render.numbers import fmt_bool, fmt_float, fmt_shape, fmt_vector

if TYPE_CHECKING:
    from rich.console import RenderableType

    from qkvcli.gradcheck.records import GradcheckResult
    from qkvcli.render.rich.options import RichOptions


class ChapterWords(Record):
    """A head chapter's published words: its prediction, what comes next, its history as
    the course states it, and its rejected cases' names (``error_keys``: on the report's
    ``errors=`` line; ``error_kinds``: each expected error in the trace's ``kind=``;
    ``fact_names``: a case's facts where the trace names them otherwise than its error's
    fields; ``unsaid``: the errors whose facts the chapter does not publish)."""

    prediction: str
    next: str
    next_chapter: str
    history: tuple[tuple[str, str], ...]
    error_keys: dict[str, str]
    error_kinds: dict[str, str]
    closing: str
    fact_names: dict[str, dict[str, str]]
    unsaid: tuple[str, ...] = ()


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
    fact_names={"OperandRank": {"operand": "input"}},
    unsaid=("EmptyTokenAxis",),
)
MASK_RULE = "lower-triangular-inclusive"
"""Chapter 28's mask, as its config names it."""
Table = tuple[tuple[str, Any], ...]
"""A text's or a trace's lines (:func:`~qkvcli.render.facts.layout`)."""



def _shaped(probe: ShapeProbe, name: str) -> tuple[int, ...]:
    """The shape of a shape probe's result ``name`` (``()`` when it had none); ``mask``:
    each batch item's masked scores ``[T,T]``."""
    if name == "mask":
        return _shaped(probe, "masked_scores")[1:]
    return probe.shape(name) or ()

def words(evidence: HeadChapterEvidence) -> ChapterWords:
    return CAUSAL if isinstance(evidence, CausalEvidence) else SELF_ATTENTION


# --- the course's spellings -------------------------------------------------------------

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


def mask_text(mask: Any) -> str:
    """The single-token mask as the course writes it: ``0`` or ``-inf`` per entry."""
    flat = np.asarray(mask).reshape(-1)
    return "[" + ",".join("-inf" if np.isneginf(m) else "0" for m in flat) + "]"


def facts_of(case: Refusal, said: ChapterWords) -> tuple[tuple[str, Any], ...]:
    """A refusal's published facts: its expected error's fields, under the trace's names."""
    if case.expected in said.unsaid:
        return ()
    names = said.fact_names.get(case.expected, {})
    return tuple((names.get(key, key), value) for key, value in case.fields)


def _errors_line(evidence: HeadChapterEvidence, said: ChapterWords) -> str:
    return "errors=" + " ".join(f"{said.error_keys.get(c.case, c.case)}:{fmt_bool(c.rejected)}"
                                for c in evidence.errors)


def _error_records(evidence: HeadChapterEvidence, said: ChapterWords) -> list[str]:
    return [f"ERROR|case={c.case}|kind={said.error_kinds.get(c.expected, c.expected)}"
            + "".join(f"|{key}={value}" for key, value in facts_of(c, said))
            + f"|rejected={fmt_bool(c.rejected)}" for c in evidence.errors]


def _gradcheck_line(g: GradcheckResult) -> str:
    return (f"gradcheck=query_checks:{g.checked('query')} key_checks:{g.checked('key')} "
            f"value_checks:{g.checked('value')} tolerance:{fmt_float(g.tolerance)} "
            f"passed:{fmt_bool(g.passed)}")


def _single_line(evidence: HeadChapterEvidence) -> str:
    single = evidence.single
    return (f"single_token=probabilities:{vec(single.probabilities)} output:{vec(single.output)} "
            f"query_gradient_zero:{fmt_bool(single.query_gradient_zero)} "
            f"key_gradient_zero:{fmt_bool(single.key_gradient_zero)}")


def _config(evidence: HeadChapterEvidence) -> str:
    p = evidence.primary
    batch, tokens, d_k = p.query.shape
    return (f"config=batch:{batch} tokens:{tokens} d_k:{d_k} d_v:{p.value.shape[2]} "
            f"scale:{fmt_float(p.scale)}")


def _replay(evidence: HeadChapterEvidence) -> str:
    return "bitwise" if evidence.replay_bitwise else "mismatch"


def _joined(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


# --- the text and the trace: tables over the facts -------------------------------------

def _fixed(value: Any) -> str:
    return fmt_float(float(value))


def _row(i: int) -> Any:
    """A spelling of a tensor's row ``i`` of batch item 0."""
    return lambda value: vec(value[0, i])


def _errors(said: ChapterWords) -> Any:
    return lambda errors: " ".join(
        f"{said.error_keys.get(c['case'], c['case'])}:{fmt_bool(c['rejected'].value)}"
        for c in errors)


def _checks(labels: tuple[str, str]) -> tuple[Part, ...]:
    """The gradient check's counts, tolerance and verdict (``labels``: the last two's)."""
    return (*((f"{name}_checks", lambda e, name=name: e.gradcheck.checked(name))
              for name in ("query", "key", "value")),
            (labels[0], "gradcheck", lambda g: fmt_float(g["tolerance"])),
            (labels[1], "gradcheck", lambda g: fmt_bool(g["passed"])))


CONFIG: tuple[Part, ...] = (*((name, f"config.{name}") for name in ("batch", "tokens", "d_k", "d_v")),
                            ("scale", "config.scale", _fixed))
OPENING: Table = (("chapter", lambda e: e.chapter), ("prediction", lambda e: words(e).prediction))
GRADIENTS: Table = tuple((name, (f"tensors.{name}", vec))
                         for name in ("query_gradient", "key_gradient", "value_gradient"))
SINGLE: Table = (("single_token", (*((name, f"single_token.{name}", vec)
                                     for name in ("probabilities", "output")),
                                   *((name, f"single_token.{name}")
                                     for name in ("query_gradient_zero", "key_gradient_zero")))),)
UPSTREAM: Table = (("upstream", (("", "tensors.upstream", vec),
                                 ("", "loss", lambda loss: f"loss={fmt_float(loss)}"))),)
GRADCHECK: Table = (("gradcheck", _checks(("tolerance", "passed"))),)
HISTORY: Table = (("history", (("", "history.*"),)),)
CLOSING: Table = (("next", lambda e: words(e).next),)
TRACE_SPELLINGS = {"tensor": lambda value: tensor(value, "|")}
BACKWARD: tuple[Part, ...] = tuple((name, f"tensors.{name}", vec)
                                   for name in ("query_gradient", "key_gradient", "value_gradient"))
PROOF: tuple[Part, ...] = (
    ("row_sum_tolerance", lambda e: f"{e.primary.row_sum_tolerance:.12f}"),
    *_checks(("gradient_tolerance", "gradcheck")))


def _tensors(names: str, trace: bool) -> Table:
    return tuple((name.upper() if trace else name, f"tensors.{name}") for name in names.split())


def _laid(evidence: HeadChapterEvidence, table: Table, trace: bool) -> str:
    lines = (layout(facts(evidence), evidence, table, "|", "=", "|", TRACE_SPELLINGS) if trace
             else layout(facts(evidence), evidence, table, " ", ":", "="))
    return "\n".join(lines) + "\n"


def _error_rows(evidence: HeadChapterEvidence) -> Table:
    said = words(evidence)
    return tuple(("ERROR", (("case", lambda e, c=c: c.case),
                            ("kind", lambda e, c=c: said.error_kinds.get(c.expected, c.expected)),
                            *((key, lambda e, value=value: value)
                              for key, value in facts_of(c, said)),
                            ("rejected", lambda e, c=c: fmt_bool(c.rejected))))
                 for c in evidence.errors)


# --- chapter 27 -------------------------------------------------------------------------

def _self_attention_text(evidence: SelfAttentionEvidence) -> Table:
    return (
        *OPENING,
        ("config", (*CONFIG, ("masked", "config.masked"), ("softmax_axis", "config.softmax_axis"))),
        *_tensors("query key value dot_products scaled_scores probabilities", False),
        ("row_sums", ("tensors.row_sums", vec)),
        *((f"mixture_query_{i}", (("terms", "tensors.mixture_terms",
                                   lambda terms, i=i: mixture_terms(terms[i])),
                                  ("output", "tensors.output", _row(i))))
          for i in range(evidence.primary.terms.shape[0])),
        *_tensors("output", False),
        ("scale_probe", (*((name, f"scale_probe.{name}", _fixed) for name in (
            "unscaled_focus", "scaled_focus", "orthogonal_probability")),
            ("softened", "scale_probe.softened"))),
        *SINGLE,
        ("batch_probe", (("", "batch_probe.*"),)),
        ("empty_batch", tuple((name, f"empty_batch.{name}")
                              for name in ("probabilities", "output", "value_width_probe"))),
        *UPSTREAM, *GRADIENTS, *GRADCHECK,
        ("errors", ("errors", _errors(SELF_ATTENTION))),
        *HISTORY,
        ("same_fixture_replays_bitwise", "replay_bitwise"),
        *CLOSING,
    )


def _self_attention_trace(evidence: SelfAttentionEvidence) -> Table:
    p = evidence.primary
    batch, tokens, _ = p.query.shape
    single = evidence.single
    return (
        ("META", (("shape", lambda e: fmt_shape(e.primary.query.shape)), ("key_width", "config.d_k"),
                  ("value_width", "config.d_v"), ("scale", "config.scale", _fixed),
                  ("softmax_axis", "config.softmax_axis"), ("masked", "config.masked"))),
        *_tensors("query key value dot_products scaled_scores", True),
        *(("PROBABILITY_ROW", (("query", lambda e, i=i: i),
                               ("values", "tensors.probabilities", _row(i)),
                               ("sum", "tensors.row_sums", lambda sums, i=i: _fixed(sums[0, i]))))
          for i in range(tokens if batch else 0)),
        *(("MIXTURE_ROW", (("query", lambda e, i=i: i),
                           ("probabilities", "tensors.probabilities", _row(i)),
                           ("terms", "tensors.mixture_terms",
                            lambda terms, i=i: mixture_terms(terms[i])),
                           ("output", "tensors.output", _row(i))))
          for i in range(p.terms.shape[0])),
        ("BACKWARD", (("seed", "tensors.upstream", vec), *BACKWARD)),
        ("BATCH_SHAPE", (("batches", lambda e: e.batch.input[0]), ("", "batch_probe.*"))),
        ("SINGLE_TOKEN", (
            ("shape", lambda e: fmt_shape(single.query.shape)),
            *((name, f"single_token.{name}", vec) for name in ("query", "key", "value")),
            ("raw", lambda e: vec(single.scores)), ("scaled", lambda e: vec(single.scaled_scores)),
            *SINGLE[0][1])),
        *_error_rows(evidence),
        ("HISTORY", (("", "history.*"),)),
        ("PROOF", (*PROOF, ("replay", _replay), ("unmasked", lambda e: fmt_bool(
            not p.mask.size or bool((p.mask == 0.0).all()))))),
        ("NEXT", (("chapter", "next"),)),
    )


# --- chapter 28 -------------------------------------------------------------------------

def future_word(evidence: CausalEvidence) -> str:
    """``exact-zero`` when every future key weighs exactly 0, else ``nonzero``."""
    return "exact-zero" if evidence.future_zero else "nonzero"


def _causal_text(evidence: CausalEvidence) -> str:
    p, x, e, said = evidence.primary, evidence.prefix, evidence.empty, CAUSAL
    invariance = " ".join([*(f"position_{i}:{fmt_bool(same)}" for i, same in enumerate(x.unchanged)),
                           f"position_{x.position}_changed:{fmt_bool(x.last_changed)}"])
    return _joined([
        f"chapter={evidence.chapter}",
        f"prediction={said.prediction}",
        f"{_config(evidence)} mask:{MASK_RULE}",
        f"query={tensor(p.query)}",
        f"key={tensor(p.key)}",
        f"value={tensor(p.value)}",
        f"mask={tensor(p.mask)}",
        f"raw_scores={tensor(p.scores)}",
        f"scaled_scores={tensor(p.scaled_scores)}",
        f"probabilities={tensor(p.probabilities)}",
        f"row_sums={vec(p.row_sums)}",
        f"output={tensor(p.output)}",
        f"suffix_perturbation=key:{vec(x.key_before)}->{vec(x.key_after)} "
        f"value:{vec(x.value_before)}->{vec(x.value_after)}",
        f"perturbed_output={vec(x.perturbed_output)}",
        f"prefix_invariance={invariance}",
        f"upstream={vec(p.upstream)} loss={fmt_float(p.loss)}",
        f"query_gradient={vec(p.grad_query)}",
        f"key_gradient={vec(p.grad_key)}",
        f"value_gradient={vec(p.grad_value)}",
        f"prefix_seed={vec(x.seed)} suffix_gradient_zero={fmt_bool(x.suffix_zero)}",
        _single_line(evidence),
        f"empty_batch=probabilities:{fmt_shape(_shaped(e, 'weights'))} "
        f"output:{fmt_shape(_shaped(e, 'output'))} valid:{fmt_bool(e.kept)}",
        _errors_line(evidence, said),
        _gradcheck_line(evidence.gradcheck),
        "history=" + " ".join(f"{key}:{value}" for key, value in said.history),
        f"proof=tape_finite:{fmt_bool(p.tape_finite)} "
        f"future_probabilities:{future_word(evidence)} "
        f"prefix_outputs:{'bitwise' if all(x.unchanged) else 'changed'} "
        f"replay:{_replay(evidence)}",
        f"next={said.next}",
    ])


def _causal_trace(evidence: CausalEvidence) -> str:
    p, x, single, g = evidence.primary, evidence.prefix, evidence.single, evidence.gradcheck
    _, tokens, d_k = p.query.shape
    e = evidence.empty
    query, key, value = evidence.operands(e)

    def visibility(i: int) -> str:
        return "[" + ",".join("blocked" if np.isneginf(m) else "allowed" for m in p.mask[i]) + "]"

    return _joined([
        f"META|input_shape={fmt_shape(p.query.shape)}|score_shape={fmt_shape(p.scores.shape)}"
        f"|mask_shape={fmt_shape(p.mask.shape)}|output_shape={fmt_shape(p.output.shape)}"
        f"|tokens={tokens}|key_width={d_k}|value_width={p.value.shape[2]}"
        f"|scale={fmt_float(p.scale)}|softmax_axis=key|mask={MASK_RULE}",
        f"QUERY|{tensor(p.query, '|')}",
        f"KEY|{tensor(p.key, '|')}",
        f"VALUE|{tensor(p.value, '|')}",
        f"MASK|{tensor(p.mask, '|')}",
        f"RAW_SCORES|{tensor(p.scores, '|')}",
        f"SCALED_SCORES|{tensor(p.scaled_scores, '|')}",
        *(f"CAUSAL_ROW|query={i}|visibility={visibility(i)}"
          f"|masked_scores={vec(p.masked_scores[0, i])}"
          f"|probabilities={vec(p.probabilities[0, i])}|sum={fmt_float(p.row_sums[0, i])}"
          f"|terms={mixture_terms(p.terms[i])}|output={vec(p.output[0, i])}"
          for i in range(p.terms.shape[0])),
        f"SUFFIX_PERTURBATION|position={x.position}|key_before={vec(x.key_before)}"
        f"|key_after={vec(x.key_after)}|value_before={vec(x.value_before)}"
        f"|value_after={vec(x.value_after)}",
        f"PERTURBED_OUTPUT|{tensor(x.perturbed_output, '|')}",
        "|".join([f"PREFIX_INVARIANCE|changed_position={x.position}",
                  *(f"position_{i}={'bitwise-unchanged' if same else 'changed'}"
                    for i, same in enumerate(x.unchanged)),
                  f"position_{x.position}={'changed' if x.last_changed else 'unchanged'}"]),
        f"BACKWARD|seed={vec(p.upstream)}|loss={fmt_float(p.loss)}"
        f"|query_gradient={vec(p.grad_query)}|key_gradient={vec(p.grad_key)}"
        f"|value_gradient={vec(p.grad_value)}",
        f"PREFIX_GRADIENT|seed={vec(x.seed)}|query_gradient={vec(x.grad_query)}"
        f"|key_gradient={vec(x.grad_key)}|value_gradient={vec(x.grad_value)}"
        f"|suffix_zero={fmt_bool(x.suffix_zero)}",
        f"SINGLE_TOKEN|mask={mask_text(single.mask)}|probabilities={vec(single.probabilities)}"
        f"|output={vec(single.output)}|query_gradient_zero={fmt_bool(single.query_gradient_zero)}"
        f"|key_gradient_zero={fmt_bool(single.key_gradient_zero)}",
        f"EMPTY_BATCH|query_shape={fmt_shape(query)}|key_shape={fmt_shape(key)}"
        f"|value_shape={fmt_shape(value)}|mask_shape={fmt_shape(_shaped(e, 'mask'))}"
        f"|probability_shape={fmt_shape(_shaped(e, 'weights'))}"
        f"|output_shape={fmt_shape(_shaped(e, 'output'))}"
        f"|valid={fmt_bool(e.kept)}",
        *_error_records(evidence, CAUSAL),
        "HISTORY|" + "|".join(f"{'earlier_visibility' if key == 'visibility' else key}={value}"
                              for key, value in CAUSAL.history),
        f"PROOF|mask_future={'negative-infinity' if np.isneginf(p.mask).any() else 'none'}"
        f"|tape_finite={fmt_bool(p.tape_finite)}|future_probabilities={future_word(evidence)}"
        f"|row_sum_tolerance={p.row_sum_tolerance:.12f}|query_checks={g.checked('query')}"
        f"|key_checks={g.checked('key')}|value_checks={g.checked('value')}"
        f"|gradient_tolerance={fmt_float(g.tolerance)}|gradcheck={fmt_bool(g.passed)}"
        f"|prefix_outputs={'bitwise' if all(x.unchanged) else 'changed'}"
        f"|replay={_replay(evidence)}",
        f"NEXT|chapter={CAUSAL.next_chapter}",
    ])


# --- the views the dispatcher calls -----------------------------------------------------

def text(evidence: HeadChapterEvidence) -> str:
    """The chapter's report (the course's ``expected.txt`` for its fixture)."""
    if isinstance(evidence, CausalEvidence):
        return _causal_text(evidence)
    assert isinstance(evidence, SelfAttentionEvidence)
    return _laid(evidence, _self_attention_text(evidence), False)


def trace(evidence: HeadChapterEvidence) -> str:
    """The diagram trace: what the figure shows, one record a line."""
    if isinstance(evidence, CausalEvidence):
        return _causal_trace(evidence)
    assert isinstance(evidence, SelfAttentionEvidence)
    return _laid(evidence, _self_attention_trace(evidence), True)


def facts(evidence: HeadChapterEvidence) -> dict[str, Any]:
    """The chapter's facts (:mod:`qkvcli.render.facts`) after the JSON's head: every
    tensor with its axes named, probe, case and verdict, in a declared order (chapter
    28's tensors add the mask and the masked scores, and its own probes)."""
    from qkvcli.render.chapters.entries import chapter_checks
    from qkvcli.render.document import coordinate_json

    p, single, e, g, said = (evidence.primary, evidence.single, evidence.empty,
                             evidence.gradcheck, words(evidence))
    causal = isinstance(evidence, CausalEvidence)
    batch, tokens, d_k = p.query.shape
    rows, square = ("batch", "token", "feature"), ("batch", "query", "key")

    def given(values: Any) -> Fact:
        return fact_tensor(values, rows, given=True)

    rule: dict[str, Any] = {"mask": MASK_RULE} if causal else {"masked": verdict(False)}
    scores = ({"mask": fact_tensor(p.mask, ("query", "key")),
               "raw_scores": fact_tensor(p.scores, square),
               "scaled_scores": fact_tensor(p.scaled_scores, square),
               "masked_scores": fact_tensor(p.masked_scores, square)} if causal
              else {"dot_products": fact_tensor(p.scores, square),
                    "scaled_scores": fact_tensor(p.scaled_scores, square)})
    own: dict[str, Any] = {}
    batch_probe: dict[str, Any] = {}
    empty: dict[str, Any] = dict(zip(("query", "key", "value"),
                                     (shape(dims) for dims in evidence.operands(e)), strict=True))
    if isinstance(evidence, CausalEvidence):
        x = evidence.prefix
        own = {"future_probabilities_zero": verdict(evidence.future_zero),
               "tape_finite": verdict(p.tape_finite),
               "suffix_perturbation": section(
                   position=x.position, key_before=given(x.key_before),
                   key_after=given(x.key_after), value_before=given(x.value_before),
                   value_after=given(x.value_after),
                   perturbed_output=fact_tensor(x.perturbed_output, rows),
                   unchanged_positions=list(x.unchanged), last_changed=verdict(x.last_changed)),
               "prefix_gradient": section(
                   seed=given(x.seed), suffix_start=x.suffix_start,
                   query_gradient=fact_tensor(x.grad_query, rows),
                   key_gradient=fact_tensor(x.grad_key, rows),
                   value_gradient=fact_tensor(x.grad_value, rows),
                   suffix_zero=verdict(x.suffix_zero))}
        empty.update(mask=shape(_shaped(e, "mask")), probabilities=shape(_shaped(e, "weights")),
                     output=shape(_shaped(e, "output")), valid=verdict(e.kept))
    elif isinstance(evidence, SelfAttentionEvidence):
        s, b = evidence.scale, evidence.batch
        own = {"scale_probe": section(d_k=s.d_k, scale=s.scale, unscaled_focus=s.unscaled_focus,
                                      scaled_focus=s.scaled_focus,
                                      orthogonal_probability=s.orthogonal_probability,
                                      softened=verdict(s.softened))}
        query, key, value = (shape(dims) for dims in evidence.operands(b))
        batch_probe = {"batch_probe": section(
            query=query, key=key, value=value, probabilities=shape(_shaped(b, "weights")),
            output=shape(_shaped(b, "output")), isolated=verdict(evidence.batch_isolated))}
        empty.update(probabilities=shape(_shaped(e, "weights")),
                     output=shape(_shaped(e, "output")),
                     value_width_probe=shape(_shaped(evidence.value_width, "output")))
    return {
        "checks": chapter_checks(evidence.chapter, evidence),
        "config": section(batch=int(batch), tokens=int(tokens), d_k=int(d_k),
                          d_v=int(p.value.shape[2]), scale=p.scale, **rule,
                          softmax_axis="key", source=evidence.source),
        "tensors": section(
            query=given(p.query), key=given(p.key), value=given(p.value), **scores,
            probabilities=fact_tensor(p.probabilities, square),
            row_sums=fact_tensor(p.row_sums, ("batch", "query")),
            mixture_terms=fact_tensor(p.terms, ("query", "key", "feature")),
            output=fact_tensor(p.output, rows), upstream=given(p.upstream),
            query_gradient=fact_tensor(p.grad_query, rows),
            key_gradient=fact_tensor(p.grad_key, rows),
            value_gradient=fact_tensor(p.grad_value, rows)),
        "loss": scalar(p.loss),
        **own,
        "single_token": section(
            query=given(single.query), key=given(single.key), value=given(single.value),
            probabilities=fact_tensor(single.probabilities, square),
            output=fact_tensor(single.output, rows),
            query_gradient_zero=verdict(single.query_gradient_zero),
            key_gradient_zero=verdict(single.key_gradient_zero)),
        **batch_probe,
        "empty_batch": section(**empty),
        "gradcheck": {"passed": g.passed, "step": g.step, "tolerance": g.tolerance,
                      "tensors": [{"tensor": c.tensor, "shape": list(c.shape),
                                   "checked": len(c.checks), "passed": c.passed,
                                   "checks": [coordinate_json(k) for k in c.checks]}
                                  for c in g.tensors]},
        "errors": entries([{"case": c.case, "kind": said.error_kinds.get(c.expected, c.expected),
                            "facts": dict(facts_of(c, said)), "rejected": verdict(c.rejected),
                            "raised": c.raised, "message": c.message} for c in evidence.errors]),
        "history": dict(said.history),
        "replay_bitwise": verdict(evidence.replay_bitwise),
        "next": said.next_chapter,
    }


def json_document(evidence: HeadChapterEvidence) -> dict[str, Any]:
    """The JSON report: the head, then :func:`facts` by the one walk."""
    from qkvcli.render.document import head

    return {**head("run", chapter=evidence.chapter, passed=evidence.passed),
            **json_of(facts(evidence))}


def figure(evidence: HeadChapterEvidence, width: int,
           options: RichOptions | None = None) -> RenderableType:
    """The chapter's figure: the trace's records drawn (Q, K, V, the scores, each query's
    probabilities and visible keys, the mixture, the reverse pass, the chapter's probes,
    the rejected inputs, the history and the checks). ``width`` is the console's; the
    layout adapts to it when printed."""
    from qkvcli.render.chapters import figure as drawn
    from qkvcli.render.rich.layout import Row
    from qkvcli.render.rich.options import RichOptions

    options = options or RichOptions()
    number = options.precision
    p, single, e, g, said = (evidence.primary, evidence.single, evidence.empty,
                             evidence.gradcheck, words(evidence))
    one = (f"probability {vec(single.probabilities)}, output {vec(single.output)}, "
           "no gradient to Q or K")
    refused = drawn.facts_part("Rejected inputs", [
        (c.rejected, c.case, c.message or "not refused") for c in evidence.errors])
    history = drawn.facts_part("History", [(None, key, value) for key, value in said.history])
    proof = drawn.facts_part("Proof", [
        (p.rows_sum_to_one, "row sums", f"within {p.row_sum_tolerance:.12f}"),
        (g.passed, "gradient check", f"{g.checked('query')}+{g.checked('key')}+"
         f"{g.checked('value')} coordinates, tolerance {fmt_float(g.tolerance)}"),
        (evidence.replay_bitwise, "replay", "bit for bit"),
    ])
    if isinstance(evidence, CausalEvidence):
        x = evidence.prefix
        later = drawn.facts_part("A later token", [
            (None, "perturbed", f"position {x.position} of batch item 0: key "
             f"{vec(x.key_before)} -> {vec(x.key_after)}, value {vec(x.value_before)} -> "
             f"{vec(x.value_after)}"),
            *((same, f"position {i}", "bitwise unchanged" if same else "changed")
              for i, same in enumerate(x.unchanged)),
            (x.last_changed, f"position {x.position}",
             f"{'changed' if x.last_changed else 'unchanged'}: now "
             f"{vec(x.perturbed_output[0, x.position])}"),
            (x.suffix_zero, "prefix seed", f"zero from position {x.suffix_start}: dQ, dK, dV "
             f"there {'exactly 0' if x.suffix_zero else 'not 0'}"),
        ], x.invariant and x.suffix_zero)
        probes = drawn.facts_part("Probes", [
            (evidence.future_zero, "future keys", f"weigh {future_word(evidence)}"),
            (single.holds, "single token", f"mask {mask_text(single.mask)}, {one}"),
            (e.kept, "empty batch", f"A {fmt_shape(_shaped(e, 'weights'))}, "
             f"O {fmt_shape(_shaped(e, 'output'))}, "
             f"mask {fmt_shape(_shaped(e, 'mask'))}"),
            (p.tape_finite, "reverse pass", "every array finite: -inf never reaches it"),
        ])
        cards = [Row([later, probes]), Row([refused])]
    else:
        assert isinstance(evidence, SelfAttentionEvidence)
        s, b = evidence.scale, evidence.batch
        probes = drawn.facts_part("Probes", [
            (s.holds, "scale probe", f"unscaled focus {fmt_float(s.unscaled_focus, number)}, "
             f"scaled {fmt_float(s.scaled_focus, number)}, orthogonal key "
             f"{fmt_float(s.orthogonal_probability, number)}: "
             f"{'softened' if s.softened else 'not softened'}"),
            (single.holds, "single token", one),
            (evidence.batch_isolated, "batch of two", f"{fmt_shape(evidence.operands(b)[0])} in, "
             f"{fmt_shape(_shaped(b, 'output'))} out, halves bit for bit equal"),
            (evidence.empty_holds, "empty batch", f"A {fmt_shape(_shaped(e, 'weights'))}, O "
             f"{fmt_shape(_shaped(e, 'output'))}; value width 1 gives "
             f"{fmt_shape(_shaped(evidence.value_width, 'output'))}"),
        ])
        cards = [Row([probes, refused])]
    return drawn.head_figure(evidence, options, said.prediction,
                             isinstance(evidence, CausalEvidence),
                             [*cards, Row([history, proof])], said.closing)
