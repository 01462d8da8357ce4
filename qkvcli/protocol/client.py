"""The ``--command`` client: one program, started once, spoken to in JSON lines.

Each request waits at most ``timeout`` seconds for its reply (the write too: a
program that stops reading cannot hang qkv). A crash, a timeout or a malformed
reply breaks the session: the program is ended, the problem is kept for the
``protocol`` family, and every later call fails with :class:`Broken`.

qkv owns the program and everything it starts. The program runs in a process group
(a session) of its own; ending it (:meth:`CommandClient.close`: after bye, on a broken
session, on Ctrl-C, also before hello was answered) sends SIGTERM to the whole group,
waits :data:`GRACE` seconds, then sends SIGKILL, so a grandchild (``sleep 300 &``) is
ended too. Nothing waits on a pipe for ever: the pipes are read with ``poll`` in
slices of :data:`SLICE` seconds, and once the program itself has exited, what it
left in the pipe is read and the rest is not waited for (a grandchild may hold the
pipe open for ever).

Memory stays bounded whatever the program writes: a reply line may be at most
:func:`~qkvcli.protocol.wire.reply_budget` bytes long, a bound that follows from the
shapes of the request (a longer line breaks the session while it is being read, before
it is parsed); at most one read's worth (:data:`CHUNK` bytes) waits beyond a line; of
its stderr only the last :data:`STDERR_KEEP` bytes are kept.
"""

from __future__ import annotations

import json
import os
import select
import shlex
import signal
import subprocess
import time
from typing import Any

from qkvcli.core.arrays import Array
from qkvcli.core.text import printable
from qkvcli.protocol.errors import BadResult, Broken, CommandNotStarted, NoReply, NotSent, Rejected
from qkvcli.protocol.wire import (
    FIRST_OPERATIONS,
    OPERATIONS,
    PAIRS,
    SCALARS,
    VERSION,
    Malformed,
    check_id,
    decode,
    decode_tensor,
    decode_unfinished,
    encode,
    encode_tensor,
    error_message,
    is_integer,
    reply_budget,
    reply_values,
)

EXIT_WAIT = 2.0  # seconds a program may take to exit after end of input (or a signal)
GRACE = 0.5  # seconds between SIGTERM and SIGKILL to the program's group
SLICE = 0.1  # seconds between looks at whether the program itself has exited
CHUNK = 1 << 16  # bytes read from a pipe at a time
STDERR_LIMIT = 4000  # characters of the program's stderr kept for the report
STDERR_KEEP = 4 * STDERR_LIMIT  # bytes of stderr kept while it is read (UTF-8: up to 4 a character)
READABLE = select.POLLIN | select.POLLHUP | select.POLLERR
WRITABLE = select.POLLOUT | select.POLLHUP | select.POLLERR


class _Ended(Exception):
    """The program closed its output, or exited, before a whole line came."""


class _TimedOut(Exception):
    """No whole line within the deadline."""


class _TooLong(Exception):
    """The line being read is already longer than its budget."""


def session_groups(session: int) -> list[int]:
    """The process groups in session ``session`` (the program's own group first).

    The program starts a session of its own, so every process it starts is in that
    session unless it calls ``setsid``; a child that moves to a group of its own
    (``setpgid``) is found here by its session, read from ``/proc`` (Linux; elsewhere
    the program's own group only).
    """
    groups = [session]
    try:
        entries = os.listdir("/proc")
    except OSError:
        return groups
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                data = handle.read()
            # pid (comm) state ppid pgrp session ...: comm may hold spaces and parentheses
            fields = data[data.rindex(b")") + 2:].split()
            group, sid = int(fields[2]), int(fields[3])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or not ours to read
        if sid == session and group not in groups:
            groups.append(group)
    return groups


