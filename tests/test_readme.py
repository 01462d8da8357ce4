"""The README starts from nothing (issue 44): a clone and its directory, the Python it
needs, the licence, how long the tests take and what they skip; every runnable block of
it runs in a clean clone, offline, and leaves that clone as it was cloned."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.test_docs import MARKER, _environment, fenced_blocks, parse_block

README = (ROOT / "README.md").read_text(encoding="utf-8")


def first_block() -> list[str]:
    """The commands of the README's first fenced block: its start from nothing."""
    _, _, body = fenced_blocks(README)[0]
    return [line.split("#", 1)[0].strip() for line in body if line.strip()]


def test_the_readme_starts_from_a_clone() -> None:
    commands = first_block()
    assert commands[0].startswith("git clone ") and commands[0].endswith("qkv && cd qkv")
    assert commands[1] == "python3 -m venv venv && . venv/bin/activate"
    assert commands[2] == "pip install . && qkv run"
    assert "Python 3.10 or newer" in README


def test_the_python_it_names_is_the_one_the_package_requires() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'requires-python = ">=3.10"' in pyproject


def test_the_licence_is_mit_in_the_file_the_metadata_and_the_readme() -> None:
    licence = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert licence.startswith("MIT License\n\nCopyright (c) the qkv authors\n")
    assert "THE SOFTWARE IS PROVIDED \"AS IS\"" in licence
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^license = "MIT"$', pyproject, re.M)
    assert re.search(r'^license-files = \["LICENSE"\]$', pyproject, re.M)
    assert "MIT ([LICENSE](LICENSE)), copyright the qkv authors." in README


def test_the_readme_shows_the_explorer_and_says_what_the_tests_cost() -> None:
    shown = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", README)
    assert "docs/explorer.png" in shown and (ROOT / "docs" / "explorer.png").is_file()
    assert "about 6 minutes on 2 cores" in README
    for needed in ("PyTorch", "`transformers`", "Playwright for Python and a Chromium",
                   "Node, a Rust toolchain, a C compiler", "`python -m pytest -rs`"):
        assert needed in README, needed


def test_the_first_screen_defines_its_words() -> None:
    first_screen = README.split("## What it shows", 1)[0]
    for defined in ("the **evidence**:", "a **fixture**, a small JSON file"):
        assert defined in first_screen
    for jargon in ("bitwise replay", "branch independence"):
        assert jargon not in first_screen


def _clean_clone(tmp_path: Path) -> Path:
    """The repository's files as a fresh clone has them, committed in a repository of its own."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True,
                            check=False)
    if listed.returncode != 0:
        pytest.skip("this checkout is not a git repository: no clone to start from")
    clone = tmp_path / "qkv"
    for name in listed.stdout.decode().split("\0"):
        source = ROOT / name
        if name and source.is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, clone / name)
    git = ["git", "-c", "user.name=qkv", "-c", "user.email=qkv@localhost", "-C", str(clone)]
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "clone"]):
        subprocess.run(git + command, check=True, capture_output=True)
    return clone


def test_every_readme_block_runs_offline_in_a_clone_and_leaves_it_clean(tmp_path: Path) -> None:
    clone = _clean_clone(tmp_path)
    environment = _environment()
    # Offline: no proxy, no package index, no model hub; and no byte-code beside the clone's files.
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        environment.pop(name, None)
    environment.update({"PIP_NO_INDEX": "1", "HF_HUB_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1",
                        "no_proxy": "*"})
    blocks = [parse_block(ROOT / "README.md", line, info, body)
              for line, info, body in fenced_blocks(README) if MARKER in info.split()]
    assert len(blocks) >= 6
    problems = []
    for block in blocks:
        for command in block.commands:
            done = subprocess.run(["bash", "-c", command.line], cwd=clone, env=environment,
                                  capture_output=True, text=True, timeout=120, check=False)
            if done.returncode != command.exit_code:
                problems.append(f"{block.name}: {command.line}: exit {done.returncode}\n"
                                f"{done.stdout}{done.stderr}")
    assert problems == []
    status = subprocess.run(["git", "-C", str(clone), "status", "--porcelain", "--ignored"],
                            capture_output=True, text=True, check=True).stdout
    assert status == "", f"the README's commands left files in the clone:\n{status}"
