"""Chapter 30's report, multi-head attention: text and trace (the anchors' bytes), JSON, figure.

Pure functions of :class:`~qkvcli.chapters.ch30.MultiHeadEvidence`; every published name and
all the chapter's wording live here. Numbers are fixed point with six decimals, and a
value under half a unit of the last decimal is written as ``0.000000`` (never signed),
as the reference writes them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from qkvcli.chapters.ch30 import NAME, MultiHeadEvidence
from qkvcli.render.chapters.entries import (
    KEPT_TEXT,
    KEPT_TRACE,
    REPLAY,
    chapter_checks,
    invariance,
    refusals,
    rejected,
    shape_of,
    worded,
)
from qkvcli.render.chapters.entries import json_document as json_document_of
from qkvcli.render.chapters.rows import Table, fields, opening, per, tensor_lines, tensors
from qkvcli.render.facts import report, scalar, section, shape, tensor, values, verdict
from qkvcli.render.numbers import fmt_bool, fmt_float, fmt_general, fmt_shape, fmt_vector, python_fixed

if TYPE_CHECKING:
    from qkvcli.render.rich.options import RichOptions

PREDICTION = ("projection creates two learned feature lanes; each lane normalizes its own "
              "causal rows; W_O first learns how to mix the concatenated results")
NEXT = "wrap this attention transformation in the first pre-normalized residual path"
PARAMETER_NAMES = ("attention.query.weight", "attention.key.weight", "attention.value.weight",
                   "attention.output.weight")
PARAMETER_ORDER = ("query.weight", "key.weight", "value.weight", "output.weight")
HISTORY_CODES = (("mixing", "after-concatenation"),
                 ("modern_example", "llama-causal-heads-plus-rope"),
                 ("weight_api", "dense-teaching-evidence"))
"""Where multi-head attention stands, as the chapter tells it: the heads are mixed after
their concatenation; LLaMA runs causal heads with RoPE; the weights here are dense
teaching evidence, not a fused kernel's API."""

GRADIENT_TENSORS = (("input", "input"), ("w_query", "query"), ("w_key", "key"),
                    ("w_value", "value"), ("w_out", "output"))
"""The gradient check's tensors and their keys on the ``gradcheck=`` line."""


def _gradient_counts(evidence: MultiHeadEvidence) -> dict[str, int]:
    counts = {t.tensor: len(t.checks) for t in evidence.gradcheck.tensors}
    return {key: counts.get(name, 0) for name, key in GRADIENT_TENSORS}


TENSORS = ("input projected_query_heads projected_key_heads projected_value_heads "
           "rotated_query_heads rotated_key_heads attention_weights head_outputs merged "
           "output_weight output")
"""The tensors the text shows whole, in its order."""
GRADIENTS = ("input_gradient query_weight_gradient key_weight_gradient value_weight_gradient "
             "output_weight_gradient")
SPELLINGS = {"tensor": lambda value: f"shape:{shape_of(value)} values:{fmt_vector(value)}",
             "values": fmt_vector,
             "scalar": lambda value: python_fixed(value, 6) if isinstance(value, float) else str(value)}
"""The chapter's spelling of its tensors, values and numbers (a tiny value is 0)."""


def _fine(value: float) -> str:
    return python_fixed(value, 12)


def _prefix(e: MultiHeadEvidence, words: tuple[str, ...], labelled: str, between: str) -> str:
    pr = e.probes
    return invariance(pr.prefix_unchanged, int(e.primary.input.shape[1]) - 1, pr.suffix_changed,
                      words, labelled, between)


def _gradchecks(e: MultiHeadEvidence) -> str:
    counts = _gradient_counts(e)
    return (" ".join(f"{key}:{count}" for key, count in counts.items())
            + f" total:{sum(counts.values())} tolerance:{python_fixed(e.fixture.tolerance, 6)} "
            f"passed:{fmt_bool(e.gradcheck.passed)}")


