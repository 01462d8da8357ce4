"""Chapter 27's report, trace, JSON and figure: pure functions of its evidence.

The text and the trace keep the course's bytes for the bundled fixture
(``tests/golden/ch27``); the JSON carries every number of the evidence; the figure
shows the scores, the probabilities, the mixture and the chapter's checks in chapter
26's visual language. Every published name of the chapter lives here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from qkvcli.chapters.ch27 import SelfAttentionEvidence
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

PREDICTION = "each query scores every key, then one probability row mixes the value rows"
NEXT = "mask future key positions before row normalization"
NEXT_CHAPTER = "28-causal-masking"
HISTORY = (("earlier", "recurrent-fixed-context"), ("bridge", "additive-encoder-decoder-alignment"),
           ("transformer", "scaled-dot-product-self-attention"),
           ("comparison", "all-sequence-positions"))
"""The chapter's history, as the course states it: what self-attention replaced."""
ERROR_KEYS = {"query-rank": "query_rank", "batch-mismatch": "batch", "token-mismatch": "tokens",
              "empty-tokens": "empty", "query-key-width": "width"}
"""Each rejected case's key on the report's ``errors=`` line."""
ERROR_KINDS = {"OperandRank": "input-rank", "OperandBatchMismatch": "batch-mismatch",
               "OperandTokenMismatch": "token-mismatch", "EmptyTokenAxis": "empty-token-axis",
               "QueryKeyWidthMismatch": "query-key-width-mismatch"}
"""Each expected error's name in the trace's ``kind=``."""


def text(evidence: SelfAttentionEvidence) -> str:
    """The chapter's report (the course's ``expected.txt`` for its fixture)."""
    p = evidence.primary
    batch, tokens, d_k = p.query.shape
    s, single, sh = evidence.scale, evidence.single, evidence.shapes
    lines = [
        f"chapter={evidence.chapter}",
        f"prediction={PREDICTION}",
        f"config=batch:{batch} tokens:{tokens} d_k:{d_k} d_v:{p.value.shape[2]} "
        f"scale:{fmt_float(p.scale)} masked:false softmax_axis:key",
        f"query={tensor(p.query)}",
        f"key={tensor(p.key)}",
        f"value={tensor(p.value)}",
        f"dot_products={tensor(p.scores)}",
        f"scaled_scores={tensor(p.scaled_scores)}",
        f"probabilities={tensor(p.probabilities)}",
        f"row_sums={vec(p.row_sums)}",
        *(f"mixture_query_{i}=terms:{mixture_terms(p.terms[i])} output:{vec(p.output[0, i])}"
          for i in range(p.terms.shape[0])),
        f"output={tensor(p.output)}",
        f"scale_probe=unscaled_focus:{fmt_float(s.unscaled_focus)} "
        f"scaled_focus:{fmt_float(s.scaled_focus)} "
        f"orthogonal_probability:{fmt_float(s.orthogonal_probability)} "
        f"softened:{fmt_bool(s.softened)}",
        f"single_token=probabilities:{vec(single.probabilities)} output:{vec(single.output)} "
        f"query_gradient_zero:{fmt_bool(single.query_gradient_zero)} "
        f"key_gradient_zero:{fmt_bool(single.key_gradient_zero)}",
        f"batch_probe=query:{fmt_shape(sh.batch_query)} key:{fmt_shape(sh.batch_key)} "
        f"value:{fmt_shape(sh.batch_value)} probabilities:{fmt_shape(sh.batch_probabilities)} "
        f"output:{fmt_shape(sh.batch_output)} isolated:{fmt_bool(sh.isolated)}",
        f"empty_batch=probabilities:{fmt_shape(sh.empty_probabilities)} "
        f"output:{fmt_shape(sh.empty_output)} value_width_probe:{fmt_shape(sh.value_width_output)}",
        f"upstream={vec(p.upstream)} loss={fmt_float(p.loss)}",
        f"query_gradient={vec(p.grad_query)}",
        f"key_gradient={vec(p.grad_key)}",
        f"value_gradient={vec(p.grad_value)}",
        f"gradcheck=query_checks:{evidence.gradcheck.checked('query')} "
        f"key_checks:{evidence.gradcheck.checked('key')} "
        f"value_checks:{evidence.gradcheck.checked('value')} "
        f"tolerance:{fmt_float(evidence.gradcheck.tolerance)} "
        f"passed:{fmt_bool(evidence.gradcheck.passed)}",
        "errors=" + " ".join(f"{ERROR_KEYS.get(c.case, c.case)}:{fmt_bool(c.rejected)}"
                             for c in evidence.errors),
        "history=" + " ".join(f"{key}:{value}" for key, value in HISTORY),
        f"same_fixture_replays_bitwise={fmt_bool(evidence.replay_bitwise)}",
        f"next={NEXT}",
    ]
    return "\n".join(lines) + "\n"


