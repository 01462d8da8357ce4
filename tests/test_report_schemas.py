"""The published report schemas (``qkv schema --report NAME``) and the one vocabulary.

Every pinned JSON output and a fresh output of every command on every bundled fixture
validate against their report's schema; a document whose check entry has another shape
(or whose head or keys differ) does not; the names table covers every check each report
judges, one kebab-case name each, unique within a report; the command's error line for a
missing or unknown name is exact.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner

from qkvcli.check.plans import ATTEND, RUN, order
from qkvcli.check.result import FAMILIES as CHECK_FAMILIES
from qkvcli.cli import main
from qkvcli.render.document import REPORTS, SCHEMA_VERSION, head
from qkvcli.render.names import (
    CH27,
    CH28,
    CH29,
    CH30,
    CH37,
    FAMILIES,
    OPERATIONS,
    PUBLISHED,
    published,
)
from qkvcli.render.schemas import report_schema

ROOT = Path(__file__).resolve().parent.parent
PINS = ROOT / "tests" / "golden" / "pins"
KEBAB = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
ERROR = "Error: {given}: name a report: run, attend, check, gradcheck, variance, families\n"


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _schema(report: str) -> dict[str, Any]:
    """The schema as the command prints it (the bytes users get, parsed)."""
    result = _invoke("schema", "--report", report)
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(result.stdout)
    return document


SCHEMAS = {report: _schema(report) for report in REPORTS}


def _errors(document: Any, report: str) -> list[str]:
    validator = jsonschema.Draft202012Validator(SCHEMAS[report])
    return [error.message for error in validator.iter_errors(document)]


@pytest.mark.parametrize("report", REPORTS)
def test_each_schema_is_a_draft_2020_12_schema_of_its_report(report: str) -> None:
    schema = SCHEMAS[report]
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema == report_schema(report)


@pytest.mark.parametrize("given", ["bogus", "Run", ""])
def test_an_unknown_report_is_one_error_line_naming_the_reports(given: str) -> None:
    result = _invoke("schema", "--report", given)
    assert result.exit_code == 2
    shown = f"--report {given!r}" if given else "--report"
    assert result.stderr == ERROR.format(given=shown)
    assert result.stdout == ""


def test_report_without_a_name_is_the_same_error_line() -> None:
    result = _invoke("schema", "--report")
    assert (result.exit_code, result.stderr) == (2, ERROR.format(given="--report"))


def test_the_fixture_schema_is_still_the_default() -> None:
    assert json.loads(_invoke("schema").stdout)["$id"] == "urn:qkv:fixture.schema.json"


PINNED = sorted(PINS.glob("*.json"))


@pytest.mark.parametrize("path", PINNED, ids=[path.stem for path in PINNED])
def test_every_pinned_output_validates(path: Path) -> None:
    document = json.loads(path.read_text(encoding="utf-8"))["output"]
    report = path.stem.split("-")[0]
    assert document["report"] == report
    assert _errors(document, report) == []


def _fresh_cases() -> list[tuple[str, list[str]]]:
    cases: list[tuple[str, list[str]]] = [("run", ["run", "-f", "json"])]
    for folder in ("fixtures", "fixtures/examples"):
        for path in sorted((ROOT / folder).glob("*.json")):
            name = path.relative_to(ROOT).as_posix()
            cases.append(("run", ["report", name, "-f", "json"]))
            if "ch37-" not in name:  # chapter 37 has no reverse pass: gradcheck refuses it
                cases.append(("gradcheck", ["gradcheck", name, "-f", "json"]))
    for path in sorted((ROOT / "fixtures" / "attend").glob("*.json")):
        name = path.relative_to(ROOT).as_posix()
        cases.append(("attend", ["attend", name, "-f", "json"]))
        cases.append(("attend", ["attend", name, "--causal", "-f", "json"]))
    cases += [
        ("attend", ["attend", "--heads", "2", "--causal", "-f", "json"]),
        ("attend", ["attend", "--example", "primer", "-f", "json"]),
        ("variance", ["variance", "--max", "16", "--samples", "64", "-f", "json"]),
        ("families", ["attend", "--families", "-f", "json"]),
        ("check", ["check", "examples/implementations/numpy_head.py", "--random", "0",
                   "-f", "json"]),
        ("check", ["check", "examples/implementations/wrong_rope_from_one.py", "--random",
                   "0", "-f", "json"]),
        ("check", ["check", "--command", "python3 examples/implementations/command_qkv.py",
                   "--random", "0", "-f", "json"]),
    ]
    return cases


FRESH = _fresh_cases()


@pytest.mark.parametrize(("report", "args"), FRESH, ids=[" ".join(a[:2]) for _, a in FRESH])
def test_a_fresh_output_validates(report: str, args: list[str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    result = _invoke(*args)
    assert result.exit_code in (0, 1), result.output
    document = json.loads(result.stdout)
    assert list(document)[:3] == ["qkv_version", "schema_version", "report"]
    assert (document["schema_version"], document["report"]) == (SCHEMA_VERSION, report)
    assert _errors(document, report) == []


def _pinned(name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((PINS / f"{name}.json").read_text())["output"]
    return document


SHAPES = [
    ("old entry", lambda c: {"name": c["name"], "passed": c["passed"], "detail": c["detail"]}),
    ("applicable kept", lambda c: {**c, "applicable": True}),
    ("no family", lambda c: {k: v for k, v in c.items() if k != "family"}),
    ("unknown family", lambda c: {**c, "family": "errors"}),
    ("unknown operation", lambda c: {**c, "operation": "attention"}),
    ("old name", lambda c: {**c, "name": "rejected_inputs"}),
    ("passed but failed", lambda c: {**c, "outcome": "failed"}),
    ("empty detail", lambda c: {**c, "detail": ""}),
]


@pytest.mark.parametrize("pin", ["run-ch26-qkv-projections", "run-ch27-self-attention",
                                 "run-ch30-multi-head-attention", "attend-attend-value-width",
                                 "check-numpy_rope_mha"])
@pytest.mark.parametrize(("change", "edit"), SHAPES, ids=[name for name, _ in SHAPES])
def test_a_wrong_entry_shape_fails(pin: str, change: str, edit: Any) -> None:
    document = _pinned(pin)
    report = document["report"]
    assert _errors(document, report) == []
    wrong = copy.deepcopy(document)
    wrong["checks"][0] = edit(wrong["checks"][0])
    assert _errors(wrong, report) != [], change


@pytest.mark.parametrize("edit", [
    lambda d: d.pop("schema_version"),
    lambda d: d.update(schema_version=1),
    lambda d: d.update(report="attend"),
    lambda d: d.update(kind="run"),
    lambda d: d.pop("checks"),
], ids=["no schema_version", "schema 1", "another report", "an extra key", "no checks"])
def test_a_wrong_head_or_top_level_fails(edit: Any) -> None:
    document = _pinned("run-ch28-causal-masking")
    edit(document)
    assert _errors(document, "run") != []


def test_a_check_failure_has_its_check_and_family() -> None:
    document = _pinned("check-wrong_head_ignores_mask")
    assert _errors(document, "check") == []
    document["failures"][0]["family"] = document["failures"][0].pop("check")
    assert _errors(document, "check") != []


def test_the_head_is_written_once() -> None:
    assert list(head("variance", seed=1)) == ["qkv_version", "schema_version", "report", "seed"]
    with pytest.raises(ValueError, match="unknown report 'kind'"):
        head("kind")


PLANS = {
    **{report: order(report) for report in (RUN, CH27, CH28, CH29, CH30, CH37, ATTEND)},
    "check": CHECK_FAMILIES,
}


@pytest.mark.parametrize("report", list(PLANS))
def test_the_table_names_every_check_once_in_kebab_case(report: str) -> None:
    names = [published(report, check).name for check in PLANS[report]]
    assert len(set(names)) == len(names)
    for check in PLANS[report]:
        found = published(report, check)
        assert KEBAB.match(found.name) and KEBAB.match(found.family), found
        assert found.family in FAMILIES and found.operation in OPERATIONS


def test_one_idea_is_one_family_across_reports() -> None:
    """The synonyms the reports spelled apart are one family now."""
    assert {published(r, c).family for r, c in [
        ("run", "errors"), (CH27, "rejected_inputs"), (CH29, "errors"), ("check", "errors"),
        ("check", "head-errors")]} == {"rejected-inputs"}
    assert {published(r, c).family for r, c in [
        (CH28, "prefix_invariance"), (CH30, "prefix"), ("attend", "prefix"),
        ("check", "head-prefix"), ("check", "multi-head-prefix")]} == {"prefix"}
    assert {published(r, c).family for r, c in [
        (CH28, "masked_rows"), ("attend", "mask")]} == {"future-zero"}
    # kept apart: check's mask places the mask, chapter 30's causal adds the row sums
    assert published("check", "mask").family == "mask"
    assert published(CH30, "causal").family == "causal"
    assert published("check", "head-prefix").name == "head-prefix"


def test_the_chapters_plans_are_the_table_rows() -> None:
    """Chapters 29 and 30's plans are the checks their pinned reports print, in order."""
    for chapter, pin in ((CH29, "run-ch29-rope"), (CH30, "run-ch30-multi-head-attention")):
        names = [entry["name"] for entry in _pinned(pin)["checks"]]
        assert names == [published(chapter, check).name for check in PLANS[chapter]]
    assert set(PUBLISHED) == {"run", CH27, CH28, CH29, CH30, CH37, "attend", "check"}
    for report, checks in PLANS.items():  # no row the report never judges
        assert set(PUBLISHED[report]) == set(checks), report