TEXT: Table = (
    *opening(NAME, PREDICTION),
    ("config", fields("config", "batch tokens d_model heads d_h offset capacity rope_base bias")),
    *tensor_lines(TENSORS),
    ("heads", fields("heads", "head_0_uniform head_1_distinct=heads_distinct "
                              "future_probabilities_zero")),
    ("prefix_perturbed_output", (("", "tensors.prefix_perturbed_output", fmt_vector),
                                 ("", lambda e: _prefix(e, ("_unchanged", *KEPT_TEXT[1:]), ":", " ")))),
    ("layout", fields("layout", "split_merge_bitwise head_isolation_before_output "
                                "common_offset_weights_preserved tolerance", tolerance=_fine)),
    ("parameters", (("names", "parameters.names", lambda names: f"[{','.join(names)}]"),
                    ("shapes", "parameters.shapes",
                     lambda shapes: f"[{','.join(fmt_shape(s) for s in shapes)}]"),
                    *fields("parameters", "count bias_free node_distinct"))),
    ("upstream", (("", "tensors.upstream", fmt_vector), ("loss", "loss"))),
    *tensor_lines(GRADIENTS, spell=fmt_vector),
    ("gradcheck", _gradchecks),
    ("shapes", (("", "shapes.*"),)),
    ("errors", rejected()),
    ("history", (("", "history.*"),)),
    ("proof", (("tape_finite", "tape_finite"), REPLAY,
               *fields("heads", "heads_distinct causal=future_probabilities_zero"),
               ("split_merge", "layout.split_merge_bitwise"),
               ("gradients", lambda e: fmt_bool(e.gradcheck.passed)))),
    ("next", lambda e: NEXT),
)
"""The text report's lines: each key, and its facts (a path said by its kind in the
chapter's :data:`SPELLINGS`, a path and its spelling, or labelled parts)."""


def text(evidence: MultiHeadEvidence) -> str:
    """The chapter's text report, ``key=value`` lines ending with a newline."""
    return report(facts(evidence), evidence, TEXT, spellings=SPELLINGS)


def _at(value: Any, index: tuple[int, ...]) -> str:
    """A tensor's slice at ``index``, ``[..]``."""
    return fmt_vector(value[index])


PROOF_WORDS = (("split_merge", "layout.split_merge_bitwise", "bitwise", "mismatch"),
               ("head_isolation", "layout.head_isolation_before_output", "before-output", "failed"),
               ("future_probabilities", "heads.future_probabilities_zero", "exact-zero", "nonzero"),
               ("common_offset", "layout.common_offset_weights_preserved", "preserved", "changed"))
"""The trace's proofs: each label, its verdict's path, and its words for true and false."""
HEAD_PARTS = (("projected_q", "projected_query"), ("projected_k", "projected_key"),
              ("projected_v", "projected_value"), ("rotated_q", "rotated_query"),
              ("rotated_k", "rotated_key"))
"""The trace's label of each of a head's tensors on its ``PARTITION`` line."""


def _trace(evidence: MultiHeadEvidence) -> Table:
    """The trace's lines: the configuration, the stages' shapes, each head's partition,
    weights and outputs, the merge, ``W_O``'s rows, the output, then the proofs (a line
    of batch item ``b`` says so when there are several)."""
    p = evidence.primary
    batch, tokens, _ = p.input.shape
    items, heads, d_h = range(batch), range(evidence.fixture.spec.heads), p.projected_query.shape[-1]
    cells = [(b, t) for b in items for t in range(tokens)]
    rows = [(b, h, t) for b in items for h in heads for t in range(tokens)]

    def item(key: str) -> Any:
        return (lambda i: f"{key}|batch={i[0]}") if batch > 1 else key

    return (
        ("CONFIG", (*fields("config", "batch tokens model_width=d_model heads head_width=d_h "
                                      "offset max_positions=capacity rope_base bias"),
                    ("parameter_order", lambda e: f"[{','.join(PARAMETER_ORDER)}]"),
                    ("layout", lambda e: "reshape-transpose"))),
        *(("SHAPE", (("stage", lambda e, s=stage: s.replace("_", "-")), ("value", f"shapes.{stage}")))
          for stage, _ in p.stages()),
        *per("PARTITION", ((h,) for h in heads), (
            ("head", 0), ("features", lambda e, i: "[" + ",".join(
                str(c) for c in range(i[0] * d_h, (i[0] + 1) * d_h)) + "]"),
            *((label, f"tensors.{name}_heads", lambda value, i: fmt_vector(value[:, i[0]]))
              for label, name in HEAD_PARTS))),
        *per(item("WEIGHT"), rows, (
            ("head", 1), ("query", 2), ("visibility", lambda e, i: "[" + ",".join(
                "allowed" if k <= i[2] else "blocked" for k in range(tokens)) + "]"),
            ("values", "tensors.attention_weights", _at),
            ("row_sum", "tensors.attention_weights", lambda value, i: fmt_float(float(value[i].sum()))))),
        *per(item("HEAD_OUTPUT"), rows, (("head", 1), ("token", 2),
                                         ("values", "tensors.head_outputs", _at))),
        *per(item("MERGED"), cells, (
            ("token", 1), *((f"head_{h}", "tensors.head_outputs",
                             lambda value, i, h=h: fmt_vector(value[i[0], h, i[1]])) for h in heads),
            ("values", "tensors.merged", _at))),
        *per("OUTPUT_MAP", ((r,) for r in range(len(p.output_weight))),
             (("row", 0), ("values", "tensors.output_weight", _at))),
        *per(item("OUTPUT"), cells, (("token", 1), ("merged", "tensors.merged", _at),
                                     ("projected", "tensors.output", _at))),
        ("PREFIX_PROOF", (("", lambda e: _prefix(e, KEPT_TRACE, "=", "|")),
                          *(worded(*words) for words in PROOF_WORDS),
                          ("tolerance", "layout.tolerance", _fine),
                          ("parameters", "parameters.count"),
                          ("gradchecks", lambda e: sum(_gradient_counts(e).values())))),
    )


