"""``qkv check`` in the terminal: one card per evidence family with PASS/FAIL/N/A, the slips
the diagnosis names, and a verdict.

The cards of a failing check fill more than a screen; the slips' names are repeated in the
last lines, beside the verdict, so the last screen of a terminal says what went wrong.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Group
from rich.text import Text

from qkvcli.check.result import CheckResult
from qkvcli.render.check import check_json
from qkvcli.render.explorer.checks import counted
from qkvcli.render.rich.layout import Foldable, Part, Row, card, lines, status, verdict_line
from qkvcli.render.rich.options import RichOptions
from qkvcli.render.rich.tables import grid

SHOWN_FAILURES = 3  # per family unless options.full; the JSON lists them all


def _title(entry: Mapping[str, Any]) -> Text:
    """A family's name and its word: PASS or FAIL, or dimmed N/A (it does not apply) or
    NOT RUN (it could not run)."""
    title = Text(entry["name"], style="bold")
    title.append("  ")
    if entry["outcome"] == "not-run" or (entry["passed"] and entry["outcome"] != "passed"):
        title.append("NOT RUN" if entry["outcome"] == "not-run" else "N/A", style="dim")
    else:
        title.append_text(status(entry["passed"]))
    return title


def _card(entry: Mapping[str, Any], failed: Sequence[Mapping[str, Any]],
          options: RichOptions) -> Part:
    """A family's check entry as a card: its words, then the fixtures and coordinates it
    failed on (at most :data:`SHOWN_FAILURES` unless ``full``)."""
    failures = [f for f in failed if f["check"] == entry["name"] and f["fixture"] is not None]
    shown = failures if options.full else failures[:SHOWN_FAILURES]
    # fixture and coordinate on one line that breaks between them, never inside a name:
    # two unbreakable columns side by side made a card 42 columns wide
    rows = [(Text.assemble((options.safe(f["fixture"]), "dim"), " ",
                           options.safe(f["coordinate"] or "")),) for f in shown]
    more = len(failures) - len(shown)
    quiet = entry["passed"] or entry["outcome"] == "not-run"
    return card(_title(entry), None, Text(options.safe(entry["detail"]), style="" if quiet else "red"),
        Text("failing fixtures and coordinates:", style="dim") if len(failures) > 1 else None,
        grid(*rows) if len(failures) > 1 else None,
        Text(f"{more} more: --full or --format json", style="dim") if more > 0 else None)


def slip_lines(document: Mapping[str, Any], options: RichOptions) -> list[Text]:
    """Each slip the failures name, once (as worded on the first fixture that showed
    it), with the checks that found it (at most :data:`SHOWN_FAILURES` unless ``full``);
    without a named slip, the first failing family's finding. Nothing for a passing check."""
    named = document["slips"]  # the text report's, said once
    shown = named if options.full else named[:SHOWN_FAILURES]
    lines = [Text.assemble(("slip: ", "bold red"), options.safe(slip["slip"]),
                           (f" ({', '.join(slip['checks'])})", "dim")) for slip in shown]
    if len(named) > len(shown):
        lines.append(Text(f"{len(named) - len(shown)} more slips named: --full or --format "
                          "json", style="dim"))
    first = next((c for c in document["checks"] if not c["passed"] and c["outcome"] != "not-run"),
                 None)
    if not named and first is not None:
        lines.append(Text.assemble(("first finding: ", "bold red"),
                                   options.safe(f"{first['name']}: {first['detail']}")))
    return lines


def render_check_rich(result: CheckResult, options: RichOptions | None = None) -> Group:
    """The cards (two per row when wide, stacked when narrow), the slips named (repeated
    last, beside the verdict, where a terminal's last screen shows them) and the verdict,
    from the JSON document (:func:`~qkvcli.render.check.check_json`)."""
    options = options or RichOptions()
    document = check_json(result)
    header = Text(options.safe(f"qkv check {document['implementation']}"), style="bold")
    header.append(options.safe(f"  ({len(document['fixtures'])} fixtures: "
                               f"{', '.join(document['fixtures'])})"), style="dim")
    cards = [_card(entry, document["failures"], options) for entry in document["checks"]]
    rows = [Row(cards[i:i + 2]) for i in range(0, len(cards), 2)]
    stderr = None
    if document.get("stderr") and not document["passed"]:
        stderr = Text("program stderr:\n", style="bold")
        said = document["stderr"].rstrip().splitlines()  # each line escaped, not the breaks
        stderr.append("\n".join(map(options.safe, said)), style="dim")
    return lines(Foldable(header), *rows, stderr, *slip_lines(document, options),
                 verdict_line(document["passed"], *counted(document["checks"])))
