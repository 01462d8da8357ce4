"""Refusing a gradient check before it starts: a ``--step`` that overflows, too many evaluations.

Both depend on the fixture and the command line together, so they run once both are
known; errors name the file being worked on (``ctx.meta``, see :mod:`qkvcli.cli.group`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from qkvcli.cli.group import CURRENT_FILE


def check_gradcheck_budget(
    given_step: float | None, max_evaluations: int | None, step: float, arrays: Sequence[Any],
    mode: str, samples: int | None, directions: int,
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
        check_evaluations(mode, samples, directions, [a.size for a in arrays], limit)
    except QkvError as error:
        ctx = click.get_current_context(silent=True)
        label = ctx.meta.get(CURRENT_FILE) if ctx is not None else None
        raise (error.in_file(label) if label else error) from None
