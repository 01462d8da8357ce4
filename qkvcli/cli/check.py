"""``qkv check``: the chapter's evidence for the user's own implementation (a thin layer).

The work is in :mod:`qkvcli.check`; this module reads the options, builds the
fixtures, starts the implementation, renders the result and sets the exit status:
0 when every applicable family passed, 1 when one failed, 2 for usage errors and
implementations that cannot be loaded or started (raised as ``QkvError`` and turned
into ``Error: ...`` by :class:`~qkvcli.cli.group.QkvGroup`), 130 on Ctrl-C (the group
says ``qkv: interrupted`` once a ``--command`` program has been ended).
"""

from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from qkvcli.cli.batch import Outcome, expand_fixtures, junit_xml
from qkvcli.cli.group import EXIT_FAILED, InputError
from qkvcli.cli.io import (
    OutputFolder,
    OutputPath,
    check_outputs,
    check_path_argument,
    label_of,
    shown,
    working_on,
    write_file,
)
from qkvcli.cli.options import (
    FIGURE_PRECISION,
    ViewSettings,
    format_option,
    html_option,
    output_option,
    view_options,
)
from qkvcli.cli.show import show
from qkvcli.render import render_pieces

if TYPE_CHECKING:
    from qkvcli.check.cases import Case
    from qkvcli.check.result import CheckResult

DEFAULT_RANDOM = 4  # the four special shapes: d_model != d_head, batch 0, tokens 0, d_head 1
DEFAULT_SEED = 26
DEFAULT_TOLERANCE = 1e-9
DEFAULT_TIMEOUT = 10.0
MAX_RANDOM = 10_000
"""The most seeded random fixtures ``--random`` adds (each is a round of calls)."""
MAX_TIMEOUT = 86_400.0
"""The longest ``--timeout``: a day (the system's own wait limit is not much larger)."""
CHECK_MAX_ELEMENTS = 1 << 22
"""check's default ``--max-elements``: every tensor crosses a pipe as JSON text (or is
copied for purity), so a fixture's tensors together stay within this many elements."""


def _finite(minimum_ok: bool, largest: float | None = None) -> Any:
    def check(ctx: click.Context, param: click.Parameter, value: float) -> float:
        if not math.isfinite(value) or value < 0 or (value == 0 and not minimum_ok):
            raise click.BadParameter("must be a finite number" +
                                     (", zero or more" if minimum_ok else " greater than zero"))
        if largest is not None and value > largest:
            raise click.BadParameter(f"must be at most {largest:g}")
        return value
    return check


def _check_request_size(case: Case, max_elements: int) -> None:
    """Refuse a fixture whose tensors together exceed ``max_elements`` (one request's worth)."""
    total = case.input.size + sum(w.size for w in case.weights) + sum(u.size for u in case.upstream)
    if total > max_elements:
        raise InputError(f"{case.label}: its tensors hold {total} elements together, more than "
                         f"the limit {max_elements} for one call (raise it with --max-elements)")


UNBOUNDED = 1 << 62
"""The chapter readers' gradient-check budget while the check reads a fixture: the
chapter's check is not the one the check runs (:func:`_check_gradcheck_size`)."""
MAX_GRADCHECK_ELEMENTS = 1 << 28
"""The most tensor elements the gradient check of one given fixture may send (its
perturbed calls times each call's elements), a few minutes of calls."""


def _check_gradcheck_size(case: Case) -> None:
    """Refuse a fixture whose gradient check would send more than
    :data:`MAX_GRADCHECK_ELEMENTS` elements: two calls of the forward per sampled
    coordinate (the fixture's ``gradcheck.samples`` of each tensor), in each mode of each
    kind the fixture is a case of, each call carrying the whole fixture."""
    from qkvcli.check.kinds import KINDS
    from qkvcli.check.session import judges

    samples = case.samples if case.samples is not None else 0
    per_mode = sum(2 * min(int(tensor.size), samples or int(tensor.size))
                   for tensor in case.tensors)
    modes = sum(len(kind.runs(case)) for kind in KINDS if judges(kind, case))
    elements = case.input.size + sum(w.size for w in case.weights)
    calls = per_mode * max(modes, 1)
    if calls * elements > MAX_GRADCHECK_ELEMENTS:
        raise InputError(f"{case.label}: its gradient check would make {calls} calls of "
                         f"{elements} elements each, more than {MAX_GRADCHECK_ELEMENTS} "
                         "elements in all (give the fixture a smaller $.gradcheck.samples)")


