"""The head's evidence: checks that pass on good runs, fail on bad data, and teacher's notes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from qkvcli.attention.fixture import head_of, load_attend_fixture, parse_attend_fixture
from qkvcli.check.attend import build_attend_evidence, hull_evidence
from qkvcli.render.attend import attend_checks, attend_json

CHECKS = ["forward", "attention", "mask", "hull", "reverse", "shapes", "replay", "gradcheck"]
PUBLISHED_CHECKS = ["forward", "weights", "mask", "hull", "reverse", "shapes", "replay",
                    "gradcheck"]


def fixture_data(wq: Any, wk: Any, wv: Any, **extra: Any) -> dict[str, Any]:
    return {"input": [[[1, 2, -1], [0, 1, 2], [2, -1, 1]]],
            "weights": {"query": wq, "key": wk, "value": wv}, **extra}


A = [[1, 0], [0, 1], [1, -1]]
B = [[0, 1], [1, 0], [-1, 1]]
C = [[1, 1], [1, -1], [0, 2]]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("example", ["chapter", "primer"])
def test_bundled_examples_pass_every_check(example: str, causal: bool) -> None:
    evidence = build_attend_evidence(load_attend_fixture(example=example), causal)
    # prefix: causal only; the scale probe is every head's (chapter 27's claim)
    claims = ["scale_probe", *(["prefix"] if causal else []), "single_token"]
    assert [c.name for c in evidence.checks] == [*CHECKS[:4], *claims, *CHECKS[4:]]
    assert [c.name for c in attend_checks(evidence)] == [*PUBLISHED_CHECKS[:4], *claims,
                                                         *PUBLISHED_CHECKS[4:]]
    assert evidence.passed, [c for c in evidence.checks if not c.passed]
    assert evidence.mask.applicable is causal


def test_primer_rows_report_the_worked_example() -> None:
    evidence = build_attend_evidence(load_attend_fixture(example="primer"))
    first = evidence.rows[0]
    assert (first.batch, first.token) == (0, 0)
    assert [round(w, 4) for w in first.attention] == [0.9442, 0.0558]
    assert [round(v, 4) for v in first.output] == [1.1116, 2.7768]
    assert first.attention_sum == pytest.approx(1.0, abs=1e-15)


@pytest.mark.parametrize(
    ("weights", "codes"),
    [
        ((A, B, C), []),
        ((A, A, C), ["symmetric-matching"]),
        ((A, A, A), ["collapsed-roles"]),
        ((A, B, A), []),
    ],
    ids=["distinct", "q-equals-k", "all-equal", "q-equals-v"],
)
def test_teacher_notes(weights: tuple[Any, Any, Any], codes: list[str]) -> None:
    evidence = build_attend_evidence(parse_attend_fixture(fixture_data(*weights)))
    assert [note.code for note in evidence.notes] == codes
    assert evidence.passed  # notes are remarks, not failures


def test_symmetric_note_is_true_of_the_scores() -> None:
    evidence = build_attend_evidence(parse_attend_fixture(fixture_data(A, A, C)))
    scores = evidence.primary["scores"]
    np.testing.assert_array_equal(scores, np.swapaxes(scores, -1, -2))


def test_equal_weights_with_different_biases_are_not_identical() -> None:
    data = fixture_data({"values": A, "bias": [1, 0]}, {"values": A, "bias": [0, 1]}, C)
    assert build_attend_evidence(parse_attend_fixture(data)).notes == ()


def test_independent_value_width_note_and_shapes() -> None:
    data = fixture_data(A, B, [[1, 0, 2], [0, 1, 0], [1, 1, 1]], value_width="independent")
    evidence = build_attend_evidence(parse_attend_fixture(data), causal=True)
    assert evidence.passed
    assert [n.code for n in evidence.notes] == ["independent-value-width"]
    assert evidence.primary["output"].shape == (1, 3, 3)
    assert evidence.config.d_v == 3 and evidence.config.d_k == 2


def test_hull_check_fails_for_an_output_outside_the_values() -> None:
    fixture = load_attend_fixture(example="primer")
    forward = head_of(fixture.parameters, fixture.function).forward(fixture.input)
    assert hull_evidence(forward, 2).passed
    moved = forward._replace(output=forward.output + np.array([0.0, 10.0]))
    hull = hull_evidence(moved, 2)
    assert not hull.passed and hull.box_violations == 2 and hull.barycentric_residual == 10.0


def test_evidence_fails_when_the_gradcheck_tolerance_is_impossible() -> None:
    fixture = load_attend_fixture(example="primer")._replace(tolerance=0.0, step=1e-3)
    evidence = build_attend_evidence(fixture)
    assert not evidence.passed
    assert [c.name for c in evidence.checks if not c.passed] == ["gradcheck"]


def test_biases_are_checked_by_the_gradient_check() -> None:
    data = fixture_data({"values": A, "bias": [0.5, -1]}, B, {"values": C, "bias": [2, 1]})
    evidence = build_attend_evidence(parse_attend_fixture(data))
    # the evidence holds internal names; render/ publishes them
    assert [t.tensor for t in evidence.gradcheck.tensors] == [
        "input", "w_query", "w_key", "w_value", "b_query", "b_value"]
    assert [t["tensor"] for t in attend_json(evidence)["gradcheck"]["tensors"]] == [
        "input", "query_weight", "key_weight", "value_weight", "query_bias", "value_bias"]
    assert evidence.passed
    assert "grad_b_query" in evidence.primary.tensors
    assert "b_key" not in evidence.primary.tensors


def test_replay_is_bitwise_and_tensors_are_read_only() -> None:
    evidence = build_attend_evidence(load_attend_fixture())
    assert evidence.replay_bitwise
    with pytest.raises(ValueError):
        evidence.primary["attention"][0, 0, 0] = 2.0


@pytest.mark.parametrize("seed", range(6), ids=lambda s: f"seed{s}")
def test_gradcheck_passes_on_seeded_random_fixtures(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    d_model, d_k, d_v = 3 + seed % 3, 2 + seed % 2, 2 + (seed + 1) % 3
    value: dict[str, Any] = {"values": rng.normal(size=(d_v, d_model)).tolist(), "layout": "torch"}
    if seed % 2:
        value["bias"] = rng.normal(size=d_v).tolist()
    data = {
        "seed": seed,
        "value_width": "independent",
        "input": rng.normal(size=(2, 1 + seed % 4, d_model)).tolist(),
        "weights": {"query": {"values": rng.normal(size=(d_model, d_k)).tolist(),
                              "bias": rng.normal(size=d_k).tolist()},
                    "key": rng.normal(size=(d_model, d_k)).tolist(), "value": value},
    }
    for causal in (False, True):
        evidence = build_attend_evidence(parse_attend_fixture(data), causal)
        assert evidence.gradcheck.passed, evidence.gradcheck.worst
        assert evidence.passed


def _layer(**changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "heads": 4, "kv_heads": 2, "causal": True, "rope": {"theta": 10000, "dims": 8},
        "input": {"generate": {"seed": 1, "shape": [2, 20, 16]}},
        "weights": {"query": {"generate": {"seed": 2, "shape": [16, 32]}},
                    "key": {"generate": {"seed": 3, "shape": [16, 16]}},
                    "value": {"generate": {"seed": 4, "shape": [16, 16]}},
                    "out_proj_weight": {"generate": {"seed": 5, "shape": [16, 32]}}},
    }
    document.update(changes)
    return document


def _checks(document: dict[str, Any]) -> dict[str, bool]:
    evidence = build_attend_evidence(parse_attend_fixture(document))
    return {check.name: check.passed for check in evidence.checks}


def test_a_multi_head_rope_causal_layer_gets_every_claim_a_learner_s_layer_gets() -> None:
    checks = _checks(_layer())
    for name in ("prefix", "single_token", "head_isolation", "position_zero", "replay"):
        assert checks[name], name


def test_isolation_needs_two_heads_and_heads_no_norm_joins_and_position_zero_needs_rope() -> None:
    assert "head_isolation" not in _checks(_layer(heads=1, kv_heads=1, weights={
        "query": {"generate": {"seed": 2, "shape": [16, 8]}},
        "key": {"generate": {"seed": 3, "shape": [16, 8]}},
        "value": {"generate": {"seed": 4, "shape": [16, 8]}},
        "out_proj_weight": {"generate": {"seed": 5, "shape": [16, 8]}}}))
    plain = _layer()
    del plain["rope"]
    assert "position_zero" not in _checks(plain) and _checks(plain)["head_isolation"]
    weights = dict(_layer()["weights"])
    weights.update({"q_norm_weight": {"generate": {"seed": 6, "shape": [32]}},
                    "k_norm_weight": {"generate": {"seed": 7, "shape": [16]}}})
    joined = _checks(_layer(weights=weights, qk_norm={"span": "layer", "eps": 1e-6}))
    assert "head_isolation" not in joined and joined["position_zero"]


def test_position_zero_of_a_scaled_rope_is_its_attention_factor_not_a_failure() -> None:
    """YaRN multiplies cos and sin by its attention factor: at position 0 a turned
    coordinate is the factor times itself, which the claim expects, and nothing else."""
    from qkvcli.attention.fixture import layer_of
    from qkvcli.attention.maths import rotate
    from qkvcli.core.rope import attention_factor

    scaled = _layer(rope={"theta": 10000, "dims": 6, "scaling": {
        "type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}})
    assert _checks(scaled)["position_zero"]
    layer = layer_of(parse_attend_fixture(scaled))
    assert layer.rope is not None and layer.rope.scaling is not None
    factor = attention_factor(layer.rope.scaling)
    assert factor != 1.0
    first = np.arange(1.0, 9.0).reshape(1, 1, 1, 8)
    turned = rotate(first, layer.rope._replace(offset=0))
    assert np.array_equal(turned[..., :6], first[..., :6] * factor)
    assert np.array_equal(turned[..., 6:], first[..., 6:])  # partial: the rest passes through


def test_the_scale_probe_softens_exactly_when_the_scale_shrinks() -> None:
    """Chapter 27's probe, every head's: the default and a given scale below 1 soften the
    focus; a scale of 1 (no scaling) or above does not, and the claim holds for each."""
    from qkvcli.attention.head import scale_probe

    default, shrinking, none, growing = (scale_probe(4), scale_probe(4, 0.25),
                                         scale_probe(4, 1.0), scale_probe(4, 2.0))
    assert default.softened and shrinking.softened and default.holds and shrinking.holds
    assert not none.softened and not growing.softened and none.holds and growing.holds
    assert _checks(_layer(scale=2.0))["scale_probe"]
    lying = default._replace(scale=1.5)  # softened, yet the scale claims to sharpen
    assert not lying.holds


def test_attend_s_prefix_is_check_s_family_and_fails_when_an_earlier_output_sees_the_last(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The layer's output reads its last token's output a little: the prefix family
    # (check's, on the layer as an implementation) fails, and attend says so.
    from qkvcli.attention import engine

    original = engine.forward

    def leaking(*args: Any, **kwargs: Any) -> Any:
        done = original(*args, **kwargs)
        return done._replace(output=done.output + 1e-3 * done.output[:, -1:, :])

    assert _checks(_layer())["prefix"]
    monkeypatch.setattr(engine, "forward", leaking)
    assert not _checks(_layer())["prefix"]


def test_a_layer_whose_heads_leak_fails_head_isolation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Head isolation is qkv check's family on the layer: a forward whose second head's
    weights lean on the first's moves with head 0's W_Q columns, and the claim fails."""
    from qkvcli.attention.multihead import MultiHeadLayer

    honest = MultiHeadLayer.forward

    def leaky(self: MultiHeadLayer, x: Any, causal: bool, *args: Any, **kwargs: Any) -> Any:
        done = honest(self, x, causal, *args, **kwargs)
        attention = np.array(done.stacked["attention"])
        attention[:, 1] += 1e-3 * attention[:, 0]
        return done._replace(stacked={**done.stacked, "attention": attention})

    assert _checks(_layer())["head_isolation"]
    monkeypatch.setattr(MultiHeadLayer, "forward", leaky)
    assert not _checks(_layer())["head_isolation"]


