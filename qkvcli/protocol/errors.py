"""Typed errors of ``qkv check``: an implementation that cannot be used, and a call that failed.

:class:`ImplementationError` and its subclasses mean the check cannot run at all (the
CLI exits 2). :class:`CallFailed` and its subclasses are what one call to the
implementation gave instead of a result; the families turn them into failures.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from qkvcli.core.errors import QkvError
from qkvcli.core.text import printable

if TYPE_CHECKING:
    from qkvcli.core.arrays import Array


class ImplementationError(QkvError):
    """The implementation cannot be loaded or started."""


class ImplementationNotFound(ImplementationError):
    def __init__(self, spec: str, reason: str) -> None:
        self.spec = spec
        self.reason = reason
        super().__init__(f"implementation {spec}: {reason}")


class ImplementationImportFailed(ImplementationError):
    def __init__(self, spec: str, cause: str) -> None:
        self.spec = spec
        self.cause = cause
        super().__init__(f"implementation {spec} cannot be imported: {cause}")


class MissingForward(ImplementationError):
    def __init__(self, spec: str) -> None:
        self.spec = spec
        super().__init__(
            f"implementation {spec} defines no forward(x, w_query, w_key, w_value) function, "
            "head_forward(x, w_query, w_key, w_value, causal), rope(x, base, offset) nor "
            "mha_forward(x, w_query, w_key, w_value, w_output, heads, causal, rope, base, "
            "offset)"
        )


class CommandNotStarted(ImplementationError):
    def __init__(self, command: str, reason: str) -> None:
        self.command = command
        self.reason = reason
        # JSON quoting, not Python's repr: the same spelling as every other quoted text.
        super().__init__(f"command {json.dumps(command)} cannot be started: {reason}")


CALL_MESSAGE_LIMIT = 500
"""Characters kept of what an implementation said (an exception, an error reply)."""


class CallFailed(QkvError):
    """One call gave no usable result. ``operation`` is ``forward`` or ``backward``.

    ``message`` often quotes the implementation, so it is kept escaped and capped at
    :data:`CALL_MESSAGE_LIMIT` characters: reports show it as it is.
    """

    def __init__(self, operation: str, message: str) -> None:
        self.operation = operation
        self.message = printable(message, CALL_MESSAGE_LIMIT)
        super().__init__(self.message)


class Rejected(CallFailed):
    """The implementation raised (or replied with an error): it rejected the input.
    ``raised`` is the exception itself where it ran in this process (qkv's engine: its
    typed error, whose fields the engine-only families judge), else ``None``."""

    def __init__(self, operation: str, message: str,
                 raised: BaseException | None = None) -> None:
        super().__init__(operation, message)
        self.raised = raised


class BadResult(CallFailed):
    """A Python implementation returned something that is not the expected tensors.
    ``results``: the tensors it returned, where they are tensors of the right count that
    hold NaN or infinity (what the diagnosis reads: a slip that gives NaN is named as the
    same slip giving finite values is), else ``None``."""

    def __init__(self, operation: str, message: str,
                 results: tuple[Array, ...] | None = None) -> None:
        super().__init__(operation, message)
        self.results = results


class Broken(CallFailed):
    """The ``--command`` program crashed, timed out or sent a malformed reply."""


class NoReply(Broken):
    """No reply to request ``request`` within ``seconds`` (the ``--timeout``)."""

    def __init__(self, operation: str, request: int, seconds: float) -> None:
        self.request = request
        self.seconds = seconds
        super().__init__(operation, f"request {request} ({operation}): no reply within "
                         f"{seconds:g} s")


class NotSent(Broken):
    """A call after the session broke: never sent to the program (the protocol family
    says what broke it)."""

    def __init__(self, operation: str) -> None:
        super().__init__(operation, "not checked: the program stopped earlier (see protocol)")