def _argument_paths(arguments: tuple[str, ...]) -> None:
    """Refuse an argument no system can open (NUL, over-long), as every path option does."""
    for argument in arguments:
        try:
            check_path_argument(argument)
        except click.BadParameter as error:
            raise InputError(error.message) from None


def implementation_sources(spec: str | None, command: str | None) -> list[str]:
    """The files that are the implementation under test, so no output replaces them: a
    ``.py`` IMPL, the file a module name imports (found as the child would find it, never
    imported here), or a ``--command`` program and every file its arguments name (the
    script of ``python impl.py``, the module of ``python -m pkg.impl``)."""
    import itertools
    import shlex
    import shutil

    if spec is not None:
        if os.path.isfile(spec):
            return [spec]
        return [found] if (found := module_file(spec)) is not None else []
    try:
        argv = shlex.split(command or "")
    except ValueError:
        return []  # the client says why it cannot start it
    sources: list[str] = []
    if argv:
        program = argv[0] if os.sep in argv[0] else shutil.which(argv[0])
        sources += [program] if program is not None and os.path.isfile(program) else []
    for before, argument in itertools.pairwise(argv):
        if os.path.isfile(argument):
            sources.append(argument)
        elif before == "-m" and (found := module_file(argument)) is not None:
            sources.append(found)
    return sources


def module_file(name: str) -> str | None:
    """The file ``import name`` would run, searched where the child searches (the working
    directory, then qkv's own path), without importing anything; ``None`` if not found."""
    import sys

    if not name or not all(part.isidentifier() for part in name.split(".")):
        return None
    relative = os.path.join(*name.split("."))
    for entry in ["", *sys.path]:
        base = os.path.join(os.path.abspath(entry or os.curdir), relative)
        for candidate in (base + ".py", os.path.join(base, "__init__.py")):
            if os.path.isfile(candidate):
                return candidate
    return None


def given_files(paths: tuple[Path, ...]) -> list[tuple[Path, Path | None]]:
    """Each fixture file the user gave, with the directory it was found in (``None`` for a
    file named on its own), once each: a file named twice, or named and found in a
    directory given too, is judged once (the first time it is met)."""
    seen: set[Path] = set()
    files: list[tuple[Path, Path | None]] = []
    for path in paths:
        folder = path if path.is_dir() else None
        for found in expand_fixtures((path,)):
            try:
                key = found.resolve()
            except (OSError, RuntimeError):
                key = found  # the reader says what is wrong with it
            if key not in seen:
                seen.add(key)
                files.append((found, folder))
    return files


def build_cases(paths: tuple[Path, ...], count: int, seed: int, max_elements: int) -> list[Case]:
    """The chapter fixture, each given fixture (directories expanded, each file once; a
    later chapter's a case of its kind, :mod:`qkvcli.check.given`), the precision and
    contrast fixtures, then ``count`` random ones."""
    from qkvcli.check import given as chapters
    from qkvcli.check.cases import (
        chapter_case,
        contrast_case,
        overflowing,
        precision_case,
        random_cases,
    )

    chapter = chapter_case()
    given = [given_case(path, max_elements) for path, _ in given_files(paths)]
    for case in given:
        _check_request_size(case, max_elements)
        _check_gradcheck_size(case)
        with working_on(case.label):
            overflow = chapters.overflowing(case) if case.kinds else overflowing(case)
        if overflow is not None:
            raise InputError(f"{case.label}: its {overflow} overflows float64; qkv check "
                             "compares finite results only (the protocol carries no infinity)")
        with working_on(case.label):
            chapters.check_resolved(case)
            overflow = chapters.overflowing_near(case)
        if overflow is not None:
            raise InputError(f"{case.label}: its {overflow} overflows float64 once the "
                             f"gradient check moves its input and weights by the step "
                             f"{case.step:g}; qkv check compares finite results only")
    return [chapter, *given, precision_case(chapter.step, chapter.tolerance),
            contrast_case(chapter.step, chapter.tolerance),
            *random_cases(count, seed, chapter.step, chapter.tolerance)]


