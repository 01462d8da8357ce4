"""The chapter's 28-line ``key=value`` report."""

from __future__ import annotations

from collections.abc import Iterator

from qkvcli.checks.records import Evidence
from qkvcli.core.text import escape_controls
from qkvcli.render.text.numbers import Deferred, fmt_bool, fmt_float, fmt_shape

PREDICTION = "three independent bias-free projections preserve batch and token axes"
NEXT = "compare queries with keys and mix values"


def render_text(evidence: Evidence, tensors: str = "summary") -> str:
    """The report as the reference prints it, computed from ``evidence``; ends with a newline."""
    return "".join(iter_text(evidence, tensors))


def iter_text(evidence: Evidence, tensors: str = "summary") -> Iterator[str]:
    """The same text in pieces, tensors formatted as they are written (``tensors``: a
    :data:`~qkvcli.render.tensors.POLICIES` policy)."""
    fmt_vector = Deferred(tensors)
    p = evidence.primary
    c = evidence.config
    s = evidence.shapes
    e = evidence.errors
    i = evidence.initialization
    g = evidence.gradcheck
    h = evidence.history

    arrays = p.tensors()

    def tensor_line(name: str) -> str:
        value = arrays[name]
        return f"{name}=shape:{fmt_shape(value.shape)} values:{fmt_vector(value)}"

    lines = [
        f"chapter={escape_controls(evidence.chapter)}",
        f"prediction={PREDICTION}",
        f"config=batch:{c.batch} tokens:{c.tokens} d_model:{c.d_model} d_head:{c.d_head} "
        f"bias:{fmt_bool(c.bias)}",
        *(tensor_line(n) for n in ("input", "query_weight", "key_weight", "value_weight",
                                   "query", "key", "value")),
        f"parameter_names=[{','.join(p.parameter_names)}]",
        f"parameter_count={p.parameter_count} independent:{fmt_bool(i.independent)}",
        f"shape_rule={fmt_shape(s.rule.input)}->three*{fmt_shape(s.rule.outputs[0])}",
        f"batch_probe={fmt_shape(s.batch.input)}->three*{fmt_shape(s.batch.outputs[0])}",
        f"empty_tokens={fmt_shape(s.report_empty_tokens.input)}"
        f"->three*{fmt_shape(s.report_empty_tokens.outputs[0])}",
        f"history=additive_query:{h.earlier_left.replace('-', '_')} "
        f"additive_key_value:{h.earlier_right.replace('-', '_')} "
        "self_attention_qkv:hidden_sequence",
        f"upstream_query={fmt_vector(p.grad_query)}",
        f"upstream_key={fmt_vector(p.grad_key)}",
        f"upstream_value={fmt_vector(p.grad_value)}",
        f"input_gradient={fmt_vector(p.grad_input)}",
        f"query_weight_gradient={fmt_vector(p.grad_w_query)}",
        f"key_weight_gradient={fmt_vector(p.grad_w_key)}",
        f"value_weight_gradient={fmt_vector(p.grad_w_value)}",
        f"gradcheck=input_checks:{len(g.checks_of('input').checks)} "
        f"query_checks:{len(g.checks_of('query_weight').checks)} "
        f"key_checks:{len(g.checks_of('key_weight').checks)} "
        f"value_checks:{len(g.checks_of('value_weight').checks)} "
        f"tolerance:{fmt_float(g.tolerance)} passed:{fmt_bool(g.passed)}",
        f"initialization=seed:{i.seed} transactional:{fmt_bool(i.transactional)} "
        f"independent:{fmt_bool(i.independent)}",
        f"errors=rank:{fmt_bool(e.rank.rejected)} width:{fmt_bool(e.width.rejected)} "
        f"model_mismatch:{fmt_bool(e.model_mismatch.rejected)} "
        f"head_mismatch:{fmt_bool(e.head_mismatch.rejected)} "
        f"duplicate_name:{fmt_bool(e.duplicate_name.rejected)}",
        f"same_fixture_replays_bitwise={fmt_bool(evidence.replay_bitwise)}",
        f"next={NEXT}",
    ]
    yield from fmt_vector.stream(lines)
