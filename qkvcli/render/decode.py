"""``qkv attend --decode``: the layer decoded one token at a time, as text lines, as JSON,
and in its check's detail (:class:`~qkvcli.attention.records.DecodeEvidence`).

The text gives one ``decode=`` line (the cache's storage, the worst step, the tolerance)
and a ``decode_step=`` line per token; the JSON's ``decode`` section holds the same facts,
every step's worst difference as the exact float. :mod:`qkvcli.render.attend` places
them; nothing here is printed without ``--decode``.
"""

from __future__ import annotations

from typing import Any

from qkvcli.attention.records import DecodeEvidence
from qkvcli.render.document import json_float
from qkvcli.render.numbers import fmt_error, fmt_shape

COMMENT = ("# decode: each token alone through a KV cache of the K/V heads (with a window, "
           "a ring of min(window, T) positions); step t against row t of the full causal "
           "pass")
"""The comment line above the decode's lines."""


def _window(evidence: DecodeEvidence) -> str:
    return "none" if evidence.window is None else str(evidence.window)


def decode_lines(evidence: DecodeEvidence | None) -> list[str]:
    """The decode's text lines (none without a decode): the storage and the worst step,
    then each step's worst difference and the keys and values it read."""
    if evidence is None:
        return []
    return [
        COMMENT,
        f"decode=steps:{len(evidence.steps)} window:{_window(evidence)} "
        f"storage_keys:{fmt_shape(evidence.storage_keys)} "
        f"storage_values:{fmt_shape(evidence.storage_values)} "
        f"storage_bytes:{evidence.storage_bytes} worst:{fmt_error(evidence.worst)} "
        f"held_worst:{fmt_error(evidence.held_worst)} tolerance:{evidence.tolerance!r}",
        *(f"decode_step=t:{s.position} worst:{fmt_error(s.worst)} keys:{fmt_shape(s.keys)} "
          f"values:{fmt_shape(s.values)} held_bytes:{s.held_bytes}" for s in evidence.steps),
    ]


def decode_details(evidence: DecodeEvidence | None) -> dict[str, tuple[str, str]]:
    """The decode check's detail when passed and when failed, by its id (empty without a
    decode)."""
    if evidence is None:
        return {}
    ring = "" if evidence.window is None else (
        f"a ring of the window, {evidence.storage_keys[2]} positions: ")
    facts = (f"{len(evidence.steps)} tokens one at a time through a KV cache of the K/V "
             f"heads ({ring}keys {fmt_shape(evidence.storage_keys)}, "
             f"{evidence.storage_bytes} bytes with the values): worst |cached - full pass| "
             f"{fmt_error(evidence.worst)}, keys and values held at the end "
             f"{fmt_error(evidence.held_worst)} from the pass's, tolerance "
             f"{evidence.tolerance!r}")
    return {"decode": (facts, facts)}


def decode_json(evidence: DecodeEvidence) -> dict[str, Any]:
    """The decode's JSON section: its verdict, tolerance and window, the storage, the
    worst differences, and every step's facts."""
    return {
        "passed": evidence.passed, "tolerance": evidence.tolerance, "window": evidence.window,
        "storage": {"keys": list(evidence.storage_keys), "values": list(evidence.storage_values),
                    "bytes": evidence.storage_bytes},
        "worst": json_float(evidence.worst), "held_worst": json_float(evidence.held_worst),
        "steps": [{"position": s.position, "worst": json_float(s.worst), "keys": list(s.keys),
                   "values": list(s.values), "held_bytes": s.held_bytes}
                  for s in evidence.steps],
    }
