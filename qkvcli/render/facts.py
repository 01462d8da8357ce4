"""A report's evidence as one facts value, and the views that need no layout of their own.

A facts value is an ordered mapping from each published name to a :class:`Fact`: a
scalar, a tensor with its axes named, a flat list of values, a shape, a verdict, a
section of further facts, or entries (a list of sections: the shape probes, the refused
inputs). Each fact says whether the fixture gave it or qkv computed it. A report builds
its facts once; :func:`json_of` is the one walk that makes them a JSON document, and
:func:`said` and :func:`line` give the text and trace the spelling of each kind, so a
chapter's text and trace are tables of (key, fact, format) over the same facts.
A value that is no :class:`Fact` (a check entry, a gradient check already in its
published form) is published as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from qkvcli.core.record import Record
from qkvcli.render.numbers import fmt_bool, fmt_float, fmt_shape, fmt_vector

KINDS = ("scalar", "tensor", "values", "shape", "verdict", "section", "entries")
"""Every kind of fact, each with its one JSON form and its one spelling in text."""


class Fact(Record):
    """One published fact: its ``kind`` (one of :data:`KINDS`), its ``value``, the names
    of a tensor's ``axes``, and whether the fixture ``given`` it (else qkv computed it)."""

    kind: str
    value: Any
    axes: tuple[str, ...] = ()
    given: bool = False


Facts = Mapping[str, Any]
"""Published names to facts (or to values published as they are), in report order."""


def scalar(value: Any) -> Fact:
    """A number, a name or a count (a float is a JSON number, or a non-finite's spelling)."""
    return Fact("scalar", value)


def tensor(value: Any, axes: tuple[str, ...], *, given: bool = False) -> Fact:
    """A tensor with its ``axes`` named (``{"shape", "values"}`` in JSON)."""
    return Fact("tensor", value, axes, given)


def values(value: Any) -> Fact:
    """A tensor published as its flat values alone."""
    return Fact("values", value)


def shape(value: tuple[int, ...] | None) -> Fact:
    """A shape, or ``None`` for a call that was refused."""
    return Fact("shape", value)


def verdict(value: bool) -> Fact:
    """Whether a claim held."""
    return Fact("verdict", bool(value))


def section(**facts: Any) -> Fact:
    """Further facts under one name, in the order given."""
    return Fact("section", facts)


def entries(sections: Sequence[Facts]) -> Fact:
    """A list of sections (one per probe, per refused input)."""
    return Fact("entries", sections)


def json_of(fact: Any) -> Any:
    """``fact`` (a :class:`Fact`, a mapping of facts, or a value published as it is) as
    the value a JSON document holds."""
    from qkvcli.render.document import json_float, tensor_json

    if isinstance(fact, Mapping):
        return {name: json_of(value) for name, value in fact.items()}
    if not isinstance(fact, Fact):
        return fact
    kind, value = fact.kind, fact.value
    if kind == "scalar":
        return json_float(value) if isinstance(value, float) else value
    if kind == "tensor":
        return tensor_json(value)
    if kind == "values":
        return tensor_json(value)["values"]
    if kind == "shape":
        return None if value is None else list(value)
    if kind == "section":
        return json_of(value)
    if kind == "entries":
        return [json_of(item) for item in value]
    return value  # a verdict


def find(facts: Facts, path: str) -> Any:
    """The fact at ``path`` (``tensors.query``: names joined by dots)."""
    found: Any = facts
    for name in path.split("."):
        found = found[name]
        found = found.value if isinstance(found, Fact) and found.kind == "section" else found
    return found


def vector(value: Any) -> str:
    """``[v,...]`` in fixed point, six decimals, ``-0.0`` written as ``0.000000``."""
    return fmt_vector(np.asarray(value, dtype=np.float64) + 0.0)


def fixed(value: float, decimals: int = 6) -> str:
    """One number in fixed point, ``-0.0`` written as ``0.000000``."""
    return fmt_float(value + 0.0, decimals)


