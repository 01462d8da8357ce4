"""Several fixtures in one ``qkv run``: a summary table, JUnit XML, and golden-file comparison.

``qkv run a.json b.json dir/`` runs each fixture (a directory means the ``*.json``
files directly inside it, in name order), prints one summary row per fixture and exits
with the worst status: 2 when any fixture was bad input, else 1 when any check failed,
else 0. With ``--jobs N`` the fixtures run in N worker processes; a worker that dies
(killed, out of memory) is a bad-input row naming its fixture, and every other row and
the summary are still printed. ``--junit FILE`` also writes a JUnit XML report (one test suite per fixture,
one test case per check); ``-o FILE`` writes the summary table to FILE (atomically)
instead of printing it. ``qkv run FIXTURE --expect GOLDEN`` compares the rendered
report with a golden file instead of printing it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import closing, contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import click

from qkvcli.cli.group import EXIT_FAILED, EXIT_INPUT, EXIT_OK, InputError, error_line, out_of_memory
from qkvcli.cli.io import check_outputs, label_of, read_text, write_output
from qkvcli.core.record import Record
from qkvcli.render import verdict_line
from qkvcli.render.wrap import wrap_line

F = TypeVar("F", bound=Callable[..., Any])
MIN_RESULT_COLUMN = 30
"""The narrowest result column a long result wraps in; narrower, it goes below its row."""

if TYPE_CHECKING:
    from pathlib import Path

    from qkvcli.cli.options import CheckOverrides


def reject_single_options(golden: Path | None) -> None:
    """``--expect`` takes one fixture; raise :class:`click.UsageError` otherwise.

    (``-o`` is fine with several fixtures: it saves the summary table.)
    """
    if golden is not None:
        raise click.UsageError(
            "--expect takes a single fixture file, not several fixtures, a directory, "
            "or --junit"
        )


def expand_fixtures(paths: Sequence[Path]) -> list[Path]:
    """Each path, with a directory replaced by its ``*.json`` files in name order.

    Raises :class:`InputError` for a directory without any ``*.json`` file. Missing or
    unreadable files are reported later, per fixture.
    """
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            try:
                inside = sorted(
                    child for child in path.iterdir()
                    if child.suffix == ".json" and not child.is_dir()
                )
            except OSError as error:
                raise InputError(f"{path}: cannot list ({error.strerror or error})") from None
            if not inside:
                raise InputError(f"{path}: no *.json fixtures in this directory")
            found.extend(inside)
        else:
            found.append(path)
    return found


class Outcome(Record):
    """One fixture's result: its checks ``(name, passed, detail)``, or the input error.

    ``not_applicable`` names checks that did not count (``qkv check``'s N/A families):
    JUnit reports them as skipped, not passed. ``report`` is the report whose checks
    they are (``run``, a chapter's id, ``check``): JUnit names each by its published
    name (:mod:`qkvcli.render.names`), as the JSON does.
    """

    label: str
    checks: tuple[tuple[str, bool, str], ...] = ()
    error: str | None = None
    not_applicable: frozenset[str] = frozenset()
    report: str = "run"

    @property
    def status(self) -> int:
        if self.error is not None:
            return EXIT_INPUT
        return EXIT_OK if all(passed for _, passed, _ in self.checks) else EXIT_FAILED


def run_one(path: Path | None, max_elements: int, overrides: CheckOverrides) -> Outcome:
    """Load and check one fixture (``None``: the bundled one); an input error is kept."""
    from qkvcli.check.chapter26 import build_evidence
    from qkvcli.cli import chapter as chapters
    from qkvcli.core.errors import QkvError
    from qkvcli.render.wording import check_rows

    label = label_of(path)
    try:
        found = chapters.load(path, max_elements, None)
        if isinstance(found, chapters.ChapterFixture):  # chapters 27-30: their own families
            judged = chapters.build(found, overrides)
            return Outcome(label, tuple((c.name, c.passed, "") for c in judged.checks),
                           report=found.chapter.name)
        fixture = overrides.apply(found)
        evidence = build_evidence(fixture)
    except QkvError as error:
        return Outcome(label, error=error_line(error).removeprefix(f"{label}: "))
    except InputError as error:  # a layer fixture, which only qkv attend runs
        return Outcome(label, error=error.format_message().removeprefix(f"{label}: "))
    except MemoryError:  # this fixture's row says so; the batch goes on with the others
        return Outcome(label, error=out_of_memory(""))
    checks = tuple((c.name, c.passed, c.detail) for c in check_rows(evidence))
    return Outcome(label, checks)


def summary_table(outcomes: Sequence[Outcome], width: int | None = None) -> str:
    """An aligned plain-text table, one row per fixture, and a totals line; with a
    screen ``width``, a long result (an error) wraps at word boundaries under its column."""
    rows = [("fixture", "checks", "result")]
    for outcome in outcomes:
        if outcome.error is not None:
            rows.append((outcome.label, "-", f"ERROR: {outcome.error}"))
            continue
        passed = sum(ok for _, ok, _ in outcome.checks)
        failed = [name for name, ok, _ in outcome.checks if not ok]
        result = "passed" if not failed else "FAILED: " + ", ".join(failed)
        rows.append((outcome.label, f"{passed}/{len(outcome.checks)}", result))
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    column = widths[0] + widths[1] + 4
    lines = []
    for label, counted, result in rows:
        if width is None or column + len(result) <= width or len(result) <= MIN_RESULT_COLUMN:
            lines.append(f"{label:<{widths[0]}}  {counted:<{widths[1]}}  {result}".rstrip())
        elif width - column >= MIN_RESULT_COLUMN:  # wrapped under its column
            first, *more = wrap_line(result, width - column)
            lines.append(f"{label:<{widths[0]}}  {counted:<{widths[1]}}  {first}")
            lines.extend(" " * column + line for line in more)
        else:  # too little room beside the label: on the lines below it
            lines.append(f"{label:<{widths[0]}}  {counted}")
            lines.extend(wrap_line(f"    {result}", width))
    counts = [sum(o.status == s for o in outcomes) for s in (EXIT_OK, EXIT_FAILED, EXIT_INPUT)]
    noun = "fixture" if len(outcomes) == 1 else "fixtures"
    lines.append(
        f"{len(outcomes)} {noun}: {counts[0]} passed, {counts[1]} failed, {counts[2]} bad input"
    )
    checks = [ok for outcome in outcomes for _, ok, _ in outcome.checks]
    lines.append(verdict_line(sum(checks), len(checks), passed_all=counts[0] == len(outcomes),
                              unread=counts[2], fixtures=len(outcomes)))
    if width is not None:
        lines[-2:] = [part for line in lines[-2:] for part in wrap_line(line, width)]
    return "\n".join(lines) + "\n"


def junit_xml(outcomes: Sequence[Outcome]) -> str:
    """A JUnit XML report: one ``testsuite`` per fixture, one ``testcase`` per check.

    A failed check is a ``failure``, a check that did not apply is ``skipped``; a fixture
    that could not be loaded is one ``testcase`` named ``load`` with an ``error``. Each
    check's ``name`` is its published name, the JSON's.
    """
    import xml.etree.ElementTree as ET  # only for --junit: it costs start-up otherwise

    from qkvcli.render.names import published

    root = ET.Element("testsuites", name="qkv")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for outcome in outcomes:
        suite = ET.SubElement(root, "testsuite", name=outcome.label)
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        if outcome.error is not None:
            case = ET.SubElement(suite, "testcase", classname=outcome.label, name="load")
            ET.SubElement(case, "error", message=outcome.error, type="input").text = outcome.error
            counts.update(tests=1, errors=1)
        for name, passed, detail in outcome.checks:
            case = ET.SubElement(suite, "testcase", classname=outcome.label,
                                 name=published(outcome.report, name).name)
            counts["tests"] += 1
            if name in outcome.not_applicable:
                ET.SubElement(case, "skipped", message=detail)
                counts["skipped"] += 1
            elif passed:
                ET.SubElement(case, "system-out").text = detail
            else:
                ET.SubElement(case, "failure", message=detail, type="check").text = detail
                counts["failures"] += 1
        for key, count in counts.items():
            suite.set(key, str(count))
            totals[key] += count
    for key, count in totals.items():
        root.set(key, str(count))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def run_many(
    paths: Sequence[Path], junit: Path | None, max_elements: int, overrides: CheckOverrides,
    jobs: int = 1, output: Path | None = None,
) -> None:
    """Run every fixture, print the summary (or write it to ``output``), write ``junit``;
    exit with the worst status.

    Without ``paths`` (``qkv run --junit FILE``) the bundled fixture is run. With
    ``jobs`` above 1 the fixtures run in a pool of that many worker processes; results
    are taken in the fixtures' order, so the output is the serial run's. Both files are
    written atomically, after every fixture ran, and never over a fixture being read.
    """
    fixtures: list[Path | None] = [*expand_fixtures(paths)] if paths else [None]
    check_outputs([output, junit], fixtures)
    outcomes = []
    with closing(outcomes_of(fixtures, jobs, max_elements, overrides)) as results:
        for outcome in results:  # closed on any exit: no worker outlives the batch
            if outcome.error is not None:
                # Every error that makes the exit status 2 is one line on stderr, as a
                # single fixture's is, whether the table goes to stdout or to -o's file.
                click.echo(f"Error: {outcome.label}: {outcome.error}", err=True)
            outcomes.append(outcome)
    from qkvcli.cli.console import screen_width

    write_output(summary_table(outcomes, None if output else screen_width()), output)
    if junit is not None:
        write_output(junit_xml(outcomes), junit)
    status = max(outcome.status for outcome in outcomes)
    if status != EXIT_OK:
        raise SystemExit(status)


def outcomes_of(
    fixtures: Sequence[Path | None], jobs: int, *settings: Any,
    work: Callable[..., Outcome] | None = None,
) -> Generator[Outcome, None, None]:
    """``work(path, *settings)`` (default :func:`run_one`) of each fixture, in order; in
    ``jobs`` processes.

    Each fixture runs in a worker process of its own, at most ``jobs`` at a time
    (:func:`pooled`); a worker that dies (killed, out of memory) is a bad-input row
    naming its fixture, and every other fixture's row is the one a serial run gives.
    """
    work = work or run_one
    if jobs <= 1 or len(fixtures) <= 1:
        for path in fixtures:
            yield work(path, *settings)
        return
    yield from pooled(work, fixtures, min(jobs, len(fixtures)), settings)


def pooled(work: Callable[..., Outcome], fixtures: Sequence[Path | None], jobs: int,
           settings: tuple[Any, ...]) -> Iterator[Outcome]:
    """``work(path, *settings)`` of each fixture in a process of its own, ``jobs`` at a
    time, yielded in the fixtures' order.

    The workers leave signals to qkv (a Ctrl-C to the terminal's process group reaches
    them too): however this generator ends (its results taken, an exception, a signal
    raised in qkv, closed early), every worker still running is killed and reaped.
    A worker that dies before giving its result is that fixture's row, said as
    :func:`_ending` says, never run again.
    """
    import multiprocessing
    from multiprocessing.connection import wait

    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else None)
    running: dict[int, tuple[Any, Any]] = {}  # index -> (process, receiving end)
    finished: dict[int, Outcome] = {}
    started = given = 0
    try:
        while given < len(fixtures):
            while started < len(fixtures) and len(running) < jobs:
                receiver, sender = context.Pipe(duplex=False)
                process = context.Process(target=_send_outcome,
                                          args=(sender, work, fixtures[started], settings))
                sys.stdout.flush()  # a forked worker must not write out qkv's buffers again
                sys.stderr.flush()
                with _signals_held():  # the worker sets its own dispositions first
                    process.start()
                    running[started] = (process, receiver)  # known before any signal lands
                sender.close()
                started += 1
            if given in finished:
                yield finished.pop(given)
                given += 1
                continue
            ready = set(wait([end for pair in running.values()
                              for end in (pair[1], pair[0].sentinel)]))
            for index, (process, receiver) in list(running.items()):
                if receiver in ready or process.sentinel in ready:
                    finished[index] = _received(process, receiver, fixtures[index])
                    del running[index]
    finally:
        for process, receiver in running.values():
            if process.is_alive():
                process.kill()
            process.join()
            receiver.close()


HELD_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGPIPE")
"""Blocked while a worker is forked, until it has set what each does in it."""


@contextmanager
def _signals_held() -> Iterator[None]:
    """Block :data:`HELD_SIGNALS` in the block (a fork inherits the mask), then restore."""
    import signal

    held = {getattr(signal, name) for name in HELD_SIGNALS if hasattr(signal, name)}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _received(process: Any, receiver: Any, path: Path | None) -> Outcome:
    """The outcome a worker sent (read before it is reaped: a large one fills the pipe),
    or the row saying how the worker ended without one."""
    from qkvcli.reading.files import note_reads

    try:
        outcome, error, reads = receiver.recv()
        note_reads(reads)  # the outputs are checked against the workers' reads too
    except (EOFError, OSError):
        outcome, error = None, None
    finally:
        receiver.close()
        process.join()
    if error is not None:
        raise error  # a bug in qkv, reported as the serial run would (exit 70)
    if outcome is None:
        return Outcome(label_of(path), error=f"its worker process {_ending(process.exitcode)} "
                       "before giving a result (out of memory?)")
    assert isinstance(outcome, Outcome)
    return outcome


def _send_outcome(sender: Any, work: Callable[..., Outcome], path: Path | None,
                  settings: tuple[Any, ...]) -> None:
    import signal

    # A worker is qkv's to end: it ignores the terminal's Ctrl-C (qkv says it and ends
    # the workers) and dies at once of SIGTERM or SIGHUP, as a process that handles none.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for name in ("SIGTERM", "SIGHUP"):
        signal.signal(getattr(signal, name), signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {getattr(signal, name) for name in HELD_SIGNALS
                                               if hasattr(signal, name)})  # held by the fork
    try:
        result: tuple[Outcome | None, BaseException | None] = (work(path, *settings), None)
    except Exception as error:  # sent back and raised in the parent
        result = (None, error)
    from qkvcli.reading.files import files_read

    sender.send((*result, files_read()))
    sender.close()


def _ending(exitcode: int | None) -> str:
    """``"was killed by SIGKILL"`` or ``"exited with status 3"``."""
    if exitcode is not None and exitcode < 0:
        import signal

        try:
            return f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with status {exitcode}"


def golden_diff(text: str, golden: Path) -> str:
    """A unified diff from ``golden``'s content to ``text``; empty when they are equal.

    Raises :class:`InputError` when the golden file cannot be read as UTF-8.
    """
    expected = read_text(golden, "golden")
    if expected == text:
        return ""
    import difflib  # only for --expect

    lines = difflib.unified_diff(
        expected.splitlines(keepends=True), text.splitlines(keepends=True),
        fromfile=str(golden), tofile="actual",
    )
    # A last line without a newline would run into the next header; mark it as diff does.
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                   for line in lines)