class CommandClient:
    """An :class:`~qkvcli.protocol.python.Implementation` backed by a program."""

    is_command = True
    has_backward = True
    operations: tuple[str, ...] = ("forward", "backward")
    reports_changes = binary = False  # only qkv's own Python runner: bad results, base64 tensors

    def take_changes(self) -> list[tuple[str, str, str, str]]:
        """Nothing: a --command program only ever sees copies (qkv's runner reads its own)."""
        return []

    def __init__(self, command: str, timeout: float, argv: list[str] | None = None,
                 env: dict[str, str] | None = None, pass_fds: tuple[int, ...] = ()) -> None:
        """Start ``command`` (or ``argv`` when given, with ``env`` and the descriptors
        ``pass_fds`` left open in it) and say hello. Raises :class:`CommandNotStarted`.

        However hello ends (answered, broken, interrupted by Ctrl-C), a program that is
        not answering is never left running: an exception out of here ends it first.
        """
        self.label = printable(command, None)
        self.timeout = timeout
        self.requests = 0
        self.problem: str | None = None
        self.exit_status: int | None = None
        try:
            argv = shlex.split(command) if argv is None else argv
        except ValueError as error:
            raise CommandNotStarted(command, str(error)) from None
        if not argv:
            raise CommandNotStarted(command, "empty command")
        try:
            # A session of its own: qkv can end the program's whole group, and a Ctrl-C
            # at the terminal reaches qkv only (which then ends the group itself).
            self.process = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                bufsize=0, start_new_session=True, env=env, pass_fds=pass_fds,
            )
        except (OSError, ValueError) as error:  # ValueError: a NUL byte in the command
            reason = error.strerror if isinstance(error, OSError) else None
            raise CommandNotStarted(command, reason or str(error)) from None
        assert self.process.stdin and self.process.stdout and self.process.stderr
        self._in: int | None = self.process.stdin.fileno()
        self._out: int | None = self.process.stdout.fileno()
        self._err: int | None = self.process.stderr.fileno()
        os.set_blocking(self._in, False)  # a partial write returns instead of blocking
        self._unsent = bytearray()  # request bytes the program has not read yet
        self._received = bytearray()  # stdout bytes not yet taken as a line
        self._stderr_tail = bytearray()
        self._next_id = 0
        self._closed = False
        try:
            self._hello()
        except BaseException:
            self.close()
            raise

    # --- the pipes ----------------------------------------------------------------------

    def _pump(self, seconds: float, want_output: bool) -> None:
        """Wait up to ``seconds`` for the pipes, then move what is ready: write unsent
        request bytes, read stdout (only when ``want_output``) and stderr."""
        poller = select.poll()
        if self._unsent and self._in is not None:
            poller.register(self._in, WRITABLE)
        if want_output and self._out is not None:
            poller.register(self._out, READABLE)
        if self._err is not None:
            poller.register(self._err, READABLE)
        for fd, events in poller.poll(max(seconds, 0.0) * 1000):
            if fd == self._in:
                self._send(events)
            elif fd == self._out:
                self._receive()
            elif fd == self._err:
                self._receive_stderr()

    def _send(self, events: int) -> None:
        assert self._in is not None
        if events & select.POLLOUT:
            try:
                written = os.write(self._in, self._unsent[:CHUNK])
            except BlockingIOError:
                return
            except OSError:
                self._close_stdin()  # the program stopped reading: the read sees its exit
                return
            del self._unsent[:written]
        else:
            self._close_stdin()

    def _receive(self) -> None:
        assert self._out is not None
        try:
            chunk = os.read(self._out, CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if chunk:
            self._received += chunk
        else:
            self._out = None  # end of output; the file object closes the descriptor

    def _receive_stderr(self) -> None:
        assert self._err is not None
        try:
            chunk = os.read(self._err, CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._err = None
            return
        self._stderr_tail += chunk
        del self._stderr_tail[:-STDERR_KEEP]

    def _drain(self) -> None:
        """Read what the pipes hold now, without waiting for more."""
        for _ in range(STDERR_KEEP // CHUNK + 64):  # bounded: a live writer never ends it
            before = (len(self._received), len(self._stderr_tail), self._out, self._err)
            self._pump(0.0, True)
            if before == (len(self._received), len(self._stderr_tail), self._out, self._err):
                return

    def _read_line(self, limit: int, deadline: float) -> bytes:
        """The next stdout line (with its newline), at most ``limit`` bytes.

        Raises :class:`_TooLong` as soon as more than ``limit`` bytes came without a
        newline, :class:`_Ended` when the output ends (or the program has exited and the
        pipe holds no whole line), :class:`_TimedOut` past ``deadline``.
        """
        exited = False
        searched = 0  # bytes already known to hold no newline: each byte is looked at once
        while True:
            end = self._received.find(b"\n", searched)
            searched = len(self._received)
            if end >= 0:
                if end + 1 > limit:
                    raise _TooLong
                line = bytes(self._received[: end + 1])
                del self._received[: end + 1]
                return line
            if len(self._received) > limit:
                raise _TooLong
            if self._out is None or exited:
                raise _Ended
            if self.process.poll() is not None:
                # What the program wrote before exiting is in the pipe now; a grandchild
                # holding the pipe open must not keep qkv waiting for the end of it.
                self._drain()
                exited = True
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _TimedOut
            self._pump(min(remaining, SLICE), True)

    def _wait_exit(self, seconds: float) -> int | None:
        """The program's exit status within ``seconds`` (its stderr read meanwhile), or ``None``."""
        deadline = time.monotonic() + seconds
        while (status := self.process.poll()) is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self._pump(min(remaining, SLICE), False)
        self._drain()
        return status

    # --- the conversation ---------------------------------------------------------------

    def _break(self, operation: str, message: str, error: Broken | None = None) -> Broken:
        if self.problem is None:
            self.problem = message
        self._stop()
        return error or Broken(operation, message)  # error: a Broken that carries facts

    def _exchange(self, operation: str, message: dict[str, Any], values: int = 0) -> dict[str, Any]:
        """Send one request and return its reply, checked for its id. Raises :class:`Broken`.

        ``values``: how many numbers a reply to it may hold (its line budget follows).
        """
        if self.problem is not None:
            raise NotSent(operation)
        ident = message["id"]
        where = f"request {ident} ({operation})"
        limit = reply_budget(values)
        if self._in is not None:
            self._unsent += encode(message)
        try:
            line = self._read_line(limit, time.monotonic() + self.timeout)
        except _TimedOut:
            late = NoReply(operation, ident, self.timeout)  # its facts name --timeout
            raise self._break(operation, late.message, late) from None
        except _Ended:
            status = self._wait_exit(EXIT_WAIT)
            ended = "closed its output" if status is None else f"exited with status {status}"
            raise self._break(operation, f"{where}: the program {ended}{self.stderr_tail()}") from None
        except _TooLong:
            raise self._break(operation, f"{where}: reply longer than {limit} bytes, the most "
                              f"a reply to it may take (see docs/fixtures.md)") from None
        try:
            reply = decode(line)
            check_id(reply, ident)
        except Malformed as error:
            hint = ("; stdout carries only replies: write logs to stderr"
                    if str(error).startswith("not JSON") else "")
            raise self._break(operation, f"{where}: malformed reply: {error}{hint}") from None
        return reply

    def _hello(self) -> None:
        try:
            reply = self._exchange("hello", {"id": 0, "op": "hello", "version": VERSION})
            if not is_integer(reply.get("version"), VERSION):
                said = json.dumps(reply.get("version"))
                raise self._break("hello", f"request 0 (hello): the program speaks version "
                                  f"{printable(said)}, not the integer {VERSION}")
            self._offered(reply)
        except Broken:
            pass  # kept in self.problem: the protocol family reports it

    def _offered(self, reply: dict[str, Any]) -> None:
        """Take the operations hello's reply offers. Raises :class:`Broken`."""
        self.operations = self._operations(reply)
        self.has_backward = "backward" in self.operations

    def _operations(self, reply: dict[str, Any]) -> tuple[str, ...]:
        """The optional ``"ops"`` of the hello reply (forward and backward when absent).

        Without ``backward`` (``"ops": ["forward"]``) none is sent; unknown names are
        ignored; head operations are ``head_forward``, ``head_backward``. Raises :class:`Broken`.
        """
        ops = reply.get("ops", ["forward", "backward"])
        if not isinstance(ops, list) or not all(isinstance(op, str) for op in ops):
            raise self._break("hello", 'request 0 (hello): malformed reply: "ops" must be a '
                              "list of strings")
        if not any(op in ops for op in FIRST_OPERATIONS):
            raise self._break("hello", 'request 0 (hello): malformed reply: "ops" must '
                              'include "forward", "head_forward", "rope" or "mha_forward"')
        return tuple(op for op in OPERATIONS if op in ops and PAIRS.get(op, op) in ops)

    def _call(self, operation: str, tensors: dict[str, Array], names: tuple[str, ...],
              scalars: dict[str, Any]) -> tuple[Array, ...]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "op": operation}
        message.update(self._tensor_fields(tensors))
        message.update({key: SCALARS[key](value) for key, value in scalars.items()})
        values = reply_values(operation, tensors)
        reply = self._exchange(operation, message, values)
        self.requests += 1
        try:
            rejection = error_message(reply)
            if rejection is not None:
                if self.reports_changes and reply.get("bad_result") is True:
                    raise BadResult(operation, rejection,
                                    decode_unfinished(reply, names, values) if self.binary
                                    else None)
                raise Rejected(operation, rejection)
            return tuple(decode_tensor(reply, name, values, self.binary) for name in names)
        except Malformed as error:
            where = f"request {self._next_id} ({operation})"
            raise self._break(operation, f"{where}: malformed reply: {error}") from None

    def _tensor_fields(self, tensors: dict[str, Array]) -> dict[str, Any]:
        """The request's fields carrying ``tensors``: each one's own, as the protocol says."""
        return {key: encode_tensor(value, self.binary) for key, value in tensors.items()}

    def call(self, operation: str, args: tuple[Any, ...]) -> tuple[Array, ...]:
        """One request of ``operation`` (its fields in :data:`OPERATIONS` order)."""
        keys, names = OPERATIONS[operation]
        fields = dict(zip(keys, args, strict=True))
        scalars = {key: fields.pop(key) for key in keys if key in SCALARS}
        return self._call(operation, fields, names, scalars)

    def finish(self) -> None:
        """Say bye, expect ``{"id": n}``, and expect the program to exit by itself."""
        if self.problem is not None:
            return
        self._next_id += 1
        try:
            reply = self._exchange("bye", {"id": self._next_id, "op": "bye"})
        except Broken:
            return
        if set(reply) != {"id"}:
            self._break("bye", f'request {self._next_id} (bye): malformed reply: expected only "id"')
            return
        self._close_stdin()
        self.exit_status = self._wait_exit(self.timeout)
        if self.exit_status is None:
            self._break("bye", f"the program did not exit within {self.timeout:g} s of bye")
            return
        if self.exit_status != 0:
            self.problem = (f"the program exited with status {self.exit_status} after bye"
                            f"{self.stderr_tail()}")

    # --- ending the process -------------------------------------------------------------

    def _close_stdin(self) -> None:
        self._unsent.clear()
        self._in = None
        try:
            if self.process.stdin is not None:
                self.process.stdin.close()
        except OSError:
            pass

    def _signal_group(self, signum: int) -> bool:
        """Send ``signum`` to every process group of the program's session (its own, and
        any a child made with ``setpgid``); whether anyone was there."""
        anyone = False
        for group in session_groups(self.process.pid):
            try:
                os.killpg(group, signum)
            except ProcessLookupError:
                continue
            except PermissionError:  # a member changed its user: the rest still get it
                pass
            anyone = True
        return anyone

    def _stop(self) -> None:
        """End the program and its group: close its input, SIGTERM to the group, a short
        grace, SIGKILL to the group; always reap the program (idempotent)."""
        self._close_stdin()
        # The group keeps its id while any member lives, so the id cannot name someone
        # else's group even after the program itself has been reaped.
        if not self._signal_group(signal.SIGTERM):
            self.process.poll()
            return
        deadline = time.monotonic() + GRACE
        while time.monotonic() < deadline:
            self.process.poll()
            if self.process.returncode is not None and not self._signal_group(0):
                return
            self._pump(SLICE / 4, False)
        self._signal_group(signal.SIGKILL)
        self.process.wait()
        self._drain()

    def close(self) -> None:
        """End the program and its group if they still run and release the pipes (idempotent)."""
        if self._closed:
            return
        self._stop()
        self._closed = True
        self._out = self._err = None
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass

    def __enter__(self) -> CommandClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- what the report shows ----------------------------------------------------------

    def stderr_text(self) -> str:
        """The program's stderr so far: its last :data:`STDERR_LIMIT` characters, control
        characters escaped line by line (it reaches the terminal and the reports)."""
        if not self._closed:
            self._drain()
        text = bytes(self._stderr_tail).decode("utf-8", "replace")[-STDERR_LIMIT:]
        return "\n".join(printable(line, None) for line in text.split("\n"))

    def stderr_tail(self) -> str:
        """``"; stderr: <last line>"``, or empty when the program wrote nothing."""
        lines = [line for line in self.stderr_text().splitlines() if line.strip()]
        return f"; stderr: {lines[-1].strip()}" if lines else ""

    def protocol_detail(self) -> tuple[bool, str]:
        """Whether the conversation followed the protocol, and what to say about it."""
        if self.problem is not None:
            return False, self.problem
        return True, (f"hello, {self.requests} requests and bye answered in order; "
                      f"the program exited with status {self.exit_status}")
