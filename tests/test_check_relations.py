"""The relation finder names a wrong tensor by what relates it to the engine's, on any
tensor: a factor (named when it is a size), axes exchanged, one index for all, counted
parts, float32 rounding, a confined region; a relation that only nearly holds is never
named; relations are kept only where every fixture agrees. The stages the finder
compares a layer with are the engine's layer when no part is changed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qkvcli.check import stages
from qkvcli.check.cases import mha_cases
from qkvcli.check.reference import engine_mha, engine_mha_backward
from qkvcli.check.relations import (
    agreed,
    confined,
    constants,
    counted_parts,
    exchanged,
    factor,
    float32_rounded,
    one_for_all,
    relations,
    unexplained,
)
from qkvcli.core.arrays import close
from qkvcli.core.results import Clause
from qkvcli.render.check import say
from qkvcli.render.relation_words import relations as said_relations

RNG = np.random.default_rng(45)
E = RNG.uniform(-1, 1, (2, 3, 4))
NAMED = constants(d_k=2, d_model=4, B=2, T=3, H=2)
AXES = ("batch", "token", "feature")
TOLERANCE = 1e-9


def test_a_factor_is_named_by_the_size_it_is() -> None:
    assert factor("grad_w_query", math.sqrt(2) * E, E, NAMED, TOLERANCE) == (
        Clause("factor", ("grad_w_query", "root d_k")),)
    assert factor("w", E / 6, E, NAMED, TOLERANCE) == (Clause("factor", ("w", "1/(B*T)")),)
    assert factor("w", -E, E, NAMED, TOLERANCE) == (Clause("factor", ("w", "-1")),)


def test_a_factor_two_sizes_share_is_either() -> None:
    found = factor("w", 2 * E, E, NAMED, TOLERANCE)  # d_k = 2 = B = H = sqrt(d_model)
    assert {clause.facts[1] for clause in found} == {"d_k", "root d_model", "B", "H", "2"}
    assert said_relations(found).startswith(
        "on this fixture, either w is d_k times qkv's or it is sqrt(d_model) times qkv's or ")


def test_a_factor_that_is_no_size_is_a_constant_multiple() -> None:
    assert factor("w", 0.37 * E, E, NAMED, TOLERANCE) == (Clause("factor", ("w", "c")),)


def test_a_near_factor_is_not_named() -> None:
    near = math.sqrt(2) * E
    near[1, 2, 3] += 1e-6
    assert factor("w", near, E, NAMED, TOLERANCE) == ()
    assert relations("w", near, E, NAMED, AXES, TOLERANCE) == ()


def test_a_transpose_and_two_axes_exchanged() -> None:
    square = RNG.uniform(-1, 1, (4, 4))
    assert exchanged("grad_w_query", square.T, square, ("row", "column"), TOLERANCE) == (
        Clause("exchanged", ("grad_w_query", "row/column")),)
    assert say(Clause("exchanged", ("grad_w_query", "row/column"))) == (
        "grad_w_query is qkv's transposed")
    weights = RNG.uniform(0, 1, (1, 3, 3, 3))
    heads_for_tokens = np.swapaxes(weights, 1, 2)
    assert exchanged("weights", heads_for_tokens, weights,
                     ("batch", "head", "query", "key"), TOLERANCE) == (
        Clause("exchanged", ("weights", "head/query")),)
    nearly = square.T.copy()
    nearly[0, 1] += 1e-6
    assert exchanged("w", nearly, square, ("row", "column"), TOLERANCE) == ()


def test_one_batch_item_standing_for_all() -> None:
    first = np.broadcast_to(E[:1], E.shape)
    assert one_for_all("output", first, E, AXES, TOLERANCE) == (
        Clause("one-for-all", ("output", "batch", "first")),)
    assert say(Clause("one-for-all", ("output", "batch", "first"))) == (
        "every batch of output is qkv's first batch")


def test_float32_rounding_is_named_and_a_float64_error_is_not() -> None:
    rounded = E.astype(np.float32).astype(np.float64)
    assert float32_rounded("weights", rounded, E) == (Clause("float32", ("weights",)),)
    assert float32_rounded("weights", E + 1e-7, E) == ()  # not float32 values
    off = rounded.copy()
    off[0, 0, 0] = np.float32(off[0, 0, 0] + 1e-3)  # a float32, but 1e-3 away
    assert float32_rounded("weights", off, E) == ()


def test_a_float32_softmax_that_underflows_is_precision_not_a_mask() -> None:
    z = np.array([[[0.0, -120.0, -5.0], [-200.0, 0.0, -1.0], [-3.0, -150.0, 0.0]]])
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    expected = e / e.sum(axis=-1, keepdims=True)
    z32 = z.astype(np.float32)
    e32 = np.exp(z32 - z32.max(axis=-1, keepdims=True))
    got = (e32 / e32.sum(axis=-1, keepdims=True)).astype(np.float64)
    assert (got == 0).any() and not (expected == 0).any()  # the tiny weights underflowed
    found = relations("weights", got, expected, NAMED, ("batch", "query", "key"), TOLERANCE)
    assert found == (Clause("float32", ("weights",)),)


def test_a_missing_path_and_one_item_for_all_are_counted_parts() -> None:
    paths = tuple((f"path:{branch}", RNG.uniform(-1, 1, (2, 3, 4)))
                  for branch in ("query", "key", "value"))
    total = paths[0][1] + paths[1][1] + paths[2][1]
    no_key = paths[0][1] + paths[2][1]
    found = counted_parts("grad_input", no_key, paths, NAMED, TOLERANCE)
    assert found == (Clause("parts", ("grad_input", "path:key=0")),)
    assert say(found[0]) == "grad_input misses the key path"
    assert relations("grad_input", no_key, total, NAMED, AXES, TOLERANCE, (paths,)) == found
    # a count that is no size (0.37 of a path) is not a relation
    assert counted_parts("grad_input", total - 0.63 * paths[1][1], paths, NAMED,
                         TOLERANCE) == ()


def test_differences_confined_to_the_diagonal() -> None:
    weights = RNG.uniform(0, 1, (2, 3, 3))
    diagonal = weights.copy()
    diagonal[:, [0, 1, 2], [0, 1, 2]] += 0.5
    assert confined("weights", diagonal, weights, TOLERANCE) == (
        Clause("confined", ("weights", "diagonal")),)
    anywhere = diagonal.copy()
    anywhere[0, 2, 0] += 0.5
    assert confined("weights", anywhere, weights, TOLERANCE) == ()


def test_the_cheapest_class_wins() -> None:
    # 2 E is a factor; it is no transpose and no float32, so only factors are named
    found = relations("w", 2 * E, E, NAMED, AXES, TOLERANCE)
    assert {clause.code for clause in found} == {"factor"}


def test_a_relation_is_kept_only_where_every_wrong_fixture_agrees() -> None:
    both = (Clause("factor", ("w", "root d_k")), Clause("factor", ("w", "2")))
    one = (Clause("factor", ("w", "root d_k")),)
    assert agreed([both, one]) == (one, one)
    assert agreed([one, (unexplained("w"),)]) == ((), ())
    # a tensor right on one fixture does not veto its name on another
    assert agreed([one, (Clause("factor", ("v", "2")),)]) == (one, (Clause("factor", ("v", "2")),))


@pytest.mark.parametrize("case", mha_cases(), ids=lambda case: case.label)
def test_the_stages_with_no_part_changed_are_the_engine_s_layer(case: object) -> None:
    from qkvcli.check.cases import Case

    assert isinstance(case, Case)
    x, weights, heads = case.input, case.weights, case.heads
    for causal in (False, True):
        for rope in (False, True):
            done = stages.forward(x, weights, heads, causal, rope, case.base, case.offset)
            engine = engine_mha(x, weights, heads, causal, rope, case.base, case.offset)
            assert all(close(a, b, 1e-12) for a, b in zip(
                (done.weights, done.merged, done.output), engine, strict=True))
            grads = stages.backward(x, weights, heads, causal, rope, case.base, case.offset,
                                    case.upstream[0])
            wanted = engine_mha_backward(x, weights, heads, causal, rope, case.base,
                                         case.offset, case.upstream[0])
            assert all(close(a, b, 1e-12) for a, b in zip(grads, wanted, strict=True))


@pytest.mark.parametrize(("before", "result", "stages"), [
    ("weights", "merged", ["mixture", "head merge"]),
    ("merged", "output", ["output projection"]),
    ("", "scores", ["projection", "scores", "scale"]),
])
def test_the_first_result_that_differs_names_its_stages_from_their_one_description(
        before: str, result: str, stages: list[str]) -> None:
    from qkvcli.render.relation_words import relation
    from qkvcli.stages.table import STAGES

    words = relation(Clause("diverges", (result, before)))
    assert words.startswith(f"{result} is the first result that differs")
    for name in stages:  # each stage as the explorer's panels describe it
        assert f"{name}: {STAGES[name].formula}" in words
    assert "the step from" in words if before else "right)" not in words


def test_a_pair_no_description_lists_names_no_stage() -> None:
    from qkvcli.render.relation_words import relation

    assert relation(Clause("diverges", ("lengths", "keys"))) == (
        "lengths is the first result that differs (keys right): the step from keys to "
        "lengths is wrong")
