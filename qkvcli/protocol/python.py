"""A Python implementation loaded in process: the interface the families call, and the loader.

A Python implementation is a ``.py`` file or an importable module defining
``forward(x, w_query, w_key, w_value) -> (query, key, value)`` and optionally
``backward(x, w_query, w_key, w_value, grad_query, grad_key, grad_value) ->
(grad_input, grad_w_query, grad_w_key, grad_w_value)``, or the head's, RoPE's and
multi-head attention's operations (:data:`~qkvcli.protocol.wire.OPERATIONS`). Results may
be anything ``numpy.asarray`` takes; tensors with a ``detach`` method (torch) are
detached first.

``qkv check`` never imports it itself: :mod:`qkvcli.protocol.runner` loads it here, in
a child process qkv owns.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any, Protocol

import numpy as np

from qkvcli.core.arrays import Array
from qkvcli.core.names import BRANCHES, GRADIENTS
from qkvcli.core.text import printable
from qkvcli.protocol.errors import (
    BadResult,
    ImplementationImportFailed,
    ImplementationNotFound,
    MissingForward,
    Rejected,
)
from qkvcli.protocol.wire import ENGINE_OPERATIONS, FIRST_OPERATIONS, OPERATIONS, PAIRS
from qkvcli.reading import limits
from qkvcli.reading.files import InputFileError, read_limited

# What forward and backward give, in order, as the protocol and the reports name them.
FORWARD_NAMES = BRANCHES
BACKWARD_NAMES = GRADIENTS
class Implementation(Protocol):
    """What the families call. Each operation raises :class:`CallFailed` subclasses.

    ``operations`` lists those it provides (of :data:`OPERATIONS`); ``has_backward``
    says whether ``backward`` is one of them.
    """

    label: str
    has_backward: bool
    is_command: bool
    operations: tuple[str, ...]

    def call(self, operation: str, args: tuple[Any, ...]) -> tuple[Array, ...]:
        """``operation`` on ``args`` (in :data:`OPERATIONS` order): its result tensors."""

    def finish(self) -> None:
        """End the conversation cleanly (a ``--command`` program says bye and exits)."""

    def take_changes(self) -> list[tuple[str, str, str, str]]:
        """What the last call changed in its arguments, seen where it ran:
        ``(argument, coordinate, before, after)`` each (empty when nothing, or unknown)."""


def said(error: BaseException) -> str:
    """``"ValueError: message"``; an exception whose own ``str`` raises gives its type only."""
    try:
        text = str(error)
    except BaseException:  # the implementation's exception class, not qkv's
        text = ""
    name = type(error).__name__
    return f"{name}: {text}" if text else name


def as_tensors(operation: str, result: Any, names: tuple[str, ...],
               copy: bool = True) -> tuple[Array, ...]:
    """``result`` as one float64 array per name (without ``copy``, a float64 array as it
    is: results only qkv's engine made, which nothing else holds). Raises
    :class:`BadResult`."""
    expected = f"({', '.join(names)})"
    if len(names) == 1:  # one tensor: itself, or alone in a tuple
        result = result if isinstance(result, tuple) and len(result) == 1 else (result,)
    if not isinstance(result, (tuple, list)):
        raise BadResult(operation, f"{operation} returned {type(result).__name__}, "
                        f"expected {expected}")
    try:
        count = len(result)
    except BaseException as error:  # a list subclass's own __len__
        raise BadResult(operation, f"{operation}'s result has no length "
                        f"({type(error).__name__})") from None
    if count != len(names):
        raise BadResult(operation, f"{operation} returned {count} values, "
                        f"expected {expected}")
    arrays = []
    try:
        values = list(result)
    except BaseException as error:  # a tuple subclass's own __iter__
        raise BadResult(operation, f"{operation}'s result cannot be read "
                        f"({type(error).__name__})") from None
    for name, value in zip(names, values, strict=False):
        try:
            if hasattr(value, "detach"):  # torch tensors, with or without requires_grad
                value = value.detach()
                value = value.cpu() if hasattr(value, "cpu") else value
            array = np.asarray(value)
            if array.dtype.kind not in "fiu":
                raise TypeError(f"dtype {array.dtype}")
            arrays.append(np.array(array, dtype=np.float64) if copy
                          else np.asarray(array, dtype=np.float64))
        except BaseException as error:  # the result's own __array__ may raise anything
            raise BadResult(operation, f"{operation}'s {name} is not a numeric tensor "
                            f"({said(error)})") from None
    return tuple(arrays)


class PythonImplementation:
    """The functions of a loaded module (``forward``, ``backward``, ``head_forward``,
    ``head_backward``, those it defines), called with fresh arrays."""

    is_command = False
    fresh = False  # its results are new arrays nothing else holds (qkv's engine): not copied

    def __init__(self, label: str, forward: Callable[..., Any] | None,
                 backward: Callable[..., Any] | None = None,
                 head_forward: Callable[..., Any] | None = None,
                 head_backward: Callable[..., Any] | None = None,
                 **others: Callable[..., Any] | None) -> None:
        self.label = label
        self._forward = forward
        self._backward = backward
        found = {"forward": forward, "backward": backward, "head_forward": head_forward,
                 "head_backward": head_backward, **others}  # others: rope, mha_forward...
        self._functions = {name: f for name, f in found.items() if f is not None}
        self.operations = tuple(self._functions)
        self.has_backward = backward is not None

    def call(self, operation: str, args: tuple[Any, ...]) -> tuple[Array, ...]:
        names = (OPERATIONS.get(operation) or ENGINE_OPERATIONS[operation])[1]
        return self._call(operation, self._functions[operation], args, names)

    def _call(self, operation: str, function: Callable[..., Any], args: tuple[Any, ...],
              names: tuple[str, ...]) -> tuple[Array, ...]:
        try:
            # Its prints go where the process sends stdout: the child's entry
            # (qkvcli.cli.child) sends them to stderr, never to the protocol's pipe.
            result = function(*args)
        except BaseException as error:  # any exception is a rejection, as
            # the interface says; sys.exit() or GeneratorExit in a forward too
            raise Rejected(operation, said(error), error) from None
        return as_tensors(operation, result, names, copy=not self.fresh)

    def forward(self, x: Array, w_query: Array, w_key: Array, w_value: Array) -> tuple[Array, ...]:
        assert self._forward is not None
        return self._call("forward", self._forward, (x, w_query, w_key, w_value), FORWARD_NAMES)

    def backward(self, x: Array, w_query: Array, w_key: Array, w_value: Array,
                 grad_query: Array, grad_key: Array, grad_value: Array) -> tuple[Array, ...]:
        assert self._backward is not None
        args = (x, w_query, w_key, w_value, grad_query, grad_key, grad_value)
        return self._call("backward", self._backward, args, BACKWARD_NAMES)

    def finish(self) -> None:
        return None

    def take_changes(self) -> list[tuple[str, str, str, str]]:
        return []  # in process the session compares its own copies


def is_path(spec: str) -> bool:
    """Whether ``spec`` names a file (ends in ``.py`` or has a directory part), not a module."""
    return spec.endswith(".py") or "/" in spec or os.sep in spec


def _import_file(spec: str) -> ModuleType:
    """Run the ``.py`` file ``spec`` as a module. Its source is read through the one reader
    (a regular file, never a blocking open, at most the byte limit)."""
    path = os.path.abspath(spec)
    try:
        source = read_limited(path, limits.MAX_FILE_BYTES, "Python")
    except InputFileError as error:
        raise ImplementationNotFound(spec, error.problem) from None
    name = "qkv_check_" + "".join(c if c.isascii() and c.isalnum() else "_"
                                  for c in os.path.basename(spec))
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None:
        raise ImplementationNotFound(spec, "not a Python file")
    module = importlib.util.module_from_spec(module_spec)
    # The file's own directory first, so it can import the modules beside it.
    sys.path.insert(0, os.path.dirname(path))
    sys.modules[name] = module
    exec(compile(source, path, "exec"), module.__dict__)  # the code the user asked to check
    return module


def is_module_name(spec: str) -> bool:
    """Whether ``spec`` is a dotted name of Python identifiers (``pkg.my_qkv``)."""
    return all(part.isidentifier() for part in spec.split("."))


def load_python(spec: str) -> PythonImplementation:
    """Import ``spec`` (a ``.py`` path or a module name) and find its functions.

    Raises :class:`ImplementationNotFound`, :class:`ImplementationImportFailed` (the
    code raised while importing) or :class:`MissingForward`.
    """
    if not is_path(spec) and not is_module_name(spec):
        raise ImplementationNotFound(spec, "not a .py file (no such file) nor a module name "
                                     "(dotted Python identifiers)")
    try:
        if is_path(spec):
            module = _import_file(spec)
        else:
            module = importlib.import_module(spec)
    except ImplementationNotFound:
        raise
    except ModuleNotFoundError as error:
        if error.name is not None and spec.startswith(error.name):
            raise ImplementationNotFound(spec, "no such module") from None
        raise ImplementationImportFailed(spec, f"{type(error).__name__}: {error}") from None
    except BaseException as error:  # whatever the import raised
        raise ImplementationImportFailed(spec, said(error)) from None
    found = {}
    for name in OPERATIONS:
        function = getattr(module, name, None)
        found[name] = function if callable(function) else None
    if all(found[name] is None for name in FIRST_OPERATIONS):
        raise MissingForward(spec)
    for later, first in PAIRS.items():
        if found[first] is None:
            found[later] = None  # a backward is judged with its forward only
    others = {name: found[name] for name in OPERATIONS if name not in (
        "forward", "backward", "head_forward", "head_backward")}
    return PythonImplementation(printable(spec, None), found["forward"], found["backward"],
                                found["head_forward"], found["head_backward"], **others)
