"""The chapter's figure as a rich renderable: one shared input, three bordered branches, evidence.

The query, key and value branches are told apart by border (solid, dashed, double;
see :mod:`qkvcli.render.boxes`), never by colour alone, and sit side by side when the
width allows, stacked when it does not. Evidence cards follow, each with a PASS/FAIL
word, then every check and a verdict line. :func:`render_rich` is pure: it returns a
:class:`rich.console.Group` for the CLI to print.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from qkvcli.evidence import Evidence, ShapeProbe
from qkvcli.render.boxes import INPUT, PLAIN, ROLE_BOXES
from qkvcli.render.numbers import fmt_float, fmt_shape
from qkvcli.render.rich_common import (
    Part,
    RichOptions,
    Row,
    batched_tables,
    cell,
    grid,
    lines,
    matrix_table,
    pairs,
    status,
)

ROLES = ("query", "key", "value")
LETTERS = {"query": "Q", "key": "K", "value": "V"}
ROLE_SENTENCES = {
    "query": "Query: what should this position retrieve?",
    "key": "Key: how can this position be matched?",
    "value": "Value: what content can this position contribute?",
}
ROLE_STYLES = {"query": "cyan", "key": "magenta", "value": "yellow"}
BORDER_WORDS = {"query": "solid", "key": "dashed", "value": "double"}
INPUT_STYLE = "blue"
TITLE = "Split one hidden sequence into three learned views"
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


def _titled(title: str, passed: bool | None = None) -> Text:
    text = Text(title, style="bold")
    if passed is not None:
        text.append("  ")
        text.append_text(status(passed))
    return text


def _legend(options: RichOptions) -> Text:
    """One sample of each border, drawn with the very boxes the figure uses."""
    ascii_only = options.ascii
    legend = Text()
    legend.append("Borders: ", style="dim")
    samples = [("input", INPUT, INPUT_STYLE)] + [
        (f"{role} ({BORDER_WORDS[role]})", ROLE_BOXES[role], ROLE_STYLES[role]) for role in ROLES
    ]
    for index, (label, box, style) in enumerate(samples):
        glyph = box.fallback.top if ascii_only else box.top
        legend.append(glyph * 2, style=style)
        legend.append(f" {label}" + ("  " if index < len(samples) - 1 else ""))
    return legend


def _input_part(evidence: Evidence, options: RichOptions) -> Part:
    p, c = evidence.primary, evidence.config
    arrow = options.symbols.arrow
    body = lines(
        pairs([
            ("shape(X)", fmt_shape(p.input.shape)),
            ("axes", f"batch {c.batch}, tokens {c.tokens}, d_model {c.d_model}"),
            ("bias", f"bias={'true' if c.bias else 'false'}"),
        ]),
        *batched_tables(p.input, "X", INPUT, options, INPUT_STYLE),
        Text(f"The same X feeds all three branches: d_model {c.d_model} {arrow} "
             f"d_head {c.d_head}.", style="dim"),
    )
    return Part(body, _titled("Shared hidden-state input"), INPUT, INPUT_STYLE)


def _branch_part(evidence: Evidence, index: int, options: RichOptions) -> Part:
    p = evidence.primary
    role = ROLES[index]
    letter = LETTERS[role]
    box, style = ROLE_BOXES[role], ROLE_STYLES[role]
    weight = (p.query_weight, p.key_weight, p.value_weight)[index]
    output = (p.query, p.key, p.value)[index]
    body = lines(
        Text(ROLE_SENTENCES[role], style=f"bold {style}"),
        Text(f"{letter} = X W_{letter}"),
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
                              ("d_model rows", "d_head columns"), style), box=None),
            Part(Group(*batched_tables(output, letter, box, options, style)), box=None),
        ], gap=2, stack_expand=False, fill=False),
    )
    title = _titled(f"{role.capitalize()} projection ({BORDER_WORDS[role]})")
    return Part(body, title, box, style)


def _input_gradient_part(evidence: Evidence, options: RichOptions) -> Part:
    p = evidence.primary
    t = options.symbols.transpose
    reverse = next(check for check in evidence.checks if check.name == "reverse")
    body = lines(
        Text(f"dX = dQ W_Q{t} + dK W_K{t} + dV W_V{t}"),
        Text(f"All three paths add into the shared input; shape(dX) = "
             f"{fmt_shape(p.input_gradient.shape)}.", style="dim"),
        Text(f"objective L = <Q,U_Q> + <K,U_K> + <V,U_V> = "
             f"{fmt_float(p.loss, options.precision)}"),
        *batched_tables(p.input_gradient, "dX", PLAIN, options, edge=False),
    )
    return Part(body, _titled("Combined input gradient", reverse.passed))


def _weight_gradient_part(evidence: Evidence, options: RichOptions) -> Part:
    p = evidence.primary
    g = evidence.gradcheck
    t = options.symbols.transpose
    tables = []
    passed = True
    for index, role in enumerate(ROLES):
        letter = LETTERS[role]
        grad = (p.query_weight_gradient, p.key_weight_gradient, p.value_weight_gradient)[index]
        checked = g.checks_of(f"{role}_weight")
        passed = passed and checked.passed
        ok = sum(1 for check in checked.checks if check.passed)
        caption = Text(f"{role}: {ok} of {len(checked.checks)} coordinates ")
        caption.append_text(status(checked.passed))
        tables.append(Part(
            Group(matrix_table(grad, f"dW_{letter}", "", ROLE_BOXES[role], options,
                               ("d_model rows", "d_head columns"), ROLE_STYLES[role]), caption),
            box=None,
        ))
    body = lines(
        Text(f"dW = X_(BT){t} dY_(BT) in each branch: a weight's gradient never crosses "
             "branches."),
        Row(tables, gap=3, stack_expand=False, fill=False),
    )
    return Part(body, _titled("Branch-local weight gradients", passed))


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
    return Part(body, _titled("Change only the query weight", ind.passed))


def _probe_ok(probe: ShapeProbe, d_head: int) -> bool:
    expected = (*probe.input[:2], d_head)
    return probe.gradient_shapes_ok and all(out == expected for out in probe.outputs)


def _shapes_part(evidence: Evidence, options: RichOptions) -> Part:
    s = evidence.shapes
    c = evidence.config
    arrow = options.symbols.arrow
    probes = (("fixture input", s.rule), ("batch doubled", s.batch),
              ("empty batch axis", s.empty_batch), ("empty token axis", s.empty_tokens))
    rows = grid(
        *((label, f"{fmt_shape(probe.input)} {arrow} "
                  f"{','.join(fmt_shape(out) for out in probe.outputs)}",
           status(_probe_ok(probe, s.d_head)))
          for label, probe in probes),
        nowrap=(0, 2),
    )
    times = options.symbols.times
    body = lines(
        rows,
        Text(f"trainable scalars: 3 {times} {c.d_model} {times} {c.d_head} = "
             f"{evidence.primary.parameter_count}", style="dim"),
    )
    return Part(body, _titled("Shapes and empty axes", s.passed))


def _rejected_part(evidence: Evidence, options: RichOptions) -> Part:
    rows = []
    for case in evidence.errors.cases():
        detail = Text(REJECTION_REASONS.get(case.case, ""))
        detail.append(f"\n{options.safe(case.message)}", style="dim")
        rows.append((status(case.rejected), f"rejected {case.case}", detail))
    return Part(grid(*rows, nowrap=(0, 1)), _titled("Rejected boundaries", evidence.errors.passed))


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
        Text(f"worst scaled error {worst.scaled_error:.3e} at "
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
    return Part(body, _titled("Numerical checks", passed))


def _history_part(evidence: Evidence, options: RichOptions) -> Part:
    """Where attention's inputs come from, then and now (sources as rows, so it fits 80 columns)."""
    h = evidence.history
    dash = options.symbols.dash
    table = Table(box=PLAIN, header_style="bold", pad_edge=False, show_edge=False)
    for header in ("Source", "Additive encoder-decoder attention", "Transformer self-attention"):
        table.add_column(cell(header), overflow="fold")
    table.add_row(*map(cell, ("Previous decoder state", h.earlier_left, dash)))
    table.add_row(*map(cell, ("Encoder annotations", h.earlier_right, dash)))
    table.add_row(*map(cell, ("One previous-layer sequence", dash, h.transformer_source)))
    body = lines(table, Text(f"mapping: {h.mapping}. {ANALOGY}", style="dim"))
    return Part(body, _titled("Change from two attention sources to one"))