def test_a_rotation_that_turns_position_zero_fails_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Position zero is qkv check's family on the layer's rotation: one that counts
    positions from 1 turns the first token, and the claim fails."""
    import qkvcli.check.attend as attend

    honest = attend.rotate

    def from_one(values: Any, rope: Any, *args: Any) -> Any:
        return honest(values, rope._replace(offset=rope.offset + 1), *args)

    monkeypatch.setattr(attend, "rotate", from_one)
    assert not _checks(_layer())["position_zero"]


def test_a_layer_whose_second_pass_differs_fails_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replay is qkv check's family on the layer: a forward whose output drifts from one
    call to the next (by one part in 10^12) fails it, everything else unchanged."""
    from qkvcli.attention.multihead import MultiHeadLayer

    honest = MultiHeadLayer.forward
    calls = [0]

    def drifting(self: MultiHeadLayer, x: Any, causal: bool, *args: Any, **kwargs: Any) -> Any:
        done = honest(self, x, causal, *args, **kwargs)
        calls[0] += 1
        return done._replace(output=done.output * (1.0 + 1e-12 * calls[0]))

    monkeypatch.setattr(MultiHeadLayer, "forward", drifting)
    checks = _checks(_layer())
    assert not checks["replay"]
    assert checks["forward"] and checks["reverse"]


def test_attend_s_facts_name_each_tensor_s_axes_where_its_shape_has_them() -> None:
    from qkvcli.render.attend import facts

    head = facts(build_attend_evidence(load_attend_fixture()))["tensors"].value
    assert head["input"].axes == ("batch", "token", "d_model")
    assert head["query_weight"].axes == head["query_weight_gradient"].axes == ("d_model", "d_k")
    assert head["value"].axes == ("batch", "key", "d_v")
    assert head["weights"].axes == head["scores_gradient"].axes == ("batch", "query", "key")
    layer = facts(build_attend_evidence(parse_attend_fixture(_layer())))["tensors"].value
    assert layer["weights"].axes == ("batch", "head", "query", "key")
    assert layer["key_weight"].axes == ("d_model", "kv_heads_d_k")  # 2 K/V heads
    assert layer["key"].axes == ("batch", "key", "heads_d_k")  # repeated for the 4 heads
    assert layer["output"].axes == ("batch", "query", "e_out")
    assert layer["out_proj_weight"].axes == ()  # as the fixture laid it out: not named
    for fact in (*head.values(), *layer.values()):
        assert not fact.axes or len(fact.axes) == np.ndim(fact.value)
