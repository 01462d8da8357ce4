"""Docs that stay true: the commands the docs show run, and every report key is explained.

Runnable blocks
---------------
README.md and every docs/*.md are scanned. A fenced block is run when its info string
holds the word ``qkv-run``; every other block is only read (leave blocks that need the
network, a checkpoint you do not ship or a long run unmarked). Two forms:

````
```sh qkv-run
qkv validate fixtures/
qkv run fixtures/ --junit qkv-junit.xml
```
````

Each non-blank line not starting with ``#`` is one command (a leading ``$ `` is
dropped); each must exit 0, or N when the line ends with the comment ``# exit N``.

````
```console qkv-run
$ qkv report --format text | head -n 2
chapter=26-qkv-projections
prediction=three independent bias-free projections preserve batch and token axes
```
````

Lines starting with ``$ `` are commands; the lines after one, up to the next ``$ ``
line, are its exact standard output (byte for byte, with a final newline; write
``2>&1`` in the command to include standard error). Exit codes as above.

Every command runs with ``bash -c`` in one fresh temporary directory per block, holding
copies of the repository's ``fixtures/`` and ``examples/``, with the ``qkv`` of the
interpreter running the tests first on ``PATH`` and this checkout first on
``PYTHONPATH``; commands of one block share the directory, so a later one can read what
an earlier one wrote. Each command has 120 seconds.

Report keys
-----------
``docs/reading-the-report.md`` must explain every key that ``qkv report --format
text``, ``qkv report --format trace`` and ``qkv attend --format text`` print, computed
here by running them (the chapter fixture, every ``fixtures/attend/*.json``, a
multi-head layer, a GPT-2-style layer with an output projection and a large, summarised
fixture), and the text and trace of ``qkv report --chapter N`` for each of chapters
27-30 whose modules this build has. A text key ``k`` (``k=...``) is explained by a
heading, or a list item starting with, the code term ``k=``; each sub-key ``s``
(``s:value`` inside that line) must appear as the code term ``s:`` in that heading's
section or list item. A trace record ``KIND``
is explained likewise by ``KIND|``, its fields ``f`` by ``f=``. So a new key without an
explanation fails here.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.tolerant import text_differences

MARKER = "qkv-run"
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
EXIT = re.compile(r"#\s*exit\s+(\d+)\s*$")
GUIDE = ROOT / "docs" / "reading-the-report.md"


@dataclass(frozen=True)
class Command:
    line: str
    exit_code: int
    output: str | None  # the exact standard output, for console blocks


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    language: str
    commands: tuple[Command, ...]

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def fenced_blocks(text: str) -> list[tuple[int, str, list[str]]]:
    """``(line number of the opening fence, info string, body lines)`` of each fenced block."""
    blocks = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        fence, info = opening.group(1), opening.group(2).strip()
        body: list[str] = []
        start = index + 1
        index += 1
        while index < len(lines):
            closing = FENCE.match(lines[index])
            if closing and closing.group(1)[0] == fence[0] and len(closing.group(1)) >= len(
                    fence) and not closing.group(2).strip():
                break
            body.append(lines[index])
            index += 1
        blocks.append((start, info, body))
        index += 1
    return blocks


def _exit_code(command: str) -> int:
    found = EXIT.search(command)
    return int(found.group(1)) if found else 0


def parse_block(path: Path, line: int, info: str, body: list[str]) -> Block:
    """The commands of one ``qkv-run`` block (see the module docstring for the two forms)."""
    language = info.split()[0] if info.split() else ""
    commands: list[Command] = []
    if language == "console":
        current: str | None = None
        output: list[str] = []
        for text in body:
            if text.startswith("$ "):
                if current is not None:
                    commands.append(Command(current, _exit_code(current),
                                            "".join(o + "\n" for o in output)))
                current, output = text[2:], []
            elif current is None:
                raise AssertionError(f"{path}:{line}: output before the first $ command")
            else:
                output.append(text)
        if current is not None:
            commands.append(Command(current, _exit_code(current),
                                    "".join(o + "\n" for o in output)))
    elif language in ("sh", "bash", "shell"):
        for text in body:
            stripped = text.strip()
            if stripped and not stripped.startswith("#"):
                stripped = stripped.removeprefix("$ ")
                commands.append(Command(stripped, _exit_code(stripped), None))
    else:
        raise AssertionError(f"{path}:{line}: a {MARKER} block must be sh or console, "
                             f"not {language!r}")
    assert commands, f"{path}:{line}: a {MARKER} block without commands"
    return Block(path, line, language, tuple(commands))


def documents() -> list[Path]:
    """README.md and every docs/*.md, the files whose runnable blocks are run."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def runnable_blocks() -> list[Block]:
    found = []
    for path in documents():
        for line, info, body in fenced_blocks(path.read_text(encoding="utf-8")):
            if MARKER in info.split():
                found.append(parse_block(path, line, info, body))
    return found


BLOCKS = runnable_blocks()


def _environment() -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR")}
    environment["PATH"] = str(Path(sys.executable).parent) + os.pathsep + environment["PATH"]
    environment["PYTHONPATH"] = str(ROOT) + os.pathsep + environment.get("PYTHONPATH", "")
    return environment


def run_block(block: Block, directory: Path) -> list[str]:
    """Run ``block``'s commands in ``directory`` (fixtures and examples copied in); the
    problems found, empty when every command exited and printed as documented."""
    for folder in ("fixtures", "examples"):
        shutil.copytree(ROOT / folder, directory / folder)
    environment = _environment()
    problems = []
    for command in block.commands:
        done = subprocess.run(["bash", "-c", command.line], cwd=directory, env=environment,
                              capture_output=True, text=True, timeout=120, check=False)
        where = f"{block.name}: {command.line}"
        if done.returncode != command.exit_code:
            problems.append(f"{where}: exit {done.returncode}, documented {command.exit_code}"
                            f"\n{done.stdout}{done.stderr}")
        elif (command.output is not None and done.stdout != command.output
              and text_differences(done.stdout, command.output)):  # BLAS's last digits
            problems.append(f"{where}: printed\n{done.stdout}documented\n{command.output}")
    return problems


@pytest.mark.parametrize("block", BLOCKS, ids=[block.name for block in BLOCKS])
def test_documented_commands_run(block: Block, tmp_path: Path) -> None:
    assert run_block(block, tmp_path) == []


def test_a_wrong_document_fails(tmp_path: Path) -> None:
    text = ("```console qkv-run\n$ qkv report --format text | head -n 1\nchapter=27\n"
            "$ qkv report missing.json  # exit 0\n```\n")
    (line, info, body), = fenced_blocks(text)
    block = parse_block(ROOT / "docs" / "x.md", line, info, body)
    problems = run_block(block, tmp_path)
    assert len(problems) == 2
    assert "printed\nchapter=26-qkv-projections\ndocumented\nchapter=27\n" in problems[0]
    assert "exit 2, documented 0" in problems[1]


def test_the_docs_have_runnable_blocks() -> None:
    # The marker is spelled right somewhere: a typo would silently run nothing.
    names = {block.path.name for block in BLOCKS}
    assert {"README.md", "reading-the-report.md", "tensors.md", "ci.md", "commands.md", "check.md",
            "rich.md"} <= names


@pytest.mark.parametrize(
    ("text", "commands"),
    [("```sh qkv-run\nqkv a\n# a comment\n\n$ qkv b  # exit 1\n```\n",
      [("qkv a", 0, None), ("qkv b  # exit 1", 1, None)]),
     ("```console qkv-run\n$ echo x\nx\n$ false # exit 1\n```\n",
      [("echo x", 0, "x\n"), ("false # exit 1", 1, "")]),
     ("````\n```sh qkv-run\nnot run\n```\n````\n", [])],
    ids=["sh", "console", "nested-fence-is-text"],
)
def test_block_parsing(text: str, commands: list[tuple[str, int, str | None]]) -> None:
    found = [parse_block(Path("x.md"), line, info, body)
             for line, info, body in fenced_blocks(text) if MARKER in info.split()]
    assert [(c.line, c.exit_code, c.output) for b in found for c in b.commands] == commands


# --- every key of the text outputs is explained ---------------------------------------------

SUB_KEY = re.compile(r"(?:^|[\s{])([a-z_][a-z0-9_]*):(?=\S)")
SUMMARY = re.compile(r"\{([^{}]*)\}")
SUMMARY_KEY = "{...}"
"""A summarised tensor, ``{shape:[...] count:N ...}``, wherever a value list would be."""


def _summaries(line: str, keys: dict[str, set[str]]) -> str:
    """``line`` with each ``{...}`` summary emptied; its sub-keys go to :data:`SUMMARY_KEY`."""
    for found in SUMMARY.finditer(line):
        keys.setdefault(SUMMARY_KEY, set()).update(SUB_KEY.findall(found.group(1)))
    return SUMMARY.sub("{}", line)


def text_keys(output: str) -> dict[str, set[str]]:
    """``{key: sub-keys}`` of ``key=value`` lines (``#`` lines are comments)."""
    keys: dict[str, set[str]] = {}
    for line in output.splitlines():
        if not line or line.startswith("#"):
            continue
        if line.startswith("verdict: "):  # the one verdict line every view but the report ends with
            keys.setdefault("verdict:", set())
            continue
        key, separator, value = _summaries(line, keys).partition("=")
        assert separator and re.fullmatch(r"[a-z_][a-z0-9_]*", key), line
        keys.setdefault(key, set()).update(SUB_KEY.findall(value))
    return keys


def trace_keys(output: str) -> dict[str, set[str]]:
    """``{KIND: fields}`` of ``KIND|field=value|...`` records."""
    keys: dict[str, set[str]] = {}
    for line in output.splitlines():
        kind, *fields = _summaries(line, keys).split("|")
        assert re.fullmatch(r"[A-Z_][A-Z0-9_]*", kind), line  # chapter 29 has RANK3
        keys.setdefault(kind, set()).update(field.partition("=")[0] for field in fields)
    return keys


def qkv(*args: str, cwd: Path = ROOT) -> str:
    done = subprocess.run([sys.executable, "-m", "qkvcli", *args], cwd=cwd, env=_environment(),
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"qkv {' '.join(args)}\n{done.stderr}"
    return done.stdout


def _layer_fixture(tmp_path: Path) -> Path:
    """A GPT-2-style two-head layer: packed c_attn with bias, c_proj output projection."""
    import json

    d_model, width = 4, 4
    c_attn = [[(i * 3 + j) % 5 / 4 - 0.5 for j in range(3 * width)] for i in range(d_model)]
    c_proj = [[(i + 2 * j) % 3 / 2 - 0.5 for j in range(d_model)] for i in range(width)]
    data = {"chapter": "docs-gpt2-layer", "heads": 2,
            "input": [[[1, 0, -1, 2], [0, 1, 1, -1], [2, -1, 0, 1]]],
            "weights": {"c_attn_weight": c_attn, "c_attn_bias": [0.1] * (3 * width),
                        "c_proj_weight": c_proj, "c_proj_bias": [0.0, 0.5, -0.5, 0.25]}}
    path = tmp_path / "layer.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp_path = tmp_path_factory.mktemp("keys")
    big = tmp_path / "big.json"
    qkv("init", "--generate", "--d-model", "80", "--d-head", "64", "-o", str(big))
    found = {
        "report": qkv("report", "--format", "text"),
        "report-summary": qkv("report", str(big), "--format", "text", "--mode", "sampled"),
        "report-none": qkv("report", str(big), "--format", "text", "--mode", "sampled",
                           "--tensors", "none"),
        "trace": qkv("report", "--format", "trace"),
        "trace-summary": qkv("report", str(big), "--format", "trace", "--mode", "sampled"),
        "attend": qkv("attend", "--format", "text"),
        "attend-causal": qkv("attend", "--causal", "--format", "text"),
        "attend-heads": qkv("attend", "fixtures/attend/attend-packed-in-proj.json", "--heads",
                            "3", "--format", "text"),
        "attend-gpt2-layer": qkv("attend", str(_layer_fixture(tmp_path)), "--format", "text"),
    }
    for path in sorted((ROOT / "fixtures" / "attend").glob("*.json")):
        found[f"attend-{path.stem}"] = qkv("attend", str(path), "--format", "text")
    for number in later_chapters():
        found[f"ch{number}-report"] = qkv("report", "--chapter", str(number), "-f", "text")
        found[f"trace-ch{number}"] = qkv("report", "--chapter", str(number), "-f", "trace")
    return found


def later_chapters() -> list[int]:
    """Chapters 27-30 whose modules this build has: their reports' keys are checked too."""
    from qkvcli.chapters.registry import available

    return [number for number in available() if number != 26]


@dataclass(frozen=True)
class Definition:
    terms: frozenset[str]
    body: str


CODE = re.compile(r"`([^`\n]+)`")
HEADING = re.compile(r"^#{1,6}\s")
ITEM = re.compile(r"^[-*]\s")


def definitions(text: str) -> list[Definition]:
    """Headings (their section runs to the next heading) and top-level list items (to the
    next item, heading or unindented line); a definition's terms are the code terms of the
    heading, or of the item's text before its first " — "."""
    found: list[Definition] = []
    lines = text.splitlines()
    in_fence = False
    starts: list[tuple[int, str]] = []
    for number, line in enumerate(lines):
        if FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence and (HEADING.match(line) or ITEM.match(line)):
            starts.append((number, "heading" if HEADING.match(line) else "item"))
    for index, (number, kind) in enumerate(starts):
        end = len(lines)
        for later, later_kind in starts[index + 1:]:
            if later_kind == "heading" or kind == "item":
                end = later
                break
        if kind == "item":
            for k in range(number + 1, end):
                if lines[k] and not lines[k].startswith((" ", "\t")):
                    end = k
                    break
        body = "\n".join(lines[number:end])
        # An item's terms may run over several lines, up to its first " — ".
        head = " ".join(body.split()).split(" — ", 1)[0] if kind == "item" else lines[number]
        found.append(Definition(frozenset(CODE.findall(head)), body))
    return found


def explanation(definitions_: list[Definition], term: str) -> Definition | None:
    """Every definition of ``term`` joined (a key the report and attend share may be
    explained once for each); ``None`` when nothing defines it."""
    bodies = [definition.body for definition in definitions_ if term in definition.terms]
    return Definition(frozenset({term}), "\n".join(bodies)) if bodies else None


def _missing(outputs: dict[str, str]) -> list[str]:
    defined = definitions(GUIDE.read_text(encoding="utf-8"))
    missing: list[str] = []
    for name, output in sorted(outputs.items()):
        kinds = trace_keys(output) if name.startswith("trace") else text_keys(output)
        joiner, sub_suffix = ("|", "=") if name.startswith("trace") else ("=", ":")
        for key, subs in sorted(kinds.items()):
            term, suffix = ((key, ":") if key == SUMMARY_KEY or key.endswith(":")
                            else (key + joiner, sub_suffix))
            found = explanation(defined, term)
            if found is None:
                missing.append(f"{name}: `{term}`")
                continue
            if len(found.body.split()) < 12:
                missing.append(f"{name}: `{term}` has no real explanation")
            missing.extend(f"{name}: `{term}` ... `{sub}{suffix}`"
                           for sub in sorted(subs) if f"`{sub}{suffix}`" not in found.body)
    return sorted(set(missing))


def test_every_key_is_explained(outputs: dict[str, str]) -> None:
    assert _missing(outputs) == []


def test_the_key_check_can_fail(outputs: dict[str, str]) -> None:
    # A key no document explains is reported: the check above is not vacuous.
    extended = {**outputs, "report": outputs["report"] + "brand_new_key=shape:[1] x\n"}
    missing = _missing(extended)
    assert "report: `brand_new_key=`" in missing


def test_key_extraction() -> None:
    assert text_keys("# comment\nconfig=batch:1 bias:query=false,key=false\n"
                     "check=hull PASS O = sum (residual 0 <= 1e-15); layer: 3\n"
                     "input=shape:[1] values:{shape:[2] count:2 sha256:ab}\n") == {
        "config": {"batch", "bias"}, "check": set(), "input": {"shape", "values"},
        SUMMARY_KEY: {"shape", "count", "sha256"}}
    assert trace_keys("META|a=1|b=[1,2]\nNEXT|chapter=27\n") == {"META": {"a", "b"},
                                                                 "NEXT": {"chapter"}}


# --- links resolve, the README stays short and names every command ---------------------------

README = ROOT / "README.md"
README_MAX_LINES = 200
LINK = re.compile(r"(?<!!)\[(?:[^\]\n]|\n(?!\n))*?\]\(([^)\s]+)\)")
PENDING: set[str] = set()
"""Pages linked by name that another branch adds: allowed to be missing only while absent;
once the file exists its links and anchors are checked like any other page's. Remove an
entry once its page has landed (none pending now)."""


def _prose(text: str) -> str:
    """``text`` without fenced blocks and inline code, where a ``[x](y)`` is not a link."""
    kept: list[str] = []
    in_fence = False
    for line in text.splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            kept.append("")
        else:
            kept.append("" if in_fence else CODE.sub("code", line))
    return "\n".join(kept)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation but ``-`` and ``_`` dropped,
    each space a ``-``."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The ``#anchors`` of a Markdown file's headings (a repeated heading gets ``-1``, ...)."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    in_fence = False
    for line in text.splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence and HEADING.match(line):
            base = slug(line.lstrip("#"))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """The relative links of ``path`` (a page of the tree at ``root``) whose file, or
    heading ``#anchor`` in a Markdown file, does not exist (web links and ``mailto:`` are
    not followed)."""
    text = path.read_text(encoding="utf-8")
    broken = []
    for target in LINK.findall(_prose(text)):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue  # https:, mailto:, ...
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(root)}: ({target})"
        inside = resolved.is_relative_to(root.resolve())
        if not inside or not resolved.exists():
            pending = inside and resolved.relative_to(root.resolve()).as_posix() in PENDING
            if not pending:
                broken.append(f"{where}: no such file in the repository")
            continue
        if anchor and (resolved.suffix != ".md"
                       or anchor not in anchors(resolved.read_text(encoding="utf-8"))):
            broken.append(f"{where}: no heading #{anchor}")
    return broken


def test_links_found() -> None:
    # The pattern sees the README's links at all: a broken pattern would pass every page.
    found = LINK.findall(_prose(README.read_text(encoding="utf-8")))
    assert {"docs/commands.md", "docs/fixtures.md", "examples/", "ARCHITECTURE.md"} <= set(found)


@pytest.mark.parametrize("path", documents(), ids=[p.name for p in documents()])
def test_every_relative_link_resolves(path: Path) -> None:
    assert broken_links(path) == []


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("# qkv\n", encoding="utf-8")
    (tmp_path / "docs" / "other.md").write_text("# Other\n## Real heading\n", encoding="utf-8")
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "# Title\n\n## A `code` heading: yes\n\n[ok](#a-code-heading-yes) [up](../README.md)"
        " [there](other.md#real-heading) [web](https://example.org/x.md)\n"
        "[gone](missing.md) [bad anchor](other.md#no-such-heading) [self](#nope)\n"
        "`[not a link](nowhere.md)`\n```\n[nor this](nowhere.md)\n```\n", encoding="utf-8")
    assert broken_links(page, tmp_path) == [
        "docs/page.md: (missing.md): no such file in the repository",
        "docs/page.md: (other.md#no-such-heading): no heading #no-such-heading",
        "docs/page.md: (#nope): no heading #nope"]


@pytest.mark.parametrize(("heading", "anchor"), [
    ("## One attention head: `qkv attend --format text`",
     "one-attention-head-qkv-attend---format-text"),
    ("## Large tensors: `{...}`", "large-tensors-"),
    ("### Tensors from `.safetensors` checkpoints", "tensors-from-safetensors-checkpoints"),
], ids=["code-and-colon", "braces", "dot"])
def test_anchor_slugs(heading: str, anchor: str) -> None:
    assert anchors(heading + "\n") == {anchor}


def test_the_readme_fits_a_few_screens() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


def _listed_commands() -> list[str]:
    """The commands ``qkv --help`` lists under "Commands:", checked against the group."""
    import click
    from click.testing import CliRunner

    from qkvcli.cli import main

    shown = CliRunner().invoke(main, ["--help"]).stdout.split("\nCommands:\n", 1)[1]
    listed = [line.split()[1] for line in shown.splitlines() if line.startswith("  qkv ")]
    assert sorted(listed) == main.list_commands(click.Context(main))
    return listed


COMMANDS = _listed_commands()


@pytest.mark.parametrize("name", COMMANDS)
def test_the_readme_names_every_command(name: str) -> None:
    assert f"`qkv {name}" in README.read_text(encoding="utf-8")


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_has_its_section(name: str) -> None:
    assert f"## `qkv {name}`" in (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
