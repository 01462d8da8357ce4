"""``qkv check`` in the terminal: one card per evidence family with PASS/FAIL/N/A, the slips
the diagnosis names, and a verdict.

The cards of a failing check fill more than a screen; the slips' names are repeated in the
last lines, beside the verdict, so the last screen of a terminal says what went wrong.
"""

from __future__ import annotations

from collections.abc import Iterator

from rich.console import Group
from rich.text import Text

from qkvcli.check.result import CheckResult
from qkvcli.core.results import Clause, FamilyCheck
from qkvcli.render.check import counted, family_detail, say, word
from qkvcli.render.rich.layout import Foldable, Part, Row, lines, status, verdict_line
from qkvcli.render.rich.options import RichOptions
from qkvcli.render.rich.tables import grid

SHOWN_FAILURES = 3  # per family unless options.full; the JSON lists them all


def _title(check: FamilyCheck) -> Text:
    title = Text(check.name, style="bold")
    title.append("  ")
    if word(check) in ("N/A", "SKIP"):
        title.append("N/A" if word(check) == "N/A" else "NOT RUN", style="dim")
    else:
        title.append_text(status(check.passed))
    return title


def _card(check: FamilyCheck, result: CheckResult, options: RichOptions) -> Part:
    failures = [f for f in result.failures if f.family == check.name and f.fixture is not None]
    shown = failures if options.full else failures[:SHOWN_FAILURES]
    # fixture and coordinate on one line that breaks between them, never inside a name:
    # two unbreakable columns side by side made a card 42 columns wide
    rows = [(Text.assemble((options.safe(f.fixture or ""), "dim"), " ",
                           options.safe(f.coordinate or "")),) for f in shown]
    more = len(failures) - len(shown)
    body = lines(
        Text(options.safe(family_detail(check)),
             style="" if check.passed or check.outcome == "not-run" else "red"),
        Text("failing fixtures and coordinates:", style="dim") if len(failures) > 1 else None,
        grid(*rows) if len(failures) > 1 else None,
        Text(f"{more} more: --full or --format json", style="dim") if more > 0 else None,
    )
    return Part(body, _title(check))


NAMING = frozenset({
    "slip", "mask-positions", "borrowed-weight", "borrowed-gradient", "swapped-weights",
    "other-branch-gradient", "summed-paths", "computed-with", "precision", "path-counts",
    "overflow", "overflow-said", "diagonal-hidden", "masked-after-softmax",
})
"""The clause codes whose words name what an implementation does wrong (with ``slip-*``,
a cache's slips), as against where a value differs and by how much."""


def _named(clause: Clause) -> Iterator[Clause]:
    """Each clause in ``clause`` (itself first) that names a slip."""
    if clause.code in ("slip-differs", "mask-positions") and clause.facts[0]:
        yield Clause("slip", clause.facts[:1])  # the slip without the values that showed it
    elif clause.code == "relation-differs" and clause.facts[0]:
        yield Clause("relations", (clause.facts[0], None))  # the relations, not the values
    elif clause.code == "relations" and clause.facts[0]:
        yield clause
    elif clause.code in NAMING or clause.code.startswith("slip-"):
        yield clause
    else:
        for fact in clause.facts:
            for inner in fact if isinstance(fact, tuple) else (fact,):
                if isinstance(inner, Clause):
                    yield from _named(inner)


def _kind(clause: Clause) -> tuple[object, ...]:
    """What makes two named slips the same: the code and the names in its facts, not the
    numbers measured on each fixture (a cache's length, the digits float32 keeps)."""
    def named(fact: object) -> bool:
        return isinstance(fact, str) or (isinstance(fact, tuple) and all(map(named, fact)))

    return (clause.code, *filter(named, clause.facts))


def slip_lines(result: CheckResult, options: RichOptions) -> list[Text]:
    """Each slip the failures name, once (as worded on the first fixture that showed
    it), with the families that found it (at most :data:`SHOWN_FAILURES` unless
    ``full``); without a named slip, the first failing family's finding. Nothing for a
    passing check."""
    found: dict[tuple[object, ...], tuple[str, list[str]]] = {}
    for failure in result.failures:
        if failure.code and not failure.not_run:
            for clause in _named(Clause(failure.code, failure.facts)):
                _, families = found.setdefault(_kind(clause), (say(clause), []))
                if failure.family not in families:
                    families.append(failure.family)
    named = list(found.values())
    shown = named if options.full else named[:SHOWN_FAILURES]
    lines = [Text.assemble(("slip: ", "bold red"), options.safe(words),
                           (f" ({', '.join(families)})", "dim")) for words, families in shown]
    if len(named) > len(shown):
        lines.append(Text(f"{len(named) - len(shown)} more slips named: --full or --format "
                          "json", style="dim"))
    first = next((c for c in result.checks if not c.passed and c.outcome != "not-run"), None)
    if not named and first is not None:
        lines.append(Text.assemble(("first finding: ", "bold red"),
                                   options.safe(f"{first.name}: {family_detail(first)}")))
    return lines


def render_check_rich(result: CheckResult,
                            options: RichOptions | None = None) -> Group:
    """The cards (two per row when wide, stacked when narrow), the slips named (repeated
    last, beside the verdict, where a terminal's last screen shows them) and the verdict."""
    options = options or RichOptions()
    header = Text(options.safe(f"qkv check {result.implementation}"), style="bold")
    header.append(options.safe(f"  ({len(result.fixtures)} fixtures: "
                               f"{', '.join(result.fixtures)})"), style="dim")
    cards = [_card(check, result, options) for check in result.checks]
    rows = [Row(cards[i:i + 2]) for i in range(0, len(cards), 2)]
    stderr = None
    if result.stderr and not result.passed:
        stderr = Text("program stderr:\n", style="bold")
        stderr.append(options.safe(result.stderr.rstrip()), style="dim")
    return lines(Foldable(header), *rows, stderr, *slip_lines(result, options),
                 verdict_line(result.passed, *counted(result)))
