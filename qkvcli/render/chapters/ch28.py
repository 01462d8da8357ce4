"""Chapter 28's report, trace, JSON and figure: pure functions of its evidence.

The text and the trace keep the course's bytes for the bundled fixture
(``tests/golden/ch28``); the JSON carries every number of the evidence; the figure
shows each query's visible keys, its probabilities and output, and the chapter's checks.
Every published name of the chapter lives here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from qkvcli.chapters.ch28 import CausalEvidence
from qkvcli.core.results import Refusal
from qkvcli.render.chapters.common import (
    case_facts,
    gradcheck_summary_json,
    mixture_terms,
    tensor,
    vec,
)
from qkvcli.render.numbers import fmt_bool, fmt_float, fmt_shape

if TYPE_CHECKING:
    from rich.console import RenderableType

    from qkvcli.render.rich.options import RichOptions

PREDICTION = ("each query keeps its diagonal and earlier keys, while future keys receive zero "
              "probability")
MASK_RULE = "lower-triangular-inclusive"
NEXT = "add relative position information without changing the causal boundary"
NEXT_CHAPTER = "29-rope"
HISTORY = (("earlier", "recurrent-autoregressive-state"), ("visibility", "available-prefix"),
           ("transformer", "parallel-known-targets"), ("decoder_rule", "no-subsequent-positions"),
           ("generation", "sequential"))
"""The chapter's history, as the course states it (the trace says ``earlier_visibility``)."""
ERROR_KEYS = {"attention-empty-tokens": "empty_tokens", "softmax-rank": "softmax_rank",
              "softmax-shape": "softmax_shape", "query-rank": "query_rank",
              "token-mismatch": "token_mismatch", "released-score": "released_score"}
"""Each rejected case's key on the report's ``errors=`` line."""
ERROR_KINDS = {"EmptyTokenAxis": "empty-tokens", "CausalSoftmaxRank": "causal-softmax-rank",
               "CausalSoftmaxNonSquare": "causal-softmax-non-square",
               "OperandRank": "score-input-rank", "OperandTokenMismatch": "score-token-mismatch",
               "ReleasedOperand": "released-operand"}
"""Each expected error's name in the trace's ``kind=``."""
FACT_NAMES = {"OperandRank": {"operand": "input"}}
"""The trace's names of a case's facts where they differ from its error's fields."""
UNSAID = ("EmptyTokenAxis",)
"""The refusals whose facts the chapter does not publish (an empty axis is its own fact)."""


def facts_of(case: Refusal) -> tuple[tuple[str, Any], ...]:
    """A refusal's published facts: its expected error's fields, under the trace's names."""
    if case.expected in UNSAID:
        return ()
    names = FACT_NAMES.get(case.expected, {})
    return tuple((names.get(key, key), value) for key, value in case.fields)


def mask_text(mask: Any) -> str:
    """The single-token mask as the course writes it: ``0`` or ``-inf`` per entry."""
    flat = np.asarray(mask).reshape(-1)
    return "[" + ",".join("-inf" if np.isneginf(m) else "0" for m in flat) + "]"


def text(evidence: CausalEvidence) -> str:
    """The chapter's report (the course's ``expected.txt`` for its fixture)."""
    p, x = evidence.primary, evidence.prefix
    batch, tokens, d_k = p.query.shape
    single, g = evidence.single, evidence.gradcheck
    invariance = " ".join([*(f"position_{i}:{fmt_bool(same)}" for i, same in enumerate(x.unchanged)),
                           f"position_{x.position}_changed:{fmt_bool(x.last_changed)}"])
    lines = [
        f"chapter={evidence.chapter}",
        f"prediction={PREDICTION}",
        f"config=batch:{batch} tokens:{tokens} d_k:{d_k} d_v:{p.value.shape[2]} "
        f"scale:{fmt_float(p.scale)} mask:{MASK_RULE}",
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
        f"single_token=probabilities:{vec(single.probabilities)} output:{vec(single.output)} "
        f"query_gradient_zero:{fmt_bool(single.query_gradient_zero)} "
        f"key_gradient_zero:{fmt_bool(single.key_gradient_zero)}",
        f"empty_batch=probabilities:{fmt_shape(evidence.empty.probabilities)} "
        f"output:{fmt_shape(evidence.empty.output)} valid:{fmt_bool(evidence.empty.valid)}",
        "errors=" + " ".join(f"{ERROR_KEYS.get(c.case, c.case)}:{fmt_bool(c.rejected)}"
                             for c in evidence.errors),
        f"gradcheck=query_checks:{g.checked('query')} key_checks:{g.checked('key')} "
        f"value_checks:{g.checked('value')} tolerance:{fmt_float(g.tolerance)} "
        f"passed:{fmt_bool(g.passed)}",
        "history=" + " ".join(f"{key}:{value}" for key, value in HISTORY),
        f"proof=tape_finite:{fmt_bool(p.tape_finite)} "
        f"future_probabilities:{future_word(evidence)} "
        f"prefix_outputs:{'bitwise' if all(x.unchanged) else 'changed'} "
        f"replay:{'bitwise' if evidence.replay_bitwise else 'mismatch'}",
        f"next={NEXT}",
    ]
    return "\n".join(lines) + "\n"


