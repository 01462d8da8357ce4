"""The chapter's figure as a rich renderable: one shared input, three bordered branches, evidence.

The query, key and value branches are told apart by border (solid, dashed, double;
see :mod:`qkvcli.render.rich.boxes`), never by colour alone, and sit side by side when the
width allows, stacked when it does not. Each branch, the input gradient and each weight
gradient works one element from the description of its stage (:mod:`qkvcli.stages`).
Evidence cards follow, one per family of evidence, with a PASS/FAIL word, then a verdict
line. :func:`render_rich` is pure: it returns a :class:`rich.console.Group` for the CLI.
"""

from __future__ import annotations

from rich.box import Box
from rich.console import Group, RenderableType
from rich.text import Text

from qkvcli.check.chapter26_evidence import Evidence
from qkvcli.core.arrays import Array
from qkvcli.core.names import BRANCHES
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
    beside,
    card,
    checks_card,
    lines,
    status,
    verdict_line,
    verdicts,
)
from qkvcli.render.rich.options import RichOptions
from qkvcli.render.rich.tables import (
    Column,
    Summarise,
    batched_tables,
    grid,
    matrix_table,
    pairs,
    table,
    worked,
)
from qkvcli.render.tensors import SUMMARY_THRESHOLD, Summaries
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
ANALOGY = ("Query-like and key/value-like are a limited retrospective analogy for the earlier "
           "two-stream mechanism.")
BORDER_WORDS = {"query": "solid", "key": "dashed", "value": "double"}
TITLE = "Split one hidden sequence into three learned views"


class Figure:
    """The evidence, the display options and the summaries of large tensors, computed ahead
    (hashed two at a time before any is shown), that every section of the figure reads."""

    def __init__(self, evidence: Evidence, options: RichOptions) -> None:
        self.evidence, self.options, p = evidence, options, evidence.primary
        self.summaries: Summarise = Summaries(
            tensor for tensor in (p.input, *p.weights, *p.outputs, p.grad_input,
                                  *p.weight_gradients)
            if not options.full and tensor.size > SUMMARY_THRESHOLD)
        self.upstreams = (p.grad_query, p.grad_key, p.grad_value)

    def marks(self, name: str) -> frozenset[tuple[int, ...]]:
        """The coordinates of ``name`` (an ``expect`` key: ``query``, ``input_gradient``...)
        whose value differs from the fixture's ``expect``: marked in the figure."""
        expect = self.evidence.expect
        return frozenset(m.coordinate for m in expect.mismatches
                         if m.name == name) if expect else frozenset()

    def tables(self, tensor: Array, name: str, box: Box, style: str | None, mark: str = "",
               edge: bool = True) -> list[RenderableType]:
        """A ``[batch, tokens, width]`` tensor's tables, ``mark``'s expect marks on them."""
        return batched_tables(tensor, name, box, self.options, style, edge, self.summaries,
                              self.marks(mark) if mark else ())

    def at(self, name: str, tensor: Array) -> tuple[int, ...] | None:
        """The coordinate of ``tensor`` (``name`` in ``expect``) the figure works: the first
        that differs from the fixture's ``expect``, so its terms explain the marked value,
        else the first; ``None`` when there is no element to work."""
        shape = tuple(int(n) for n in tensor.shape)
        if 0 in shape or not self.evidence.primary.input.size:
            return None
        return min(self.marks(name), default=tuple(0 for _ in shape))

    def work(self, stage: str, names: dict[str, str], at: tuple[int, ...],
             derivation: Derivation) -> RenderableType:
        """``stage``'s element at ``at`` in the figure's ``names``, its terms cut to
        ``max_rows`` unless ``full``."""
        shown = derivation if self.options.full else fewer(derivation, self.options.max_rows)
        return worked(element_at(STAGES[stage], at, names, optional=False), shown, self.options)

    def formula(self, stage: str, names: dict[str, str] | None = None) -> Text:
        return Text(self.options.math(formula_in(STAGES[stage], names or {}, optional=False)))


