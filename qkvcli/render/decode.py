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
from qkvcli.render.facts import Table, entries, scalar, section, shape, verdict
from qkvcli.render.numbers import fmt_error, fmt_exact, fmt_shape

COMMENT = ("# decode: each token alone through a KV cache of the K/V heads (with a window, "
           "a ring of min(window, T) positions); step t against row t of the full causal "
           "pass")
"""The comment line above the decode's lines."""


def decode_table(evidence: DecodeEvidence | None) -> Table:
    """The decode's text lines (none without a decode), over its facts (``decode``): the storage and
    the worst step, then each step's worst difference and the keys and values it read."""
    if evidence is None:
        return ()
    worst = fmt_error
    return (
        ("", lambda e: COMMENT),
        ("decode", (("steps", "decode.steps", len),
                    ("window", "decode.window", lambda w: "none" if w is None else w),
                    *((f"storage_{name}", f"decode.storage.{name}")
                      for name in ("keys", "values", "bytes")),
                    ("worst", "decode.worst", worst), ("held_worst", "decode.held_worst", worst),
                    ("tolerance", "decode.tolerance", fmt_exact))),
        *(("decode_step", ("decode.steps", lambda steps, i=i: " ".join([
            f"t:{steps[i]['position']}", f"worst:{fmt_error(steps[i]['worst'].value)}",
            f"keys:{fmt_shape(steps[i]['keys'].value)}",
            f"values:{fmt_shape(steps[i]['values'].value)}",
            f"held_bytes:{steps[i]['held_bytes']}"]))) for i in range(len(evidence.steps))),
    )


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
             f"{fmt_exact(evidence.tolerance)}")
    return {"decode": (facts, facts)}


def decode_facts(evidence: DecodeEvidence) -> Any:
    """The decode's facts: its verdict, tolerance and window, the storage, the worst
    differences, and every step's facts."""
    return section(
        passed=verdict(evidence.passed), tolerance=evidence.tolerance, window=evidence.window,
        storage=section(keys=shape(evidence.storage_keys), values=shape(evidence.storage_values),
                        bytes=evidence.storage_bytes),
        worst=scalar(evidence.worst), held_worst=scalar(evidence.held_worst),
        steps=entries([{"position": s.position, "worst": scalar(s.worst), "keys": shape(s.keys),
                        "values": shape(s.values), "held_bytes": s.held_bytes}
                       for s in evidence.steps]))
