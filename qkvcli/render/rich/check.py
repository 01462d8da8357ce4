"""``qkv check`` in the terminal: one card per evidence family with PASS/FAIL/N/A, and a verdict."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from qkvcli.check.result import CheckResult
from qkvcli.core.results import FamilyCheck
from qkvcli.render.check import counted, family_detail, word
from qkvcli.render.rich.layout import Foldable, Part, Row, lines, status
from qkvcli.render.rich.options import RichOptions
from qkvcli.render.rich.tables import grid
from qkvcli.render.wording import VERDICT, verdict_counts

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


def render_check_rich(result: CheckResult,
                            options: RichOptions | None = None) -> Group:
    """The cards (two per row when wide, stacked when narrow) and the verdict line."""
    options = options or RichOptions()
    header = Text(options.safe(f"qkv check {result.implementation}"), style="bold")
    header.append(options.safe(f"  ({len(result.fixtures)} fixtures: "
                               f"{', '.join(result.fixtures)})"), style="dim")
    cards = [_card(check, result, options) for check in result.checks]
    rows = [Row(cards[i:i + 2]) for i in range(0, len(cards), 2)]
    line = Text(VERDICT, style="bold")
    line.append_text(status(result.passed))
    line.append(" " + verdict_counts(*counted(result)))
    if result.stderr and not result.passed:
        stderr = Text("program stderr:\n", style="bold")
        stderr.append(options.safe(result.stderr.rstrip()), style="dim")
        return Group(Foldable(header), *rows, stderr, line)
    return Group(Foldable(header), *rows, line)
