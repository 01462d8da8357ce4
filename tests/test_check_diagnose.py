"""The reverse diagnosis: each way a dX can go wrong is named, and the likeliest name wins."""

from __future__ import annotations

import numpy as np
import pytest

from qkvcli.check.diagnose import input_gradient, weight_gradient
from qkvcli.core.arrays import Array
from qkvcli.core.results import Clause
from qkvcli.render.check import say

RNG = np.random.default_rng(12)
X = RNG.uniform(-1, 1, (2, 3, 5))
W = tuple(RNG.uniform(-1, 1, (5, 3)) for _ in range(3))
U = tuple(RNG.uniform(-1, 1, (2, 3, 3)) for _ in range(3))
Q, K, V = 0, 1, 2


def path(grad: int, weight: int) -> Array:
    return U[grad] @ W[weight].T


@pytest.mark.parametrize(
    ("grad_input", "finding", "phrase"),
    [
        (path(Q, Q) + path(K, K), Clause("path-counts", (("value",), ())),
         "grad_input misses the value path"),
        (path(Q, Q) + 2 * path(K, K) + path(V, V), Clause("path-counts", ((), ("key",))),
         "grad_input counts the key path twice"),
        (path(V, V), Clause("path-counts", (("query", "key"), ())),
         "grad_input misses the query and key paths"),
        (path(Q, Q) + path(K, Q) + path(V, V), Clause("borrowed-weight", ("key", "query")),
         "grad_input's key path uses W_Q instead of W_K (dL/dK W_Q^T)"),
        (path(Q, V) + path(K, K) + path(V, V), Clause("borrowed-weight", ("query", "value")),
         "grad_input's query path uses W_V instead of W_Q (dL/dQ W_V^T)"),
        (path(V, Q) + path(K, K) + path(V, V), Clause("borrowed-gradient", ("query", "value")),
         "grad_input's query path uses dL/dV instead of dL/dQ (dL/dV W_Q^T)"),
        (path(Q, K) + path(K, Q) + path(V, V), Clause("swapped-weights", ("query", "key")),
         "grad_input's query and key paths swap W_Q and W_K"),
        (path(Q, Q) + path(K, K) + path(V, V) + 1.0, Clause("not-three-paths"),
         "grad_input is not dQ W_Q^T + dK W_K^T + dV W_V^T"),
    ],
    ids=["missing", "doubled", "two-missing", "key-uses-wq", "query-uses-wv",
         "query-uses-dv", "swap-qk", "unknown"],
)
def test_input_gradient_names_the_wrong_path(grad_input: Array, finding: Clause,
                                              phrase: str) -> None:
    assert input_gradient(grad_input, W, U, 1e-9) == finding
    assert say(finding) == phrase


def test_a_path_with_a_borrowed_weight_and_a_borrowed_gradient_is_a_missing_one() -> None:
    # dQ W_Q^T in the key path's place is "query twice, key missing": the simpler name.
    grad_input = 2 * path(Q, Q) + path(V, V)
    finding = input_gradient(grad_input, W, U, 1e-9)
    assert finding == Clause("path-counts", (("key",), ("query",)))
    assert say(finding) == "grad_input misses the key path and counts the query path twice"


def test_weight_gradient_names_a_borrowed_branch() -> None:
    rows = X.reshape(6, 5)
    grad_w_key = rows.T @ U[Q].reshape(6, 3)
    finding = weight_gradient(K, grad_w_key, X, U, 1e-9)
    assert finding == Clause("other-branch-gradient", ("key", "query"))
    assert say(finding) == "grad_w_key uses the query branch's gradient dL/dQ"


# --- a head's slips are the engine's maths given a wrong part ------------------------------

def test_the_right_variant_is_the_engine_s_head_and_the_scale_slips_are_exact() -> None:
    from qkvcli.attention.head import AttentionHead
    from qkvcli.check.reference import variant_forward

    x, weights = X, (W[0], W[1], W[2])
    raw = (x @ W[0]) @ np.swapaxes(x @ W[1], -1, -2)
    before_mask = AttentionHead.from_arrays(*weights).forward(x, False).scaled_scores
    for causal in (False, True):
        done = AttentionHead.from_arrays(*weights).forward(x, causal)
        scores, attention, output = variant_forward(x, weights, causal)
        assert scores.tobytes() == before_mask.tobytes()
        np.testing.assert_allclose(attention, done.attention, rtol=0, atol=1e-15)
        np.testing.assert_allclose(output, done.output, rtol=0, atol=1e-15)
    assert variant_forward(x, weights, False, "by-d_k")[0].tobytes() == (raw / 3).tobytes()
    assert variant_forward(x, weights, False, "unscaled")[0].tobytes() == raw.tobytes()


def test_the_judge_writes_no_attention_maths_of_its_own() -> None:
    """The softmax, its exp and the scale's root are qkvcli.attention.maths' alone."""
    import re
    from pathlib import Path

    import qkvcli.check

    folder = Path(qkvcli.check.__file__).parent
    found = [f"{path.name}:{number}" for path in sorted(folder.glob("*.py"))
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"np\.exp\(|math\.exp\(|sqrt", line)]
    assert found == []