LABELS = {"run": "run (chapter 26)", CH27: "run (chapter 27)", CH28: "run (chapter 28)",
          CH29: "run (chapter 29)", CH30: "run (chapter 30)", CH37: "run (chapter 37)",
          "attend": "attend",
          "check": "check"}


def names_table() -> str:
    """The table of docs/json.md: each report's checks, the schema 1 name (the internal
    id, attend's ``weights`` aside), the name, family and operation."""
    rows = ["| report | schema 1 name | name | family | operation |",
            "| --- | --- | --- | --- | --- |"]
    for report, checks in PLANS.items():
        for check in checks:
            found = published(report, check)
            old = "weights" if (report, check) == ("attend", "attention") else check
            rows.append(f"| {LABELS[report]} | `{old}` | `{found.name}` | `{found.family}` "
                        f"| `{found.operation}` |")
    return "\n".join(rows) + "\n"


def test_the_docs_show_the_names_table() -> None:
    assert names_table() in (ROOT / "docs" / "json.md").read_text(encoding="utf-8")


def test_schema_help_names_every_report() -> None:
    """``qkv schema --help`` lists every report ``--report`` takes (it left out
    ``families``)."""
    text = " ".join(CliRunner().invoke(main, ["schema", "--help"]).output.split())
    listed = text.split("instead:", 1)[1]
    assert all(re.search(rf"\b{name}\b", listed) for name in REPORTS)
