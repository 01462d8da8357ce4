"""The explorer page of ``qkv check``: an implementation's families, its findings and their replay.

Failing families are listed open, passing ones folded. Each finding is worded as the
text report words it; where it names a coordinate's value (``value-differs``; a KV
cache's ``step-differs``, ``cache-differs``, ``refusal-differs``) or a gradient-check
point (``point``), the implementation's value and qkv's are numbers that open the
comparison: expected against actual, the scaled error (a cache's absolute difference)
and tolerance, the slip the finding names, and the commands that replay the failing
fixture (``--save-failures``). Where a stage describes the expected value, it opens the
engine's terms on the fixture first (:mod:`qkvcli.render.explorer.expected`). A passing
gradient check's worst coordinate opens its analytic and numerical values the same way.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator, Mapping, Sequence
from html import escape
from typing import Any

from qkvcli.check.cases import Case
from qkvcli.check.result import CheckResult
from qkvcli.core.names import chapter_span
from qkvcli.core.results import Clause, Failure
from qkvcli.render.check import (
    facts as check_facts,
)
from qkvcli.render.check import (
    failure_detail,
    say,
)
from qkvcli.render.explorer.checks import checks_section, counted
from qkvcli.render.explorer.expected import as_float, engine_terms, parse_at
from qkvcli.render.explorer.page import Page
from qkvcli.render.numbers import fmt_exact, fmt_general
from qkvcli.render.wording import verdict
from qkvcli.stages.terms import Derivation, Step

OPERATION_CHAPTERS = {"forward": (26,), "backward": (26,), "head_forward": (27, 28),
                      "head_backward": (27, 28), "rope": (29,), "rope_reverse": (29,),
                      "mha_forward": (30,), "mha_backward": (30,), "cache_steps": (37,)}
"""The chapters whose code each operation an implementation offers is (its page's title)."""
NUMBERED = ("value-differs", "point", "step-differs", "cache-differs", "refusal-differs")
"""The clause codes whose numbers the page shows (and where in their facts they are)."""
PAIRS = {"value-differs": (2, 3), "point": (1, 2), "step-differs": (2, 3),
         "cache-differs": (1, 2), "refusal-differs": (2, 3)}
"""Where each numbered clause holds its two numbers: actual and expected (a gradient
check's point: analytic and numerical)."""
CACHE_EXPECTED = {"step-differs": "the causal pass over the prefix",
                  "cache-differs": "the causal pass over the prefix",
                  "refusal-differs": "a cache that refuses the step"}
"""What a cache finding's expected value is (qkv's engine's)."""


def clauses(facts: tuple[Any, ...] | list[Any]) -> Iterator[Clause]:
    """Every clause among ``facts`` (and in tuples of them), nested ones too, depth first."""
    for fact in facts:
        if isinstance(fact, Clause):
            yield fact
            yield from clauses(fact.facts)
        elif isinstance(fact, (tuple, list)):
            yield from clauses(fact)


def pair(clause: Clause) -> tuple[float, float] | None:
    """The two numbers a numbered clause compares (``None``: it compares shapes)."""
    if clause.code not in PAIRS:
        return None
    first, second = (as_float(clause.facts[i]) for i in PAIRS[clause.code])
    return None if first is None or second is None else (first, second)


def numbered(failure: Failure) -> Clause | None:
    """The finding's first clause with numbers to compare (``value-differs``, ``point``,
    or a KV cache's ``step-differs``, ``cache-differs``, ``refusal-differs``)."""
    found = Clause(failure.code, failure.facts) if failure.code else None
    for clause in ([found] if found else []) + list(clauses(failure.facts)):
        if clause.code in NUMBERED and pair(clause) is not None:
            return clause
    return None


def compared_at(clause: Clause) -> tuple[str, tuple[int, ...]] | None:
    """The result and coordinate a clause compares (a cache step's output: its position
    first), or ``None``."""
    if clause.code == "value-differs":
        return parse_at(f"{clause.facts[0]}{clause.facts[1]}")
    text = {"step-differs": 1, "cache-differs": 0}.get(clause.code)
    found = parse_at(str(clause.facts[text])) if text is not None else None
    if found is not None and clause.code == "step-differs":
        return found[0], (int(clause.facts[0]), *found[1])
    return found


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


def comparison(clause: Clause, failure: Failure, replay: list[str],
               tolerance: float | None = None) -> Derivation:
    """Expected against actual for a numbered clause, with the finding and its replay;
    ``tolerance``: a cache finding's (its clause holds none), where one applies."""
    if clause.code == "point":
        rows = _point_rows(clause)
        value = float(clause.facts[1])
    else:
        actual, expected = pair(clause) or (float("nan"), float("nan"))
        source = CACHE_EXPECTED.get(clause.code)
        rows = [Step("actual (the implementation)", actual, "fact"),
                Step("expected (qkv's engine" + (f": {source})" if source else ")"), expected,
                     "fact"),
                Step("actual \u2212 expected", actual - expected, "fact")]
        if clause.code == "value-differs":
            error, bound = clause.facts[4:6]
            rows += [Step("scaled error |a\u2212e| / max(1,|a|,|e|)", _small(error), "text"),
                     Step("tolerance", fmt_general(bound), "text")]
        else:
            rows.append(Step("|a\u2212e| (a cache is judged by it)", _small(abs(actual - expected)),
                             "text"))
            if tolerance is not None:
                rows.append(Step("tolerance", fmt_general(tolerance), "text"))
        value = actual
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
          heading: str, engine: Derivation | None = None) -> str:
    """The two numbers ``clause`` compares (actual and expected, or analytic and
    numerical), each opening ``derivation``; ``where`` is their ``tensor|index``. With
    ``engine`` (how the engine made the expected value), the expected number opens it
    instead (``data-variant="expected"``)."""
    differs = clause.code != "point"
    tensor, index = where.split("|")
    shown = []
    for name, value in zip(("actual", "expected") if differs else ("analytic", "numerical"),
                           pair(clause) or (), strict=True):
        own = engine if name == "expected" and engine is not None else None
        shown.append(f"{name} " + page.number(
            tensor, index, value, own or derivation, field=name,
            heading=f"{heading}: the expected value" if own else heading,
            variant="expected" if own else ""))
    return ", ".join(shown)


