"""Immutable records that cost almost nothing to define.

A frozen ``dataclass`` compiles five or six methods with ``exec`` when its class is
created (about a millisecond each on a small machine), and a ``NamedTuple`` about a
third of that; the evidence defines over a dozen such types, which would add tens of
milliseconds to every ``qkv`` start-up. :class:`Record` gives the same behaviour
(positional or keyword construction with defaults, immutability, value equality,
hashing, a readable ``repr``) from one shared set of methods, so a new record type is
as cheap as a plain class.

Declare fields as annotated class attributes, in order, defaults last::

    class Check(Record):
        name: str
        passed: bool
        detail: str = ""

A ``__post_init__(self)`` method, if defined, runs after construction (it may store
derived, non-field values in ``self.__dict__``); ``record._replace(**changes)`` builds
a new record with some fields changed, running ``__post_init__`` again.
"""

from __future__ import annotations

import inspect  # already loaded by click; costs nothing here
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:

    def dataclass_transform(**_: Any) -> Any:
        return lambda cls: cls


R = TypeVar("R", bound="Record")


class FrozenRecordError(AttributeError):
    """Raised on assignment to (or deletion of) a field of a :class:`Record`."""


@dataclass_transform(frozen_default=True)
class Record:
    """Base class of immutable records; see the module docstring."""

    __record_fields__: ClassVar[tuple[str, ...]] = ()
    __record_defaults__: ClassVar[dict[str, Any]] = {}
    __record_post_init__: ClassVar[Any] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        annotations = inspect.get_annotations(cls)  # this class's own, as strings
        names = tuple(
            name for name, hint in annotations.items() if not str(hint).startswith("ClassVar")
        )
        cls.__record_fields__ = names
        cls.__record_defaults__ = {name: cls.__dict__[name] for name in names
                                   if name in cls.__dict__}
        cls.__record_post_init__ = getattr(cls, "__post_init__", None)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        fields = self.__record_fields__
        if not kwargs and len(args) == len(fields):  # the common case, kept cheap
            object.__setattr__(self, "__dict__", dict(zip(fields, args, strict=True)))
        else:
            self.__bind(args, kwargs)
        if self.__record_post_init__ is not None:
            self.__record_post_init__()

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
