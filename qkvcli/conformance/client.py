"""The ``--command`` client: one program, started once, spoken to in JSON lines.

Each request waits at most ``timeout`` seconds for its reply (the write too: a
program that stops reading cannot hang qkv). A crash, a timeout or a malformed
reply breaks the session: the program is ended, the problem is kept for the
``protocol`` family, and every later call fails with :class:`Broken`.

Memory stays bounded whatever the program writes: a reply line may be at most
``limits.MAX_FILE_BYTES`` long (a longer one breaks the session), at most one line
waits unread (the program blocks on a full pipe rather than qkv growing), and of its
stderr only the last :data:`STDERR_KEEP` bytes are kept. :meth:`CommandClient.close`
always ends the process (bye, then closing stdin, then terminate, then kill), also
when a ``KeyboardInterrupt`` unwinds through ``with``.
"""

from __future__ import annotations

import os
import queue
import shlex
import subprocess
import threading
from typing import Any

from qkvcli.conformance.errors import Broken, CommandNotStarted, Rejected
from qkvcli.conformance.target import BACKWARD_NAMES, FORWARD_NAMES
from qkvcli.conformance.wire import (
    VERSION,
    Malformed,
    check_id,
    decode,
    decode_tensor,
    encode,
    encode_tensor,
    error_message,
)
from qkvcli.core.arrays import Array
from qkvcli.core.text import printable

EXIT_WAIT = 2.0  # seconds a program may take to exit after bye or end of input
STDERR_LIMIT = 4000  # characters of the program's stderr kept for the report
STDERR_KEEP = 4 * STDERR_LIMIT  # bytes of stderr kept while it is read (UTF-8: up to 4 a character)
TOO_LONG = b"\0too long"  # queued in place of a reply line over the limit


def reply_limit() -> int:
    """The longest reply line read: the byte limit of any input (looked up at call time)."""
    from qkvcli.reading import limits

    return limits.MAX_FILE_BYTES


