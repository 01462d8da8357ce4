"""The explorer's list of checks (failing ones open, passing ones folded, the ones that
did not run or do not apply apart and dimmed), shared by every page."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from qkvcli.render.wording import Check

MARKS = {"pass": "✔", "fail": "✘", "skip": "\u2013"}


def check_item(check: Check, word: str, state: str) -> str:
    """One check: its name, its word (PASS, FAIL, or the report's word for a family that
    did not count), never colour alone, and its detail."""
    return (f'<li class="check {state}"><span class="word">{MARKS[state]} {escape(word)}'
            f"</span> <strong>{escape(check.name)}</strong> {escape(check.detail)}</li>")


def checks_section(checks: Sequence[Check], words: Sequence[str] = (),
                   uncounted: Sequence[bool] = ()) -> str:
    """The checks: failing ones listed open, then the ones that did not count (not run,
    not applicable: ``uncounted``, dimmed as the terminal dims them), the passing ones
    folded into one line."""
    words = list(words) or ["PASS" if c.passed else "FAIL" for c in checks]
    apart = list(uncounted) or [False] * len(checks)
    states = ["skip" if skip else "pass" if c.passed else "fail"
              for c, skip in zip(checks, apart, strict=True)]
    items = {state: [check_item(c, w, s) for c, w, s in zip(checks, words, states, strict=True)
                     if s == state] for state in MARKS}
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


def published_word(entry: Mapping[str, Any]) -> str:
    """A published check entry's word: ``SKIP`` for a family that could not run, ``N/A``
    for one that does not apply (any other outcome than ``passed``/``failed`` that
    passed), else ``PASS`` or ``FAIL``."""
    outcome, passed = entry.get("outcome", ""), bool(entry.get("passed"))
    if outcome == "not-run":
        return "SKIP"
    if outcome not in ("", "passed", "failed") and passed:
        return "N/A"
    return "PASS" if passed else "FAIL"


def published_rows(entries: Sequence[Any]) -> list[Check]:
    """Published check entries as rows: each name, whether it passed, and its detail (or
    its outcome)."""
    return [Check(str(e.get("name", "")), bool(e.get("passed")),
                  str(e.get("detail", e.get("outcome", ""))))
            for e in entries if isinstance(e, Mapping)]


def published_checks(entries: Sequence[Any]) -> str:
    """The checks section of a report's published check entries (``name``, ``passed``,
    ``outcome``, ``detail``: every report's one entry shape), each with its word."""
    entries = [entry for entry in entries if isinstance(entry, Mapping)]
    words = [published_word(entry) for entry in entries]
    checks = published_rows(entries)
    return checks_section(checks, words, [w in ("SKIP", "N/A") for w in words])


def counted(entries: Sequence[Any]) -> tuple[int, int]:
    """How many of the counted entries passed, and how many count (N/A and SKIP do not)."""
    counting = [bool(e.get("passed")) for e in entries
                if isinstance(e, Mapping) and published_word(e) in ("PASS", "FAIL")]
    return sum(counting), len(counting)
