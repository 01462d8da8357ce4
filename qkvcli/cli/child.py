"""The child process of a Python implementation: ``python -m qkvcli.cli.child IMPL``.

``qkv check`` starts it (:class:`~qkvcli.protocol.runner.PythonClient`). This module owns
the child's process, as the CLI owns qkv's: it moves the protocol's pipes to private
descriptors, gives the implementation an empty stdin and its stdout to stderr, hands the
conversation to :func:`~qkvcli.protocol.runner.serve`, and ends with ``os._exit``, so a
thread the implementation started cannot keep the process alive.
"""

from __future__ import annotations

import os
import sys
from typing import Any


def main(spec: str) -> None:
    """Serve ``spec`` on this process's stdin and stdout, then end the process."""
    from qkvcli.protocol.runner import ARENA_FD, serve
    from qkvcli.protocol.wire import encode

    arena = int(os.environ.pop(ARENA_FD)) if os.environ.get(ARENA_FD, "").isdigit() else None
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.dup(1)
    empty = os.open(os.devnull, os.O_RDONLY)
    os.dup2(empty, 0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def send(message: dict[str, Any]) -> None:
        data = memoryview(encode(message))
        while data:
            data = data[os.write(replies, data):]

    serve(spec, requests, send, arena)
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1])
