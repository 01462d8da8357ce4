"""The chapter's figure as a rich renderable: one shared input, three bordered branches, evidence.

The query, key and value branches are told apart by border (solid, dashed, double;
see :mod:`qkvcli.render.rich.boxes`), never by colour alone, and sit side by side when the
width allows, stacked when it does not. Evidence cards follow, one per family of evidence
(combined input gradient, branch-local weight gradients, changing only the query weight,
shapes and empty axes, numerical checks, rejected boundaries, the historical contrast,
every check) with a PASS/FAIL word, then a verdict line. :func:`render_rich` is pure: it
returns a :class:`rich.console.Group` for the CLI to print.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from qkvcli.check.chapter26_evidence import Evidence
from qkvcli.core.names import BRANCHES
from qkvcli.core.results import ShapeProbe
from qkvcli.render.numbers import fmt_error, fmt_float, fmt_shape
from qkvcli.render.rich.boxes import (
    INPUT,
    INPUT_STYLE,
    LETTERS,
    PLAIN,
    ROLE_BOXES,
    ROLE_SENTENCES,
    ROLE_STYLES,
    ROLES,
)
from qkvcli.render.rich.layout import (
    Flow,
    Part,
    Row,
    checks_card,
    lines,
    status,
    titled,
    verdict_line,
)
from qkvcli.render.rich.options import RichOptions
from qkvcli.render.rich.tables import (
    Summarise,
    batched_tables,
    cell,
    grid,
    longest_word,
    matrix_table,
    pairs,
    worked,
)
from qkvcli.render.tensors import SUMMARY_THRESHOLD, Summaries, summarise
from qkvcli.render.wording import check_rows
from qkvcli.stages.applied import element_at, fewer, formula_in
from qkvcli.stages.table import STAGES
from qkvcli.stages.terms import Derivation, input_paths, projection, weight_gradient

REJECTION_REASONS = {
    "rank-two": "The input must keep explicit batch, token, and feature axes.",
    "input-width": "The final input axis must match the model width.",
    "branch-mismatch": "All three projection weights must use the same model width.",
    "head-mismatch": "All three projection weights must use the same head width.",
    "duplicate-name": "Every parameter needs its own stable name.",
}
ANALOGY = (
    "Query-like and key/value-like are a limited retrospective analogy for the earlier "
    "two-stream mechanism."
)


def expect_marks(evidence: Evidence, name: str) -> frozenset[tuple[int, ...]]:
    """The coordinates of ``name`` (an ``expect`` key: ``query``, ``input_gradient``...)
    whose value differs from the fixture's ``expect``: marked in the figure."""
    if evidence.expect is None:
        return frozenset()
    return frozenset(m.coordinate for m in evidence.expect.mismatches if m.name == name)


