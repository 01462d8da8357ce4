"""The rows the later chapters' text and trace tables share, built from the facts' names.

A chapter's line that is ``key=label:value ...`` over facts of one section is written as
the section and the names (:func:`fields`); a run of tensors as their names
(:func:`tensor_lines`); a line per index, or per tuple of indices, as its key and parts
(:func:`per`). The gradient check's counts, tolerance and verdict (:func:`gradcheck`), a
report's opening lines (:func:`opening`), a refused input's published facts
(:func:`refused_facts`) and a run of tensor facts of the same axes (:func:`tensors`) are
one builder each.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from qkvcli.core.results import Refusal
from qkvcli.render.chapters.entries import checked
from qkvcli.render.facts import Fact, Part, tensor
from qkvcli.render.numbers import fmt_bool, fmt_float

Table = tuple[tuple[str, Any], ...]
"""A text's or a trace's lines (:func:`~qkvcli.render.facts.report`)."""


def fields(section: str, names: str, spell: Callable[[Any], str] | None = None,
           **spelt: Callable[[Any], str]) -> tuple[Part, ...]:
    """A part per word of ``names`` (``label`` or ``label=fact``, the fact of ``section``
    the line labels otherwise), said by ``spelt[label]``, else by ``spell``, else by its kind."""
    found: list[Part] = []
    for word in names.split():
        label, _, name = word.partition("=")
        said = spelt.get(label, spell)
        found.append((label, f"{section}.{name or label}", *((said,) if said else ())))
    return tuple(found)


def tensor_lines(names: str, trace: bool = False, spell: Callable[[Any], str] | None = None) -> Table:
    """One line per tensor of ``names`` (its key in capitals in a ``trace``), said whole
    or by ``spell`` (:func:`~qkvcli.render.numbers.fmt_vector`: its values alone)."""
    return tuple((name.upper() if trace else name,
                  (f"tensors.{name}", spell) if spell else f"tensors.{name}") for name in names.split())


def per(key: str | Callable[[Any], str], indices: Iterable[Any],
        parts: Iterable[tuple[Any, ...]]) -> Table:
    """One line per index (a number or a tuple): ``key`` (or a function of the index), then
    each part at it: ``(label, path, spell)`` with ``spell(value, index)``, ``(label, f)``
    with ``f(evidence, index)``, or ``(label, int)``: the index's item, said as a number."""
    def at(part: tuple[Any, ...], i: Any) -> Part:
        label, path, *spell = part
        if isinstance(path, int):
            return (label, lambda e: i[path])
        if not isinstance(path, str):
            return (label, lambda e: path(e, i))
        return (label, path, lambda value: spell[0](value, i))

    listed = tuple(parts)
    return tuple((key(i) if callable(key) else key, tuple(at(part, i) for part in listed))
                 for i in indices)


def gradcheck(names: Iterable[str], tolerance: str = "tolerance",
              passed: str = "passed") -> tuple[Part, ...]:
    """The gradient check's ``name_checks`` counts, then its tolerance and its verdict
    under the labels ``tolerance`` and ``passed``."""
    return (*checked(tuple(names)),
            (tolerance, lambda e: fmt_float(e.gradcheck.tolerance)),
            (passed, lambda e: fmt_bool(e.gradcheck.passed)))


def opening(name: str, prediction: str | None = None) -> Table:
    """A report's first lines: ``chapter=`` and, where the chapter states one, ``prediction=``."""
    return (("chapter", lambda e: name),
            *((("prediction", lambda e: prediction),) if prediction is not None else ()))


def tensors(axes: tuple[str, ...], given: bool = False, **named: Any) -> dict[str, Fact]:
    """Each of ``named``'s arrays as a tensor fact of ``axes`` (``given``: by the fixture)."""
    return {name: tensor(value, axes, given=given) for name, value in named.items()}


def refused_facts(case: Refusal, names: Mapping[str, str | None] | None = None) -> dict[str, Any]:
    """A refusal's published facts: its expected error's fields, each under the name
    ``names`` gives ``Error.field`` (``None``: not published) or its own."""
    named = [((names or {}).get(f"{case.expected}.{key}", key), value) for key, value in case.fields]
    return {name: value for name, value in named if name is not None}
