"""The explorer's list of checks (failing ones open, passing ones folded, the ones that
did not run or do not apply apart and dimmed), shared by every page: each drawn from a
report's published check entries (``name``, ``passed``, ``outcome``, ``detail``: every
report's one entry shape), as its JSON document holds them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

MARKS = {"pass": "✔", "fail": "✘", "skip": "\u2013"}
STATES = {"PASS": "pass", "FAIL": "fail", "SKIP": "skip", "N/A": "skip"}
"""Each word's state: N/A and SKIP do not count (JUnit's skipped)."""


def entries_of(document: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The document's published check entries."""
    return [entry for entry in document.get("checks", []) if isinstance(entry, Mapping)]


def published_word(entry: Mapping[str, Any]) -> str:
    """An entry's word: ``SKIP`` for a family that could not run, ``N/A`` for one that
    does not apply (any other outcome than ``passed``/``failed`` that passed), else
    ``PASS`` or ``FAIL``."""
    outcome, passed = entry.get("outcome", ""), bool(entry.get("passed"))
    if outcome == "not-run":
        return "SKIP"
    if outcome not in ("", "passed", "failed") and passed:
        return "N/A"
    return "PASS" if passed else "FAIL"


def check_item(entry: Mapping[str, Any], word: str) -> str:
    """One check: its name, its word (never colour alone) and its detail (or outcome)."""
    detail = str(entry.get("detail", entry.get("outcome", "")))
    return (f'<li class="check {STATES[word]}"><span class="word">{MARKS[STATES[word]]} '
            f'{escape(word)}</span> <strong>{escape(str(entry.get("name", "")))}</strong> '
            f"{escape(detail)}</li>")


def checks_section(entries: Sequence[Mapping[str, Any]]) -> str:
    """The checks: failing ones listed open, then the ones that did not count (dimmed as
    the terminal dims them), the passing ones folded into one line."""
    items: dict[str, list[str]] = {state: [] for state in MARKS}
    for entry in entries:
        word = published_word(entry)
        items[STATES[word]].append(check_item(entry, word))
    out = ['<section class="group checks" id="checks"><h2>Checks</h2>']
    if items["fail"]:
        out.append('<ul class="failing">' + "".join(items["fail"]) + "</ul>")
    if items["skip"]:
        out.append('<ul class="uncounted">' + "".join(items["skip"]) + "</ul>")
    if items["pass"]:
        count = len(items["pass"])
        out.append(f'<details class="passing"><summary>{count} passing '
                   f'{"check" if count == 1 else "checks"}</summary><ul>'
                   + "".join(items["pass"]) + "</ul></details>")
    out.append("</section>")
    return "".join(out)


def counted(entries: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
    """How many of the counted entries passed, and how many count (N/A and SKIP do not)."""
    counting = [bool(e.get("passed")) for e in entries if STATES[published_word(e)] != "skip"]
    return sum(counting), len(counting)
