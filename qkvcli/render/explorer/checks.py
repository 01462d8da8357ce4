"""The explorer's list of checks (failing ones open, passing ones folded), shared by
every page."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from qkvcli.render.wording import Check


def check_item(check: Check, word: str = "") -> str:
    """One check: its name, PASS or FAIL in words (never colour alone), its detail."""
    word = word or ("PASS" if check.passed else "FAIL")
    state = "pass" if check.passed else "fail"
    mark = "✔" if check.passed else "✘"
    return (f'<li class="check {state}"><span class="word">{mark} {word}</span> '
            f"<strong>{escape(check.name)}</strong> {escape(check.detail)}</li>")


def checks_section(checks: Sequence[Check], words: Sequence[str] = ()) -> str:
    """The checks: failing ones listed open, the passing ones folded into one line."""
    words = list(words) or ["PASS" if c.passed else "FAIL" for c in checks]
    failing = [check_item(c, w) for c, w in zip(checks, words, strict=True) if not c.passed]
    passing = [check_item(c, w) for c, w in zip(checks, words, strict=True) if c.passed]
    out = ['<section class="group checks" id="checks"><h2>Checks</h2>']
    if failing:
        out.append('<ul class="failing">' + "".join(failing) + "</ul>")
    if passing:
        out.append(f'<details class="passing"><summary>{len(passing)} passing '
                   f'{"check" if len(passing) == 1 else "checks"}</summary><ul>'
                   + "".join(passing) + "</ul></details>")
    out.append("</section>")
    return "".join(out)
