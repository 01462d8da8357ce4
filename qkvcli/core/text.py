"""Showing text from inputs safely: :func:`printable` escapes control characters and caps length.

Any string a person or a file supplied (a chapter, a name, an unknown key, a path, a quiz
answer) may hold terminal escape sequences or be megabytes long. Messages and reports
show it through :func:`printable`, so nothing raw reaches the terminal: control
characters (C0, DEL, C1), line and paragraph separators, bidirectional overrides and
lone surrogates are spelled as Python escapes (``\\x1b``, ``\\u202e``, ``\\ud800``), and
text longer than the cap ends in ``…``.
"""

from __future__ import annotations

import re

ERROR_TEXT_LIMIT = 120
"""The longest user text an error line quotes (file names, keys, answers), in characters."""

# A pattern string, compiled by ``re``'s cache on first use: most text is printable and
# never needs it, and compiling costs ~0.3 ms of every start-up (see ARCHITECTURE.md).
_UNSAFE = "[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_controls(text: str) -> str:
    """``text`` with every control character spelled as an escape; nothing is cut."""
    # Every unsafe character is non-printable (Cc, Cf, Cs, Zl, Zp), so printable text
    # has none to escape.
    if text.isprintable():
        return text
    return re.sub(_UNSAFE, _escape, text)


def printable(text: str, limit: int | None = ERROR_TEXT_LIMIT) -> str:
    """``text`` safe to print: control characters escaped, at most ``limit`` characters.

    A longer result is cut to ``limit - 1`` characters followed by ``…``; ``None`` keeps
    every character.
    """
    shown = escape_controls(text)
    if limit is not None and len(shown) > limit:
        return shown[: max(limit - 1, 0)] + "…"
    return shown
