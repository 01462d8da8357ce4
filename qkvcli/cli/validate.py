"""``qkv validate``: check fixture files without running them, chapter and attend alike.

Each file is first checked as a chapter fixture (``qkv run``), collecting every problem.
A file the chapter refuses that uses a key only ``qkv attend`` reads (biases,
``value_width``, packed ``in_proj``/``c_attn`` weights, ``heads``, an output
projection) is checked as an attend fixture instead, and ``--attend`` checks every file
that way. The attend reader stops at the first problem.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from qkvcli.cli.batch import expand_fixtures
from qkvcli.cli.chapter import chapter_option, check_chapter
from qkvcli.cli.group import EXIT_INPUT, error_line, safe_line
from qkvcli.cli.io import SafePath, label_of, labelled
from qkvcli.cli.options import max_elements_option

if TYPE_CHECKING:
    from pathlib import Path

CHAPTER, ATTEND = "chapter", "attend"


def attend_keys(data: Any) -> list[str]:
    """The keys of ``data`` that only ``qkv attend`` reads, as JSON paths (``$.heads``)."""
    from qkvcli.core.names import BRANCHES
    from qkvcli.reading.fixture import LAYER_TOP_KEYS, PACKED_KEYS
    from qkvcli.reading.layouts import (
        C_ATTN_KEYS,
        CODEGEN_KEYS,
        NEOX_KEYS,
        NORM_KEYS,
        OUT_KEYS,
        QKV_PROJ_KEYS,
    )

    if not isinstance(data, dict):
        return []
    found = [f"$.{key}" for key in (*LAYER_TOP_KEYS, "value_width") if key in data]
    weights = data.get("weights")
    if isinstance(weights, dict):
        found += [f"$.weights.{key}" for key in (*PACKED_KEYS, *C_ATTN_KEYS, *NEOX_KEYS,
                                                  *QKV_PROJ_KEYS, *CODEGEN_KEYS, *OUT_KEYS,
                                                  *NORM_KEYS)
                  if key in weights]
        found += [f"$.weights.{branch}.bias" for branch in BRANCHES
                  if isinstance(weights.get(branch), dict) and "bias" in weights[branch]]
    return found


def fixture_problems_of(path: Path, max_elements: int, attend: bool,
                        chapter: int | None = None) -> tuple[str, list[str]]:
    """What ``path`` was checked as (a chapter 27-30 fixture: its chapter's id), and
    its problems as ``"$.location: message"`` lines."""
    from qkvcli.reading.json_values import parse_json_text
    from qkvcli.reading.load import fixture_stem, read_fixture_text
    from qkvcli.reading.parse import fixture_problems
    from qkvcli.reading.problems import FixtureError

    text = labelled(label_of(path), lambda: read_fixture_text(path))
    try:
        data = parse_json_text(text)
    except FixtureError as error:
        return (ATTEND if attend else CHAPTER), [str(error)]
    if not attend:
        from qkvcli.cli.chapter import chapter_problems

        found = chapter_problems(data, path.parent, max_elements, chapter)
        if found is not None:
            return found
        problems = [str(error) for error in
                    fixture_problems(data, fixture_stem(path), max_elements, base_dir=path.parent)]
        if not problems or not attend_keys(data):
            return CHAPTER, problems
    from qkvcli.attention.fixture import parse_attend_fixture
    from qkvcli.reading.settings import refuse_chapter_fixture

    try:
        refuse_chapter_fixture(data)  # a chapter's fixture: qkv run --chapter N
    except FixtureError as error:
        return ATTEND, [str(error.in_file(label_of(path)))]
    try:
        parse_attend_fixture(data, fixture_stem(path), max_elements, path.parent)
    except FixtureError as error:
        return ATTEND, [str(error)]
    return ATTEND, []


@click.command()
@click.argument("fixtures", nargs=-1, required=True, type=SafePath())
@chapter_option
@click.option("--attend", is_flag=True,
              help="Check every file as a qkv attend fixture (stops at its first problem). "
              "Without it, a file with attend-only keys is recognised as one.")
@click.option("--trust-paths", is_flag=True, help="Let the fixtures read files outside their "
              "directories (absolute paths, .., links out: a hub cache's model.safetensors).")
@max_elements_option
def validate(fixtures: tuple[Path, ...], attend: bool, trust_paths: bool,
             max_elements: int, chapter: int | None = None) -> None:
    """Check FIXTURE... without running them, reporting every problem found.

    A directory means the *.json files in it. Each problem is one line on stderr naming
    the file and the JSON location; each valid fixture prints "FILE: ok" ("FILE: ok
    (attend fixture)" for one qkv attend reads: biases, value_width, in_proj or c_attn
    weights, heads, an output projection). A fixture whose "chapter" key names chapter
    27 to 30 or 37 (or any, with --chapter N) is checked as that chapter's. With several
    fixtures a last line counts the problems. Exit status 0 when every fixture is valid, 2 otherwise.
    """
    from qkvcli.reading.files import trusting_paths

    check_chapter(chapter)
    with trusting_paths(trust_paths):
        _validate(fixtures, attend, max_elements, chapter)


def _validate(fixtures: tuple[Path, ...], attend: bool, max_elements: int,
              chapter: int | None = None) -> None:
    from qkvcli.core.errors import QkvError

    bad_files = 0
    total = 0
    paths = expand_fixtures(fixtures)
    for path in paths:
        try:
            checked_as, problems = fixture_problems_of(path, max_elements, attend, chapter)
        except QkvError as error:
            checked_as, problems = CHAPTER, [error_line(error).removeprefix(f"{label_of(path)}: ")]
        if problems:
            bad_files += 1
            total += len(problems)
            for problem in problems:
                click.echo(safe_line(f"Error: {label_of(path)}: {problem}"), err=True)
        else:
            note = {CHAPTER: "", ATTEND: " (attend fixture)"}.get(checked_as, f" ({checked_as} fixture)")
            click.echo(f"{label_of(path)}: ok{note}")
    if bad_files:
        if len(paths) > 1:
            noun = "problem" if total == 1 else "problems"
            click.echo(f"qkv: {total} {noun} in {bad_files} of {len(paths)} fixtures", err=True)
        raise SystemExit(EXIT_INPUT)