Spellings = Mapping[str, Callable[[Any], str]]
"""A chapter's own spelling of some kinds of fact (``tensor``, ``values``, ``scalar``)."""


def said(fact: Any, spellings: Spellings | None = None) -> str:
    """``fact`` in the text's spelling of its kind: a tensor ``shape:[..] values:[..]``,
    values ``[..]``, a shape ``[..]`` (``rejected`` for none), a verdict ``true`` or
    ``false``, a float in fixed point; anything else as ``str`` gives it. A chapter's
    ``spellings`` replace those of the kinds they name (a function of the value)."""
    if not isinstance(fact, Fact):
        return str(fact)
    if spellings and fact.kind in spellings:
        spelt: str = spellings[fact.kind](fact.value)
        return spelt
    if fact.kind == "tensor":
        array = np.asarray(fact.value)
        return f"shape:{fmt_shape(array.shape)} values:{vector(array)}"
    if fact.kind == "values":
        return vector(fact.value)
    if fact.kind == "shape":
        return "rejected" if fact.value is None else fmt_shape(fact.value)
    if fact.kind == "verdict":
        return fmt_bool(fact.value)
    if fact.kind == "scalar" and isinstance(fact.value, float):
        return fixed(fact.value)
    return str(fact.value)


Part = tuple[Any, ...]
"""One piece of a line: its label (``""``: none) and the path of its fact, said by its
kind or by a third item, a function of the fact's value; or its label and a function of
the evidence, for what the text says but the JSON does not publish."""


def line(facts: Facts, evidence: Any, parts: tuple[Part, ...], between: str,
         labelled: str, spellings: Spellings | None = None) -> str:
    """``parts`` of ``facts`` joined by ``between``, each ``label`` ``labelled`` value
    (a text line's ``input:[..] rotated:[..]``, a trace line's ``|input=[..]``)."""
    def spelt(part: Part) -> str:
        label, path, *spell = part
        if not isinstance(path, str):
            found = path(evidence)
        else:
            fact = find(facts, path)
            found = (spell[0](fact.value if isinstance(fact, Fact) else fact) if spell
                     else said(fact, spellings))
        return f"{label}{labelled}{found}" if label else found

    return between.join(map(spelt, parts))


def _expanded(facts: Facts, part: Part) -> tuple[Part, ...]:
    """A part whose path is ``section.*``: each fact of the section, labelled by its name."""
    path = part[1]
    if not (isinstance(path, str) and path.endswith(".*")):
        return (part,)
    return tuple((name, f"{path[:-2]}.{name}") for name in find(facts, path[:-2]))


def layout(facts: Facts, evidence: Any, table: tuple[tuple[str, Any], ...], between: str,
           labelled: str, start: str, spellings: Spellings | None = None) -> list[str]:
    """Each row of ``table`` as one line: its key, ``start``, then its parts (one part
    alone: a path, a path and its spelling, or a function of the evidence; a path
    ``section.*``: every fact of the section, in order)."""
    lines = []
    for key, parts in table:
        one = parts if isinstance(parts, tuple) and parts and isinstance(parts[0], tuple) else (
            ("", *(parts if isinstance(parts, tuple) else (parts,))),)
        one = tuple(every for part in one for every in _expanded(facts, part))
        lines.append(f"{key}{start}{line(facts, evidence, one, between, labelled, spellings)}")
    return lines


def report(facts: Facts, evidence: Any, table: tuple[tuple[str, Any], ...], trace: bool = False,
           spellings: Spellings | None = None) -> str:
    """``table`` laid out as a text report (``key=label:value label:value``) or as a
    ``trace`` (``KEY|label=value|label=value``), each line ending with a newline."""
    between, labelled, start = ("|", "=", "|") if trace else (" ", ":", "=")
    lines = layout(facts, evidence, table, between, labelled, start, spellings)
    return "".join(f"{line}\n" for line in lines)
