"""The implementation under test: the interface every kind shares, and Python ones loaded by name.

A Python implementation is a ``.py`` file or an importable module defining
``forward(x, w_query, w_key, w_value) -> (query, key, value)`` and optionally
``backward(x, w_query, w_key, w_value, grad_query, grad_key, grad_value) ->
(grad_input, grad_w_query, grad_w_key, grad_w_value)``. Results may be anything
``numpy.asarray`` takes; tensors with a ``detach`` method (torch) are detached first.
While it runs, what it prints goes to stderr (qkv's report owns stdout).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any, Protocol

import numpy as np

from qkvcli.conformance.errors import (
    BadResult,
    ImplementationImportFailed,
    ImplementationNotFound,
    MissingForward,
    Rejected,
)
from qkvcli.core.arrays import Array
from qkvcli.core.names import BRANCHES, GRADIENTS
from qkvcli.core.text import printable
from qkvcli.reading import limits
from qkvcli.reading.files import InputFileError, read_limited

# What forward and backward give, in order, as the protocol and the reports name them.
FORWARD_NAMES = BRANCHES
BACKWARD_NAMES = GRADIENTS


class Implementation(Protocol):
    """What the families call. ``forward``/``backward`` raise :class:`CallFailed` subclasses."""

    label: str
    has_backward: bool
    is_command: bool

    def forward(self, x: Array, w_query: Array, w_key: Array, w_value: Array) -> tuple[Array, ...]:
        ...

    def backward(self, x: Array, w_query: Array, w_key: Array, w_value: Array,
                 grad_query: Array, grad_key: Array, grad_value: Array) -> tuple[Array, ...]:
        ...

    def finish(self) -> None:
        """End the conversation cleanly (a ``--command`` program says bye and exits)."""


def as_tensors(operation: str, result: Any, names: tuple[str, ...]) -> tuple[Array, ...]:
    """``result`` as one float64 array per name. Raises :class:`BadResult`."""
    expected = f"({', '.join(names)})"
    if not isinstance(result, (tuple, list)):
        raise BadResult(operation, f"{operation} returned {type(result).__name__}, "
                        f"expected {expected}")
    if len(result) != len(names):
        raise BadResult(operation, f"{operation} returned {len(result)} values, "
                        f"expected {expected}")
    arrays = []
    for name, value in zip(names, result, strict=True):
        if hasattr(value, "detach"):  # torch tensors, with or without requires_grad
            value = value.detach()
            value = value.cpu() if hasattr(value, "cpu") else value
        try:
            array = np.asarray(value)
            if array.dtype.kind not in "fiu":
                raise TypeError(f"dtype {array.dtype}")
            arrays.append(np.array(array, dtype=np.float64))
        except (TypeError, ValueError) as error:
            raise BadResult(operation, f"{operation}'s {name} is not a numeric tensor "
                            f"({error})") from None
    return tuple(arrays)


class PythonImplementation:
    """``forward``/``backward`` functions of a loaded module, called with fresh arrays."""

    is_command = False

    def __init__(self, label: str, forward: Callable[..., Any],
                 backward: Callable[..., Any] | None) -> None:
        self.label = label
        self._forward = forward
        self._backward = backward
        self.has_backward = backward is not None

    def _call(self, operation: str, function: Callable[..., Any], args: tuple[Array, ...],
              names: tuple[str, ...]) -> tuple[Array, ...]:
        try:
            # Debugging prints go to stderr, so they never spoil qkv's report on stdout.
            with contextlib.redirect_stdout(sys.stderr):
                result = function(*args)
        except (Exception, SystemExit) as error:  # any exception is a rejection, as the
            # interface says; sys.exit() in a forward must not end qkv with its status
            raise Rejected(operation, f"{type(error).__name__}: {error}") from None
        return as_tensors(operation, result, names)

    def forward(self, x: Array, w_query: Array, w_key: Array, w_value: Array) -> tuple[Array, ...]:
        return self._call("forward", self._forward, (x, w_query, w_key, w_value), FORWARD_NAMES)

    def backward(self, x: Array, w_query: Array, w_key: Array, w_value: Array,
                 grad_query: Array, grad_key: Array, grad_value: Array) -> tuple[Array, ...]:
        assert self._backward is not None
        args = (x, w_query, w_key, w_value, grad_query, grad_key, grad_value)
        return self._call("backward", self._backward, args, BACKWARD_NAMES)

    def finish(self) -> None:
        return None


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
    except (Exception, SystemExit) as error:
        raise ImplementationImportFailed(spec, f"{type(error).__name__}: {error}") from None
    forward = getattr(module, "forward", None)
    if not callable(forward):
        raise MissingForward(spec)
    backward = getattr(module, "backward", None)
    return PythonImplementation(printable(spec, None), forward,
                                backward if callable(backward) else None)
