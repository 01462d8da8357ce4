"""Shared fixtures for the tests, and the settings that keep a test run out of the checkout.

A test run writes nothing into the repository: hypothesis keeps its directory (its
example database and its cache of the code's constants) in the system's temporary
directory, not ``.hypothesis/`` in the working directory, and the
Rust example is built from a copy (cargo writes ``Cargo.lock`` beside its manifest, and
its target directory is a temporary one too).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTER_FIXTURE = ROOT / "fixtures" / "ch26-qkv-projections.json"
GOLDEN = Path(__file__).resolve().parent / "golden"
HYPOTHESIS_HOME = Path(tempfile.gettempdir()) / "qkv-tests-hypothesis"
HYPOTHESIS_DATABASE = HYPOTHESIS_HOME / "examples"

try:
    from hypothesis import settings
    from hypothesis.configuration import set_hypothesis_home_dir
    from hypothesis.database import DirectoryBasedExampleDatabase
except ImportError:  # hypothesis is a test extra: the tests that need it skip
    pass
else:
    set_hypothesis_home_dir(str(HYPOTHESIS_HOME))
    settings.register_profile(
        "qkv", database=DirectoryBasedExampleDatabase(str(HYPOTHESIS_DATABASE)))
    settings.load_profile("qkv")


def is_later_chapter_fixture(path: Path) -> bool:
    """Whether ``path`` is a fixture of chapters 27-30 (its ``"chapter"`` key names one):
    read by that chapter's module, not by chapter 26's reader, ``qkv attend`` or the schema."""
    import json

    from qkvcli.core.names import DEFAULT_CHAPTER as DEFAULT
    from qkvcli.core.names import chapter_of_id as number_named

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


@pytest.fixture(scope="session")
def rust_example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of ``examples/rust`` to build: its ``Cargo.toml`` in a temporary directory."""
    copy = tmp_path_factory.mktemp("rust-example") / "rust"
    shutil.copytree(ROOT / "examples" / "rust", copy,
                    ignore=shutil.ignore_patterns("target", "Cargo.lock"))
    return copy / "Cargo.toml"
