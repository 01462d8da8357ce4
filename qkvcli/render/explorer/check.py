"""The explorer page of ``qkv check``: an implementation's families, its findings and their replay.

Failing families are listed open, passing ones folded. Each finding is worded as the
text report words it; where it names a coordinate's value (``value-differs``) or a
gradient-check point (``point``), the implementation's value and qkv's are numbers that
open the comparison: expected against actual, the scaled error and tolerance, the slip
the finding names, and the commands that replay the failing fixture
(``--save-failures``). A passing gradient check's worst coordinate opens its analytic
and numerical values the same way.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator, Mapping
from html import escape
from typing import Any

from qkvcli.check.result import CheckResult
from qkvcli.core.names import chapter_span
from qkvcli.core.results import Clause, Failure
from qkvcli.render.check import (
    check_verdict,
    failure_detail,
    family_detail,
    say,
    uncounted,
    word,
)
from qkvcli.render.explorer.checks import checks_section
from qkvcli.render.explorer.page import Page
from qkvcli.render.numbers import fmt_general
from qkvcli.render.wording import Check
from qkvcli.stages.terms import Derivation, Step

OPERATION_CHAPTERS = {"forward": (26,), "backward": (26,), "head_forward": (27, 28),
                      "head_backward": (27, 28), "rope": (29,), "rope_reverse": (29,),
                      "mha_forward": (30,), "mha_backward": (30,), "cache_steps": (37,)}
"""The chapters whose code each operation an implementation offers is (its page's title)."""
NUMBERED = ("value-differs", "point")
"""The clause codes whose numbers the page shows (and where in their facts they are)."""


def clauses(facts: tuple[Any, ...] | list[Any]) -> Iterator[Clause]:
    """Every clause among ``facts`` (and in tuples of them), nested ones too, depth first."""
    for fact in facts:
        if isinstance(fact, Clause):
            yield fact
            yield from clauses(fact.facts)
        elif isinstance(fact, (tuple, list)):
            yield from clauses(fact)


def numbered(failure: Failure) -> Clause | None:
    """The finding's first clause with numbers to compare (``value-differs`` or ``point``)."""
    found = Clause(failure.code, failure.facts) if failure.code else None
    for clause in ([found] if found else []) + list(clauses(failure.facts)):
        if clause.code in NUMBERED:
            return clause
    return None


def slips(failure: Failure) -> list[str]:
    """The words of the finding's clauses that name a cause (a slip, a path, a weight),
    without the comparison itself."""
    found = [say(Clause("slip", (failure.facts[0],)))] if failure.code == "slip-differs" else []
    return found + [say(clause) for clause in clauses(failure.facts)
                    if clause.code not in (*NUMBERED, "point-on")]


def replay_lines(failure: Failure, result: CheckResult, replay: Mapping[str, str],
                 spec: str) -> list[str]:
    """The commands that replay the failing fixture of ``failure`` (none for a fixture
    ``--save-failures`` does not write)."""
    label = failure.fixture
    name = None
    if label is not None:
        name = replay.get(label) or next(
            (file for fixture, file in replay.items() if label.startswith(fixture + " ")), None)
    if name is None:
        return []
    lines = [f"qkv check {spec} --save-failures DIR   (writes DIR/{name}.json)",
             f"qkv check {spec} DIR/{name}.json"]
    if result.command:
        program = spec.removeprefix("--command ")
        lines.append(f"{shlex.split(program)[0] if program else 'PROGRAM'} "
                     f"< DIR/{name}.requests.jsonl   (the requests alone)")
    else:
        lines.append(f"qkv run DIR/{name}.json   (qkv's own evidence on it)")
    return lines


def comparison(clause: Clause, failure: Failure, replay: list[str]) -> Derivation:
    """Expected against actual for a numbered clause, with the finding and its replay."""
    if clause.code == "value-differs":
        _, _, actual, expected, error, tolerance = clause.facts
        rows = [Step("actual (the implementation)", float(actual), "fact"),
                Step("expected (qkv's engine)", float(expected), "fact"),
                Step("actual \u2212 expected", float(actual) - float(expected), "fact"),
                Step("scaled error |a\u2212e| / max(1,|a|,|e|)", _small(error), "text"),
                Step("tolerance", fmt_general(tolerance), "text")]
        value = float(actual)
    else:
        rows = _point_rows(clause)
        value = float(clause.facts[1])
    rows += [Step("exact values", _exact(clause), "text")]
    rows += [Step("the slip", words, "text") for words in slips(failure)]
    rows += [Step("replay" if i == 0 else "", line, "text") for i, line in enumerate(replay)]
    where = f"{failure.family} on {failure.fixture}" if failure.fixture else failure.family
    return Derivation(f"{where}: {failure_detail(failure)}", tuple(rows), value, "none")


def _point_rows(point: Clause) -> list[Step]:
    """A gradient-check point's analytic and numerical values, its scaled error and note."""
    _, analytic, numerical, error, note = point.facts
    rows = [Step("analytic (the implementation's backward)", float(analytic), "fact"),
            Step("numerical (central difference of its forward)", float(numerical), "fact"),
            Step("scaled error", _small(error), "text")]
    if note:
        rows.append(Step("note", str(note), "text"))
    return rows


def worst_section(page: Page, result: CheckResult) -> str:
    """The worst coordinate of each passing gradient check, its two values numbers that
    open the comparison (``data-tensor="checks"``, ``data-index``: the family's place in
    the report's ``checks``); empty when no passing family has one."""
    items = []
    for i, check in enumerate(result.checks):
        if not check.passed or check.worst is None:
            continue
        label, point = check.worst.facts
        derivation = Derivation(
            f"{check.name}: the worst coordinate, on {label}",
            (*_point_rows(point), Step("tolerance", fmt_general(check.tolerance), "text"),
             Step("exact values", _exact(point), "text")), float(point.facts[1]), "none")
        heading = f"{check.name}: worst {point.facts[0]}"
        items.append(f"<li><strong>{escape(check.name)}</strong> [{escape(str(label))}] "
                     f"{escape(str(point.facts[0]))}: "
                     + _pair(page, f"checks|{i}", point, derivation, heading) + "</li>")
    if not items:
        return ""
    return ('<section class="group"><h2>Worst gradient-check coordinates</h2>'
            '<ul class="findings">' + "".join(items) + "</ul></section>")


def _pair(page: Page, where: str, clause: Clause, derivation: Derivation,
          heading: str) -> str:
    """The two numbers ``clause`` compares (actual and expected, or analytic and
    numerical), each opening ``derivation``; ``where`` is their ``tensor|index``."""
    differs = clause.code == "value-differs"
    tensor, index = where.split("|")
    return ", ".join(
        f"{name} " + page.number(tensor, index, float(value), derivation, field=name,
                                 heading=heading)
        for name, value in zip(("actual", "expected") if differs else ("analytic", "numerical"),
                               clause.facts[2:4] if differs else clause.facts[1:3],
                               strict=True))


def _small(error: Any) -> str:
    return fmt_general(float(error))


def _exact(clause: Clause) -> str:
    """The compared numbers as the text report writes them (shortest round trip)."""
    if clause.code == "value-differs":
        return f"actual {clause.facts[2]!r}, expected {clause.facts[3]!r}"
    return f"analytic {clause.facts[1]!r}, numerical {clause.facts[2]!r}"


def check_page(result: CheckResult, precision: int, title: str,
               replay: Mapping[str, str], spec: str) -> str:
    """The implementation's explorer page (one self-contained HTML document).

    ``replay``: failing fixture label -> the name ``--save-failures`` writes it under;
    ``spec``: how the command line names the implementation.
    """
    page = Page(title, precision)
    rows = [Check(c.name, c.passed, family_detail(c)) for c in result.checks]
    page.sections.append(f'<p class="caption">implementation {escape(result.implementation)};'
                         f" fixtures {escape(', '.join(result.fixtures))}</p>")
    page.sections.append(checks_section(rows, [word(c) for c in result.checks],
                                        [uncounted(c) for c in result.checks]))
    worst = worst_section(page, result)
    if worst:
        page.sections.append(worst)
    if result.failures:
        items = []
        for i, failure in enumerate(result.failures):
            commands = replay_lines(failure, result, replay, spec)
            clause = numbered(failure)
            numbers = ""
            if clause is not None:
                numbers = ('<p class="compare">' + _pair(
                    page, f"failures|{i}", clause, comparison(clause, failure, commands),
                    f"finding {i + 1}: {failure.family}") + "</p>")
            where = f" [{escape(failure.fixture)}]" if failure.fixture else ""
            replay_html = ("<pre>" + escape("\n".join(commands)) + "</pre>") if commands else ""
            items.append(f'<li class="failure"><strong>{escape(failure.family)}</strong>{where} '
                         f"{escape(failure_detail(failure))}{numbers}{replay_html}</li>")
        page.sections.append('<section class="group"><h2>Findings</h2><ul class="findings">'
                             + "".join(items) + "</ul></section>")
    chapters = sorted({n for op in result.operations for n in OPERATION_CHAPTERS.get(op, ())})
    judged = f" ({'chapter' if len(chapters) == 1 else 'chapters'} {chapter_span(chapters)})"
    return page.html(f"{title}: {result.implementation}" + (judged if chapters else ""),
                     check_verdict(result), result.passed)