def trace(evidence: SelfAttentionEvidence) -> str:
    """The diagram trace: what the figure shows, one record a line."""
    p = evidence.primary
    batch, tokens, d_k = p.query.shape
    single, sh, g = evidence.single, evidence.shapes, evidence.gradcheck
    rows = range(tokens if batch else 0)
    lines = [
        f"META|shape={fmt_shape(p.query.shape)}|key_width={d_k}|value_width={p.value.shape[2]}"
        f"|scale={fmt_float(p.scale)}|softmax_axis=key|masked=false",
        f"QUERY|{tensor(p.query, '|')}",
        f"KEY|{tensor(p.key, '|')}",
        f"VALUE|{tensor(p.value, '|')}",
        f"DOT_PRODUCTS|{tensor(p.scores, '|')}",
        f"SCALED_SCORES|{tensor(p.scaled_scores, '|')}",
        *(f"PROBABILITY_ROW|query={i}|values={vec(p.probabilities[0, i])}"
          f"|sum={fmt_float(p.row_sums[0, i])}" for i in rows),
        *(f"MIXTURE_ROW|query={i}|probabilities={vec(p.probabilities[0, i])}"
          f"|terms={mixture_terms(p.terms[i])}|output={vec(p.output[0, i])}"
          for i in range(p.terms.shape[0])),
        f"BACKWARD|seed={vec(p.upstream)}|query_gradient={vec(p.grad_query)}"
        f"|key_gradient={vec(p.grad_key)}|value_gradient={vec(p.grad_value)}",
        f"BATCH_SHAPE|batches={sh.batch_query[0]}|query={fmt_shape(sh.batch_query)}"
        f"|key={fmt_shape(sh.batch_key)}|value={fmt_shape(sh.batch_value)}"
        f"|probabilities={fmt_shape(sh.batch_probabilities)}|output={fmt_shape(sh.batch_output)}"
        f"|isolated={fmt_bool(sh.isolated)}",
        f"SINGLE_TOKEN|shape={fmt_shape(single.query.shape)}|query={vec(single.query)}"
        f"|key={vec(single.key)}|value={vec(single.value)}|raw={vec(single.scores)}"
        f"|scaled={vec(single.scaled_scores)}|probabilities={vec(single.probabilities)}"
        f"|output={vec(single.output)}|query_gradient_zero={fmt_bool(single.query_gradient_zero)}"
        f"|key_gradient_zero={fmt_bool(single.key_gradient_zero)}",
        *(f"ERROR|case={c.case}|kind={ERROR_KINDS.get(c.expected, c.expected)}"
          f"{case_facts(c.fields)}|rejected={fmt_bool(c.rejected)}" for c in evidence.errors),
        "HISTORY|" + "|".join(f"{key}={value}" for key, value in HISTORY),
        f"PROOF|row_sum_tolerance={p.row_sum_tolerance:.12f}|query_checks={g.checked('query')}"
        f"|key_checks={g.checked('key')}|value_checks={g.checked('value')}"
        f"|gradient_tolerance={fmt_float(g.tolerance)}|gradcheck={fmt_bool(g.passed)}"
        f"|replay={'bitwise' if evidence.replay_bitwise else 'mismatch'}"
        f"|unmasked={fmt_bool(not p.mask.size or bool((p.mask == 0.0).all()))}",
        f"NEXT|chapter={NEXT_CHAPTER}",
    ]
    return "\n".join(lines) + "\n"