def _worked_at(evidence: Evidence, name: str, shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """The coordinate a figure works by hand: the first that differs from the fixture's
    ``expect`` (so the terms explain the marked value), else the first; ``None`` when the
    tensor has no values."""
    if 0 in shape:
        return None
    return min(expect_marks(evidence, name), default=tuple(0 for _ in shape))


def _work(stage: str, names: dict[str, str], at: tuple[int, ...], derivation: Derivation,
          options: RichOptions) -> RenderableType:
    """``stage``'s element at ``at`` in the figure's ``names``, its terms cut to
    ``max_rows`` unless ``full``."""
    shown = derivation if options.full else fewer(derivation, options.max_rows)
    return worked(element_at(STAGES[stage], at, names, optional=False), shown, options)


def _upstream_part(evidence: Evidence, options: RichOptions, summaries: Summarise) -> Part:
    """U_Q, U_K, U_V: the upstream gradients dL/dQ, dL/dK, dL/dV the reverse pass starts
    from, what a learner needs to recompute dX and each dW by hand."""
    p = evidence.primary
    tables = [
        Part(Group(*batched_tables(upstream, f"U_{LETTERS[role]}", ROLE_BOXES[role], options,
                                   ROLE_STYLES[role], summaries=summaries)), box=None)
        for role, upstream in zip(ROLES, (p.grad_query, p.grad_key, p.grad_value), strict=True)
    ]
    body = lines(
        Text("U = dL/dQ, dL/dK, dL/dV: the fixture's upstream gradients, where the reverse "
             "pass starts (dQ = U_Q, dK = U_K, dV = U_V)."),
        Row(tables, gap=3, stack_expand=False, fill=False),
    )
    return Part(body, titled("Upstream gradients"))


def _input_gradient_part(evidence: Evidence, options: RichOptions, summaries: Summarise) -> Part:
    p = evidence.primary
    loss = Text(f"objective L = <Q,U_Q> + <K,U_K> + <V,U_V> = "
                f"{fmt_float(p.loss, options.precision)}")
    if expect_marks(evidence, "loss"):
        loss.append(f" {options.symbols.mark} differs from the fixture's expect",
                    style="bold reverse")
    stage = "projection reverse (input)"
    at = _worked_at(evidence, "input_gradient", p.grad_input.shape)
    body = lines(
        Text(options.math(formula_in(STAGES[stage], {}))),
        Text(f"All three paths add into the shared input; shape(dX) = "
             f"{fmt_shape(p.grad_input.shape)}.", style="dim"),
        loss,
        *batched_tables(p.grad_input, "dX", PLAIN, options, edge=False, summaries=summaries,
                        marks=expect_marks(evidence, "input_gradient")),
        None if at is None else _work(stage, {}, at, input_paths(
            (p.grad_query, p.grad_key, p.grad_value), p.weights, at,
            float(p.grad_input[at])), options),
    )
    return Part(body, titled("Combined input gradient", evidence.reverse_ok))


def _weight_gradient_part(evidence: Evidence, options: RichOptions, summaries: Summarise) -> Part:
    p = evidence.primary
    g = evidence.gradcheck
    stage = "projection reverse (weight)"
    tables, terms = [], []
    passed = True
    for index, role in enumerate(ROLES):
        letter = LETTERS[role]
        grad = p.weight_gradients[index]
        checked = g.checks_of(f"{role}_weight")
        passed = passed and checked.passed
        ok = sum(1 for check in checked.checks if check.passed)
        caption = Text(f"{role}: {ok} of {len(checked.checks)} coordinates ")
        caption.append_text(status(checked.passed))
        tables.append(Part(
            Group(matrix_table(grad, f"dW_{letter}", "", ROLE_BOXES[role], options,
                               ("d_model rows", "d_head columns"), ROLE_STYLES[role],
                               summaries=summaries,
                               marks=expect_marks(evidence, f"{role}_weight_gradient")),
                  caption),
            box=None,
        ))
        names = {"dW": f"dW_{letter}", "U": f"U_{letter}"}
        at = _worked_at(evidence, f"{role}_weight_gradient", grad.shape)
        upstream = (p.grad_query, p.grad_key, p.grad_value)[index]
        if at is not None and p.input.size:
            terms.append(Part(_work(stage, names, at, weight_gradient(
                p.input, upstream, (at[0], at[1]), float(grad[at]), f"U_{letter}"), options),
                box=None))
    body = lines(
        Text(options.math(formula_in(STAGES[stage], {})) + " in each branch: a weight's "
             "gradient never crosses branches."),
        Row(tables, gap=3, stack_expand=False, fill=False),
        Row(terms, gap=3, stack_expand=False, fill=False),
    )
    return Part(body, titled("Branch-local weight gradients", passed))


def _independence_part(evidence: Evidence) -> Part:
    ind = evidence.independence
    if not ind.applicable:
        body: RenderableType = Text("not applicable: the input has no non-zero feature column")
    else:
        rows = grid(
            (ROLE_SENTENCES["query"], "changed" if ind.query_changed else "unchanged",
             status(ind.query_changed)),
            (ROLE_SENTENCES["key"], "bitwise unchanged" if ind.key_unchanged else "changed",
             status(ind.key_unchanged)),
            (ROLE_SENTENCES["value"], "bitwise unchanged" if ind.value_unchanged else "changed",
             status(ind.value_unchanged)),
            nowrap=(2,),
        )
        body = lines(Text(f"Add 1 to W_Q[{ind.row},0] and project X again:", style="dim"), rows)
    return Part(body, titled("Change only the query weight", ind.passed))


def _outputs(probe: ShapeProbe) -> tuple[tuple[int, ...], ...]:
    """Q's, K's and V's shapes (a probe that failed has none)."""
    return tuple(shape for name, shape, _ in probe.results if name in BRANCHES)


def _shapes_part(evidence: Evidence, options: RichOptions) -> Part:
    s = evidence.shapes
    c = evidence.config
    arrow = options.symbols.arrow
    probes = (("fixture input", s.rule), ("batch doubled", s.batch),
              ("empty batch axis", s.empty_batch), ("empty token axis", s.empty_tokens))
    rows = grid(
        *((label, f"{fmt_shape(probe.input)} {arrow} "
                  f"{','.join(fmt_shape(out) for out in _outputs(probe))}",
           status(probe.kept))
          for label, probe in probes),
        nowrap=(0, 2),
    )
    times = options.symbols.times
    body = lines(
        rows,
        Text(f"trainable scalars: 3 {times} {c.d_model} {times} {c.d_head} = "
             f"{evidence.primary.parameter_count}", style="dim"),
    )
    return Part(body, titled("Shapes and empty axes", s.passed))


def _rejected_part(evidence: Evidence, options: RichOptions) -> Part:
    rows = []
    for case in evidence.errors.cases():
        detail = Text(REJECTION_REASONS.get(case.case, ""))
        detail.append(f"\n{options.safe(case.message or 'accepted')}", style="dim")
        rows.append((status(case.rejected), f"rejected {case.case}", detail))
    return Part(grid(*rows, nowrap=(0, 1)), titled("Rejected boundaries", evidence.errors.passed))


def _numerical_part(evidence: Evidence, options: RichOptions) -> Part:
    g = evidence.gradcheck
    e = evidence.errors
    i = evidence.initialization
    counts = " ".join(
        f"n_{key}={len(g.checks_of(tensor).checks)}"
        for key, tensor in (("X", "input"), ("Q", "query_weight"), ("K", "key_weight"),
                            ("V", "value_weight"))
    )
    worst = g.worst
    worst_line = (
        Text(f"worst scaled error {fmt_error(worst.scaled_error)} at "
             f"{worst.tensor}{fmt_shape(worst.coordinate)}", style="dim")
        if worst is not None else None
    )
    within = sum(1 for tensor in g.tensors for check in tensor.checks if check.passed)
    rows = grid(
        ("gradcheck", f"{within} of {g.count} coordinates within tolerance", status(g.passed)),
        ("replay", "bitwise" if evidence.replay_bitwise else "mismatch",
         status(evidence.replay_bitwise)),
        ("names", "unique" if e.duplicate_name.rejected else "unchecked",
         status(e.duplicate_name.rejected)),
        ("initialization",
         f"seed {i.seed}, " + ("transactional" if i.transactional else "partial"),
         status(i.passed)),
        nowrap=(0, 2),
    )
    passed = g.passed and evidence.replay_bitwise and e.duplicate_name.rejected and i.passed
    body = lines(
        Text(counts),
        Text(f"step h = {g.step!r}   tolerance {options.symbols.tau} = {g.tolerance!r}"),
        worst_line,
        rows,
    )
    return Part(body, titled("Numerical checks", passed))


def _history_part(evidence: Evidence, options: RichOptions) -> Part:
    """Where attention's inputs come from, then and now (sources as rows, so it fits 80 columns)."""
    h = evidence.history
    dash = options.symbols.dash
    table = Table(box=PLAIN, header_style="bold", pad_edge=False, show_edge=False)
    headers = ("Source", "Additive encoder-decoder attention", "Transformer self-attention")
    rows = (("Previous decoder state", h.earlier_left, dash),
            ("Encoder annotations", h.earlier_right, dash),
            ("One previous-layer sequence", dash, h.transformer_source))
    for index, header in enumerate(headers):
        # Wrap at spaces only: a word split in two (``encoder-annotati``/``ons``) misreads.
        words = longest_word([header, *(row[index] for row in rows)])
        table.add_column(cell(header), overflow="fold", min_width=words)
    for row in rows:
        table.add_row(*map(cell, row))
    body = lines(table, Text(f"mapping: {h.mapping}. {ANALOGY}", style="dim"))
    return Part(body, titled("Change from two attention sources to one"))


def evidence_cards(
    evidence: Evidence, options: RichOptions, summaries: Summarise = summarise
) -> list[Row]:
    """The cards, paired in rows that sit side by side when wide and stack when narrow.

    ``summaries`` gives a large tensor's summary (the figure passes those it computed ahead).
    """
    return [
        Row([_upstream_part(evidence, options, summaries)]),
        Row([_input_gradient_part(evidence, options, summaries), _independence_part(evidence)]),
        Row([_weight_gradient_part(evidence, options, summaries)]),
        Row([_shapes_part(evidence, options), _numerical_part(evidence, options)]),
        Row([_rejected_part(evidence, options)]),
        Row([_history_part(evidence, options)]),
        Row([checks_card(((c.passed, c.name, c.detail) for c in check_rows(evidence)),
                         evidence.passed)]),
    ]


BORDER_WORDS = {"query": "solid", "key": "dashed", "value": "double"}
TITLE = "Split one hidden sequence into three learned views"


def _legend(options: RichOptions) -> Flow:
    """One sample of each border, drawn with the very boxes the figure uses."""
    ascii_only = options.ascii
    samples = [("input", INPUT, INPUT_STYLE)] + [
        (f"{role} ({BORDER_WORDS[role]})", ROLE_BOXES[role], ROLE_STYLES[role]) for role in ROLES
    ]
    items = [Text("Borders:", style="dim")]
    for label, box, style in samples:
        glyph = box.fallback.top if ascii_only else box.top
        item = Text(glyph * 2, style=style)
        item.append(f" {label}")
        items.append(item)
    # The label and the first sample share a line, as in ``Borders: ━━ input``.
    first = Text.assemble(items[0], " ", items[1])
    return Flow([first, *items[2:]])


def _input_part(evidence: Evidence, options: RichOptions, summaries: Summarise) -> Part:
    p, c = evidence.primary, evidence.config
    arrow = options.symbols.arrow
    body = lines(
        pairs([
            ("shape(X)", fmt_shape(p.input.shape)),
            ("axes", f"batch {c.batch}, tokens {c.tokens}, d_model {c.d_model}"),
            ("bias", f"bias={'true' if c.bias else 'false'}"),
        ]),
        *batched_tables(p.input, "X", INPUT, options, INPUT_STYLE, summaries=summaries),
        Text(f"The same X feeds all three branches: d_model {c.d_model} {arrow} "
             f"d_head {c.d_head}.", style="dim"),
    )
    return Part(body, titled("Shared hidden-state input"), INPUT, INPUT_STYLE)


def _branch_part(
    evidence: Evidence, index: int, options: RichOptions, summaries: Summarise
) -> Part:
    p = evidence.primary
    role = ROLES[index]
    letter = LETTERS[role]
    box, style = ROLE_BOXES[role], ROLE_STYLES[role]
    weight = p.weights[index]
    output = p.outputs[index]
    names = {"Y": letter, "W": f"W_{letter}"}
    at = _worked_at(evidence, role, output.shape)
    body = lines(
        Text(ROLE_SENTENCES[role], style=f"bold {style}"),
        Text(options.math(formula_in(STAGES["projection"], names, optional=False))),
        Text("Stable parameter:", style="dim"),
        # Its own line: a long name must not force the three branches to stack.
        Text(p.parameter_names[index], overflow="fold"),
        pairs([
            ("Projection weight", f"shape(W_{letter}) = {fmt_shape(weight.shape)}"),
            ("Projected output", f"shape({letter}) = {fmt_shape(output.shape)}"),
        ]),
        # Weight beside output when the branch is wide enough (stacked at 80 columns saves
        # a screenful), one above the other inside a narrow side-by-side branch.
        Row([
            Part(matrix_table(weight, f"W_{letter}", "", box, options,
                              ("d_model rows", "d_head columns"), style, summaries=summaries),
                 box=None),
            Part(Group(*batched_tables(output, letter, box, options, style,
                                       summaries=summaries,
                                       marks=expect_marks(evidence, role))), box=None),
        ], gap=2, stack_expand=False, fill=False),
        None if at is None or not p.input.size else _work("projection", names, at, projection(
            p.input, weight, None, at, float(output[at]), ("X", f"W_{letter}", "")), options),
    )
    title = titled(f"{role.capitalize()} projection ({BORDER_WORDS[role]})")
    return Part(body, title, box, style)


def render_rich(evidence: Evidence, options: RichOptions | None = None) -> Group:
    """The chapter's figure for ``evidence``: input, three branches, evidence cards, verdict.

    Takes the evidence and display options; gives a renderable whose layout adapts to
    the width it is printed at. Raises nothing for any valid evidence.
    """
    options = options or RichOptions()
    p = evidence.primary
    # Every large tensor the figure summarises, hashed two at a time before any is shown.
    summaries = Summaries(
        tensor for tensor in (p.input, *p.weights, *p.outputs, p.grad_input,
                              *p.weight_gradients)
        if not options.full and tensor.size > SUMMARY_THRESHOLD
    )
    heading = Text(f"qkv {options.symbols.dot} chapter {options.safe(evidence.chapter)}",
                   style="bold")
    return lines(
        heading,
        Text(TITLE, style="bold underline"),
        _legend(options),
        Text(""),
        Row([_input_part(evidence, options, summaries)]),
        Row([_branch_part(evidence, index, options, summaries) for index in range(3)]),
        Text("The three branches share coordinates, not weights or feature values.",
             style="italic"),
        Text(""),
        Text("Check independence, gradients, and boundaries", style="bold underline"),
        *evidence_cards(evidence, options, summaries),
        Text("The figure stops before comparing queries with keys: chapter 27 computes "
             "scores, probabilities and a weighted value mixture.", style="dim"),
        verdict_line(evidence.passed, sum(c.passed for c in evidence.checks),
                     len(evidence.checks)),
    )
