"""The claims every attention computation keeps (qkvcli/core/invariants.py), each able to
fail: judged on results made by hand, not by any engine."""

from __future__ import annotations

import numpy as np

from qkvcli.core.invariants import prefix, replayed, single_token


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


def test_replayed_compares_bits_not_values() -> None:
    a = np.array([0.0, 1.0, np.nan])
    assert replayed((a, 2.5), (a.copy(), 2.5))
    assert not replayed((a,), (np.array([-0.0, 1.0, np.nan]),))  # -0.0 is another run's bits
    assert not replayed((a,), (a[:2],))  # a shape that differs
    assert not replayed((1.0,), (np.nextafter(1.0, 2.0),))
