"""A report's evidence as one facts value, and the views that need no layout of their own.

A facts value is an ordered mapping from each published name to a :class:`Fact`: a
scalar, a tensor with its axes named, a flat list of values, a shape, a verdict, a
section of further facts, entries (a list of sections: the shape probes, the refused
inputs) or a record the JSON publishes through a function (a gradient check). Each fact
says whether the fixture gave it or qkv computed it. A report builds its facts once:
:func:`json_of` is the one walk that makes them a JSON document (:func:`json_pieces`
streams a large tensor's values, :func:`tensor_json` and :func:`dumps` spell a tensor and
the document), and a report's text and trace are layout tables of (key, parts) over the
same facts (:func:`pieces`, :func:`report`), a tensor written as it streams per the
``--tensors`` policy; :func:`columns` lays out an aligned table. A value that is no
:class:`Fact` (a check entry) is published as it is.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from qkvcli.core.record import Record
from qkvcli.render.numbers import (
    Line,
    fmt_bool,
    fmt_float,
    fmt_shape,
    iter_vector,
    json_float,
    stream_lines,
)
from qkvcli.render.tensors import TensorSummary, shows_values, summarise

if TYPE_CHECKING:
    import numpy.typing as npt  # annotations only: importing it costs start-up

KINDS = ("scalar", "tensor", "values", "shape", "verdict", "section", "entries", "record")
"""Every kind of fact, each with its one JSON form and its one spelling in text."""


class Fact(Record):
    """One published fact: its ``kind`` (one of :data:`KINDS`), its ``value``, the names
    of a tensor's ``axes``, whether the fixture ``given`` it (else qkv computed it), and a
    record's ``published`` form (a function of the record, called only by the JSON), and
    the tensors ``policy`` a tensor always takes whatever is asked (``none``: a packed
    layer's split views, the same numbers as the packed weight, given as digests)."""

    kind: str
    value: Any
    axes: tuple[str, ...] = ()
    given: bool = False
    published: Callable[[Any], Any] | None = None
    policy: str | None = None


Facts = Mapping[str, Any]
"""Published names to facts (or to values published as they are), in report order."""


def scalar(value: Any) -> Fact:
    """A number, a name or a count (a float is a JSON number, or a non-finite's spelling)."""
    return Fact("scalar", value)


def tensor(value: Any, axes: tuple[str, ...] = (), *, given: bool = False,
           policy: str | None = None) -> Fact:
    """A tensor with its ``axes`` named (``{"shape", "values"}`` in JSON), shown per
    ``policy`` whatever the report's (``None``: as the report's)."""
    return Fact("tensor", value, axes, given, policy=policy)


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


def record(value: Any, published: Callable[[Any], Any]) -> Fact:
    """A record the text reads field by field and the JSON publishes as ``published(value)``
    (a gradient check: its thousands of coordinates are built only for the JSON)."""
    return Fact("record", value, published=published)


def tensor_json(values: npt.ArrayLike, tensors: str = "full") -> dict[str, Any]:
    """``{"shape", "values"}``, or per the ``tensors`` policy the summary form
    ``{"shape", "count", "summary": {...}}`` (``none``: ``{"shape", "count", "sha256"}``)."""
    array = np.asarray(values, dtype=np.float64)
    if not shows_values(array.size, tensors):
        return summary_json(summarise(array), tensors)
    flat = array.reshape(-1).tolist()
    if not np.isfinite(array).all():
        flat = [json_float(v) for v in flat]
    return {"shape": list(array.shape), "values": flat}


def summary_json(s: TensorSummary, tensors: str) -> dict[str, Any]:
    """A summarised tensor: see ``docs/tensors.md`` for the schema of both forms."""
    if tensors == "none":
        return {"shape": list(s.shape), "count": s.count, "sha256": s.sha256}
    return {"shape": list(s.shape), "count": s.count, "summary": {
        "head": [json_float(v) for v in s.head], "tail": [json_float(v) for v in s.tail],
        **{key: json_float(getattr(s, field)) for key, field in (
            ("min", "minimum"), ("max", "maximum"), ("mean", "mean"), ("l2_norm", "l2_norm"))},
        "sha256": s.sha256}}


def dumps(document: Any) -> str:
    """Deterministic JSON text (declared key order, two-space indent, trailing newline)."""
    return json.dumps(document, indent=2, allow_nan=False) + "\n"


def json_of(fact: Any, tensors: str = "full", streamed: list[Any] | None = None) -> Any:
    """``fact`` (a :class:`Fact`, a mapping of facts, or a value published as it is) as
    the value a JSON document holds, each tensor per the ``tensors`` policy
    (:mod:`qkvcli.render.tensors`); given a list ``streamed``, each tensor shown whole is
    appended to it and its values left as a :func:`~qkvcli.render.stream.marker`."""
    if isinstance(fact, Mapping):
        return {name: json_of(value, tensors, streamed) for name, value in fact.items()}
    if not isinstance(fact, Fact):
        return fact
    kind, value = fact.kind, fact.value
    if kind == "scalar":
        return json_float(value) if isinstance(value, float) else value
    if kind == "tensor" and streamed is not None and (fact.policy or tensors) == "full":
        from qkvcli.render.stream import marker

        streamed.append(value)
        return {"shape": list(np.shape(value)), "values": marker(len(streamed) - 1)}
    if kind == "tensor":
        return tensor_json(value, fact.policy or tensors)
    if kind == "values":
        return tensor_json(value)["values"]
    if kind == "shape":
        return None if value is None else list(value)
    if kind == "section":
        return json_of(value, tensors, streamed)
    if kind == "entries":
        return [json_of(item, tensors, streamed) for item in value]
    if kind == "record" and fact.published is not None:
        return fact.published(value)
    return value  # a verdict


def json_pieces(head: Mapping[str, Any], facts: Facts, tensors: str = "summary") -> Iterator[str]:
    """The JSON document ``head`` then ``facts``, in pieces: the bytes of
    ``dumps({**head, **json_of(facts, tensors)})``, but a tensor shown in ``full`` is
    streamed (:func:`~qkvcli.render.stream.stream_document`), never held as one list of
    Python floats."""
    from qkvcli.render.stream import stream_document

    streamed: list[Any] = []
    document = dumps({**head, **json_of(facts, tensors, streamed if tensors == "full" else None)})
    return stream_document(document, streamed) if streamed else iter([document])


def find(facts: Facts, path: str) -> Any:
    """The fact at ``path`` (``tensors.query``: names joined by dots)."""
    found: Any = facts
    for name in path.split("."):
        found = found[name]
        found = found.value if isinstance(found, Fact) and found.kind == "section" else found
    return found


Spellings = Mapping[str, Callable[[Any], str]]
"""A chapter's own spelling of some kinds of fact (``tensor``, ``values``, ``scalar``)."""
Part = tuple[Any, ...]
"""One piece of a line: its label (``""``: none) and the path of its fact, said by its
kind or by a third item, a function of the fact's value; or its label and a function of
the evidence, for what the text says but the JSON does not publish. A function may give
a tuple of pieces, a tensor among them (:func:`bare`), to be written as it streams."""
Table = tuple[tuple[str, Any], ...]
"""A text's or a trace's lines: each key and its parts (one part alone: a path, a path
and its spelling, or a function of the evidence; a path ``section.*``: every fact of the
section, in order, each labelled by its name)."""


def bare(value: Any) -> tuple[Any, ...]:
    """A tensor's values alone, ``[..]``, written as they stream (per the tensors policy)."""
    return (value,)


def _spelt(fact: Any, spellings: Spellings | None) -> tuple[Any, ...]:
    """``fact`` as text pieces in its kind's spelling (see :func:`said`), a tensor (and a
    list of values) left whole, to be written as it streams."""
    if not isinstance(fact, Fact):
        return (str(fact),)
    kind, value = fact.kind, fact.value
    if spellings and kind in spellings:
        return (spellings[kind](value),)
    if kind == "tensor":
        shown = value if fact.policy is None else "".join(iter_vector(value, fact.policy))
        return (f"shape:{fmt_shape(np.shape(value))} values:", shown)
    if kind == "values":
        return (value,)
    if kind == "shape":
        return ("rejected" if value is None else fmt_shape(value),)
    if kind == "verdict":
        return (fmt_bool(value),)
    return (fmt_float(value) if kind == "scalar" and isinstance(value, float) else str(value),)


def said(fact: Any, spellings: Spellings | None = None) -> str:
    """``fact`` in the text's spelling of its kind: a tensor ``shape:[..] values:[..]``,
    values ``[..]``, a shape ``[..]`` (``rejected`` for none), a verdict ``true`` or
    ``false``, a float in fixed point; anything else as ``str`` gives it. A chapter's
    ``spellings`` replace those of the kinds they name (a function of the value)."""
    return "".join(stream_lines([_spelt(fact, spellings)], "full"))[:-1]


def lines(facts: Facts, evidence: Any, table: Table, between: str, labelled: str, start: str,
          spellings: Spellings | None = None) -> Iterator[Line]:
    """Each row of ``table`` as one line of pieces: its key and ``start`` (none for the key
    ``""``: a comment, a verdict), then its parts joined by ``between``, each ``label``
    ``labelled`` value (a text line's ``input:[..]``, a trace line's ``|input=[..]``)."""
    for key, parts in table:
        if not (isinstance(parts, tuple) and parts and isinstance(parts[0], tuple)):
            parts = (("", *(parts if isinstance(parts, tuple) else (parts,))),)
        pieces: list[Any] = [f"{key}{start}"] if key else []
        for index, (label, path, *spell) in enumerate(
                every for part in parts for every in _expanded(facts, part)):
            if not isinstance(path, str):
                found = path(evidence)
            else:
                fact = find(facts, path)
                found = (spell[0](fact.value if isinstance(fact, Fact) else fact) if spell
                         else _spelt(fact, spellings))
            pieces += [between] if index else []
            pieces += [f"{label}{labelled}"] if label else []
            pieces += found if isinstance(found, tuple) else (str(found),)
        yield tuple(pieces)


def _expanded(facts: Facts, part: Part) -> tuple[Part, ...]:
    """A part whose path is ``section.*``: each fact of the section, labelled by its name."""
    path = part[1]
    if not (isinstance(path, str) and path.endswith(".*")):
        return (part,)
    return tuple((name, f"{path[:-2]}.{name}") for name in find(facts, path[:-2]))


def pieces(facts: Facts, evidence: Any, table: Table, trace: bool = False,
           spellings: Spellings | None = None, tensors: str = "full",
           precision: int = 6) -> Iterator[str]:
    """``table`` laid out as a text report (``key=label:value label:value``) or as a
    ``trace`` (``KEY|label=value|label=value``), in pieces, each line ending with a
    newline, each tensor written as it streams per the ``tensors`` policy."""
    between, labelled, start = ("|", "=", "|") if trace else (" ", ":", "=")
    return stream_lines(lines(facts, evidence, table, between, labelled, start, spellings),
                        tensors, precision)


def report(facts: Facts, evidence: Any, table: Table, trace: bool = False,
           spellings: Spellings | None = None) -> str:
    """:func:`pieces`, whole, every tensor in full."""
    return "".join(pieces(facts, evidence, table, trace, spellings))


def columns(rows: Sequence[Sequence[str]], right: Collection[int] = ()) -> list[str]:
    """``rows`` of cells as aligned columns two spaces apart (the columns in ``right``
    right-aligned, the rest left-aligned), no line ending in a space."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
                      for i, cell in enumerate(row)).rstrip() for row in rows]
