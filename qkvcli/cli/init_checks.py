"""What ``qkv init`` must not write: a fixture that its own ``run`` or ``attend`` would refuse.

Policy for ``--max-elements`` above run's default (``DEFAULT_MAX_ELEMENTS``): init
writes the fixture, since the larger limit was asked for, and warns on stderr naming the
``--max-elements`` value ``run`` and ``attend`` will need. A fixture over the reader's
byte limit (``MAX_FILE_BYTES``) cannot be read with any option, so init refuses it and
points to ``--generate`` and ``--npy``. Paths init writes follow the reading rule
(:func:`~qkvcli.fixtures.files.relative_path`): relative, no ``..``, no NUL.
"""

from __future__ import annotations

import click

from qkvcli.cli.group import InputError

MIN_BYTES_PER_VALUE = 4
"""No written value takes fewer bytes than this (``0.0,``): a sure lower bound of the text."""
LARGE_HINT = "write large fixtures with --generate or --npy DIR"


def warn_run_limit(counts: dict[str, int]) -> None:
    """Warn when the largest of ``counts`` (tensors and the projections, by label) is over
    the default ``--max-elements`` of ``run`` and ``attend``, naming the value they need."""
    from qkvcli.fixtures.limits import DEFAULT_MAX_ELEMENTS

    label, count = max(counts.items(), key=lambda item: item[1])
    if count > DEFAULT_MAX_ELEMENTS:
        click.echo(f"qkv: warning: the {label} has {count} elements, over the default limit "
                   f"{DEFAULT_MAX_ELEMENTS}; run the fixture with --max-elements {count}", err=True)


def check_values_fit(values: int) -> None:
    """Refuse up front a written-out fixture of ``values`` numbers that is surely over the
    reader's byte limit (before the text is built)."""
    from qkvcli.fixtures import limits

    if values * MIN_BYTES_PER_VALUE > limits.MAX_FILE_BYTES:
        raise InputError(f"{values} values written out would be more than {limits.MAX_FILE_BYTES} "
                         f"bytes, the limit of a fixture file; {LARGE_HINT}")


def check_text_fits(text: str) -> None:
    """Refuse fixture ``text`` over the reader's byte limit (no option raises that limit)."""
    from qkvcli.fixtures import limits

    size = len(text.encode("utf-8"))
    if size > limits.MAX_FILE_BYTES:
        raise InputError(f"the fixture would be {size} bytes, more than {limits.MAX_FILE_BYTES}, "
                         f"the limit of a fixture file; {LARGE_HINT}")


def npy_directory(raw: str) -> str:
    """``--npy DIR`` as the relative POSIX path the fixture will name: absolute paths, ``..``
    and NUL refused, as when reading. Raises :class:`InputError`."""
    from qkvcli.fixtures.files import relative_path
    from qkvcli.fixtures.problems import FixtureError

    try:
        relative = relative_path(raw, "--npy")
    except FixtureError as error:
        raise InputError(str(error)) from None
    shown = relative.as_posix()
    return "" if shown == "." else shown
