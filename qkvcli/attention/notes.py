"""A teacher's remarks on an attention head's parameters: observations, never failures."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qkvcli.attention.head import AttentionHead


@dataclass(frozen=True)
class Note:
    """One remark: a stable ``code`` and its ``text``."""

    code: str
    text: str


def notes_of(head: AttentionHead) -> tuple[Note, ...]:
    """Remarks on equal projections (collapsed or symmetric roles) and a distinct ``d_v``."""
    w, b = head.weights, head.biases

    def same(i: int, j: int) -> bool:
        bi, bj = b[i], b[j]
        biases_equal = (bi is None and bj is None) or (
            bi is not None and bj is not None and np.array_equal(bi, bj)
        )
        return w[i].shape == w[j].shape and np.array_equal(w[i], w[j]) and biases_equal

    notes = []
    if same(0, 1) and same(0, 2):
        notes.append(Note("collapsed-roles", "W_Q = W_K = W_V: every token is matched with, and "
                          "hands over, the same vector; matching and content collapse into one "
                          "role (the primer's gotcha: self-attention means the same input, "
                          "not the same projection)"))
    elif same(0, 1):
        notes.append(Note("symmetric-matching", "W_Q = W_K: q_i.k_j = q_j.k_i, so matching is "
                          "symmetric; token i cannot look for something other than what it "
                          "advertises"))
    if head.d_v != head.d_k:
        notes.append(Note("independent-value-width", f"d_v = {head.d_v} differs from d_k = "
                          f"{head.d_k}: the output takes the value width"))
    return tuple(notes)
