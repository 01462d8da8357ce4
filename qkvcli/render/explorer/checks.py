"""The explorer's list of checks (failing ones open, passing ones folded) and its
gradient-check table, shared by every page."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape

from qkvcli.gradcheck.records import GradcheckResult
from qkvcli.render.explorer.derive import gradcheck_point
from qkvcli.render.explorer.page import GRADCHECK_ROWS, Page, index_text
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


def gradcheck_section(page: Page, result: GradcheckResult, name_of: Callable[[str], str]) -> str:
    """Every checked coordinate (up to :data:`GRADCHECK_ROWS` a tensor): the analytic
    value, the numerical one and the scaled error, each opening the comparison.

    ``name_of`` gives a checked tensor's published name.
    """
    out = ['<section class="group gradcheck"><h2>Gradient check</h2>',
           f'<p class="caption">mode {escape(result.mode)}, step '
           f'{result.step!r}, tolerance {result.tolerance!r}: {escape(result.summary)}</p>']
    for tensor in result.tensors:
        name = name_of(tensor.tensor)
        key = f"gradcheck.{name}"
        shown = tensor.checks[:GRADCHECK_ROWS]
        rows = []
        for check in shown:
            if check.direction is not None:
                where, label = str(check.direction), f"direction {check.direction}"
            else:
                where, label = index_text(check.coordinate), f"[{index_text(check.coordinate)}]"
            derivation = gradcheck_point(check.analytic, check.numerical, result.step,
                                         check.scaled_error, result.tolerance, check.passed)
            heading = f"gradient check of {name} at {label}"
            cells = [page.number(key, where, value, derivation, field=field, heading=heading)
                     for field, value in (("analytic", check.analytic),
                                          ("numerical", check.numerical))]
            error = page.number(key, where, check.scaled_error, derivation,
                                field="scaled_error", heading=heading)
            word = "✔ PASS" if check.passed else "✘ FAIL"
            rows.append(f"<tr><th scope=\"row\">{label}</th><td>{cells[0]}</td>"
                        f"<td>{cells[1]}</td><td>{error}</td><td>{word}</td></tr>")
        more = (f'<p class="caption">showing {len(shown)} of {len(tensor.checks)} '
                "coordinates (the JSON report lists every one)</p>"
                if len(shown) < len(tensor.checks) else "")
        out.append(
            f"<details{' open' if not tensor.passed else ''}><summary><code>{escape(name)}"
            f"</code>: {len(tensor.checks)} checked, {escape(tensor.mode)}, "
            f"{'all pass' if tensor.passed else 'FAILED'}</summary>"
            '<table class="values gc"><thead><tr><th>coordinate</th><th>analytic</th>'
            "<th>numerical</th><th>scaled error</th><th></th></tr></thead><tbody>"
            + "".join(rows) + f"</tbody></table>{more}</details>")
    out.append("</section>")
    return "".join(out)
