"""The chapter's evidence report in its three plain forms: text, diagram trace and JSON.

The text is the chapter's 28-line ``key=value`` report and the trace its diagram's
17-line ``KIND|key=value`` trace, both byte for byte the reference's (the anchors fix
them); the JSON holds everything in the evidence under stable key names, in the forms
every report shares (:mod:`qkvcli.render.document`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from qkvcli.check.chapter26_evidence import Evidence, Primary
from qkvcli.core.arrays import Array
from qkvcli.core.names import BRANCHES, GRADIENTS
from qkvcli.core.results import Refusal, ShapeProbe
from qkvcli.core.text import escape_controls
from qkvcli.render.numbers import Line, fmt_bool, fmt_float, fmt_shape, stream_lines
from qkvcli.render.views import Asked
from qkvcli.render.wording import check_rows

if TYPE_CHECKING:
    import numpy.typing as npt  # annotations only: importing it costs start-up (numpy._typing)

# --- text ---------------------------------------------------------------------------

PREDICTION = "three independent bias-free projections preserve batch and token axes"
NEXT = "compare queries with keys and mix values"


PUBLISHED_TENSORS = {
    "input": "input", "w_query": "query_weight", "w_key": "key_weight",
    "w_value": "value_weight", "query": "query", "key": "key", "value": "value",
    "grad_query": "upstream_query", "grad_key": "upstream_key", "grad_value": "upstream_value",
    "grad_input": "input_gradient", "grad_w_query": "query_weight_gradient",
    "grad_w_key": "key_weight_gradient", "grad_w_value": "value_weight_gradient",
}
"""The report's published name of each of :meth:`Primary.tensors`' fields, in order."""


def published_tensors(primary: Primary) -> dict[str, Array]:
    """``primary``'s tensors under the report's published names, in report order."""
    return {PUBLISHED_TENSORS[field]: value for field, value in primary.tensors().items()}


def render_text(evidence: Evidence, tensors: str = "summary") -> str:
    """The report as the reference prints it, computed from ``evidence``; ends with a newline."""
    return "".join(iter_text(evidence, tensors))


def iter_text(evidence: Evidence, tensors: str = "summary") -> Iterator[str]:
    """The same text in pieces, tensors formatted as they are written (``tensors``: a
    :data:`~qkvcli.render.tensors.POLICIES` policy)."""
    p = evidence.primary
    c = evidence.config
    s = evidence.shapes
    e = evidence.errors
    i = evidence.initialization
    g = evidence.gradcheck
    h = evidence.history

    arrays = published_tensors(p)

    def tensor_line(name: str) -> Line:
        value = arrays[name]
        return (f"{name}=shape:{fmt_shape(value.shape)} values:", value)

    lines: list[Line] = [
        f"chapter={escape_controls(evidence.chapter)}",
        f"prediction={PREDICTION}",
        f"config=batch:{c.batch} tokens:{c.tokens} d_model:{c.d_model} d_head:{c.d_head} "
        f"bias:{fmt_bool(c.bias)}",
        *(tensor_line(n) for n in ("input", "query_weight", "key_weight", "value_weight",
                                   "query", "key", "value")),
        f"parameter_names=[{','.join(p.parameter_names)}]",
        f"parameter_count={p.parameter_count} independent:{fmt_bool(i.independent)}",
        f"shape_rule={fmt_shape(s.rule.input)}->three*{fmt_shape(_out(s.rule, 0))}",
        f"batch_probe={fmt_shape(s.batch.input)}->three*{fmt_shape(_out(s.batch, 0))}",
        f"empty_tokens={fmt_shape(s.report_empty_tokens.input)}"
        f"->three*{fmt_shape(_out(s.report_empty_tokens, 0))}",
        f"history=additive_query:{h.earlier_left.replace('-', '_')} "
        f"additive_key_value:{h.earlier_right.replace('-', '_')} "
        "self_attention_qkv:hidden_sequence",
        ("upstream_query=", p.grad_query),
        ("upstream_key=", p.grad_key),
        ("upstream_value=", p.grad_value),
        ("input_gradient=", p.grad_input),
        ("query_weight_gradient=", p.grad_w_query),
        ("key_weight_gradient=", p.grad_w_key),
        ("value_weight_gradient=", p.grad_w_value),
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
    yield from stream_lines(lines, tensors)


# --- trace --------------------------------------------------------------------------

NEXT_CHAPTER = "27-self-attention"


def said(case: Refusal) -> str:
    """A bad input's message: the error raised, or ``accepted`` when none was."""
    return case.message or "accepted"


