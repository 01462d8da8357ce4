"""The claims every attention computation keeps (qkvcli/core/invariants.py), each able to
fail: judged on results made by hand, not by any engine."""

from __future__ import annotations

import numpy as np

from qkvcli.core.arrays import Array, first_difference
from qkvcli.core.invariants import (
    HeadLayout,
    isolated_heads,
    position_zero,
    prefix,
    single_token,
)


def test_prefix_holds_only_when_every_earlier_output_stays_and_the_last_changes() -> None:
    before = np.arange(12.0).reshape(1, 4, 3)
    after = before.copy()
    after[0, 3, 0] += 1.0
    assert prefix(before, after).holds
    assert not prefix(before, before.copy()).holds  # the last token's output must change
    leaked = after.copy()
    leaked[0, 1, 2] = np.nextafter(leaked[0, 1, 2], np.inf)  # one bit at an earlier token
    found = prefix(before, leaked)
    assert not found.holds and found.unchanged == (True, False, True)


def test_single_token_needs_weights_exactly_one_and_no_score_gradient() -> None:
    assert single_token(np.ones((2, 1, 1)), np.zeros((2, 1, 3)))
    assert not single_token(np.array([[[1.0 - 2**-52]]]), np.zeros(3))
    assert not single_token(np.ones((1, 1, 1)), np.array([0.0, 1e-300]))


def test_replay_compares_bits_not_values() -> None:
    """Replay's comparison (``first_difference``, bit for bit): -0.0 is another run's
    bits, a NaN equals the same NaN, and a shape that differs is a difference."""
    a = np.array([0.0, 1.0, np.nan])
    assert first_difference(a, a.copy()) is None
    assert first_difference(a, np.array([-0.0, 1.0, np.nan])) == ("[0]", "0.0", "-0.0")
    assert first_difference(a, a[:2]) == ("", "[3]", "[2]")
    assert first_difference(np.array([1.0]), np.array([np.nextafter(1.0, 2.0)])) is not None


def test_position_zero_compares_the_first_token_bit_for_bit() -> None:
    given = np.arange(12.0).reshape(1, 3, 4)
    turned = given + 1.0
    turned[:, 0] = given[:, 0]
    assert position_zero(turned, given) is None
    turned[0, 0, 0] = -0.0  # x cos 0 - y sin 0 may turn a 0.0 into -0.0: the same value
    assert position_zero(turned, given) is None
    turned[0, 0, 3] = np.nextafter(turned[0, 0, 3], 0.0)
    assert position_zero(turned, given) == ("[0,0,3]", repr(float(turned[0, 0, 3])), "3.0")
    assert position_zero(turned[..., :2], given) == ("", "[1,1,2]", "[1,1,4]")


def _heads(x: Array, weights: tuple[Array, ...], layout: HeadLayout,
           mix: float = 0.0) -> tuple[Array, Array]:
    """A hand-written layer without scaling or a mask: each head's weights from its own
    query columns and key head, each merged column from its own value head; ``mix``
    leaks head 0's scores into every other head (the slip the claim must find)."""
    w_q, w_k, w_v = weights[:3]
    per = layout.heads // layout.kv_heads
    scores = []
    for h in range(layout.heads):
        g = h // per
        q = x @ w_q[:, h * layout.d_k:(h + 1) * layout.d_k]
        k = x @ w_k[:, g * layout.d_k:(g + 1) * layout.d_k]
        scores.append(q @ np.swapaxes(k, -1, -2))
    scores = [s + (mix * scores[0] if h else 0.0) for h, s in enumerate(scores)]
    weights_ = np.exp(np.stack(scores, axis=1))
    weights_ /= weights_.sum(axis=-1, keepdims=True)
    merged = np.concatenate([weights_[:, h] @ (x @ w_v[:, (h // per) * layout.d_v:
                                                         (h // per + 1) * layout.d_v])
                             for h in range(layout.heads)], axis=-1)
    return weights_, merged


def test_isolated_heads_holds_for_apart_heads_grouped_or_not_and_finds_a_leak() -> None:
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (2, 4, 6))
    for layout in (HeadLayout(3, 3, 2, 2), HeadLayout(4, 2, 2, 3)):
        weights = (rng.uniform(-1, 1, (6, layout.heads * layout.d_k)),
                   rng.uniform(-1, 1, (6, layout.kv_heads * layout.d_k)),
                   rng.uniform(-1, 1, (6, layout.kv_heads * layout.d_v)))

        def apart(w: tuple[Array, ...], layout: HeadLayout = layout) -> tuple[Array, Array]:
            return _heads(x, w, layout)

        def leaking(w: tuple[Array, ...], layout: HeadLayout = layout) -> tuple[Array, Array]:
            return _heads(x, w, layout, mix=0.1)

        assert isolated_heads(apart, x, weights, apart(weights), layout, 1e-12) is None
        found = isolated_heads(leaking, x, weights, leaking(weights), layout, 1e-12)
        assert found is not None and found[1].code == "moved"
        assert found[1].facts[0] == f"W_Q[:,0:{layout.d_k}]"


def test_a_value_change_that_moves_nothing_is_unmoved_and_one_token_skips_the_query_probe() -> None:
    layout = HeadLayout(2, 2, 1, 1)
    x = np.array([[[1.0, -1.0]]])  # one token whose row sums to 0: V cannot move
    weights = (np.eye(2), np.eye(2), np.eye(2))

    def frozen(w: tuple[Array, ...]) -> tuple[Array, Array]:
        return np.ones((1, 2, 1, 1)), np.zeros((1, 1, 2))

    assert isolated_heads(frozen, x, weights, frozen(weights), layout, 0.0) is None
    moving_input = np.array([[[1.0, 0.0]]])
    found = isolated_heads(frozen, moving_input, weights, frozen(weights), layout, 0.0)
    assert found == ("merged", found[1]) and found[1].code == "unmoved"
    assert found[1].facts == ("W_V[:,1:2]", "merged[...,1:2]")
