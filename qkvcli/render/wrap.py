"""Plain text wrapped to a narrow screen at word boundaries, never inside a number.

A terminal wraps a long line at its last column, whatever is there: ``-1.00`` then
``0000`` on the next line reads as two numbers. :func:`wrap_lines` breaks each line
longer than the width after a space, a comma, a ``|`` or a ``;`` instead (the last one
that fits), and indents what follows by :data:`INDENT` more than the line it continues,
so a continuation is never read as a line of its own. A word longer than the width (a
digest, a path) is kept whole: the terminal folds it, but no number is split by qkv.
Only the screen's copy is wrapped; a pipe or a file gets the report's own lines.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

INDENT = "  "
BREAKS = frozenset(" ,|;")
"""Characters a line may break after (a space is dropped at the break, the rest kept)."""


def wrap_line(line: str, width: int) -> list[str]:
    """``line`` as lines of at most ``width`` characters where breaks allow (see the
    module docstring); continuations are indented :data:`INDENT` more than ``line``."""
    indent = " " * (len(line) - len(line.lstrip(" "))) + INDENT
    if width <= len(indent) + 8 or len(line) <= width:
        return [line]
    out: list[str] = []
    rest, room = line, width
    while len(rest) > room:
        cut = max((index for index in range(1, room + 1) if rest[index - 1] in BREAKS),
                  default=0)
        if cut == 0:  # no break fits: keep the word whole, break after it
            found = [index for index in range(room + 1, len(rest)) if rest[index - 1] in BREAKS]
            if not found:
                break
            cut = found[0]
        head = rest[:cut]
        out.append((indent if out else "") + (head[:-1] if head.endswith(" ") else head))
        rest = rest[cut:].lstrip(" ")
        room = width - len(indent)
    if rest:
        out.append((indent if out else "") + rest)
    return out


def wrap_lines(pieces: Iterable[str], width: int) -> Iterator[str]:
    """The text ``pieces`` (split anywhere) with each line wrapped to ``width`` by
    :func:`wrap_line`, in pieces again: one or more whole lines at a time."""
    pending = ""
    for piece in pieces:
        pending += piece
        if "\n" not in pending:
            continue
        complete, pending = pending.rsplit("\n", 1)
        yield "".join(f"{wrapped}\n" for line in complete.split("\n")
                      for wrapped in wrap_line(line, width))
    if pending:
        yield "\n".join(wrap_line(pending, width))
