"""Every fixture qkv writes or ships validates against ``qkv schema``.

Shipped: ``fixtures/**.json``, the bundled chapter fixture and every fixture-shaped JSON
example in README.md and docs/*.md. Written: ``qkv init`` in each of its forms (values,
``--generate``, ``--npy``, ``--from-chapter``, empty axes).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner

from qkvcli.cli import main

ROOT = Path(__file__).resolve().parent.parent


def validator() -> jsonschema.Draft202012Validator:
    result = CliRunner().invoke(main, ["schema"])
    assert result.exit_code == 0
    return jsonschema.Draft202012Validator(json.loads(result.stdout))


VALIDATOR = validator()
# chapters 29 and 30 have fixtures of their own kinds, read by qkvcli/chapters (not this schema)
SHIPPED = sorted(p for p in (ROOT / "fixtures").rglob("*.json")
                 if not p.name.startswith(("ch29-", "ch30-")))
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def errors(data: Any) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
            for e in VALIDATOR.iter_errors(data)]


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_shipped_fixtures_validate(path: Path) -> None:
    assert errors(json.loads(path.read_text(encoding="utf-8"))) == []


def doc_examples() -> list[tuple[str, Any]]:
    """JSON code blocks in the docs that are whole fixtures (they have input and weights)."""
    found = []
    for doc in DOCS:
        for index, block in enumerate(re.findall(r"```json\n(.*?)```", doc.read_text("utf-8"),
                                                 flags=re.S)):
            try:
                data = json.loads(block)
            except json.JSONDecodeError:
                continue  # a fragment (e.g. an "expect" section), not a fixture
            if isinstance(data, dict) and {"input", "weights"} <= set(data):
                found.append((f"{doc.name}#{index}", data))
    return found


EXAMPLES = doc_examples()


def test_the_docs_have_fixture_examples() -> None:
    assert len(EXAMPLES) >= 2


@pytest.mark.parametrize(("name", "data"), EXAMPLES, ids=[name for name, _ in EXAMPLES])
def test_documented_fixtures_validate(name: str, data: Any) -> None:
    assert errors(data) == []


@pytest.mark.parametrize("args", [
    [], ["--seed", "7", "--batch", "2", "--tokens", "3", "--d-model", "5", "--d-head", "4"],
    ["--batch", "0"], ["--tokens", "0"], ["--generate"],
    ["--generate", "--batch", "8", "--tokens", "512", "--d-model", "1024", "--d-head", "64"],
    ["--from-chapter"],
], ids=["default", "sized", "empty-batch", "empty-tokens", "generate", "generate-large",
        "from-chapter"])
def test_init_writes_fixtures_the_schema_accepts(args: list[str]) -> None:
    result = CliRunner().invoke(main, ["init", *args])
    assert result.exit_code == 0, result.output
    assert errors(json.loads(result.stdout)) == []


def test_init_npy_writes_a_fixture_the_schema_accepts(tmp_path: Path) -> None:
    target = tmp_path / "large.json"
    result = CliRunner().invoke(main, ["init", "-o", str(target), "--npy", "tensors"])
    assert result.exit_code == 0, result.output
    assert errors(json.loads(target.read_text(encoding="utf-8"))) == []
