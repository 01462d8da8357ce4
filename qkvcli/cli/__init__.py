"""The ``qkv`` command line: the only layer that touches argv, files, exit codes and the terminal."""

from __future__ import annotations

import gc
import sys

import click

from qkvcli import __version__
from qkvcli.cli.group import QkvGroup

# Each command's module is imported only when that command runs (or help lists them
# all): building a module's click options costs start-up that other commands need not pay.
COMMANDS = {
    "run": "qkvcli.cli.evidence",
    "report": "qkvcli.cli.evidence",
    "gradcheck": "qkvcli.cli.gradcheck",
    "init": "qkvcli.cli.authoring",
    "validate": "qkvcli.cli.validate",
    "schema": "qkvcli.cli.authoring",
    "attend": "qkvcli.cli.attend",
    "variance": "qkvcli.cli.learn",
    "quiz": "qkvcli.cli.learn",
    "check": "qkvcli.cli.check",
    "inspect": "qkvcli.cli.inspect",
}
LISTING = (
    ("run [FIXTURE]...", "run every check and show the evidence: the chapter's figure on a "
     "terminal, text in a pipe; several fixtures or a DIR/: a summary table"),
    ("report [FIXTURE]", "the same evidence as text, trace, json or rich"),
    ("gradcheck [FIXTURE]", "per-coordinate central-difference check of the gradients"),
    ("attend [FIXTURE]", "one attention head or a real model's layer, forward and reverse"),
    ("check IMPL [FIXTURE]...", "the chapter's evidence for YOUR implementation (a .py "
     "file, a module, or --command PROGRAM)"),
    ("init -o FILE [--seed N]", "write a starter fixture with seeded weights"),
    ("validate FIXTURE...", "report every problem without running anything"),
    ("schema", "print the fixture format's JSON Schema"),
    ("inspect FILE.safetensors", "list a checkpoint's tensors, mark attention projections"),
    ("variance", "why scores are scaled by 1/sqrt(d_k)"),
    ("quiz [FIXTURE]", "the chapter's nine prediction questions"),
)
"""The help's list of commands, each once, in the order a newcomer meets them: its usage
and what it does (:meth:`QkvGroup.format_commands` wraps them to the terminal)."""


@click.group(cls=QkvGroup, lazy_commands=COMMANDS, listing=LISTING,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="qkv", message="%(prog)s %(version)s")
def main() -> None:
    """Evidence for self-attention, chapter by chapter: the query/key/value projections
    (chapter 26, the default), self-attention (27), causal masking (28), RoPE (29) and
    multi-head attention (30).

    Without FIXTURE the bundled chapter fixture is used; --chapter N picks another
    chapter's. qkv COMMAND -h shows a command's options.
    """


GC_THRESHOLD = 50_000
"""Allocations between young-generation collections in the ``qkv`` program (CPython: 700)."""


def entry() -> None:
    """The ``qkv`` program (console script and ``python -m qkvcli``): :func:`main`, then exit.

    Two start-up measures for a program that runs once and exits, both about the cyclic
    garbage collector (reference counting, which frees nearly everything, is untouched):

    - while it runs, the young generation is collected every :data:`GC_THRESHOLD`
      allocations instead of every 700, so importing NumPy and qkv's modules does not
      set off dozens of collections (the practice of mypy and others);
    - before the interpreter exits, every object is moved out of the collector's reach
      (:func:`gc.freeze`), so its final collections do not walk the hundreds of
      thousands of objects NumPy and click made.

    Together they save about 8% of the instructions of a chapter report (ARCHITECTURE.md,
    "Start-up"). Nothing else about running or exiting changes: files are closed and
    flushed, ``atexit`` handlers run. Only the one-shot program does this: :func:`main`
    called in a long-lived process (tests, library users) leaves the collector alone.
    """
    gc.set_threshold(GC_THRESHOLD)
    if computes(sys.argv[1:]):
        import numpy  # noqa: F401 - imported here, at a shallow stack: see computes()
    try:
        main()
    finally:
        gc.freeze()


def computes(args: list[str]) -> bool:
    """Whether ``qkv ARGS`` will import NumPy (anything but bare ``qkv``, help and version).

    :func:`entry` then imports NumPy first, before click's call chain. CPython 3.11 keeps
    its frames in 16 KiB chunks; NumPy's import makes many nested calls (its typing
    module), and started deep inside click a run of them can straddle a chunk boundary,
    so that every call maps and unmaps a chunk: about 1,900 ``mmap``/``munmap`` pairs,
    20-30% of a chapter report's wall time, all in the kernel (callgrind's instruction
    count does not see it; ``strace -c`` does). Imported at the top it costs what it costs
    the baseline.
    """
    return bool(args) and not any(arg in ("-h", "--help", "--version") for arg in args)