def refuse_unfit(paths: tuple[Path, ...], cases: list[Case], operations: tuple[str, ...],
                 tolerance: float) -> None:
    """Raise :class:`InputError` for a given fixture on which qkv's own engine fails a
    family of a kind the implementation offers with its backward
    (:func:`~qkvcli.check.given.engine_fails`): a correct implementation fails it too."""
    from qkvcli.check.given import engine_fails
    from qkvcli.render.check import failure_detail

    by_label = {case.label: case for case in cases}
    for path, _ in given_files(paths):
        case = by_label[label_of(path)]
        with working_on(case.label):
            failed = engine_fails(case, operations, tolerance)
        if failed is not None:
            mode = (failed.fixture or "").removeprefix(case.label).strip()
            fix = ("change $.gradcheck.step or $.gradcheck.tolerance to fit its numbers"
                   if failed.family.endswith("gradcheck") else "change its numbers")
            raise InputError(f"{case.label}: qkv's own engine fails {failed.family} on it"
                             f"{' (' + mode + ')' if mode else ''}: {failure_detail(failed)}; "
                             f"a correct implementation would too: {fix}")


def unjudged(paths: tuple[Path, ...], cases: list[Case], operations: tuple[str, ...],
             implementation: str) -> list[str]:
    """The stderr lines for the given fixtures no kind the implementation offers takes
    (:func:`~qkvcli.check.session.judges`): one per fixture found in a directory given,
    which may hold several chapters' fixtures. Raises :class:`InputError` for such a
    fixture named on its own, or a directory none of whose fixtures is judged: a fixture
    the user gives is judged or refused, never dropped."""
    from qkvcli.check.kinds import KINDS
    from qkvcli.check.session import judges

    offered = [kind for kind in KINDS if kind.forward in operations]
    by_label = {case.label: case for case in cases}
    said: list[str] = []
    judged: dict[Path, bool] = {}
    for path, folder in given_files(paths):
        case = by_label[label_of(path)]
        taken = any(judges(kind, case) for kind in offered)
        if folder is not None:
            judged[folder] = judged.get(folder, False) or taken
        if taken:
            continue
        wanted = tuple(kind.forward for kind in KINDS if judges(kind, case))
        line = (f"{case.label}: a fixture of {' or '.join(wanted)}, which {implementation} "
                f"does not define (it defines: {', '.join(operations) or 'nothing'})")
        if folder is None:
            raise InputError(line)
        said.append(f"qkv: not checked: {line}")
    for folder, taken in judged.items():
        if not taken:
            raise InputError(f"{label_of(folder)}: none of its fixtures is of an operation "
                             f"{implementation} defines ({', '.join(operations) or 'none'})")
    return said


def given_case(path: Path, max_elements: int) -> Case:
    """The fixture at ``path`` as a case labelled as the user named it: a chapter 26
    fixture as it is, a later chapter's the case its chapter judges it by, read by that
    chapter's reader (:func:`~qkvcli.cli.chapter.load`). Raises the readers' errors and
    the check's refusals, naming the file."""
    from qkvcli.check.cases import fixture_case
    from qkvcli.cli.chapter import ChapterFixture
    from qkvcli.cli.chapter import load as load_chapter
    from qkvcli.gradcheck.settings import evaluation_budget

    label = label_of(path)
    with working_on(label):
        # The chapter's own gradient check (every coordinate, unless the fixture samples)
        # is not what the check runs: the check's is counted by _check_gradcheck_size.
        with evaluation_budget(UNBOUNDED):
            loaded = load_chapter(path, max_elements, None)
        if isinstance(loaded, ChapterFixture):
            return _chapter_case(label, loaded)
        return fixture_case(label, loaded)


