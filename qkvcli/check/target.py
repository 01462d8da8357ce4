"""The implementation under test: the interface every kind shares, and the runner of Python ones.

A Python implementation is a ``.py`` file or an importable module defining
``forward(x, w_query, w_key, w_value) -> (query, key, value)`` and optionally
``backward(x, w_query, w_key, w_value, grad_query, grad_key, grad_value) ->
(grad_input, grad_w_query, grad_w_key, grad_w_value)``. Results may be anything
``numpy.asarray`` takes; tensors with a ``detach`` method (torch) are detached first.

``qkv check`` never imports it: it starts ``python -m qkvcli.check.target IMPL``
(:func:`serve`), a child process qkv owns, which imports the implementation and
answers the ``--command`` protocol of docs/protocol.md on a private copy of its
stdin/stdout. The implementation's own stdout is qkv's stderr pipe, its stdin is
empty; nothing it does (printing, exiting, looping, changing directory, patching
modules, starting threads) reaches qkv except the answers. The runner adds to a
reply what only it can see: ``"bad_result"`` (the call returned something that is not
the tensors).

Purity is judged in qkv's own process, where the implementation cannot reach: each
call's arguments are placed in memory qkv shares with the runner (:class:`Arena`, a
memory file the child maps), the implementation gets arrays over that memory, and
after the reply qkv reads them back and compares them with what it placed. Replacing
the runner's functions or qkv's modules inside the child changes nothing qkv reads.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any, Protocol

import numpy as np

from qkvcli.check.client import CommandClient
from qkvcli.check.errors import (
    BadResult,
    Broken,
    ImplementationImportFailed,
    ImplementationNotFound,
    MissingForward,
    Rejected,
)
from qkvcli.check.wire import FIRST_OPERATIONS, OPERATIONS, PAIRS, SCALARS
from qkvcli.core.arrays import Array
from qkvcli.core.names import BRANCHES, GRADIENTS
from qkvcli.core.text import printable
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


def _scalar(key: str, value: Any) -> Any:
    """A request's scalar field as the Python function takes it (``causal``, ``rope``:
    ``bool``; ``heads``, ``offset``: ``int``; ``base``: ``float``)."""
    kind = SCALARS[key]
    if kind is bool:
        return value is True
    return kind(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def as_tensors(operation: str, result: Any, names: tuple[str, ...]) -> tuple[Array, ...]:
    """``result`` as one float64 array per name. Raises :class:`BadResult`."""
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
            arrays.append(np.array(array, dtype=np.float64))
        except BaseException as error:  # the result's own __array__ may raise anything
            raise BadResult(operation, f"{operation}'s {name} is not a numeric tensor "
                            f"({said(error)})") from None
    return tuple(arrays)


class PythonImplementation:
    """The functions of a loaded module (``forward``, ``backward``, ``head_forward``,
    ``head_backward``, those it defines), called with fresh arrays."""

    is_command = False

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
        return self._call(operation, self._functions[operation], args, OPERATIONS[operation][1])

    def _call(self, operation: str, function: Callable[..., Any], args: tuple[Any, ...],
              names: tuple[str, ...]) -> tuple[Array, ...]:
        try:
            # Debugging prints go to stderr, so they never spoil qkv's report on stdout.
            with contextlib.redirect_stdout(sys.stderr):
                result = function(*args)
        except BaseException as error:  # any exception is a rejection, as
            # the interface says; sys.exit() or GeneratorExit in a forward too
            raise Rejected(operation, said(error)) from None
        return as_tensors(operation, result, names)

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


# --- the runner: a Python implementation in a child process qkv owns ---------------------

LOAD_ERRORS = {"not-found": ImplementationNotFound, "import-failed": ImplementationImportFailed,
               "no-forward": MissingForward}
"""The hello reply's ``"load"`` codes for an implementation that cannot be used."""


def _load_error(spec: str) -> tuple[PythonImplementation | None, dict[str, Any]]:
    """The loaded implementation and its hello reply, or ``None`` and the reply saying why."""
    try:
        implementation = load_python(spec)
    except ImplementationNotFound as error:
        return None, {"error": error.reason, "load": "not-found"}
    except ImplementationImportFailed as error:
        return None, {"error": error.cause, "load": "import-failed"}
    except MissingForward:
        return None, {"error": "no forward", "load": "no-forward"}
    return implementation, {"version": 1, "ops": list(implementation.operations)}


ARENA_FD = "QKV_ARGUMENTS_FD"
"""The environment variable naming the runner's descriptor of the :class:`Arena`."""
ARENA_ALIGN = 64  # bytes: each argument starts on a cache line


