"""``--tensors full|summary|none``: how much of each tensor ``run`` and ``report`` print.

Kept in a module of its own so the option is one decorator and one call in the commands.
The policy itself lives in :mod:`qkvcli.render.tensors`; ``--full`` (the rich view's
flag) also means ``full`` when ``--tensors`` is not given.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])
META_KEY = "qkv.tensors"
POLICIES = ("full", "summary", "none")  # as qkvcli.render.tensors.POLICIES


def tensors_option(func: F) -> F:
    """Add ``--tensors`` and keep its value aside for :func:`tensor_policy`."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        click.get_current_context().meta[META_KEY] = kwargs.pop("tensors")
        return func(*args, **kwargs)

    option = click.option(
        "--tensors", type=click.Choice(POLICIES), default=None,
        help="full: every value; summary (default): every value up to 4096 elements, "
        "above that shape, count, head/tail, min/max/mean/L2 norm and a sha256 digest; "
        "none: shape, count and digest only. --full means full.",
    )
    return option(wrapper)  # type: ignore[return-value]


def tensor_policy(full: bool) -> str:
    """The policy asked for: ``--tensors``, else ``full`` with ``--full``, else ``summary``."""
    chosen = click.get_current_context().meta.get(META_KEY)
    if chosen is not None:
        return str(chosen)
    return "full" if full else "summary"


def render_pieces(evidence: object, fmt: str, policy: str) -> Iterator[str]:
    """The report in ``fmt`` (text, trace or json) as pieces, tensors per ``policy``."""
    from qkvcli.evidence.records import Evidence

    assert isinstance(evidence, Evidence)
    if fmt == "trace":
        from qkvcli.render.report import iter_trace

        return iter_trace(evidence, policy)
    if fmt == "json":
        from qkvcli.render.report import iter_json

        return iter_json(evidence, policy)
    from qkvcli.render.report import iter_text

    return iter_text(evidence, policy)