def render_trace(evidence: Evidence, tensors: str = "summary") -> str:
    """The trace as the reference prints it, computed from ``evidence``; ends with a newline."""
    return "".join(iter_trace(evidence, tensors))


def iter_trace(evidence: Evidence, tensors: str = "summary") -> Iterator[str]:
    """The same text in pieces, tensors formatted as they are written (``tensors``: a
    :data:`~qkvcli.render.tensors.POLICIES` policy)."""
    p = evidence.primary
    c = evidence.config
    s = evidence.shapes
    e = evidence.errors
    g = evidence.gradcheck
    h = evidence.history
    ind = evidence.independence

    def projection(role: str, tensor: str, index: int) -> Line:
        weight = p.weights[index]
        output = p.outputs[index]
        return (
            f"PROJECTION|role={role}|tensor={tensor}|parameter={p.parameter_names[index]}"
            f"|weight_shape={fmt_shape(weight.shape)}|weights=", weight,
            f"|output_shape={fmt_shape(output.shape)}|output=", output,
        )

    def weight_gradient(role: str, index: int) -> Line:
        grad = p.weight_gradients[index]
        return (f"WEIGHT_GRADIENT|role={role}|shape={fmt_shape(grad.shape)}|values=", grad)

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
    lines: list[Line] = [
        f"META|input_shape={fmt_shape(p.input.shape)}|model_width={c.d_model}"
        f"|head_width={c.d_head}|bias={fmt_bool(c.bias)}|parameter_count={p.parameter_count}"
        "|branch_order=query,key,value",
        ("INPUT|values=", p.input),
        projection("query", "Q", 0),
        projection("key", "K", 1),
        projection("value", "V", 2),
        ("BACKWARD|query_upstream=", p.grad_query, "|key_upstream=", p.grad_key,
         "|value_upstream=", p.grad_value,
         f"|input_gradient_shape={fmt_shape(p.grad_input.shape)}|input_gradient=", p.grad_input),
        weight_gradient("query", 0),
        weight_gradient("key", 1),
        weight_gradient("value", 2),
        independence,
        f"EMPTY_SHAPES|batch_input={fmt_shape(eb.input)}|batch_query={fmt_shape(_out(eb, 0))}"
        f"|batch_key={fmt_shape(_out(eb, 1))}|batch_value={fmt_shape(_out(eb, 2))}"
        f"|token_input={fmt_shape(et.input)}|token_query={fmt_shape(_out(et, 0))}"
        f"|token_key={fmt_shape(_out(et, 1))}|token_value={fmt_shape(_out(et, 2))}",
        f"ERROR|case=rank-two|rejected={fmt_bool(e.rank.rejected)}|message={said(e.rank)}",
        f"ERROR|case=input-width|rejected={fmt_bool(e.width.rejected)}|message={said(e.width)}",
        f"ERROR|case=branch-mismatch|rejected={fmt_bool(e.model_mismatch.rejected)}"
        f"|message={said(e.model_mismatch)}",
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
    yield from stream_lines(lines, tensors)


# --- JSON ---------------------------------------------------------------------------


def _out(probe: ShapeProbe, branch: int) -> tuple[int, ...]:
    """The shape of the probe's Q, K or V (``()`` when its call failed)."""
    return probe.shape(BRANCHES[branch]) or ()


def _probe(probe: ShapeProbe) -> dict[str, Any]:
    return {
        "input": list(probe.input),
        "query": list(_out(probe, 0)),
        "key": list(_out(probe, 1)),
        "value": list(_out(probe, 2)),
        "gradient_shapes_ok": probe.holds(*GRADIENTS),
    }


def evidence_json(evidence: Evidence, tensors: str = "summary") -> dict[str, Any]:
    """The report as a JSON-ready dictionary (tensors per the ``tensors`` policy)."""
    from qkvcli.render.document import check_entry, gradcheck_json, head, json_float, tensor_json

    p = evidence.primary
    c = evidence.config
    s = evidence.shapes
    i = evidence.initialization
    ind = evidence.independence
    return {
        **head("run", chapter=evidence.chapter, passed=evidence.passed),
        "loss": json_float(p.loss),
        "checks": [check_entry("run", ch.name, ch.passed, ch.detail)
                   for ch in check_rows(evidence)],
        "config": {
            "batch": c.batch,
            "tokens": c.tokens,
            "d_model": c.d_model,
            "d_head": c.d_head,
            "bias": c.bias,
            "seed": evidence.seed,
            "layout": c.layout,
        },
        "parameter_names": list(p.parameter_names),
        "parameter_count": p.parameter_count,
        "tensors": {name: tensor_json(value, tensors)
                    for name, value in published_tensors(p).items()},
        "shapes": {
            "rule": _probe(s.rule),
            "batch": _probe(s.batch),
            "empty_batch": _probe(s.empty_batch),
            "empty_tokens": _probe(s.empty_tokens),
            "report_empty_tokens": _probe(s.report_empty_tokens),
        },
        "errors": [
            {"case": case.case, "rejected": case.rejected, "message": said(case)}
            for case in evidence.errors.cases()
        ],
        "initialization": {
            "seed": i.seed,
            "reproducible": i.reproducible,
            "independent": i.independent,
            "transactional": i.transactional,
            "rejection": i.rejection,
        },
        "independence": {
            "applicable": ind.applicable,
            "changed": "query",
            "row": ind.row,
            "query_changed": ind.query_changed,
            "key_unchanged": ind.key_unchanged,
            "value_unchanged": ind.value_unchanged,
        },
        "replay_bitwise": evidence.replay_bitwise,
        "history": {
            "earlier_left": evidence.history.earlier_left,
            "earlier_right": evidence.history.earlier_right,
            "transformer_source": evidence.history.transformer_source,
            "mapping": evidence.history.mapping,
        },
        "gradcheck": gradcheck_json(evidence.gradcheck),
    }


def render_json(evidence: Evidence, tensors: str = "summary") -> str:
    """The JSON report as one string (see :func:`iter_json`)."""
    return "".join(iter_json(evidence, tensors))


def iter_json(evidence: Evidence, tensors: str = "summary") -> Iterator[str]:
    """The JSON report in pieces: the bytes of ``dumps(evidence_json(evidence, tensors))``.

    Large tensors shown in full are streamed (:func:`~qkvcli.render.stream.iter_values`)
    instead of being held as one list of Python floats and one string.
    """
    from qkvcli.render.document import dumps  # the JSON path only: start-up
    from qkvcli.render.stream import marker, stream_document

    document = evidence_json(evidence, "summary" if tensors == "full" else tensors)
    if tensors != "full":
        yield dumps(document)
        return
    arrays: list[npt.ArrayLike] = []
    for name, value in published_tensors(evidence.primary).items():
        entry = document["tensors"][name]
        if "values" not in entry:
            document["tensors"][name] = {"shape": entry["shape"], "values": marker(len(arrays))}
            arrays.append(value)
    yield from stream_document(dumps(document), arrays)


def pieces(evidence: Evidence, fmt: str, asked: Asked) -> Iterator[str]:
    """The chapter's report as ``text``, ``trace`` or ``json``, in pieces."""
    stream = {"text": iter_text, "trace": iter_trace, "json": iter_json}
    return stream[fmt](evidence, asked.tensors)