class Arena:
    """The arguments of each call, in a memory file qkv and its runner share.

    qkv writes the tensors (:meth:`place`), the runner hands the implementation arrays
    over the same memory (:func:`arena_arguments`), and qkv reads them back after the
    reply (:meth:`changes`): what the implementation changed in place, seen by qkv
    itself. qkv never shrinks the file (a mapping past a shrunk end would fault); if the
    implementation does, what it cut reads as zeros: a change.
    """

    def __init__(self) -> None:
        if hasattr(os, "memfd_create"):
            self.fd = os.memfd_create("qkv-arguments", os.MFD_CLOEXEC)
        else:  # an unlinked temporary file does the same where memory files do not exist
            import tempfile

            fd, path = tempfile.mkstemp(prefix="qkv-arguments-")
            os.unlink(path)
            self.fd = fd
        self.placed: list[tuple[str, Array, int]] = []

    def place(self, tensors: dict[str, Array]) -> dict[str, list[Any]]:
        """Write ``tensors`` into the file; the request's ``"arena"`` field saying where
        (``{key: [offset, shape]}``)."""
        layout: dict[str, list[Any]] = {}
        placed = []
        offset = 0
        for key, value in tensors.items():
            array = np.ascontiguousarray(value, dtype="<f8")
            layout[key] = [offset, [int(dim) for dim in array.shape]]
            placed.append((key, array, offset))
            offset += -(-array.nbytes // ARENA_ALIGN) * ARENA_ALIGN
        if offset > os.fstat(self.fd).st_size:  # the child may have cut it short
            os.ftruncate(self.fd, offset)
        for _, array, start in placed:
            data = array.data.cast("B") if array.size else memoryview(b"")
            written = 0
            while written < len(data):
                written += os.pwrite(self.fd, data[written:], start + written)
        self.placed = placed
        return layout

    def changes(self) -> list[tuple[str, str, str, str]]:
        """``(argument, coordinate, before, after)`` for each argument of the last call
        that is not, bit for bit, what was placed (read back in qkv's own process)."""
        from qkvcli.check.diagnose import first_bit_difference

        found = []
        for key, before, start in self.placed:
            raw = os.pread(self.fd, before.nbytes, start) if before.size else b""
            raw += bytes(before.nbytes - len(raw))  # cut short in the child: zeros, as mapped
            after = np.frombuffer(raw, dtype="<f8").reshape(before.shape)
            difference = first_bit_difference(before, after)
            if difference is not None:
                found.append(("x" if key == "input" else key, *difference))
        self.placed = []
        return found

    def close(self) -> None:
        """Release the file (idempotent: the descriptor number is never closed twice)."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass


def arena_arguments(request: dict[str, Any], keys: tuple[str, ...], fd: int) -> list[Any]:
    """The call's arguments as arrays over the shared memory the request's ``"arena"``
    names (the implementation changes qkv's copy, in place, if it changes them at all)."""
    import mmap

    layout = request["arena"]
    spans = [(int(layout[key][0]), tuple(int(dim) for dim in layout[key][1]))
             for key in keys if key not in SCALARS]
    end = max((start + 8 * int(np.prod(shape)) for start, shape in spans), default=0)
    memory = mmap.mmap(fd, end) if end else None
    arguments: list[Any] = []
    tensors = iter(spans)
    for key in keys:
        if key in SCALARS:
            arguments.append(_scalar(key, request.get(key)))
            continue
        start, shape = next(tensors)
        count = int(np.prod(shape))
        if memory is None or count == 0:
            arguments.append(np.zeros(shape, dtype=np.float64))
        else:
            arguments.append(np.frombuffer(memory, dtype=np.float64, count=count,
                                           offset=start).reshape(shape))
    return arguments


def _answer(implementation: PythonImplementation, request: dict[str, Any],
            arena: int | None = None) -> dict[str, Any]:
    """The reply to one forward or backward request (any exception is said in it); its
    tensors over the shared ``arena`` when the request places them there."""
    from qkvcli.check.wire import decode_tensor, encode_tensor

    operation = request.get("op")
    if operation not in implementation.operations:
        return {"error": f"unknown op {json.dumps(operation)}"}
    keys, names = OPERATIONS[str(operation)]
    if arena is not None and isinstance(request.get("arena"), dict):
        arguments = arena_arguments(request, keys, arena)
        binary = True
    else:
        arguments = [_scalar(key, request.get(key)) if key in SCALARS
                     else decode_tensor(request, key, sys.maxsize, True) for key in keys]
        binary = any(isinstance(request.get(key), dict) and "float64" in request[key]
                     for key in keys)
    reply: dict[str, Any] = {}
    try:
        results = implementation.call(str(operation), tuple(arguments))
        for name, result in zip(names, results, strict=True):
            if not np.isfinite(result).all():
                raise BadResult(str(operation), f"{operation}'s {name} holds NaN or infinity")
            reply[name] = encode_tensor(result, binary)  # as the request came
    except BadResult as error:
        reply = {"error": error.message, "bad_result": True}
    except Rejected as error:
        reply = {"error": error.message}
    return reply


def serve(spec: str) -> None:
    """Load ``spec`` and answer protocol requests on stdin/stdout until bye or end of input.

    The protocol's pipes are moved to private descriptors first; the implementation's
    stdin becomes empty and its stdout goes to stderr. The process ends with
    ``os._exit``, so a thread the implementation started cannot keep it alive.
    """
    arena = int(os.environ.pop(ARENA_FD)) if os.environ.get(ARENA_FD, "").isdigit() else None
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.dup(1)
    empty = os.open(os.devnull, os.O_RDONLY)
    os.dup2(empty, 0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    from qkvcli.check.wire import Malformed, decode, encode

    implementation, hello = _load_error(spec)

    def send(message: dict[str, Any]) -> None:
        data = memoryview(encode(message))
        while data:
            data = data[os.write(replies, data):]

    for line in requests:
        try:
            request = decode(line)
        except Malformed:
            break
        reply: dict[str, Any] = {"id": request.get("id")}
        if request.get("op") == "hello":
            reply.update(hello)
        elif request.get("op") == "bye" or implementation is None:
            send(reply)
            break
        else:
            try:
                reply.update(_answer(implementation, request, arena))
            except BaseException as error:  # never a traceback for qkv to parse
                reply["error"] = said(error)
        send(reply)
    sys.stderr.flush()
    os._exit(0)


def _child_path() -> str:
    """qkv's own import path for the child (``""``, the working directory, made absolute),
    so it imports this qkv and the modules qkv itself could import."""
    entries = [os.path.abspath(entry or os.curdir) for entry in sys.path]
    return os.pathsep.join(dict.fromkeys(entry for entry in entries if os.path.isdir(entry)))


def start_python(spec: str, timeout: float) -> CommandClient:
    """``spec`` running in a child process qkv owns, as an :class:`Implementation`.

    Raises :class:`ImplementationNotFound`, :class:`ImplementationImportFailed` (the import
    raised, exited, or did not finish within ``timeout`` seconds) or :class:`MissingForward`.
    """
    if not is_path(spec) and not is_module_name(spec):
        raise ImplementationNotFound(spec, "not a .py file (no such file) nor a module name "
                                     "(dotted Python identifiers)")
    if is_path(spec):  # refused here, at qkv's own limits, before a process is started
        try:
            read_limited(os.path.abspath(spec), limits.MAX_FILE_BYTES, "Python")
        except InputFileError as error:
            raise ImplementationNotFound(spec, error.problem) from None
    return PythonClient(spec, timeout)


class PythonClient(CommandClient):
    """The runner (:func:`serve`) of a Python implementation, spoken to as a program is."""

    is_command = False
    reports_changes = True
    binary = True  # both ends are qkv's: tensors cross as base64 float64 bytes

    def __init__(self, spec: str, timeout: float) -> None:
        self.spec = spec
        target = os.path.abspath(spec) if is_path(spec) else spec
        self.arena = Arena()
        env = {**os.environ, "PYTHONPATH": _child_path(), "PYTHONDONTWRITEBYTECODE": "1",
               ARENA_FD: str(self.arena.fd)}
        argv = [sys.executable, "-m", "qkvcli.check.target", target]
        try:
            super().__init__(spec, timeout, argv=argv, env=env, pass_fds=(self.arena.fd,))
        except BaseException:
            self.arena.close()
            raise
        self.label = printable(spec, None)

    def _tensor_fields(self, tensors: dict[str, Array]) -> dict[str, Any]:
        """The tensors placed in the shared :class:`Arena`; the request says where."""
        return {"arena": self.arena.place(tensors)}

    def take_changes(self) -> list[tuple[str, str, str, str]]:
        """What the last call changed in its arguments, read back by qkv itself."""
        return self.arena.changes()

    def close(self) -> None:
        super().close()
        self.arena.close()

    def _hello(self) -> None:
        """Wait for the import; raise the implementation's load error, if any."""
        try:
            reply = self._exchange("hello", {"id": 0, "op": "hello", "version": 1})
        except Broken:
            problem = (self.problem or "").removeprefix("request 0 (hello): ")
            if problem.startswith("no reply within"):
                problem = f"importing it took more than {self.timeout:g} s (--timeout)"
            raise ImplementationImportFailed(
                self.spec, problem.replace("the program", "its process")) from None
        error = LOAD_ERRORS.get(str(reply.get("load")))
        if error is MissingForward:
            raise MissingForward(self.spec)
        if error is not None:
            raise error(self.spec, str(reply.get("error")))
        self._offered(reply)

    def protocol_detail(self) -> tuple[bool, str]:
        """Whether the child answered every call (its process may have died or hung)."""
        passed, detail = super().protocol_detail()
        return passed, detail.replace("the program", "the implementation's process")


if __name__ == "__main__":  # python -m qkvcli.check.target IMPL
    serve(sys.argv[1])
