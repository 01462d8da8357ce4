"""Limits of the command line: the rich view's width, and refusing a gradient check
before it starts (a ``--step`` that overflows, too many evaluations).

The gradient-check limits depend on the fixture and the command line together, so they
run once both are known; errors name the file being worked on (``ctx.meta``, see
:mod:`qkvcli.cli.group`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from qkvcli.cli.group import CURRENT_FILE

MAX_WIDTH = 1000
"""The widest rich view ``--width`` may ask for: layout work and output grow with it."""


def environment_width() -> int | None:
    """:data:`MAX_WIDTH` when ``COLUMNS`` asks for more (a layout that wide would not end)."""
    import os

    try:
        return MAX_WIDTH if int(os.environ.get("COLUMNS", "0")) > MAX_WIDTH else None
    except ValueError:
        return None


def check_gradcheck_budget(
    given_step: float | None, max_evaluations: int | None, step: float, arrays: Sequence[Any],
    mode: str, samples: int | None, directions: int, has_fast: bool = True,
) -> None:
    """Refuse ``step`` (when ``--step`` gave it) if ``x + 2*step`` overflows beside ``arrays``,
    and a check of ``arrays`` over ``max_evaluations`` (default
    :data:`~qkvcli.gradcheck.settings.MAX_EVALUATIONS`) evaluations. Raises a
    :class:`~qkvcli.core.errors.QkvError` naming the current file.
    """
    from qkvcli.core.errors import QkvError
    from qkvcli.fixtures.budget import check_step_fits
    from qkvcli.gradcheck.settings import MAX_EVALUATIONS, check_evaluations

    limit = MAX_EVALUATIONS if max_evaluations is None else max_evaluations
    try:
        if given_step is not None:
            check_step_fits(step, arrays, "--step")
        check_evaluations(mode, samples, directions, [a.size for a in arrays], limit, has_fast)
    except QkvError as error:
        ctx = click.get_current_context(silent=True)
        label = ctx.meta.get(CURRENT_FILE) if ctx is not None else None
        raise (error.in_file(label) if label else error) from None