def _input(f: Figure) -> Part:
    p, c = f.evidence.primary, f.evidence.config
    return card("Shared hidden-state input", None, pairs([
        ("shape(X)", fmt_shape(p.input.shape)),
        ("axes", f"batch {c.batch}, tokens {c.tokens}, d_model {c.d_model}"),
        ("bias", f"bias={'true' if c.bias else 'false'}"),
    ]), *f.tables(p.input, "X", INPUT, INPUT_STYLE), Text(
        f"The same X feeds all three branches: d_model {c.d_model} {f.options.symbols.arrow} "
        f"d_head {c.d_head}.", style="dim"), box=INPUT, style=INPUT_STYLE)


def _branch(f: Figure, index: int) -> Part:
    p = f.evidence.primary
    role = ROLES[index]
    letter, weight, output = LETTERS[role], p.weights[index], p.outputs[index]
    names = {"Y": letter, "W": f"W_{letter}"}
    at = f.at(role, output)
    return card(
        f"{role.capitalize()} projection ({BORDER_WORDS[role]})", None,
        Text(ROLE_SENTENCES[role], style=f"bold {ROLE_STYLES[role]}"),
        f.formula("projection", names),
        Text("Stable parameter:", style="dim"),
        # Its own line: a long name must not force the three branches to stack.
        Text(p.parameter_names[index], overflow="fold"),
        pairs([("Projection weight", f"shape(W_{letter}) = {fmt_shape(weight.shape)}"),
               ("Projected output", f"shape({letter}) = {fmt_shape(output.shape)}")]),
        # Weight beside output when the branch is wide enough (stacked at 80 columns saves
        # a screenful), one above the other inside a narrow side-by-side branch.
        beside([matrix_table(weight, f"W_{letter}", "", ROLE_BOXES[role], f.options,
                             ("d_model rows", "d_head columns"), ROLE_STYLES[role],
                             summaries=f.summaries),
                Group(*f.tables(output, letter, ROLE_BOXES[role], ROLE_STYLES[role],
                                  role))]),
        None if at is None else f.work("projection", names, at, projection(
            p.input, weight, None, at, float(output[at]), ("X", f"W_{letter}", ""))),
        box=ROLE_BOXES[role], style=ROLE_STYLES[role])


def _upstream(f: Figure) -> Part:
    """U_Q, U_K, U_V: the upstream gradients dL/dQ, dL/dK, dL/dV the reverse pass starts
    from, what a learner needs to recompute dX and each dW by hand."""
    return card("Upstream gradients", None, Text(
        "U = dL/dQ, dL/dK, dL/dV: the fixture's upstream gradients, where the reverse pass "
        "starts (dQ = U_Q, dK = U_K, dV = U_V)."), beside(
        (Group(*f.tables(u, f"U_{LETTERS[role]}", ROLE_BOXES[role], ROLE_STYLES[role]))
         for role, u in zip(
            ROLES, f.upstreams, strict=True)), gap=3))


def _input_gradient(f: Figure) -> Part:
    p = f.evidence.primary
    loss = Text(f"objective L = <Q,U_Q> + <K,U_K> + <V,U_V> = "
                f"{fmt_float(p.loss, f.options.precision)}")
    if f.marks("loss"):
        loss.append(f" {f.options.symbols.mark} differs from the fixture's expect",
                    style="bold reverse")
    stage = "projection reverse (input)"
    at = f.at("input_gradient", p.grad_input)
    return card(
        "Combined input gradient", f.evidence.reverse_ok, f.formula(stage),
        Text(f"All three paths add into the shared input; shape(dX) = "
             f"{fmt_shape(p.grad_input.shape)}.", style="dim"), loss,
        *f.tables(p.grad_input, "dX", PLAIN, None, "input_gradient", edge=False),
        None if at is None else f.work(stage, {}, at, input_paths(
            f.upstreams, p.weights, at, float(p.grad_input[at]))))