def future_word(evidence: CausalEvidence) -> str:
    """``exact-zero`` when every future key weighs exactly 0, else ``nonzero``."""
    return "exact-zero" if evidence.future_zero else "nonzero"


def trace(evidence: CausalEvidence) -> str:
    """The diagram trace: what the figure shows, one record a line."""
    p, x, single, g = evidence.primary, evidence.prefix, evidence.single, evidence.gradcheck
    _, tokens, d_k = p.query.shape
    e = evidence.empty

    def visibility(i: int) -> str:
        return "[" + ",".join("blocked" if np.isneginf(m) else "allowed" for m in p.mask[i]) + "]"

    lines = [
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
        f"EMPTY_BATCH|query_shape={fmt_shape(e.query)}|key_shape={fmt_shape(e.key)}"
        f"|value_shape={fmt_shape(e.value)}|mask_shape={fmt_shape(e.mask)}"
        f"|probability_shape={fmt_shape(e.probabilities)}|output_shape={fmt_shape(e.output)}"
        f"|valid={fmt_bool(e.valid)}",
        *(f"ERROR|case={c.case}|kind={ERROR_KINDS.get(c.expected, c.expected)}"
          f"{case_facts(facts_of(c))}|rejected={fmt_bool(c.rejected)}"
          for c in evidence.errors),
        "HISTORY|" + "|".join(f"{'earlier_visibility' if key == 'visibility' else key}={value}"
                              for key, value in HISTORY),
        f"PROOF|mask_future={'negative-infinity' if np.isneginf(p.mask).any() else 'none'}"
        f"|tape_finite={fmt_bool(p.tape_finite)}|future_probabilities={future_word(evidence)}"
        f"|row_sum_tolerance={p.row_sum_tolerance:.12f}|query_checks={g.checked('query')}"
        f"|key_checks={g.checked('key')}|value_checks={g.checked('value')}"
        f"|gradient_tolerance={fmt_float(g.tolerance)}|gradcheck={fmt_bool(g.passed)}"
        f"|prefix_outputs={'bitwise' if all(x.unchanged) else 'changed'}"
        f"|replay={'bitwise' if evidence.replay_bitwise else 'mismatch'}",
        f"NEXT|chapter={NEXT_CHAPTER}",
    ]
    return "\n".join(lines) + "\n"


def json_document(evidence: CausalEvidence) -> dict[str, Any]:
    """The JSON report: every tensor, probe, case and verdict, keys in a declared order."""
    from qkvcli.render.document import checks_json, head, json_float
    from qkvcli.render.document import tensor_json as whole

    def t(values: Any) -> dict[str, Any]:
        return whole(values, "full")

    p, x, single, e = evidence.primary, evidence.prefix, evidence.single, evidence.empty
    batch, tokens, d_k = p.query.shape
    return {
        **head(evidence.chapter, evidence.passed),
        "checks": checks_json(evidence.checks),
        "config": {"batch": int(batch), "tokens": int(tokens), "d_k": int(d_k),
                   "d_v": int(p.value.shape[2]), "scale": p.scale, "mask": MASK_RULE,
                   "softmax_axis": "key", "source": evidence.source},
        "tensors": {
            "query": t(p.query), "key": t(p.key), "value": t(p.value), "mask": t(p.mask),
            "raw_scores": t(p.scores), "scaled_scores": t(p.scaled_scores),
            "masked_scores": t(p.masked_scores), "probabilities": t(p.probabilities),
            "row_sums": t(p.row_sums), "mixture_terms": t(p.terms), "output": t(p.output),
            "upstream": t(p.upstream), "query_gradient": t(p.grad_query),
            "key_gradient": t(p.grad_key), "value_gradient": t(p.grad_value),
        },
        "loss": json_float(p.loss),
        "future_probabilities_zero": evidence.future_zero,
        "tape_finite": p.tape_finite,
        "suffix_perturbation": {"position": x.position, "key_before": t(x.key_before),
                                "key_after": t(x.key_after), "value_before": t(x.value_before),
                                "value_after": t(x.value_after),
                                "perturbed_output": t(x.perturbed_output),
                                "unchanged_positions": list(x.unchanged),
                                "last_changed": x.last_changed},
        "prefix_gradient": {"seed": t(x.seed), "suffix_start": x.suffix_start,
                            "query_gradient": t(x.grad_query), "key_gradient": t(x.grad_key),
                            "value_gradient": t(x.grad_value), "suffix_zero": x.suffix_zero},
        "single_token": {"query": t(single.query), "key": t(single.key),
                         "value": t(single.value), "probabilities": t(single.probabilities),
                         "output": t(single.output),
                         "query_gradient_zero": single.query_gradient_zero,
                         "key_gradient_zero": single.key_gradient_zero},
        "empty_batch": {"query": list(e.query), "key": list(e.key), "value": list(e.value),
                        "mask": list(e.mask), "probabilities": list(e.probabilities),
                        "output": list(e.output), "valid": e.valid},
        "gradcheck": gradcheck_summary_json(evidence.gradcheck),
        "errors": [{"case": c.case, "kind": ERROR_KINDS.get(c.expected, c.expected),
                    "facts": dict(facts_of(c)),
                    "rejected": c.rejected, "raised": c.raised, "message": c.message}
                   for c in evidence.errors],
        "history": dict(HISTORY),
        "replay_bitwise": evidence.replay_bitwise,
        "next": NEXT_CHAPTER,
    }