def json_document(evidence: SelfAttentionEvidence) -> dict[str, Any]:
    """The JSON report: every tensor, probe, case and verdict, keys in a declared order."""
    from qkvcli.render.document import checks_json, head, json_float

    p = evidence.primary
    s, single, sh = evidence.scale, evidence.single, evidence.shapes
    batch, tokens, d_k = p.query.shape
    return {
        **head(evidence.chapter, evidence.passed),
        "checks": checks_json(evidence.checks),
        "config": {"batch": int(batch), "tokens": int(tokens), "d_k": int(d_k),
                   "d_v": int(p.value.shape[2]), "scale": p.scale, "masked": False,
                   "softmax_axis": "key", "source": evidence.source},
        "tensors": {
            "query": tensor_json(p.query), "key": tensor_json(p.key),
            "value": tensor_json(p.value), "dot_products": tensor_json(p.scores),
            "scaled_scores": tensor_json(p.scaled_scores),
            "probabilities": tensor_json(p.probabilities), "row_sums": tensor_json(p.row_sums),
            "mixture_terms": tensor_json(p.terms), "output": tensor_json(p.output),
            "upstream": tensor_json(p.upstream), "query_gradient": tensor_json(p.grad_query),
            "key_gradient": tensor_json(p.grad_key), "value_gradient": tensor_json(p.grad_value),
        },
        "loss": json_float(p.loss),
        "scale_probe": {"d_k": s.d_k, "scale": s.scale, "unscaled_focus": s.unscaled_focus,
                        "scaled_focus": s.scaled_focus,
                        "orthogonal_probability": s.orthogonal_probability,
                        "softened": s.softened},
        "single_token": {"query": tensor_json(single.query), "key": tensor_json(single.key),
                         "value": tensor_json(single.value),
                         "probabilities": tensor_json(single.probabilities),
                         "output": tensor_json(single.output),
                         "query_gradient_zero": single.query_gradient_zero,
                         "key_gradient_zero": single.key_gradient_zero},
        "batch_probe": {"query": list(sh.batch_query), "key": list(sh.batch_key),
                        "value": list(sh.batch_value),
                        "probabilities": list(sh.batch_probabilities),
                        "output": list(sh.batch_output), "isolated": sh.isolated},
        "empty_batch": {"query": list(sh.empty_query), "key": list(sh.empty_key),
                        "value": list(sh.empty_value),
                        "probabilities": list(sh.empty_probabilities),
                        "output": list(sh.empty_output),
                        "value_width_probe": list(sh.value_width_output)},
        "gradcheck": gradcheck_summary_json(evidence.gradcheck),
        "errors": [{"case": c.case, "kind": ERROR_KINDS.get(c.expected, c.expected),
                    "facts": dict(c.fields), "rejected": c.rejected, "raised": c.raised, "message": c.message}
                   for c in evidence.errors],
        "history": dict(HISTORY),
        "replay_bitwise": evidence.replay_bitwise,
        "next": NEXT_CHAPTER,
    }


def tensor_json(values: Any) -> dict[str, Any]:
    from qkvcli.render.document import tensor_json as whole

    return whole(values, "full")


def figure(evidence: SelfAttentionEvidence, width: int,
           options: RichOptions | None = None) -> RenderableType:
    """The chapter's figure: the trace's records drawn (Q, K, V, the scores, the probability
    rows, the mixture, the reverse pass, the probes, the rejected inputs, the history and
    the checks). ``width`` is the console's; the layout adapts to it when printed."""
    from qkvcli.render.chapters import figure as drawn
    from qkvcli.render.rich.layout import Row
    from qkvcli.render.rich.options import RichOptions

    options = options or RichOptions()
    number = options.precision
    s, single, sh, g = evidence.scale, evidence.single, evidence.shapes, evidence.gradcheck
    probes = drawn.facts_part("Probes", [
        (s.holds, "scale probe", f"unscaled focus {fmt_float(s.unscaled_focus, number)}, "
         f"scaled {fmt_float(s.scaled_focus, number)}, orthogonal key "
         f"{fmt_float(s.orthogonal_probability, number)}: "
         f"{'softened' if s.softened else 'not softened'}"),
        (single.holds, "single token", f"probability {vec(single.probabilities)}, output "
         f"{vec(single.output)}, no gradient to Q or K"),
        (sh.isolated, "batch of two", f"{fmt_shape(sh.batch_query)} in, "
         f"{fmt_shape(sh.batch_output)} out, halves bit for bit equal"),
        (sh.empty_holds, "empty batch", f"A {fmt_shape(sh.empty_probabilities)}, O "
         f"{fmt_shape(sh.empty_output)}; value width 1 gives {fmt_shape(sh.value_width_output)}"),
    ])
    refused = drawn.facts_part("Rejected inputs", [
        (c.rejected, c.case, c.message or "not refused") for c in evidence.errors])
    history = drawn.facts_part("History", [(None, key, value) for key, value in HISTORY])
    proof = drawn.facts_part("Proof", [
        (evidence.primary.rows_sum_to_one, "row sums",
         f"within {evidence.primary.row_sum_tolerance:.12f}"),
        (g.passed, "gradient check", f"{g.checked('query')}+{g.checked('key')}+{g.checked('value')} "
         f"coordinates, tolerance {fmt_float(g.tolerance)}"),
        (evidence.replay_bitwise, "replay", "bit for bit"),
    ])
    return drawn.head_figure(
        evidence, options, PREDICTION, False,
        [Row([probes, refused]), Row([history, proof])],
        "No mask yet: chapter 28 hides the keys after each query before the softmax.")