class CommandClient:
    """An :class:`~qkvcli.conformance.target.Implementation` backed by a program."""

    is_command = True
    has_backward = True

    def __init__(self, command: str, timeout: float) -> None:
        """Start ``command`` and say hello. Raises :class:`CommandNotStarted`."""
        self.label = printable(command, None)
        self.timeout = timeout
        self.requests = 0
        self.problem: str | None = None
        self.exit_status: int | None = None
        try:
            argv = shlex.split(command)
        except ValueError as error:
            raise CommandNotStarted(command, str(error)) from None
        if not argv:
            raise CommandNotStarted(command, "empty command")
        try:
            self.process = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )
        except (OSError, ValueError) as error:  # ValueError: a NUL byte in the command
            reason = error.strerror if isinstance(error, OSError) else None
            raise CommandNotStarted(command, reason or str(error)) from None
        # One line may wait: a program that floods its output blocks, qkv does not grow.
        self._replies: queue.Queue[bytes | None] = queue.Queue(maxsize=1)
        self._stderr_tail = bytearray()
        self._stderr_lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()
        self._stderr_thread = threading.Thread(target=self._drain_stderr, daemon=True)
        self._stderr_thread.start()
        self._next_id = 0
        self._hello()

    # --- the conversation ---------------------------------------------------------------

    def _read(self) -> None:
        assert self.process.stdout is not None
        limit = reply_limit()
        try:
            while line := self.process.stdout.readline(limit + 1):
                if len(line) > limit and not line.endswith(b"\n"):
                    self._replies.put(TOO_LONG)
                    return
                self._replies.put(line)
        except (OSError, ValueError):
            pass
        self._replies.put(None)

    def _drain_stderr(self) -> None:
        """Read the program's stderr to its end, keeping only the last :data:`STDERR_KEEP` bytes."""
        assert self.process.stderr is not None
        try:
            fd = self.process.stderr.fileno()
            while chunk := os.read(fd, 65536):
                with self._stderr_lock:
                    self._stderr_tail += chunk
                    del self._stderr_tail[:-STDERR_KEEP]
        except (OSError, ValueError):
            pass

    def _write(self, data: bytes) -> None:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(data)
            self.process.stdin.flush()
        except (OSError, ValueError):
            pass  # the read sees the end of output and reports the exit

    def _break(self, operation: str, message: str) -> Broken:
        if self.problem is None:
            self.problem = message
        self._stop()
        return Broken(operation, message)

    def _exchange(self, operation: str, message: dict[str, Any]) -> dict[str, Any]:
        """Send one request and return its reply, checked for its id. Raises :class:`Broken`."""
        if self.problem is not None:
            raise Broken(operation, "not checked: the program stopped earlier (see protocol)")
        ident = message["id"]
        where = f"request {ident} ({operation})"
        threading.Thread(target=self._write, args=(encode(message),), daemon=True).start()
        try:
            line = self._replies.get(timeout=self.timeout)
        except queue.Empty:
            raise self._break(operation, f"{where}: no reply within {self.timeout:g} s") from None
        if line is None:
            status = self._exit_status()
            ended = "closed its output" if status is None else f"exited with status {status}"
            raise self._break(operation, f"{where}: the program {ended}{self.stderr_tail()}")
        if line is TOO_LONG:
            raise self._break(operation, f"{where}: reply longer than {reply_limit()} bytes, "
                              "the byte limit of any input")
        try:
            reply = decode(line)
            check_id(reply, ident)
        except Malformed as error:
            raise self._break(operation, f"{where}: malformed reply: {error}") from None
        return reply

    def _hello(self) -> None:
        try:
            reply = self._exchange("hello", {"id": 0, "op": "hello", "version": VERSION})
            if reply.get("version") != VERSION:
                raise self._break("hello", f"request 0 (hello): the program speaks version "
                                  f"{reply.get('version')!r}, not {VERSION}")
            self.has_backward = "backward" in self._operations(reply)
        except Broken:
            pass  # kept in self.problem: the protocol family reports it

    def _operations(self, reply: dict[str, Any]) -> tuple[str, ...]:
        """The optional ``"ops"`` of the hello reply (both operations when absent).

        A program without a backward answers ``{"id": 0, "version": 1, "ops": ["forward"]}``
        and is never sent a backward request. Unknown names are ignored. Raises :class:`Broken`.
        """
        ops = reply.get("ops", ["forward", "backward"])
        if not isinstance(ops, list) or not all(isinstance(op, str) for op in ops):
            raise self._break("hello", 'request 0 (hello): malformed reply: "ops" must be a '
                              "list of strings")
        if "forward" not in ops:
            raise self._break("hello", 'request 0 (hello): malformed reply: "ops" must '
                              'include "forward"')
        return tuple(ops)

    def _call(self, operation: str, tensors: dict[str, Array],
              names: tuple[str, ...]) -> tuple[Array, ...]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "op": operation}
        message.update({key: encode_tensor(value) for key, value in tensors.items()})
        reply = self._exchange(operation, message)
        self.requests += 1
        try:
            rejection = error_message(reply)
            if rejection is not None:
                raise Rejected(operation, rejection)
            return tuple(decode_tensor(reply, name) for name in names)
        except Malformed as error:
            where = f"request {self._next_id} ({operation})"
            raise self._break(operation, f"{where}: malformed reply: {error}") from None

    def forward(self, x: Array, w_query: Array, w_key: Array, w_value: Array) -> tuple[Array, ...]:
        tensors = {"input": x, "w_query": w_query, "w_key": w_key, "w_value": w_value}
        return self._call("forward", tensors, FORWARD_NAMES)

    def backward(self, x: Array, w_query: Array, w_key: Array, w_value: Array,
                 grad_query: Array, grad_key: Array, grad_value: Array) -> tuple[Array, ...]:
        tensors = {"input": x, "w_query": w_query, "w_key": w_key, "w_value": w_value,
                   "grad_query": grad_query, "grad_key": grad_key, "grad_value": grad_value}
        return self._call("backward", tensors, BACKWARD_NAMES)

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
            self._break("bye", f"request {self._next_id} (bye): malformed reply: expected only "
                        '"id"')
            return
        self._close_stdin()
        try:
            self.exit_status = self.process.wait(self.timeout)
        except subprocess.TimeoutExpired:
            self._break("bye", f"the program did not exit within {self.timeout:g} s of bye")
            return
        if self.exit_status != 0:
            self.problem = (f"the program exited with status {self.exit_status} after bye"
                            f"{self.stderr_tail()}")

    # --- ending the process -------------------------------------------------------------

    def _exit_status(self) -> int | None:
        try:
            return self.process.wait(EXIT_WAIT)
        except subprocess.TimeoutExpired:
            return None

    def _close_stdin(self) -> None:
        try:
            if self.process.stdin is not None:
                self.process.stdin.close()
        except OSError:
            pass

    def _stop(self) -> None:
        """End the process: close its input, then terminate, then kill; always reap it."""
        if self.process.poll() is None:
            self._close_stdin()
            self.process.terminate()
            try:
                self.process.wait(EXIT_WAIT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._close_stdin()

    def close(self) -> None:
        """End the process if it still runs and release its pipes (idempotent)."""
        self._stop()
        self._stderr_thread.join(EXIT_WAIT)
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
        if self.process.poll() is not None:
            self._stderr_thread.join(EXIT_WAIT)  # an ended program's last words
        with self._stderr_lock:
            data = bytes(self._stderr_tail)
        text = data.decode("utf-8", "replace")[-STDERR_LIMIT:]
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
