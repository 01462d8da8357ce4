"""The chapter diagram's 17-line ``KIND|key=value`` trace."""

from __future__ import annotations

from collections.abc import Iterator

from qkvcli.checks.records import Evidence
from qkvcli.render.text.numbers import Deferred, fmt_bool, fmt_float, fmt_shape

NEXT_CHAPTER = "27-self-attention"


def render_trace(evidence: Evidence, tensors: str = "summary") -> str:
    """The trace as the reference prints it, computed from ``evidence``; ends with a newline."""
    return "".join(iter_trace(evidence, tensors))


def iter_trace(evidence: Evidence, tensors: str = "summary") -> Iterator[str]:
    """The same text in pieces, tensors formatted as they are written (``tensors``: a
    :data:`~qkvcli.render.tensors.POLICIES` policy)."""
    fmt_vector = Deferred(tensors)
    p = evidence.primary
    c = evidence.config
    s = evidence.shapes
    e = evidence.errors
    g = evidence.gradcheck
    h = evidence.history
    ind = evidence.independence

    def projection(role: str, tensor: str, index: int) -> str:
        weight = p.weights[index]
        output = p.outputs[index]
        return (
            f"PROJECTION|role={role}|tensor={tensor}|parameter={p.parameter_names[index]}"
            f"|weight_shape={fmt_shape(weight.shape)}|weights={fmt_vector(weight)}"
            f"|output_shape={fmt_shape(output.shape)}|output={fmt_vector(output)}"
        )

    def weight_gradient(role: str, index: int) -> str:
        grad = p.weight_gradients[index]
        return f"WEIGHT_GRADIENT|role={role}|shape={fmt_shape(grad.shape)}|values={fmt_vector(grad)}"

    if ind.applicable:
        independence = (
            f"INDEPENDENCE|changed=query|query_changed={fmt_bool(ind.query_changed)}"
            f"|key_output={'bitwise-unchanged' if ind.key_unchanged else 'changed'}"
            f"|value_output={'bitwise-unchanged' if ind.value_unchanged else 'changed'}"
        )
    else:
        independence = (
            "INDEPENDENCE|changed=query|query_changed=not-applicable"
            "|key_output=not-applicable|value_output=not-applicable"
        )
    eb, et = s.empty_batch, s.empty_tokens
    lines = [
        f"META|input_shape={fmt_shape(p.input.shape)}|model_width={c.d_model}"
        f"|head_width={c.d_head}|bias={fmt_bool(c.bias)}|parameter_count={p.parameter_count}"
        "|branch_order=query,key,value",
        f"INPUT|values={fmt_vector(p.input)}",
        projection("query", "Q", 0),
        projection("key", "K", 1),
        projection("value", "V", 2),
        f"BACKWARD|query_upstream={fmt_vector(p.grad_query)}"
        f"|key_upstream={fmt_vector(p.grad_key)}"
        f"|value_upstream={fmt_vector(p.grad_value)}"
        f"|input_gradient_shape={fmt_shape(p.grad_input.shape)}"
        f"|input_gradient={fmt_vector(p.grad_input)}",
        weight_gradient("query", 0),
        weight_gradient("key", 1),
        weight_gradient("value", 2),
        independence,
        f"EMPTY_SHAPES|batch_input={fmt_shape(eb.input)}|batch_query={fmt_shape(eb.outputs[0])}"
        f"|batch_key={fmt_shape(eb.outputs[1])}|batch_value={fmt_shape(eb.outputs[2])}"
        f"|token_input={fmt_shape(et.input)}|token_query={fmt_shape(et.outputs[0])}"
        f"|token_key={fmt_shape(et.outputs[1])}|token_value={fmt_shape(et.outputs[2])}",
        f"ERROR|case=rank-two|rejected={fmt_bool(e.rank.rejected)}|message={e.rank.message}",
        f"ERROR|case=input-width|rejected={fmt_bool(e.width.rejected)}|message={e.width.message}",
        f"ERROR|case=branch-mismatch|rejected={fmt_bool(e.model_mismatch.rejected)}"
        f"|message={e.model_mismatch.message}",
        f"HISTORY|earlier_left={h.earlier_left}|earlier_right={h.earlier_right}"
        f"|transformer_source={h.transformer_source}|mapping={h.mapping}",
        f"PROOF|input_checks={len(g.checks_of('input').checks)}"
        f"|query_weight_checks={len(g.checks_of('query_weight').checks)}"
        f"|key_weight_checks={len(g.checks_of('key_weight').checks)}"
        f"|value_weight_checks={len(g.checks_of('value_weight').checks)}"
        f"|tolerance={fmt_float(g.tolerance)}|gradcheck={fmt_bool(g.passed)}"
        f"|replay={'bitwise' if evidence.replay_bitwise else 'mismatch'}"
        f"|names={'unique' if e.duplicate_name.rejected else 'unchecked'}"
        f"|initialization={'transactional' if evidence.initialization.transactional else 'partial'}",
        f"NEXT|chapter={NEXT_CHAPTER}",
    ]
    yield from fmt_vector.stream(lines)
