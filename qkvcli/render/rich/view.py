"""Chapter 26's figure as a rich renderable: one shared input, three bordered branches, evidence.

The branches are told apart by border (solid, dashed, double: :mod:`~qkvcli.render.rich.boxes`),
never by colour alone, side by side when the width allows. Each branch, the input gradient
and each weight gradient works one element from its stage's description
(:mod:`qkvcli.stages`). Evidence cards follow, each with its PASS/FAIL word, then the
verdict line; every tensor, shape, refused input and check is drawn from run's facts
(:func:`qkvcli.render.report.facts`), so the figure says what the text and the JSON say.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text

from qkvcli.check.chapter26_evidence import Evidence
from qkvcli.core.arrays import Array
from qkvcli.gradcheck.records import GradcheckResult
from qkvcli.render.facts import Fact, find
from qkvcli.render.gradcheck import within
from qkvcli.render.numbers import fmt_error, fmt_float, fmt_shape
from qkvcli.render.report import facts
from qkvcli.render.rich.boxes import BOXES, LETTERS, PLAIN, ROLE_SENTENCES, ROLES
from qkvcli.render.rich.drawn import checks_card, checks_verdict, config_row, listed, tensor_tables
from qkvcli.render.rich.layout import Flow, Part, Row, beside, card, lines, status, verdicts
from qkvcli.render.rich.options import RichOptions
from qkvcli.render.rich.tables import Column, Summarise, grid, table, worked
from qkvcli.render.tensors import SUMMARY_THRESHOLD, Summaries
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
    """The evidence, its facts (:func:`qkvcli.render.report.facts`), the display options and
    the summaries of large tensors, computed ahead (hashed two at a time before any is
    shown), that every section of the figure reads."""

    def __init__(self, evidence: Evidence, options: RichOptions) -> None:
        self.evidence, self.options, self.facts = evidence, options, facts(evidence)
        self.tensors: dict[str, Fact] = find(self.facts, "tensors")
        self.summaries: Summarise = Summaries(
            tensor.value for name, tensor in self.tensors.items()
            if not name.startswith("upstream") and not options.full
            and tensor.value.size > SUMMARY_THRESHOLD)

    def __getitem__(self, name: str) -> Array:
        """The tensor published as ``name``."""
        found: Array = self.tensors[name].value
        return found

    def passed(self, check: str) -> bool:
        """Whether the check published as ``check`` passed (its card's word)."""
        return any(c["passed"] for c in self.facts["checks"] if c["name"] == check)

    def marks(self, name: str) -> frozenset[tuple[int, ...]]:
        """The coordinates of ``name`` (an ``expect`` key: ``query``, ``input_gradient``...)
        whose value differs from the fixture's ``expect``: marked in the figure."""
        expect = self.evidence.expect
        return frozenset(m.coordinate for m in expect.mismatches
                         if m.name == name) if expect else frozenset()

    def tables(self, name: str, shown: str, role: str, marked: bool = False,
               edge: bool = True) -> list[RenderableType]:
        """The tensor published as ``name``'s tables, titled ``shown``, in ``role``'s box
        and style (:data:`BOXES`), its expect marks on them when ``marked``."""
        box, style = BOXES[role]
        return tensor_tables(self.tensors[name], shown, box, self.options, style, edge=edge,
                             summaries=self.summaries,
                             marks=self.marks(name) if marked else ())

    def work(self, stage: str, names: dict[str, str], name: str,
             derivation: Callable[[tuple[int, ...]], Derivation]) -> RenderableType | None:
        """One element of the tensor ``name`` worked from ``stage`` in the figure's
        ``names``: the first that differs from the fixture's ``expect`` (its terms explain
        the marked value), else the first; its terms cut to ``max_rows`` unless ``full``;
        ``None`` when there is no element to work."""
        shape = tuple(int(n) for n in self[name].shape)
        if 0 in shape or not self["input"].size:
            return None
        at = min(self.marks(name), default=tuple(0 for _ in shape))
        found = derivation(at)
        shown = found if self.options.full else fewer(found, self.options.max_rows)
        return worked(element_at(STAGES[stage], at, names, optional=False), shown, self.options)

    def formula(self, stage: str, names: dict[str, str] | None = None) -> Text:
        return Text(self.options.math(formula_in(STAGES[stage], names or {}, optional=False)))


def _input(f: Figure) -> Part:
    c, (box, style) = find(f.facts, "config"), BOXES["input"]
    return card("Shared hidden-state input", None, config_row(
        c, ("batch", "tokens", "d_model", "d_head", "bias"), f.options),
        *f.tables("input", "X", "input"), Text(
        f"The same X feeds all three branches: d_model {c['d_model']} "
        f"{f.options.symbols.arrow} d_head {c['d_head']}.", style="dim"), box=box, style=style)


def _branch(f: Figure, role: str, parameter: str) -> Part:
    letter, weight, output = LETTERS[role], f[f"{role}_weight"], f[role]
    names, (box, style) = {"Y": letter, "W": f"W_{letter}"}, BOXES[role]
    return card(
        f"{role.capitalize()} projection ({BORDER_WORDS[role]})", None,
        Text(ROLE_SENTENCES[role], style=f"bold {style}"),
        f.formula("projection", names),
        Text("Stable parameter:", style="dim"),
        # Its own line: a long name must not force the three branches to stack.
        Text(parameter, overflow="fold"),
        grid(("Projection weight", f"shape(W_{letter}) = {fmt_shape(weight.shape)}"),
             ("Projected output", f"shape({letter}) = {fmt_shape(output.shape)}"),
             nowrap=(0,), dim=(0,)),
        # Weight beside output when the branch is wide enough (stacked at 80 columns saves
        # a screenful), one above the other inside a narrow side-by-side branch.
        beside([*f.tables(f"{role}_weight", f"W_{letter}", role),
                Group(*f.tables(role, letter, role, True))]),
        f.work("projection", names, role, lambda at: projection(
            f["input"], weight, None, at, float(output[at]), ("X", f"W_{letter}", ""))),
        box=box, style=style)


def _upstream(f: Figure) -> Part:
    """U_Q, U_K, U_V: the upstream gradients dL/dQ, dL/dK, dL/dV the reverse pass starts
    from, what a learner needs to recompute dX and each dW by hand."""
    return card("Upstream gradients", None, Text(
        "U = dL/dQ, dL/dK, dL/dV: the fixture's upstream gradients, where the reverse pass "
        "starts (dQ = U_Q, dK = U_K, dV = U_V)."), beside(
        (Group(*f.tables(f"upstream_{role}", f"U_{LETTERS[role]}", role)) for role in ROLES),
        gap=3))


def _upstreams(f: Figure) -> tuple[Array, ...]:
    return tuple(f[f"upstream_{role}"] for role in ROLES)


def _input_gradient(f: Figure) -> Part:
    loss = Text(f"objective L = <Q,U_Q> + <K,U_K> + <V,U_V> = "
                f"{fmt_float(find(f.facts, 'loss').value, f.options.precision)}")
    if f.marks("loss"):
        loss.append(f" {f.options.symbols.mark} differs from the fixture's expect",
                    style="bold reverse")
    stage, grad = "projection reverse (input)", f["input_gradient"]
    return card(
        "Combined input gradient", f.passed("reverse"), f.formula(stage),
        Text(f"All three paths add into the shared input; shape(dX) = "
             f"{fmt_shape(grad.shape)}.", style="dim"), loss,
        *f.tables("input_gradient", "dX", "plain", True, edge=False),
        f.work(stage, {}, "input_gradient", lambda at: input_paths(
            _upstreams(f), tuple(f[f"{role}_weight"] for role in ROLES), at, float(grad[at]))))


def _weight_gradients(f: Figure) -> Part:
    g: GradcheckResult = find(f.facts, "gradcheck").value
    stage = "projection reverse (weight)"

    def branch(role: str, upstream: Array) -> tuple[Group, RenderableType | None]:
        """``role``'s weight gradient, its gradient check's count, and one element worked."""
        letter, name, checked = LETTERS[role], f"{role}_weight_gradient", g.checks_of(f"{role}_weight")
        caption = Text(f"{role}: {sum(1 for c in checked.checks if c.passed)} of "
                       f"{len(checked.checks)} coordinates ")
        caption.append_text(status(checked.passed))
        return Group(*f.tables(name, f"dW_{letter}", role, True), caption), f.work(
            stage, {"dW": f"dW_{letter}", "U": f"U_{letter}"}, name, lambda at: weight_gradient(
                f["input"], upstream, (at[0], at[1]), float(f[name][at]), f"U_{letter}"))

    tables, terms = zip(*(branch(role, upstream) for role, upstream in zip(
        ROLES, _upstreams(f), strict=True)), strict=True)
    heading = f.formula(stage)
    heading.append(" in each branch: a weight's gradient never crosses branches.")
    return card("Branch-local weight gradients", all(g.checks_of(f"{role}_weight").passed
                                                      for role in ROLES),
                heading, beside(tables, gap=3), beside([t for t in terms if t is not None], gap=3))


def _independence(f: Figure) -> Part:
    ind, title = find(f.facts, "independence"), "Change only the query weight"
    if not ind["applicable"].value:
        return card(title, f.passed("independence"),
                    Text("not applicable: the input has no non-zero feature column"))
    changed = ind["query_changed"].value
    rows = [(changed, "query", "changed" if changed else "unchanged"), *(
        (ind[f"{role}_unchanged"].value, role, "bitwise unchanged"
         if ind[f"{role}_unchanged"].value else "changed") for role in ROLES[1:])]
    return card(title, f.passed("independence"), Text(
        f"Add 1 to W_Q[{ind['row']},0] and project X again:", style="dim"), verdicts(rows))


PROBES = {"rule": "fixture input", "batch": "batch doubled", "empty_batch": "empty batch axis",
          "empty_tokens": "empty token axis"}
"""The shape probes the card lists, by published name, with their words."""


def _shapes(f: Figure) -> Part:
    symbols, c = f.options.symbols, find(f.facts, "config")

    def shapes(probe: str) -> str:
        found = find(f.facts, f"shapes.{probe}")
        return f"{fmt_shape(found['input'].value)} {symbols.arrow} " + ",".join(
            fmt_shape(found[branch].value) for branch in ROLES)

    return card("Shapes and empty axes", f.passed("shapes"), listed(
        ({"passed": find(f.facts, f"shapes.{name}.kept").value, "name": name} for name in PROBES),
        lambda probe: PROBES[probe["name"]], lambda probe: shapes(probe["name"])), Text(
        f"trainable scalars: 3 {symbols.times} {c['d_model']} {symbols.times} {c['d_head']} = "
        f"{find(f.facts, 'parameter_count')}", style="dim"))


def _numerical(f: Figure) -> Part:
    g: GradcheckResult = find(f.facts, "gradcheck").value
    counts = " ".join(f"n_{key}={len(g.checks_of(tensor).checks)}" for key, tensor in (
        ("X", "input"), ("Q", "query_weight"), ("K", "key_weight"), ("V", "value_weight")))
    replay = find(f.facts, "replay_bitwise").value
    named = next(e for e in find(f.facts, "errors").value if e["case"] == "duplicate-name")
    init = find(f.facts, "initialization")
    rows = [(g.passed, "gradcheck", f"{within(g)} of {g.count} coordinates within tolerance"),
            (replay, "replay", "bitwise" if replay else "mismatch"),
            (named["rejected"].value, "names", "unique" if named["rejected"].value
             else "unchecked"),
            (f.passed("initialization"), "initialization", f"seed {init['seed']}, "
             + ("transactional" if init["transactional"].value else "partial"))]
    worst = g.worst
    return card(
        "Numerical checks", all(ok for ok, _, _ in rows), Text(counts),
        # the settings as given (repr): the text report's spelling
        Text(f"step h = {g.step!r}   tolerance {f.options.symbols.tau} = {g.tolerance!r}"),
        None if worst is None else Text(
            f"worst scaled error {fmt_error(worst.scaled_error)} at "
            f"{worst.tensor}{fmt_shape(worst.coordinate)}", style="dim"), verdicts(rows))


def _rejected(f: Figure) -> Part:
    def detail(case: Mapping[str, Any]) -> Text:
        said = Text(REJECTION_REASONS.get(case["case"], ""))
        said.append(f"\n{f.options.safe(case['message'])}", style="dim")
        return said

    return card("Rejected boundaries", f.passed("rejected-inputs"), listed(
        find(f.facts, "errors").value, lambda case: f"rejected {case['case']}", detail,
        "rejected"))


def _history(f: Figure) -> Part:
    """Where attention's inputs come from, then and now (sources as rows, so it fits 80
    columns; wrapped at spaces only: ``encoder-annotati``/``ons`` misreads)."""
    h, dash = find(f.facts, "history"), f.options.symbols.dash
    return card("Change from two attention sources to one", None, table(
        [Column("Source"), Column("Additive encoder-decoder attention"),
         Column("Transformer self-attention")],
        [("Previous decoder state", h["earlier_left"], dash),
         ("Encoder annotations", h["earlier_right"], dash),
         ("One previous-layer sequence", dash, h["transformer_source"])],
        box=PLAIN, pad_edge=False, show_edge=False),
        Text(f"mapping: {h['mapping']}. {ANALOGY}", style="dim"))


def _legend(options: RichOptions) -> Flow:
    """One sample of each border, drawn with the very boxes the figure uses; the label and
    the first sample share a line, as in ``Borders: ━━ input``."""
    items = [Text((box.fallback.top if options.ascii else box.top) * 2, style=style or "").append(
        f" {label}") for label, (box, style) in [("input", BOXES["input"]), *(
            (f"{role} ({BORDER_WORDS[role]})", BOXES[role]) for role in ROLES)]]
    return Flow([Text.assemble(Text("Borders:", style="dim"), " ", items[0]), *items[1:]])


def render_rich(evidence: Evidence, options: RichOptions | None = None) -> Group:
    """The chapter's figure for ``evidence``: input, three branches, evidence cards, verdict.

    Takes the evidence and display options; gives a renderable whose layout adapts to
    the width it is printed at. Raises nothing for any valid evidence.
    """
    f = Figure(evidence, options or RichOptions())
    checks = checks_card(find(f.facts, "checks"), f.options)
    return lines(
        Text(f"qkv {f.options.symbols.dot} chapter {f.options.safe(evidence.chapter)}",
             style="bold"),
        Text(TITLE, style="bold underline"),
        _legend(f.options),
        Text(""),
        Row([_input(f)]),
        Row([_branch(f, role, name) for role, name in zip(
            ROLES, find(f.facts, "parameter_names"), strict=True)]),
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
        checks_verdict(find(f.facts, "checks")),
    )