def _weight_gradients(f: Figure) -> Part:
    p, g = f.evidence.primary, f.evidence.gradcheck
    stage = "projection reverse (weight)"
    tables, terms = [], []
    for index, role in enumerate(ROLES):
        letter, grad = LETTERS[role], p.weight_gradients[index]
        checked = g.checks_of(f"{role}_weight")
        ok = sum(1 for check in checked.checks if check.passed)
        caption = Text(f"{role}: {ok} of {len(checked.checks)} coordinates ")
        caption.append_text(status(checked.passed))
        tables.append(Group(matrix_table(
            grad, f"dW_{letter}", "", ROLE_BOXES[role], f.options,
            ("d_model rows", "d_head columns"), ROLE_STYLES[role], summaries=f.summaries,
            marks=f.marks(f"{role}_weight_gradient")), caption))
        at = f.at(f"{role}_weight_gradient", grad)
        if at is not None:
            terms.append(f.work(stage, {"dW": f"dW_{letter}", "U": f"U_{letter}"}, at,
                                weight_gradient(p.input, f.upstreams[index], (at[0], at[1]),
                                                float(grad[at]), f"U_{letter}")))
    passed = all(g.checks_of(f"{role}_weight").passed for role in ROLES)
    heading = f.formula(stage)
    heading.append(" in each branch: a weight's gradient never crosses branches.")
    return card("Branch-local weight gradients", passed, heading, beside(tables, gap=3),
                beside(terms, gap=3))


def _independence(f: Figure) -> Part:
    ind = f.evidence.independence
    if not ind.applicable:
        return card("Change only the query weight", ind.passed,
                    Text("not applicable: the input has no non-zero feature column"))
    rows = [(ROLE_SENTENCES[role], word, status(kept)) for role, word, kept in (
        ("query", "changed" if ind.query_changed else "unchanged", ind.query_changed),
        ("key", "bitwise unchanged" if ind.key_unchanged else "changed", ind.key_unchanged),
        ("value", "bitwise unchanged" if ind.value_unchanged else "changed",
         ind.value_unchanged))]
    return card("Change only the query weight", ind.passed,
                Text(f"Add 1 to W_Q[{ind.row},0] and project X again:", style="dim"),
                grid(*rows, nowrap=(2,)))


def _shapes(f: Figure) -> Part:
    s, c, symbols = f.evidence.shapes, f.evidence.config, f.options.symbols
    rows = [(label, f"{fmt_shape(probe.input)} {symbols.arrow} " + ",".join(
        fmt_shape(shape) for name, shape, _ in probe.results if name in BRANCHES),
        status(probe.kept)) for label, probe in (
        ("fixture input", s.rule), ("batch doubled", s.batch),
        ("empty batch axis", s.empty_batch), ("empty token axis", s.empty_tokens))]
    return card("Shapes and empty axes", s.passed, grid(*rows, nowrap=(0, 2)), Text(
        f"trainable scalars: 3 {symbols.times} {c.d_model} {symbols.times} {c.d_head} = "
        f"{f.evidence.primary.parameter_count}", style="dim"))


def _numerical(f: Figure) -> Part:
    e, g, i = f.evidence.errors, f.evidence.gradcheck, f.evidence.initialization
    counts = " ".join(f"n_{key}={len(g.checks_of(tensor).checks)}" for key, tensor in (
        ("X", "input"), ("Q", "query_weight"), ("K", "key_weight"), ("V", "value_weight")))
    worst = g.worst
    within = sum(1 for tensor in g.tensors for check in tensor.checks if check.passed)
    replay = f.evidence.replay_bitwise
    rows = [("gradcheck", f"{within} of {g.count} coordinates within tolerance", g.passed),
            ("replay", "bitwise" if replay else "mismatch", replay),
            ("names", "unique" if e.duplicate_name.rejected else "unchecked",
             e.duplicate_name.rejected),
            ("initialization", f"seed {i.seed}, "
             + ("transactional" if i.transactional else "partial"), i.passed)]
    return card(
        "Numerical checks", all(ok for _, _, ok in rows), Text(counts),
        # the settings as given (repr): the text report's spelling
        Text(f"step h = {g.step!r}   tolerance {f.options.symbols.tau} = {g.tolerance!r}"),
        None if worst is None else Text(
            f"worst scaled error {fmt_error(worst.scaled_error)} at "
            f"{worst.tensor}{fmt_shape(worst.coordinate)}", style="dim"),
        grid(*((name, detail, status(ok)) for name, detail, ok in rows), nowrap=(0, 2)))


