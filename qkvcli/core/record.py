"""Immutable records that cost almost nothing to define: the one record idiom of qkv.

Every plain data type in qkv (evidence, gradient checks, fixtures, the engine's outputs)
is a :class:`Record`. It gives what a frozen ``dataclass`` gives (positional or keyword
construction with defaults, immutability, value equality, hashing, a readable ``repr``,
fields inherited from base records) from one shared set of methods, so a new record type
is as cheap to define as a plain class.

Why not ``@dataclass(frozen=True)``: on Python 3.11 a frozen dataclass compiles six
methods with ``exec`` when its class is created, and ``qkv report`` and ``qkv run
FIXTURE`` define 19 record types before their first line of output. Measured with
callgrind (one BLAS thread, compiled bytecode; ``benchmarks/bench.py`` counts the same
way), turning every one of them into a frozen dataclass took a chapter report from
457.8M to 536.1M instructions (+78M, about 4M a class, plus 3.6M to import
``dataclasses``), against the 438.1M of ``python -c "import numpy, click, json"``:
from 1.045x to 1.224x, past the 1.15x the start-up budget allows. So records stay.

Declare fields as annotated class attributes, in order, defaults last::

    class Check(Record):
        name: str
        passed: bool
        detail: str = ""

A subclass of a record starts with its bases' fields, in order, then adds its own, as a
dataclass does (a field declared again keeps its place; its default is the one given in
the new declaration, none if none is given).
``ClassVar`` annotations are not fields. A field without a default after one with a
default is refused when the class is defined (``TypeError``).

``record._replace(**changes)`` builds a new record with some fields changed. A record
holds its fields and nothing else: what can be derived from them is a property or a
function, computed when asked.

Records are not sequences. A record that callers unpack (``q, k, v = projections.forward(x)``)
defines ``__iter__`` itself, over its fields in order (see :mod:`qkvcli.core.outputs`).
"""

from __future__ import annotations

import inspect  # already loaded by click; costs nothing here
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, get_origin

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:

    def dataclass_transform(**_: Any) -> Any:
        return lambda cls: cls


R = TypeVar("R", bound="Record")


def is_class_var(hint: Any) -> bool:
    """Whether an annotation (a string under ``from __future__ import annotations``, or an
    object) declares a ``ClassVar``, which is not a field."""
    if isinstance(hint, str):
        return hint.startswith(("ClassVar", "typing.ClassVar"))
    return hint is ClassVar or get_origin(hint) is ClassVar


class FrozenRecordError(AttributeError):
    """Raised on assignment to (or deletion of) a field of a :class:`Record`."""


@dataclass_transform(frozen_default=True)
class Record:
    """Base class of immutable records; see the module docstring."""

    __record_fields__: ClassVar[tuple[str, ...]] = ()
    __record_defaults__: ClassVar[dict[str, Any]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        defaults: dict[str, Any] = {}
        fields: list[str] = []
        # Bases first, farthest first, as dataclasses collects them: each record base
        # has already gathered its own bases' fields.
        for base in reversed(cls.__mro__[1:]):
            if "__record_fields__" in base.__dict__:
                for name in base.__dict__["__record_fields__"]:
                    if name not in fields:
                        fields.append(name)
                defaults.update(base.__dict__["__record_defaults__"])
        for name, hint in inspect.get_annotations(cls).items():  # strings, or objects
            if is_class_var(hint):
                continue
            if name not in fields:
                fields.append(name)
            if name in cls.__dict__:
                defaults[name] = cls.__dict__[name]
            else:
                defaults.pop(name, None)  # declared again without a default
        seen_default = ""
        for name in fields:
            if name in defaults:
                seen_default = seen_default or name
            elif seen_default:
                raise TypeError(f"{cls.__name__}: field {name!r} without a default follows "
                                f"{seen_default!r}, which has one")
        cls.__record_fields__ = tuple(fields)
        cls.__record_defaults__ = defaults

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        fields = self.__record_fields__
        if not kwargs and len(args) == len(fields):  # the common case, kept cheap
            object.__setattr__(self, "__dict__", dict(zip(fields, args, strict=True)))
        else:
            self.__bind(args, kwargs)

    def __bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        fields = self.__record_fields__
        if len(args) > len(fields):
            raise TypeError(
                f"{type(self).__name__} takes {len(fields)} fields, got {len(args)} positional"
            )
        values = dict(zip(fields, args, strict=False))
        for name, value in kwargs.items():
            if name not in fields:
                raise TypeError(f"{type(self).__name__} has no field {name!r}")
            if name in values:
                raise TypeError(f"{type(self).__name__} got field {name!r} twice")
            values[name] = value
        if len(values) < len(fields):
            defaults = self.__record_defaults__
            for name in fields:
                if name not in values:
                    if name not in defaults:
                        raise TypeError(f"{type(self).__name__} is missing field {name!r}")
                    values[name] = defaults[name]
        object.__setattr__(self, "__dict__", values)

    def _replace(self: R, **changes: Any) -> R:
        """A new record of the same type with ``changes`` applied to its fields."""
        values = {name: self.__dict__[name] for name in self.__record_fields__}
        for name in changes:
            if name not in values:
                raise TypeError(f"{type(self).__name__} has no field {name!r}")
        values.update(changes)
        return type(self)(**values)

    def _values(self) -> tuple[Any, ...]:
        return tuple(self.__dict__[name] for name in self.__record_fields__)

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenRecordError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenRecordError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, Record)
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash((self.__class__, self._values()))

    def __repr__(self) -> str:
        body = ", ".join(f"{name}={self.__dict__[name]!r}" for name in self.__record_fields__)
        return f"{type(self).__name__}({body})"
