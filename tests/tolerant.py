"""Comparing printed text where a number depends on BLAS: its digits within a tolerance.

Another machine's kernels may sum a product in another order, so a value that is 0 in
exact arithmetic prints as 5.55112e-17 here and 2.77556e-16 there, and a long number
may differ in its last digit. :func:`text_differences` compares two texts as a stream of
tokens: words and punctuation exactly, two integers exactly (shapes, counts, coordinates),
every other number within ``REL`` relative or ``ABS`` absolute; whitespace and the
box-drawing characters between them are layout (a longer number may wrap a line
elsewhere), not content. Tests compare bytes first and fall back to this only when the
bytes differ.
"""

from __future__ import annotations

import math
import re

REL = 1e-5
"""A number printed to six significant digits may differ in its last one."""
ABS = 1e-8
"""Below this a value is rounding noise on every qkv fixture (a passing gradient check's
scaled error is a few 1e-10; the smallest tolerance qkv prints is 1e-09's scale)."""

LAYOUT = re.compile(r"[\s\u2500-\u257f]+")
TOKEN = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?"
                   r"|(?:[^\d\s\u2500-\u257f+-]|[-+](?![\d.]))+")
FLOAT = re.compile(r"[.eE]")


def _tokens(text: str) -> list[str]:
    return [token for part in LAYOUT.split(text) for token in TOKEN.findall(part)]


def _number(token: str) -> float | None:
    try:
        return float(token)
    except ValueError:
        return None


def text_differences(actual: str, expected: str) -> list[str]:
    """Where ``actual`` differs from ``expected`` beyond layout and rounding (empty: the same)."""
    found: list[str] = []
    got, wanted = _tokens(actual), _tokens(expected)
    for index, (one, other) in enumerate(zip(got, wanted, strict=False)):
        if one == other:
            continue
        a, b = _number(one), _number(other)
        if (a is not None and b is not None and (FLOAT.search(one) or FLOAT.search(other))
                and (math.isclose(a, b, rel_tol=REL, abs_tol=ABS)
                     or (math.isnan(a) and math.isnan(b)))):
            continue
        context = " ".join(got[max(index - 4, 0):index + 2])
        found.append(f"token {index}: {one!r} != {other!r} (after: {context})")
    if len(got) != len(wanted):
        found.append(f"{len(got)} tokens != {len(wanted)}")
    return found