def _rejected(f: Figure) -> Part:
    rows = []
    for case in f.evidence.errors.cases():
        detail = Text(REJECTION_REASONS.get(case.case, ""))
        detail.append(f"\n{f.options.safe(case.message or 'accepted')}", style="dim")
        rows.append((case.rejected, f"rejected {case.case}", detail))
    return card("Rejected boundaries", f.evidence.errors.passed, verdicts(rows))


def _history(f: Figure) -> Part:
    """Where attention's inputs come from, then and now (sources as rows, so it fits 80
    columns; wrapped at spaces only: ``encoder-annotati``/``ons`` misreads)."""
    h, dash = f.evidence.history, f.options.symbols.dash
    return card("Change from two attention sources to one", None, table(
        [Column("Source"), Column("Additive encoder-decoder attention"),
         Column("Transformer self-attention")],
        [("Previous decoder state", h.earlier_left, dash),
         ("Encoder annotations", h.earlier_right, dash),
         ("One previous-layer sequence", dash, h.transformer_source)],
        box=PLAIN, pad_edge=False, show_edge=False),
        Text(f"mapping: {h.mapping}. {ANALOGY}", style="dim"))


def _legend(options: RichOptions) -> Flow:
    """One sample of each border, drawn with the very boxes the figure uses; the label and
    the first sample share a line, as in ``Borders: ━━ input``."""
    items = []
    for label, box, style in [("input", INPUT, INPUT_STYLE)] + [
            (f"{role} ({BORDER_WORDS[role]})", ROLE_BOXES[role], ROLE_STYLES[role])
            for role in ROLES]:
        item = Text((box.fallback.top if options.ascii else box.top) * 2, style=style)
        item.append(f" {label}")
        items.append(item)
    return Flow([Text.assemble(Text("Borders:", style="dim"), " ", items[0]), *items[1:]])


def render_rich(evidence: Evidence, options: RichOptions | None = None) -> Group:
    """The chapter's figure for ``evidence``: input, three branches, evidence cards, verdict.

    Takes the evidence and display options; gives a renderable whose layout adapts to
    the width it is printed at. Raises nothing for any valid evidence.
    """
    f = Figure(evidence, options or RichOptions())
    checks = checks_card(((c.passed, c.name, c.detail) for c in check_rows(evidence)),
                         evidence.passed)
    return lines(
        Text(f"qkv {f.options.symbols.dot} chapter {f.options.safe(evidence.chapter)}",
             style="bold"),
        Text(TITLE, style="bold underline"),
        _legend(f.options),
        Text(""),
        Row([_input(f)]),
        Row([_branch(f, index) for index in range(3)]),
        Text("The three branches share coordinates, not weights or feature values.",
             style="italic"),
        Text(""),
        Text("Check independence, gradients, and boundaries", style="bold underline"),
        # the cards, paired in rows that sit side by side when wide and stack when narrow
        *(Row(parts) for parts in (
            [_upstream(f)], [_input_gradient(f), _independence(f)], [_weight_gradients(f)],
            [_shapes(f), _numerical(f)], [_rejected(f)], [_history(f)], [checks])),
        Text("The figure stops before comparing queries with keys: chapter 27 computes "
             "scores, probabilities and a weighted value mixture.", style="dim"),
        verdict_line(evidence.passed, sum(c.passed for c in evidence.checks),
                     len(evidence.checks)),
    )
