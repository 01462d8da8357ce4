"""Shared fixtures for the tests."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTER_FIXTURE = ROOT / "fixtures" / "ch26-qkv-projections.json"
GOLDEN = Path(__file__).resolve().parent / "golden"


@pytest.fixture
def chapter_path() -> Path:
    return CHAPTER_FIXTURE
