"""The explorer page of ``qkv check``: an implementation's families, its findings and their replay.

The page reads the JSON document (:func:`~qkvcli.render.check.check_json`). Failing
families are listed open, passing ones folded. Each finding is worded as the text report
words it; where it compared two numbers (its ``compared``), the implementation's and the
one it must equal are numbers that open the comparison: both values, the scaled error (a
cache's absolute error) and tolerance, the slips the finding names, and the commands
that replay the failing fixture (``--save-failures``). Where a stage describes the
expected value, it opens the engine's terms on the fixture first
(:mod:`qkvcli.render.explorer.expected`). A passing gradient check's worst point (the
document's ``worst``) opens its analytic and numerical values the same way.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from qkvcli.check.cases import Case
from qkvcli.check.result import CheckResult
from qkvcli.core.names import chapter_span
from qkvcli.render.check import check_json
from qkvcli.render.explorer.checks import checks_section, counted
from qkvcli.render.explorer.expected import engine_terms
from qkvcli.render.explorer.page import Page
from qkvcli.render.numbers import fmt_exact, fmt_general
from qkvcli.render.wording import verdict
from qkvcli.stages.terms import Derivation, Step

Entry = Mapping[str, Any]
OPERATION_CHAPTERS = {"projections": (26,), "head": (27, 28), "rope": (29,), "multi-head": (30,),
                      "kv-cache": (37,)}
"""The chapters whose code each published operation is (the page's title)."""
EXPECTED = {"engine": "expected (qkv's engine)",
            "causal-pass": "expected (qkv's engine: the causal pass over the prefix)",
            "refusing-cache": "expected (qkv's engine: a cache that refuses the step)"}
"""What the number a finding's value is compared with is, by its ``against``."""


def replay_lines(failure: Entry, document: Entry, replay: Mapping[str, str],
                 spec: str) -> list[str]:
    """The commands that replay the failing fixture of ``failure`` (none for a fixture
    ``--save-failures`` does not write); a ``--command`` program's document has ``stderr``."""
    label = failure["fixture"]
    name = None
    if label is not None:
        name = replay.get(label) or next(
            (file for fixture, file in replay.items() if label.startswith(fixture + " ")), None)
    if name is None:
        return []
    lines = [f"qkv check {spec} --save-failures DIR   (writes DIR/{name}.json)",
             f"qkv check {spec} DIR/{name}.json"]
    if "stderr" in document:
        program = spec.removeprefix("--command ")
        lines.append(f"{shlex.split(program)[0] if program else 'PROGRAM'} "
                     f"< DIR/{name}.requests.jsonl   (the requests alone)")
    else:
        lines.append(f"qkv run DIR/{name}.json   (qkv's own evidence on it)")
    return lines


def _names(compared: Entry) -> tuple[str, str]:
    """The two numbers' names: a gradient check's analytic and numerical, else actual and expected."""
    return ("analytic", "numerical") if "analytic" in compared else ("actual", "expected")


def _rows(compared: Entry) -> list[Step]:
    """The two numbers, their difference or scaled error, the tolerance and their exact spellings."""
    first, second = (float(compared[name]) for name in _names(compared))
    if "analytic" in compared:
        rows = [Step("analytic (the implementation's backward)", first, "fact"),
                Step("numerical (central difference of its forward)", second, "fact"),
                Step("scaled error", fmt_general(float(compared["scaled_error"])), "text")]
        rows += [Step("note", compared["note"], "text")] if "note" in compared else []
    else:
        rows = [Step("actual (the implementation)", first, "fact"),
                Step(EXPECTED[compared["against"]], second, "fact"),
                Step("actual \u2212 expected", first - second, "fact")]
        rows.append(Step("scaled error |a\u2212e| / max(1,|a|,|e|)",
                         fmt_general(float(compared["scaled_error"])), "text")
                    if "scaled_error" in compared else
                    Step("|a\u2212e| (a cache is judged by it)",
                         fmt_general(float(compared["absolute_error"])), "text"))
    if compared["tolerance"] is not None:
        rows.append(Step("tolerance", fmt_general(float(compared["tolerance"])), "text"))
    names = _names(compared)
    rows.append(Step("exact values", f"{names[0]} {fmt_exact(first)}, {names[1]} "
                     f"{fmt_exact(second)}", "text"))
    return rows


def _pair(page: Page, where: str, compared: Entry, derivation: Derivation,
          heading: str, engine: Derivation | None = None) -> str:
    """The two numbers ``compared`` holds, each opening ``derivation``; ``where`` is their
    ``tensor|index``. With ``engine`` (how the engine made the expected value), the
    expected number opens it instead (``data-variant="expected"``)."""
    tensor, index = where.split("|")
    shown = []
    for name in _names(compared):
        own = engine if name == "expected" else None
        shown.append(f"{name} " + page.number(
            tensor, index, float(compared[name]), own or derivation, field=name,
            heading=f"{heading}: the expected value" if own else heading,
            variant="expected" if own else ""))
    return ", ".join(shown)


def _at(compared: Entry) -> str:
    """``grad_input[0,0,2]``: the compared tensor and coordinate as the text writes them."""
    return f"{compared['tensor']}[{','.join(map(str, compared['coordinate']))}]"


def worst_section(page: Page, document: Entry) -> str:
    """The worst point of each passing gradient check, its two values numbers that open
    the comparison (``data-tensor="checks"``, ``data-index``: the family's place in the
    report's ``checks``); empty when no passing family has one."""
    places = {entry["name"]: i for i, entry in enumerate(document["checks"])}
    items = []
    for worst in document["worst"]:
        name, label, compared = worst["check"], worst["fixture"], worst["compared"]
        derivation = Derivation(f"{name}: the worst coordinate, on {label}",
                                tuple(_rows(compared)), float(compared["analytic"]), "none")
        items.append(f"<li><strong>{escape(name)}</strong> [{escape(str(label))}] "
                     f"{escape(_at(compared))}: " + _pair(
                         page, f"checks|{places[name]}", compared, derivation,
                         f"{name}: worst {_at(compared)}") + "</li>")
    if not items:
        return ""
    return ('<section class="group"><h2>Worst gradient-check coordinates</h2>'
            '<ul class="findings">' + "".join(items) + "</ul></section>")


def engine_derivation(failure: Entry, compared: Derivation,
                      cases: Sequence[Case]) -> Derivation | None:
    """How the engine made the expected value ``failure`` compared (its stage's terms with
    the operands' values from the engine's pass on the fixture), the comparison after
    them; ``None`` where no stage describes it (:mod:`qkvcli.render.explorer.expected`)."""
    numbers = failure["compared"]
    if numbers["against"] not in ("engine", "causal-pass"):
        return None
    at = (*([numbers["position"]] if "position" in numbers else []), *numbers["coordinate"])
    expected = float(numbers["expected"])
    terms = engine_terms(failure["check"], failure["fixture"], numbers["tensor"], at,
                         expected, cases)
    if terms is None:
        return None
    after = tuple(row if row.part in ("fact", "text") else row._replace(part="fact")
                  for row in compared.rows)
    return terms._replace(formula=f"qkv's engine: {terms.formula}",
                          rows=(*terms.rows, *after), value=expected)


def _finding(page: Page, i: int, failure: Entry, commands: list[str],
             cases: Sequence[Case]) -> str:
    """One failure: its check, fixture and words, the numbers it compared, its replay."""
    numbers, compared = "", failure["compared"]
    if compared is not None:
        rows = [*_rows(compared), *(Step("the slip", words, "text") for words in failure["slips"]),
                *(Step("replay" if n == 0 else "", line, "text") for n, line in enumerate(commands))]
        where = (f"{failure['check']} on {failure['fixture']}" if failure["fixture"]
                 else failure["check"])
        derivation = Derivation(f"{where}: {failure['detail']}", tuple(rows),
                                float(compared[_names(compared)[0]]), "none")
        numbers = ('<p class="compare">' + _pair(
            page, f"failures|{i}", compared, derivation, f"finding {i + 1}: {failure['check']}",
            engine_derivation(failure, derivation, cases)) + "</p>")
    where = f" [{escape(failure['fixture'])}]" if failure["fixture"] else ""
    replay_html = ("<pre>" + escape("\n".join(commands)) + "</pre>") if commands else ""
    return (f'<li class="failure"><strong>{escape(failure["check"])}</strong>{where} '
            f"{escape(failure['detail'])}{numbers}{replay_html}</li>")


def check_page(result: CheckResult, precision: int, title: str,
               replay: Mapping[str, str], spec: str, cases: Sequence[Case] = ()) -> str:
    """The implementation's explorer page (one self-contained HTML document).

    ``replay``: failing fixture label -> the name ``--save-failures`` writes it under;
    ``spec``: how the command line names the implementation; ``cases``: the fixtures it
    was checked on (an expected value opens the engine's terms on them).
    """
    document = check_json(result)
    page = Page(title, precision)
    page.sections.append(f'<p class="caption">implementation {escape(document["implementation"])};'
                         f" fixtures {escape(', '.join(document['fixtures']))}</p>")
    page.sections.append(checks_section(document["checks"]))
    page.sections.append(worst_section(page, document))
    if document["failures"]:
        items = [_finding(page, i, failure, replay_lines(failure, document, replay, spec), cases)
                 for i, failure in enumerate(document["failures"])]
        page.sections.append('<section class="group"><h2>Findings</h2><ul class="findings">'
                             + "".join(items) + "</ul></section>")
    chapters = sorted({n for entry in document["checks"]
                       for n in OPERATION_CHAPTERS.get(entry["operation"], ())})
    judged = f" ({'chapter' if len(chapters) == 1 else 'chapters'} {chapter_span(chapters)})"
    return page.html(f"{title}: {document['implementation']}" + (judged if chapters else ""),
                     verdict(document["passed"], *counted(document["checks"])),
                     document["passed"])