def engine_derivation(clause: Clause, failure: Failure, compared: Derivation,
                      cases: Sequence[Case]) -> Derivation | None:
    """How the engine made the expected value of ``clause`` (its stage's terms with the
    operands' values from the engine's pass on the fixture), the comparison after them;
    ``None`` where no stage describes it (:mod:`qkvcli.render.explorer.expected`)."""
    where, numbers = compared_at(clause), pair(clause)
    if where is None or numbers is None or clause.code == "point":
        return None
    terms = engine_terms(failure.family, failure.fixture, where[0], where[1], numbers[1],
                         cases)
    if terms is None:
        return None
    after = tuple(row if row.part in ("fact", "text") else row._replace(part="fact")
                  for row in compared.rows)
    return terms._replace(formula=f"qkv's engine: {terms.formula}",
                          rows=(*terms.rows, *after), value=numbers[1])


def _small(error: Any) -> str:
    return fmt_general(float(error))


def _exact(clause: Clause) -> str:
    """The compared numbers as the text report writes them (shortest round trip)."""
    first, second = pair(clause) or (float("nan"), float("nan"))
    names = ("analytic", "numerical") if clause.code == "point" else ("actual", "expected")
    return f"{names[0]} {fmt_exact(first)}, {names[1]} {fmt_exact(second)}"


def cache_tolerance(result: CheckResult, family: str) -> float | None:
    """The tolerance a cache family judged by: its own, else the steps family's (the
    refusals family compares within the same session tolerance)."""
    for name in (family, "cache-steps"):
        check = next((c for c in result.checks if c.name == name), None)
        if check is not None and check.tolerance > 0:
            return check.tolerance
    return None


def check_page(result: CheckResult, precision: int, title: str,
               replay: Mapping[str, str], spec: str, cases: Sequence[Case] = ()) -> str:
    """The implementation's explorer page (one self-contained HTML document).

    ``replay``: failing fixture label -> the name ``--save-failures`` writes it under;
    ``spec``: how the command line names the implementation; ``cases``: the fixtures it
    was checked on (an expected value opens the engine's terms on them).
    """
    page = Page(title, precision)
    found = check_facts(result)
    page.sections.append(f'<p class="caption">implementation {escape(result.implementation)};'
                         f" fixtures {escape(', '.join(result.fixtures))}</p>")
    page.sections.append(checks_section(found["checks"]))
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
                tolerance = (cache_tolerance(result, failure.family)
                             if clause.code in CACHE_EXPECTED else None)
                compared = comparison(clause, failure, commands, tolerance)
                numbers = ('<p class="compare">' + _pair(
                    page, f"failures|{i}", clause, compared,
                    f"finding {i + 1}: {failure.family}",
                    engine_derivation(clause, failure, compared, cases)) + "</p>")
            where = f" [{escape(failure.fixture)}]" if failure.fixture else ""
            replay_html = ("<pre>" + escape("\n".join(commands)) + "</pre>") if commands else ""
            items.append(f'<li class="failure"><strong>{escape(failure.family)}</strong>{where} '
                         f"{escape(failure_detail(failure))}{numbers}{replay_html}</li>")
        page.sections.append('<section class="group"><h2>Findings</h2><ul class="findings">'
                             + "".join(items) + "</ul></section>")
    chapters = sorted({n for op in result.operations for n in OPERATION_CHAPTERS.get(op, ())})
    judged = f" ({'chapter' if len(chapters) == 1 else 'chapters'} {chapter_span(chapters)})"
    return page.html(f"{title}: {result.implementation}" + (judged if chapters else ""),
                     verdict(result.passed, *counted(found["checks"])), result.passed)
