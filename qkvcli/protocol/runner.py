"""The runner of a Python implementation: a child process qkv owns, spoken to as a program is.

``qkv check`` starts ``python -m qkvcli.cli.child IMPL`` (:class:`PythonClient`); the
child's entry sets up its process and calls :func:`serve`, which imports the
implementation (:func:`~qkvcli.protocol.python.load_python`) and answers the
``--command`` protocol of docs/protocol.md on a private copy of its stdin/stdout. The
implementation's own stdout is qkv's stderr pipe, its stdin is empty; nothing it does
(printing, exiting, looping, changing directory, patching modules, starting threads)
reaches qkv except the answers. The runner adds to a reply what only it can see:
``"bad_result"`` (the call returned something that is not the tensors), with the
tensors themselves under ``"results"`` when they are tensors holding NaN or infinity
(float64 bytes: JSON has no NaN), for the diagnosis to name the slip that made them.

Purity is judged in qkv's own process, where the implementation cannot reach: each
call's arguments are placed in memory qkv shares with the runner (:class:`Arena`, a
memory file the child maps), the implementation gets arrays over that memory, and
after the reply qkv reads them back and compares them with what it placed. Replacing
the runner's functions or qkv's modules inside the child changes nothing qkv reads.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from qkvcli.core.arrays import Array, first_difference
from qkvcli.core.text import printable
from qkvcli.protocol.client import CommandClient
from qkvcli.protocol.errors import (
    BadResult,
    Broken,
    ImplementationImportFailed,
    ImplementationNotFound,
    MissingForward,
    Rejected,
)
from qkvcli.protocol.python import PythonImplementation, is_module_name, is_path, load_python, said
from qkvcli.protocol.wire import OPERATIONS, SCALARS
from qkvcli.reading import limits
from qkvcli.reading.files import InputFileError, read_limited


def _scalar(key: str, value: Any) -> Any:
    """A request's scalar field as the Python function takes it (``causal``, ``rope``:
    ``bool``; ``heads``, ``offset``: ``int``; ``base``: ``float``)."""
    kind = SCALARS[key]
    if kind is bool:
        return value is True
    return kind(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


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
        found = []
        for key, before, start in self.placed:
            raw = os.pread(self.fd, before.nbytes, start) if before.size else b""
            raw += bytes(before.nbytes - len(raw))  # cut short in the child: zeros, as mapped
            after = np.frombuffer(raw, dtype="<f8").reshape(before.shape)
            difference = first_difference(before, after)
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
    from qkvcli.protocol.wire import decode_tensor, encode_tensor

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
                raise BadResult(str(operation), f"{operation}'s {name} holds NaN or infinity",
                                results)
            reply[name] = encode_tensor(result, binary)  # as the request came
    except BadResult as error:
        reply = {"error": error.message, "bad_result": True}
        if binary and error.results is not None:  # NaN crosses only as float64 bytes
            reply["results"] = {name: encode_tensor(result, True)
                                for name, result in zip(names, error.results, strict=True)}
    except Rejected as error:
        reply = {"error": error.message}
    return reply


def serve(spec: str, requests: Iterable[bytes], send: Callable[[dict[str, Any]], None],
          arena: int | None) -> None:
    """Load ``spec`` and answer the protocol's ``requests`` (lines) through ``send`` until
    bye or the end of input; each call's tensors over the shared memory ``arena`` (a
    descriptor, ``None``: none is shared). Returns when the conversation ends; the
    child's entry (:mod:`qkvcli.cli.child`) owns its process: descriptors and exit.
    """
    from qkvcli.protocol.wire import Malformed, decode

    implementation, hello = _load_error(spec)
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
        argv = [sys.executable, "-m", "qkvcli.cli.child", target]
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