def trace(evidence: MultiHeadEvidence) -> str:
    """The chapter's diagram trace, ``KIND|key=value`` lines ending with a newline: what
    the figure draws, stage by stage."""
    return report(facts(evidence), evidence, _trace(evidence), True, SPELLINGS)


# --- JSON -----------------------------------------------------------------------------------

JSON_KEYS = ("qkv_version", "schema_version", "report", "chapter", "passed", "checks", "config",
             "tensors", "heads", "prefix", "layout", "parameters", "loss", "shapes", "errors",
             "gradcheck", "tape_finite", "replay_bitwise", "history")
"""The JSON report's keys, in order (docs/reading-the-report.md explains each)."""


def facts(evidence: MultiHeadEvidence) -> dict[str, Any]:
    """The chapter's facts (:mod:`qkvcli.render.facts`) under :data:`JSON_KEYS` after
    the head: what the JSON publishes and the text says."""
    from qkvcli.render.document import gradcheck_json

    f, p, pr = evidence.fixture, evidence.primary, evidence.probes
    (empty, one), par, h = evidence.shapes, evidence.parameters, evidence.history
    batch, tokens, d_model = p.input.shape
    split, merged = ("batch", "head", "token", "feature"), ("batch", "token", "feature")
    weights, square = ("model_feature", "feature"), ("feature", "model_feature")
    return {
        "checks": chapter_checks(NAME, evidence),
        "config": section(batch=int(batch), tokens=int(tokens), d_model=int(d_model),
                          heads=f.spec.heads, d_h=int(p.projected_query.shape[-1]),
                          offset=f.offset, shift=f.shift, capacity=f.spec.table.positions,
                          rope_base=scalar(float(f.spec.table.base)),
                          rope_layout=f.spec.table.layout, bias=verdict(not par.bias_free)),
        "tensors": section(
            **tensors(merged, True, input=p.input),
            **tensors(split, projected_query_heads=p.projected_query,
                      projected_key_heads=p.projected_key, projected_value_heads=p.projected_value,
                      rotated_query_heads=p.rotated_query, rotated_key_heads=p.rotated_key),
            attention_weights=tensor(p.attention, ("batch", "head", "query", "key")),
            **tensors(split, head_outputs=p.head_outputs), **tensors(merged, merged=p.merged),
            **tensors(square, True, output_weight=p.output_weight),
            **tensors(merged, output=p.output), **tensors(merged, True, upstream=p.upstream),
            **tensors(merged, input_gradient=p.grad_input),
            **tensors(weights, query_weight_gradient=p.grad_w_query,
                      key_weight_gradient=p.grad_w_key, value_weight_gradient=p.grad_w_value),
            **tensors(square, output_weight_gradient=p.grad_w_out),
            **tensors(merged, prefix_perturbed_output=pr.suffix_output)),
        "heads": section(head_0_uniform=verdict(pr.head_0_uniform),
                         heads_distinct=verdict(pr.heads_distinct),
                         future_probabilities_zero=verdict(pr.future_zero),
                         rows_normalized=verdict(pr.rows_normalized)),
        "prefix": section(suffix=values(f.suffix), unchanged=list(pr.prefix_unchanged),
                          last_changed=pr.suffix_changed),
        "layout": section(split_merge_bitwise=verdict(pr.split_merge),
                          head_isolation_before_output=verdict(pr.head_isolation),
                          common_offset_weights_preserved=verdict(pr.common_offset),
                          tolerance=f.invariant_tolerance),
        "parameters": section(names=list(PARAMETER_NAMES),
                              shapes=[list(x) for x in par.shapes], count=par.count,
                              bias_free=verdict(par.bias_free), node_distinct=verdict(par.distinct)),
        "loss": scalar(p.loss),
        "shapes": section(**{name: shape(dims) for name, dims in p.stages()},
                          empty_batch_weights=shape(empty.shape("weights")),
                          empty_batch_output=shape(empty.shape("output")),
                          single_token_weights=shape(one.shape("weights"))),
        "errors": refusals(evidence.errors, ("case", "expected", "raised", "rejected", "message")),
        "gradcheck": gradcheck_json(evidence.gradcheck),
        "tape_finite": verdict(evidence.tape_finite),
        "replay_bitwise": verdict(evidence.replay_bitwise),
        "history": section(earlier_weighted_context=values(h.earlier_context),
                           earlier_distributions_per_target=1,
                           single_head_shape=shape(h.single_head_shape),
                           multi_head_shape=shape(h.multi_head_shape),
                           single_head_tables=h.single_head_tables,
                           multi_head_tables=h.multi_head_tables,
                           rows_normalized=verdict(h.rows_normalized), **dict(HISTORY_CODES)),
    }