def _chapter_case(label: str, loaded: Any) -> Case:
    """A later chapter's fixture (a :class:`~qkvcli.cli.chapter.ChapterFixture`) as the
    case its chapter's session judges (:func:`~qkvcli.check.given.chapter_case`); chapters
    27 and 28 as a head's case (their operands through
    :func:`~qkvcli.check.given.operand_case`, their ``X`` and weights as they are)."""
    from qkvcli.check.cases import Case
    from qkvcli.check.given import chapter_case, operand_case

    number, fixture = loaded.chapter.number, loaded.fixture
    if number in (27, 28):
        from qkvcli.chapters.head import causal_suffix

        f = fixture if number == 27 else fixture.inputs
        if f.source == "projections":
            case = Case(label, f.x, f.weights, (f.upstream,) * 3, f.step, f.tolerance,
                        f.samples)
        else:
            case = operand_case(f.query, f.key, f.value, f.upstream, f.step, f.tolerance,
                                f.samples, causal_suffix(fixture) if number == 28 else None)
        return chapter_case(number, label, case)
    if number == 29:
        from qkvcli.chapters import ch29

        return chapter_case(number, label, ch29.judge_session(fixture).cases[0],
                            fixture.table.layout)
    if number == 30:
        from qkvcli.chapters import ch30

        return chapter_case(number, label, ch30.judge_session(fixture).cases[0],
                            fixture.spec.table.layout)
    from qkvcli.chapters import ch37

    case = ch37.judge_session(fixture).cases[0]._replace(capacity=fixture.capacity)
    return chapter_case(number, label, case, fixture.spec.table.layout)


@click.command()
@click.argument("arguments", nargs=-1, metavar="[IMPL] [FIXTURE]...")
@click.option("--command", "command", metavar="'PROGRAM ARGS...'", default=None,
              help="Check a program in any language speaking the JSON lines protocol "
              "(docs/protocol.md) instead of a Python IMPL.")
@click.option("--random", "random_count", type=click.IntRange(0, MAX_RANDOM), default=DEFAULT_RANDOM,
              show_default=True, metavar="N",
              help="Seeded random fixtures to add (the first four: d_model != d_head, "
              "batch 0, tokens 0, d_head 1).")
@click.option("--seed", type=click.IntRange(0, (1 << 64) - 1), default=DEFAULT_SEED,
              show_default=True, help="SplitMix64 seed of the random fixtures.")
@click.option("--tolerance", type=float, default=DEFAULT_TOLERANCE, show_default=True,
              callback=_finite(True),
              help="Largest scaled error |a-b|/max(1,|a|,|b|) against qkv's engine.")
@click.option("--timeout", type=float, default=DEFAULT_TIMEOUT, show_default=True,
              callback=_finite(False, MAX_TIMEOUT), metavar="SECONDS",
              help="Seconds to wait for each call (and for a Python IMPL's import).")
@format_option(help="rich: a card per family; text: one line per family; json: "
               "everything; auto: rich on a terminal, text otherwise.")
@output_option
@click.option("--junit", type=OutputPath(), default=None,
              help="Also write a JUnit XML report to FILE (one test case per family).")
@click.option("--save-failures", "save_failures", type=OutputFolder(), default=None,
              metavar="DIR", help="Write each failing fixture to DIR as a qkv fixture "
              "(NAME.json: qkv run / qkv check replay it) and the requests that replay it "
              "for a --command program (NAME.requests.jsonl: PROGRAM < FILE).")
@click.option("--max-elements", type=click.IntRange(min=1), default=CHECK_MAX_ELEMENTS,
              show_default=True, help="Refuse a FIXTURE whose tensors together hold more "
              "than this many elements (they are sent in one call).")
