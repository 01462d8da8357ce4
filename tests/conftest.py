"""Shared fixtures for the tests."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTER_FIXTURE = ROOT / "fixtures" / "ch26-qkv-projections.json"
GOLDEN = Path(__file__).resolve().parent / "golden"


def is_later_chapter_fixture(path: Path) -> bool:
    """Whether ``path`` is a fixture of chapters 27-30 (its ``"chapter"`` key names one):
    read by that chapter's module, not by chapter 26's reader, ``qkv attend`` or the schema."""
    import json

    from qkvcli.chapters.registry import DEFAULT, number_named

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return False
    number = number_named(data.get("chapter")) if isinstance(data, dict) else None
    return number is not None and number != DEFAULT


def shipped_fixtures(pattern: str = "*.json", recursive: bool = False) -> list[Path]:
    """The repository's fixtures of chapter 26 and ``qkv attend`` (``fixtures/``)."""
    found = (ROOT / "fixtures").rglob(pattern) if recursive else (ROOT / "fixtures").glob(pattern)
    return sorted(path for path in found if not is_later_chapter_fixture(path))


@pytest.fixture
def chapter_path() -> Path:
    return CHAPTER_FIXTURE