def figure(evidence: CausalEvidence, width: int,
           options: RichOptions | None = None) -> RenderableType:
    """The chapter's figure: the trace's records drawn (Q, K, V, the mask, the scores, each
    query's visible keys and probabilities, the mixture, the reverse pass, the suffix
    perturbation, the prefix gradient, the probes, the rejected inputs, the history and
    the checks). ``width`` is the console's; the layout adapts to it when printed."""
    from qkvcli.render.chapters import figure as drawn
    from qkvcli.render.rich.layout import Row
    from qkvcli.render.rich.options import RichOptions

    options = options or RichOptions()
    p, x, single, e, g = (evidence.primary, evidence.prefix, evidence.single, evidence.empty,
                          evidence.gradcheck)
    prefix = drawn.facts_part("A later token", [
        (None, "perturbed", f"position {x.position} of batch item 0: key {vec(x.key_before)} -> "
         f"{vec(x.key_after)}, value {vec(x.value_before)} -> {vec(x.value_after)}"),
        *((same, f"position {i}", "bitwise unchanged" if same else "changed")
          for i, same in enumerate(x.unchanged)),
        (x.last_changed, f"position {x.position}",
         f"{'changed' if x.last_changed else 'unchanged'}: now "
         f"{vec(x.perturbed_output[0, x.position])}"),
        (x.suffix_zero, "prefix seed", f"zero from position {x.suffix_start}: dQ, dK, dV there "
         f"{'exactly 0' if x.suffix_zero else 'not 0'}"),
    ], evidence.prefix.invariant and x.suffix_zero)
    probes = drawn.facts_part("Probes", [
        (evidence.future_zero, "future keys", f"weigh {future_word(evidence)}"),
        (single.holds, "single token", f"mask {mask_text(single.mask)}, probability "
         f"{vec(single.probabilities)}, output {vec(single.output)}, no gradient to Q or K"),
        (e.valid, "empty batch", f"A {fmt_shape(e.probabilities)}, O {fmt_shape(e.output)}, "
         f"mask {fmt_shape(e.mask)}"),
        (p.tape_finite, "reverse pass", "every array finite: -inf never reaches it"),
    ])
    refused = drawn.facts_part("Rejected inputs", [
        (c.rejected, c.case, c.message or "not refused") for c in evidence.errors])
    history = drawn.facts_part("History", [(None, key, value) for key, value in HISTORY])
    proof = drawn.facts_part("Proof", [
        (p.rows_sum_to_one, "row sums", f"within {p.row_sum_tolerance:.12f}"),
        (g.passed, "gradient check", f"{g.checked('query')}+{g.checked('key')}+{g.checked('value')} "
         f"coordinates, tolerance {fmt_float(g.tolerance)}"),
        (evidence.replay_bitwise, "replay", "bit for bit"),
    ])
    return drawn.head_figure(
        evidence, options, PREDICTION, True,
        [Row([prefix, probes]), Row([refused]), Row([history, proof])],
        "Chapter 29 turns Q and K by position (RoPE) without moving the causal boundary.")