@view_options
@html_option
def check(arguments: tuple[str, ...], command: str | None, random_count: int, seed: int,
          tolerance: float, timeout: float, fmt: str, output: Path | None,
          junit: Path | None, save_failures: Path | None, max_elements: int,
          view: ViewSettings, html: Path | None = None) -> None:
    """Check YOUR Q/K/V implementation against the chapter's evidence.

    \b
    qkv check my_qkv.py [FIXTURE]...    a Python file or an importable module
    qkv check --command "./my_qkv" [FIXTURE]...
                                        any language, JSON lines on stdin/stdout

    IMPL defines forward(x, w_query, w_key, w_value) -> (query, key, value) and
    optionally backward(x, w_query, w_key, w_value, grad_query, grad_key, grad_value)
    -> (grad_input, grad_w_query, grad_w_key, grad_w_value), on float64 NumPy arrays;
    and/or an attention head: head_forward(x, w_query, w_key, w_value, causal) ->
    (scores, weights, output) and head_backward(..., causal, grad_output) -> the same
    four gradients; and/or RoPE, rope(x, base, offset) and rope_reverse, and multi-head
    attention, mha_forward(x, w_query, w_key, w_value, w_output, heads, causal, rope,
    base, offset) and mha_backward (docs/protocol.md). It runs in a process of its own
    (--timeout bounds each call).
    The chapter fixture, each FIXTURE, a precision fixture (values exact neither in 6
    decimals nor in float32) and --random N seeded fixtures are checked. A FIXTURE of
    chapter 29, 30 or 37 (or 27 and 28, a head's) is a case of the kind it describes:
    RoPE, multi-head attention, the KV cache. A FIXTURE of operations IMPL does not
    define is a usage error; in a directory such fixtures are skipped, each said.
    Exit status: 0 when every applicable family passed, 1 when one failed, 2 for usage
    errors and implementations that cannot be loaded or started, 130 on Ctrl-C.
    """
    if command is None and not arguments:
        raise click.UsageError("give IMPL (a .py file or module) or --command 'PROGRAM ARGS'")
    _argument_paths(arguments)
    spec = None if command is not None else arguments[0]
    paths = tuple(Path(arg) for arg in (arguments if command is not None else arguments[1:]))
    reads: list[Path | str] = [*implementation_sources(spec, command),
                               *(path for path, _ in given_files(paths))]
    check_outputs([output, junit, *(path for _, path in view.exports), html], reads)
    cases = build_cases(paths, random_count, seed, max_elements)
    if save_failures is not None:  # every file it may write, before any work, as -o's
        _make_folder(save_failures)  # made now: a folder it cannot make stops no run late
        saved = _saved_paths(save_failures, cases)  # not named by the user: regular files only
        check_outputs([output, junit, *(path for _, path in view.exports), html, *saved], reads,
                      regular_only=saved)
    result = _run(spec, command, cases, tolerance, timeout, view, paths)
    fmt = show(result, fmt, view, output, title="qkv check", precision=FIGURE_PRECISION,
               pieces=lambda shown: render_pieces(result, shown), html=html,
               page=_page_facts(result, cases, spec, command))
    if junit is not None:
        from qkvcli.render.check import family_detail, uncounted

        checks = tuple((c.name, c.passed, family_detail(c)) for c in result.checks)
        skipped = frozenset(c.name for c in result.checks if uncounted(c))
        write_file(junit, junit_xml([Outcome(result.implementation, checks,
                                             not_applicable=skipped, report="check")]))
    if save_failures is not None:
        _save_failures(save_failures, result, cases)
    if not result.command and result.stderr.strip():
        # What a Python implementation printed (its stdout too) is its debugging output.
        click.echo(result.stderr.rstrip(), err=True)
    if not result.passed:
        failed = [c for c in result.checks if not c.passed and c.outcome != "not-run"]
        click.echo(f"qkv: FAILED: {', '.join(c.name for c in failed)}", err=True)
        if result.command and result.stderr and (fmt != "rich" or output is not None):
            click.echo("qkv: the program's stderr:\n" + result.stderr.rstrip(), err=True)
        raise SystemExit(EXIT_FAILED)


def _file_name(number: int, label: str) -> str:
    """``03-random-1-2-3-5-3``: the case's place and label, in characters every system takes."""
    safe = "".join(c if c.isascii() and c.isalnum() else "-" for c in label).strip("-")
    while "--" in safe:
        safe = safe.replace("--", "-")
    return f"{number:02d}-{safe}"