def _checks_part(evidence: Evidence) -> Part:
    rows = grid(*((status(check.passed), check.name, check.detail) for check in evidence.checks),
                nowrap=(0, 1))
    return Part(rows, _titled("Checks", evidence.passed))


def verdict_line(evidence: Evidence) -> Text:
    """``verdict: PASS (8 of 8 checks passed)`` or ``verdict: FAIL (failed: ...)``."""
    total = len(evidence.checks)
    passed = sum(1 for check in evidence.checks if check.passed)
    line = Text("verdict: ", style="bold")
    line.append_text(status(evidence.passed))
    if evidence.passed:
        line.append(f" ({passed} of {total} checks passed)")
    else:
        failed = ", ".join(check.name for check in evidence.checks if not check.passed)
        line.append(f" ({passed} of {total} checks passed; failed: {failed})")
    return line


def render_rich(evidence: Evidence, options: RichOptions | None = None) -> Group:
    """The chapter's figure for ``evidence``: input, three branches, evidence cards, verdict.

    Takes the evidence and display options; gives a renderable whose layout adapts to
    the width it is printed at. Raises nothing for any valid evidence.
    """
    options = options or RichOptions()
    heading = Text(f"qkv {options.symbols.dot} chapter {options.safe(evidence.chapter)}",
                   style="bold")
    return lines(
        heading,
        Text(TITLE, style="bold underline"),
        _legend(options),
        Text(""),
        Row([_input_part(evidence, options)]),
        Row([_branch_part(evidence, index, options) for index in range(3)]),
        Text("The three branches share coordinates, not weights or feature values.",
             style="italic"),
        Text(""),
        Text("Check independence, gradients, and boundaries", style="bold underline"),
        Row([_input_gradient_part(evidence, options), _independence_part(evidence)]),
        Row([_weight_gradient_part(evidence, options)]),
        Row([_shapes_part(evidence, options), _numerical_part(evidence, options)]),
        Row([_rejected_part(evidence, options)]),
        Row([_history_part(evidence, options)]),
        Row([_checks_part(evidence)]),
        Text("The figure stops before comparing queries with keys: chapter 27 computes "
             "scores, probabilities and a weighted value mixture.", style="dim"),
        verdict_line(evidence),
    )
