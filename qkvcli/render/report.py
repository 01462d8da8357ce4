"""Chapter 26's evidence report, run's: its facts, and the text, trace and JSON made of them.

:func:`facts` states the evidence once (:mod:`qkvcli.render.facts`); the JSON is their one
walk, and the text (the chapter's 28-line ``key=value`` report) and the trace (its
diagram's 17-line ``KIND|key=value`` trace) are layout tables over them, byte for byte the
reference's (the anchors fix them), each tensor written as it streams per ``--tensors``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from qkvcli.check.chapter26_evidence import Evidence, Primary
from qkvcli.core.arrays import Array
from qkvcli.core.names import BRANCHES, GRADIENTS
from qkvcli.core.results import ShapeProbe
from qkvcli.core.text import escape_controls
from qkvcli.render.facts import (
    Facts,
    Part,
    Table,
    bare,
    entries,
    json_pieces,
    record,
    scalar,
    section,
    shape,
    tensor,
    verdict,
)
from qkvcli.render.facts import pieces as laid
from qkvcli.render.numbers import fmt_bool, fmt_float, fmt_shape
from qkvcli.render.views import Asked
from qkvcli.render.wording import check_rows

if TYPE_CHECKING:
    from qkvcli.check.expect import ExpectResult

PREDICTION = "three independent bias-free projections preserve batch and token axes"
NEXT = "compare queries with keys and mix values"
NEXT_CHAPTER = "27-self-attention"

PUBLISHED_TENSORS = {
    "input": "input", **{f"w_{b}": f"{b}_weight" for b in BRANCHES}, **{b: b for b in BRANCHES},
    **{f"grad_{b}": f"upstream_{b}" for b in BRANCHES}, "grad_input": "input_gradient",
    **{f"grad_w_{b}": f"{b}_weight_gradient" for b in BRANCHES},
}
"""The report's published name of each of :meth:`Primary.tensors`' fields, in order."""
AXES = {"input": ("batch", "token", "model_feature"), "weight": ("model_feature", "feature"),
        "output": ("batch", "token", "feature")}
"""The axes of the input (and its gradient), of a weight (and its gradient) and of an
output (and its upstream gradient)."""
GIVEN = ("input", "w_query", "w_key", "w_value", "grad_query", "grad_key", "grad_value")
"""The tensors the fixture gives (the rest qkv computes)."""


def published_tensors(primary: Primary) -> dict[str, Array]:
    """``primary``'s tensors under the report's published names, in report order."""
    return {PUBLISHED_TENSORS[field]: value for field, value in primary.tensors().items()}


def _axes(field: str) -> tuple[str, ...]:
    return AXES["weight" if "w_" in field else "input" if field.endswith("input") else "output"]


def _probe(probe: ShapeProbe) -> Any:
    return section(input=shape(probe.input),
                   **{branch: shape(probe.shape(branch) or ()) for branch in BRANCHES},
                   gradient_shapes_ok=verdict(probe.holds(*GRADIENTS)), kept=verdict(probe.kept))


def facts(evidence: Evidence) -> dict[str, Any]:
    """The chapter's facts after the JSON's head: everything the evidence holds, under the
    report's published names."""
    from qkvcli.render.document import check_entry, gradcheck_json

    p, c, s, i, ind, h = (evidence.primary, evidence.config, evidence.shapes,
                          evidence.initialization, evidence.independence, evidence.history)
    return {
        "loss": scalar(float(p.loss)),
        "checks": [check_entry("run", ch.name, ch.passed, ch.detail) for ch in check_rows(evidence)],
        "config": section(batch=c.batch, tokens=c.tokens, d_model=c.d_model, d_head=c.d_head,
                          bias=verdict(c.bias), seed=evidence.seed, layout=c.layout),
        "parameter_names": list(p.parameter_names),
        "parameter_count": p.parameter_count,
        "tensors": section(**{PUBLISHED_TENSORS[field]: tensor(value, _axes(field), given=field in GIVEN)
                              for field, value in p.tensors().items()}),
        "shapes": section(**{name: _probe(getattr(s, name)) for name in (
            "rule", "batch", "empty_batch", "empty_tokens", "report_empty_tokens")}),
        "errors": entries([{"case": case.case, "rejected": verdict(case.rejected),
                            "message": case.message or "accepted"} for case in evidence.errors.cases()]),
        "initialization": section(seed=i.seed, reproducible=verdict(i.reproducible),
                                  independent=verdict(i.independent),
                                  transactional=verdict(i.transactional), rejection=i.rejection),
        "independence": section(applicable=verdict(ind.applicable), changed="query", row=ind.row,
                                query_changed=verdict(ind.query_changed),
                                key_unchanged=verdict(ind.key_unchanged),
                                value_unchanged=verdict(ind.value_unchanged)),
        "replay_bitwise": verdict(evidence.replay_bitwise),
        "history": section(earlier_left=h.earlier_left, earlier_right=h.earlier_right,
                           transformer_source=h.transformer_source, mapping=h.mapping),
        "gradcheck": record(evidence.gradcheck, gradcheck_json),
        **({} if evidence.expect is None else {"expect": _expect(evidence.expect)}),
    }


