"""The chapter's figure as a rich renderable: one shared input, three bordered branches, evidence.

The query, key and value branches are told apart by border (solid, dashed, double;
see :mod:`qkvcli.render.rich.boxes`), never by colour alone, and sit side by side when the
width allows, stacked when it does not. Evidence cards follow, each with a PASS/FAIL
word (:mod:`qkvcli.render.rich.cards`), then every check and a verdict line.
:func:`render_rich` is pure: it returns a
:class:`rich.console.Group` for the CLI to print.
"""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from qkvcli.check.chapter26_evidence import Evidence
from qkvcli.render.numbers import fmt_shape
from qkvcli.render.rich.boxes import (
    INPUT,
    INPUT_STYLE,
    LETTERS,
    ROLE_BOXES,
    ROLE_SENTENCES,
    ROLE_STYLES,
    ROLES,
)
from qkvcli.render.rich.cards import evidence_cards, expect_marks, verdict_line
from qkvcli.render.rich.layout import Flow, Part, Row, lines, titled
from qkvcli.render.rich.options import RichOptions
from qkvcli.render.rich.tables import Summarise, batched_tables, matrix_table, pairs
from qkvcli.render.tensors import SUMMARY_THRESHOLD, Summaries

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
                              ("d_model rows", "d_head columns"), style, summaries=summaries),
                 box=None),
            Part(Group(*batched_tables(output, letter, box, options, style,
                                       summaries=summaries,
                                       marks=expect_marks(evidence, role))), box=None),
        ], gap=2, stack_expand=False, fill=False),
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
        verdict_line(evidence),
    )