def json_document(evidence: MultiHeadEvidence) -> dict[str, Any]:
    """The JSON report, :data:`JSON_KEYS` in order: the head, then :func:`facts`."""
    return json_document_of(NAME, evidence, facts(evidence))


# --- the figure -----------------------------------------------------------------------------


def figure(evidence: MultiHeadEvidence, width: int, options: RichOptions | None = None) -> Any:
    """The chapter's picture as a rich renderable, in the order of :func:`trace`: the
    stages' shapes, each head's partition (its projected and turned Q with a solid border,
    K dashed, V double), its causal weights (a later key shown as masked), its outputs
    with one worked as its stage's terms, ``W_O``'s rows, the merge and the output per
    token, then the probes, the checks and the verdict line. Formulas are the stages'
    (:mod:`qkvcli.render.chapters.figure`), numbers at ``options``' precision. A head's
    Q, K and V stand side by side where they fit. The first batch item is drawn.

    Laid out for the width rich offers when it is printed, down to 40 columns: a vector
    too long for its column is written a few numbers a line (a line ends with its comma),
    and a head's outputs leave its weights for a table of their own. Measured as its
    narrowest layout."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from qkvcli.render.chapters import figure as kit
    from qkvcli.render.rich.boxes import KEY, QUERY, VALUE
    from qkvcli.render.rich.layout import Fitted, titled
    from qkvcli.render.rich.options import RichOptions

    options = options or RichOptions()
    n = options.precision  # every number of the figure at the caller's precision
    f, p, pr = evidence.fixture, evidence.primary, evidence.probes
    batch, tokens, d_model = p.input.shape
    heads, d_h = f.spec.heads, p.projected_query.shape[-1]
    per_lines = (None, 2, 1)  # how many numbers a vector's line holds, widest first (None: all)

    def row(values: Any, per_line: int | None = None) -> str:
        return kit.numbers(values, options, per_line=per_line)

    def branches(h: int, per_line: int | None) -> list[Table]:
        return [kit.card(f"head {h} {letter}", ["token", "projected", "turned"][:2 + (after is not None)],
                         [[str(t), *(row(x[0, h, t], per_line) for x in (before, after) if x is not None)]
                          for t in range(tokens)], box=box, style=style, left=(1, 2))
                for letter, box, style, before, after in (
                    ("Q", QUERY, "cyan", p.projected_query, p.rotated_query),
                    ("K", KEY, "magenta", p.projected_key, p.rotated_key),
                    ("V", VALUE, "yellow", p.projected_value, None))]

    def weight(h: int, q: int, k: int) -> str:
        return fmt_float(p.attention[0, h, q, k], n) if k <= q else "masked"

    def weights(h: int, with_output: bool | None) -> Table:
        # ``None``: one row per query and key, for the narrowest screens
        title = f"head {h}: weights (masked: a later key)" + (" and output" if with_output else "")
        if with_output is None:
            return kit.card(title, ["query", "key", "weight"],
                            [[str(q) if k == 0 else "", str(k), weight(h, q, k)]
                             for q in range(tokens) for k in range(tokens)])
        return kit.card(title, ["query", *(f"key {k}" for k in range(tokens)),
                                *(["output"] if with_output else [])],
                        [[str(q), *(weight(h, q, k) for k in range(tokens)),
                          *([row(p.head_outputs[0, h, q])] if with_output else [])]
                         for q in range(tokens)], left=(tokens + 1,))

    def vectors(title: str, headers: list[str], columns: tuple[Any, ...], count: int) -> list[Table]:
        # one layout per line length of :data:`per_lines`
        return [kit.card(title, headers, [[str(i), *(row(c[i], per_line) for c in columns)]
                                          for i in range(count)], left=(1, 2))
                for per_line in per_lines]

    parts: list[Any] = [
        kit.heading("Chapter 30 - multi-head attention", f"d_model {d_model} split into {heads} "
                    f"heads of {d_h}, RoPE base {fmt_general(f.spec.table.base, kit.SETTING)} from "
                    f"position {f.offset}, causal, W_O after the merge; batch item 0 of {batch}",
                    evidence.passed),
        Text("shapes: " + " -> ".join(
            f"{'head outputs' if name == 'head_output' else name} {fmt_shape(shape)}"
            for name, shape in p.stages() if name != "output_weight")),
        kit.element("head split", options), kit.element("rope", options)]
    for h in range(heads):
        side = Table.grid(padding=(0, 1))
        side.add_row(*branches(h, None))
        stacked: list[Any] = [side, *(Group(*branches(h, per_line)) for per_line in per_lines)]
        parts += [titled(f"head {h}: features {h * d_h}-{(h + 1) * d_h - 1}"), Fitted(stacked),
                  Text(kit.formula(options, "scores", "scale", "mask", "softmax", "mixture"),
                       style="dim"),
                  Fitted([weights(h, True), *(Group(weights(h, listed), output)
                                              for listed in (False, None) for output in vectors(
                                                  f"head {h}: output", ["query", "output"],
                                                  (p.head_outputs[0, h],), tokens))])]
        if tokens:
            parts.append(kit.mixture_line(f"head {h} o{tokens - 1}", p.attention, p.projected_value,
                                          (0, h, tokens - 1), p.head_outputs[0, h, tokens - 1],
                                          options))
    return Group(
        *parts, Text(kit.formula(options, "head merge", "output projection"), style="dim"),
        Fitted(vectors("W_O: where each merged feature goes", ["merged feature", "output features"],
                       (p.output_weight,), len(p.output_weight))),
        Fitted(vectors("merged heads, then W_O", ["token", "merged", "output"],
                       (p.merged[0], p.output[0]), tokens)),
        *kit.showed("what the heads showed", [
            ("future weights", "exactly 0" if pr.future_zero else "NOT zero"),
            ("last token changed", ", ".join(
                [f"token {t} {'kept bit for bit' if same else 'CHANGED'}"
                 for t, same in enumerate(pr.prefix_unchanged)]
                + [f"token {tokens - 1} {'changed' if pr.suffix_changed else 'unchanged'}"])),
            ("heads isolated", f"before W_O: {fmt_bool(pr.head_isolation)}"),
            ("split and merge", f"exact inverses: {fmt_bool(pr.split_merge)}"),
            ("common offset", f"+{f.shift}: weights kept: {fmt_bool(pr.common_offset)}"),
            ("gradient check", f"{evidence.gradcheck.count} coordinates within "
             f"{fmt_general(f.tolerance, kit.SETTING)}: {fmt_bool(evidence.gradcheck.passed)}"),
        ]), *kit.closing(evidence.checks))