def _expect(found: ExpectResult) -> Any:
    """The fixture's ``expect`` judged: the quantities compared, how many values, the
    tolerance, the verdict and each quantity's first value beyond the tolerance."""
    return section(names=list(found.names), values=found.values, tolerance=found.tolerance,
                   passed=verdict(found.passed), mismatches=entries([
                       {"name": m.name, "coordinate": shape(m.coordinate),
                        "expected": scalar(m.expected), "actual": scalar(m.actual),
                        "error": scalar(m.error)} for m in found.mismatches]))


# --- the text and the trace: tables over the facts -------------------------------------

def _three(probe: str) -> Part:
    return ("", f"shapes.{probe}", lambda p: f"{fmt_shape(p['input'].value)}->three*"
            f"{fmt_shape(p['query'].value)}")


CHECKED = ("input", "query_weight", "key_weight", "value_weight")
"""The gradient check's tensors, in the order the text and the trace count them."""


def _counts(labels: tuple[str, ...]) -> tuple[Part, ...]:
    """The gradient check's count per tensor, each under its label, then its tolerance."""
    return (*((label, "gradcheck", lambda g, n=name: len(g.checks_of(n).checks))
              for label, name in zip(labels, CHECKED, strict=True)),
            ("tolerance", "gradcheck", lambda g: fmt_float(g.tolerance)))


def _rejected(errors: Any, index: int) -> str:
    return fmt_bool(errors[index]["rejected"].value)


def _shape(value: Any) -> str:
    return fmt_shape(np.shape(value))


ROLES = tuple(zip(BRANCHES, ("Q", "K", "V"), strict=True))
TEXT: Table = (
    ("chapter", lambda e: escape_controls(e.chapter)),
    ("prediction", lambda e: PREDICTION),
    ("config", tuple((name, f"config.{name}") for name in ("batch", "tokens", "d_model", "d_head",
                                                              "bias"))),
    *((name, f"tensors.{name}") for name in ("input", "query_weight", "key_weight",
                                             "value_weight", "query", "key", "value")),
    ("parameter_names", ("parameter_names", lambda names: f"[{','.join(names)}]")),
    ("parameter_count", (("", "parameter_count"), ("independent", "initialization.independent"))),
    ("shape_rule", (_three("rule"),)),
    ("batch_probe", (_three("batch"),)),
    ("empty_tokens", (_three("report_empty_tokens"),)),
    ("history", (("additive_query", "history.earlier_left", lambda v: v.replace("-", "_")),
                 ("additive_key_value", "history.earlier_right", lambda v: v.replace("-", "_")),
                 ("self_attention_qkv", lambda e: "hidden_sequence"))),
    *((name, (f"tensors.{name}", bare)) for name in (
        "upstream_query", "upstream_key", "upstream_value", "input_gradient",
        "query_weight_gradient", "key_weight_gradient", "value_weight_gradient")),
    ("gradcheck", (*_counts(("input_checks", "query_checks", "key_checks", "value_checks")),
                   ("passed", "gradcheck", lambda g: fmt_bool(g.passed)))),
    ("initialization", (("seed", "initialization.seed"),
                        ("transactional", "initialization.transactional"),
                        ("independent", "initialization.independent"))),
    ("errors", tuple((label, "errors", lambda errors, i=i: _rejected(errors, i)) for i, label in
                     enumerate(("rank", "width", "model_mismatch", "head_mismatch",
                                "duplicate_name")))),
    ("same_fixture_replays_bitwise", "replay_bitwise"),
    ("next", lambda e: NEXT),
)
"""The text report's lines: each key and its facts."""


def _output(branch: str) -> Part:
    """The trace's word for whether changing ``W_Q`` left ``branch``'s output alone."""
    return (f"{branch}_output", "independence", lambda ind: "not-applicable" if not
            ind["applicable"].value else "bitwise-unchanged" if ind[f"{branch}_unchanged"].value
            else "changed")


def _error(index: int) -> tuple[str, Any]:
    return ("ERROR", (("case", "errors", lambda errors: errors[index]["case"]),
                      ("rejected", "errors", lambda errors: _rejected(errors, index)),
                      ("message", "errors", lambda errors: errors[index]["message"])))