def _saved_paths(folder: Path, cases: list[Case]) -> list[Path]:
    """Every file ``--save-failures`` may write for ``cases`` (none while ``folder`` is missing)."""
    from qkvcli.check.given import replayable

    if not folder.is_dir():
        return []
    names = [_file_name(number, case.label) for number, case in enumerate(cases, 1)
             if replayable(case)]
    return [folder / f"{name}{suffix}" for name in names for suffix in (".json", ".requests.jsonl")]
def _page_facts(result: CheckResult, cases: list[Case], spec: str | None,
                command: str | None) -> dict[str, Any]:
    """What the explorer page says to replay each failing fixture: the file name
    ``--save-failures`` gives it, how the command line names the implementation, and the
    fixtures (a finding's expected value opens the engine's terms on its own)."""
    import shlex

    from qkvcli.check.given import replayable

    failing = set(result.failing_fixtures())
    replay = {case.label: _file_name(number, case.label)
              for number, case in enumerate(cases, 1)
              if case.label in failing and replayable(case)}
    named = f"--command {shlex.quote(command)}" if command is not None else shlex.quote(
        spec or "IMPL")
    return {"replay": replay, "spec": named, "cases": cases}


def _make_folder(folder: Path) -> None:
    """Make ``--save-failures``'s folder if missing; one line naming the option if not."""
    try:
        folder.mkdir(exist_ok=True)
    except OSError as error:
        raise InputError(f"{shown(folder)}: cannot create the directory "
                         f"({error.strerror or error})") from None


def _save_failures(folder: Path, result: CheckResult, cases: list[Case]) -> None:
    """Write each failing case's fixture and replay requests into ``folder`` (made if
    missing); a later chapter's fixture, replayed from its own file, is said, not written."""
    import json

    from qkvcli.check.given import replayable
    from qkvcli.render.check import failing_fixture, replay_requests

    failing = set(result.failing_fixtures())
    _make_folder(folder)
    # Numbered over every case, as _saved_paths checked them up front and the page names
    # them: a case that was not checked must not shift the names onto another output.
    for number, case in enumerate(cases, 1):
        if case.label not in failing or case.label not in result.fixtures:
            continue
        if not replayable(case):  # its own file replays it; a copy could lose its tensors' paths
            click.echo(f"qkv: --save-failures: nothing written for {case.label}: a later "
                       "chapter's fixture, which qkv check replays from its own file", err=True)
            continue
        name = _file_name(number, case.label)
        write_file(folder / f"{name}.json", json.dumps(failing_fixture(case), indent=1) + "\n",
                   regular_only=True)
        write_file(folder / f"{name}.requests.jsonl", replay_requests(case, result.operations),
                   regular_only=True)


def check_progress(view: ViewSettings) -> Any:
    """A progress reporter when stderr is an interactive terminal, else ``None``: the
    families done, the one running and the calls so far
    (:class:`~qkvcli.cli.console.CheckProgress`)."""
    from qkvcli.cli.console import CheckProgress, stderr_console

    console = stderr_console(view)
    return None if console is None else CheckProgress(console)


def _run(spec: str | None, command: str | None, cases: list[Case], tolerance: float,
         timeout: float, view: ViewSettings, paths: tuple[Path, ...] = ()) -> CheckResult:
    """Every family on ``cases``: a ``--command`` program or a Python IMPL's runner (both
    always ended), with a progress bar on a terminal; once it has said what it offers, a
    given fixture it cannot be judged on is refused or, from a directory, said
    (:func:`unjudged`), and one its gradient check cannot judge refused
    (:func:`refuse_unfit`)."""
    from qkvcli.check.run import run_checks

    progress = check_progress(view)
    with contextlib.ExitStack() as stack:
        if command is not None:
            from qkvcli.protocol.client import CommandClient

            client = stack.enter_context(CommandClient(command, timeout))
        else:
            from qkvcli.protocol.runner import start_python

            assert spec is not None
            client = stack.enter_context(start_python(spec, timeout))
        operations = tuple(client.operations)
        for line in unjudged(paths, cases, operations, client.label):
            click.echo(line, err=True)
        refuse_unfit(paths, cases, operations, tolerance)
        if progress is not None:
            stack.enter_context(progress)
        return run_checks(client, cases, tolerance, progress)