TRACE: Table = (
    ("META", (("input_shape", "tensors.input", _shape),
              ("model_width", "config.d_model"), ("head_width", "config.d_head"),
              ("bias", "config.bias"), ("parameter_count", "parameter_count"),
              ("branch_order", lambda e: ",".join(BRANCHES)))),
    ("INPUT", (("values", "tensors.input", bare),)),
    *(("PROJECTION", (("role", lambda e, b=branch: b), ("tensor", lambda e, t=letter: t),
                      ("parameter", "parameter_names", lambda names, i=i: names[i]),
                      ("weight_shape", f"tensors.{branch}_weight", _shape),
                      ("weights", f"tensors.{branch}_weight", bare),
                      ("output_shape", f"tensors.{branch}", _shape),
                      ("output", f"tensors.{branch}", bare)))
      for i, (branch, letter) in enumerate(ROLES)),
    ("BACKWARD", (*((f"{branch}_upstream", f"tensors.upstream_{branch}", bare) for branch in BRANCHES),
                  ("input_gradient_shape", "tensors.input_gradient", _shape),
                  ("input_gradient", "tensors.input_gradient", bare))),
    *(("WEIGHT_GRADIENT", (("role", lambda e, b=branch: b),
                           ("shape", f"tensors.{branch}_weight_gradient", _shape),
                           ("values", f"tensors.{branch}_weight_gradient", bare)))
      for branch in BRANCHES),
    ("INDEPENDENCE", (("changed", "independence.changed"),
                      ("query_changed", "independence", lambda ind: fmt_bool(
                          ind["query_changed"].value) if ind["applicable"].value
                       else "not-applicable"), _output("key"), _output("value"))),
    ("EMPTY_SHAPES", tuple(
        (f"{side}_{name}", f"shapes.{probe}", lambda p, n=name: fmt_shape(p[n].value))
        for side, probe in (("batch", "empty_batch"), ("token", "empty_tokens"))
        for name in ("input", *BRANCHES))),
    *(_error(index) for index in range(3)),
    ("HISTORY", (("", "history.*"),)),
    ("PROOF", (*_counts(("input_checks", "query_weight_checks", "key_weight_checks",
                         "value_weight_checks")),
               ("gradcheck", "gradcheck", lambda g: fmt_bool(g.passed)),
               ("replay", "replay_bitwise", lambda same: "bitwise" if same else "mismatch"),
               ("names", "errors", lambda errors: "unique" if errors[4]["rejected"].value
                else "unchecked"),
               ("initialization", "initialization.transactional",
                lambda done: "transactional" if done else "partial"))),
    ("NEXT", (("chapter", lambda e: NEXT_CHAPTER),)),
)
"""The trace's lines: each kind and its facts."""


def _head(evidence: Evidence) -> dict[str, Any]:
    from qkvcli.render.document import head

    return head("run", chapter=evidence.chapter, passed=evidence.passed)


def pieces(evidence: Evidence, fmt: str, asked: Asked) -> Iterator[str]:
    """The chapter's report as ``text``, ``trace`` or ``json``, in pieces, each tensor
    written as it streams per ``asked.tensors`` (a JSON tensor shown in full is never held
    as one list of Python floats)."""
    found: Facts = facts(evidence)
    if fmt == "json":
        return json_pieces(_head(evidence), found, asked.tensors)
    return laid(found, evidence, TRACE if fmt == "trace" else TEXT, fmt == "trace",
                tensors=asked.tensors)


def evidence_json(evidence: Evidence, tensors: str = "summary") -> dict[str, Any]:
    """The report as a JSON-ready dictionary (tensors per the ``tensors`` policy)."""
    from qkvcli.render.facts import json_of

    return {**_head(evidence), **json_of(facts(evidence), tensors)}


def iter_text(evidence: Evidence, tensors: str = "summary") -> Iterator[str]:
    """The text report in pieces (:func:`pieces`)."""
    return pieces(evidence, "text", Asked(tensors))


def render_text(evidence: Evidence, tensors: str = "summary") -> str:
    """The report as the reference prints it; ends with a newline."""
    return "".join(pieces(evidence, "text", Asked(tensors)))


def render_trace(evidence: Evidence, tensors: str = "summary") -> str:
    """The trace as the reference prints it; ends with a newline."""
    return "".join(pieces(evidence, "trace", Asked(tensors)))


def render_json(evidence: Evidence, tensors: str = "summary") -> str:
    """The JSON report as one string: ``dumps(evidence_json(evidence, tensors))``."""
    return "".join(pieces(evidence, "json", Asked(tensors)))
