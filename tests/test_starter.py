"""Starter fixtures: the reference's seeded weights bit for bit, input and upstream on their own."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkvcli.authoring.starter import (
    INPUT_TAG,
    UPSTREAM_TAG,
    dump_fixture,
    starter_fixture,
    starter_values,
    stream,
)
from qkvcli.core.projections import QkvProjections
from qkvcli.core.splitmix import SplitMix64, xavier_uniform
from qkvcli.reading.json_values import parse_json_text
from qkvcli.reading.parse import parse_fixture


def _bits(array: np.ndarray) -> bytes:  # type: ignore[type-arg]
    return np.ascontiguousarray(array, dtype=np.float64).tobytes()


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**64 - 1), batch=st.integers(0, 3), tokens=st.integers(0, 3),
    d_model=st.integers(1, 6), d_head=st.integers(1, 6),
)
def test_written_weights_load_back_equal_to_from_seed_bit_for_bit(
    seed: int, batch: int, tokens: int, d_model: int, d_head: int
) -> None:
    text = dump_fixture(starter_fixture(seed, batch, tokens, d_model, d_head))
    loaded = parse_fixture(parse_json_text(text))
    reference = QkvProjections.from_seed(d_model, d_head, SplitMix64(seed))
    for got, want in zip(loaded.weights, reference.weights, strict=True):
        assert _bits(got) == _bits(want)
    assert loaded.seed == seed
    assert loaded.names == reference.names
    assert loaded.input.shape == (batch, tokens, d_model)
    assert all(u.shape == (batch, tokens, d_head) for u in loaded.upstream)


def test_weights_are_query_key_value_drawn_in_order_from_one_fresh_generator() -> None:
    # Independent of from_seed: three consecutive Xavier draws from SplitMix64(7).
    rng = SplitMix64(7)
    expected = [xavier_uniform(5, 4, rng) for _ in range(3)]
    layer, _, _ = starter_values(7, 2, 3, 5, 4)
    for got, want in zip(layer.weights, expected, strict=True):
        assert _bits(got) == _bits(want)


def test_input_and_upstream_never_shift_the_weights() -> None:
    small = starter_values(11, 1, 1, 3, 2)[0]
    large = starter_values(11, 4, 9, 3, 2)[0]
    for a, b in zip(small.weights, large.weights, strict=True):
        assert _bits(a) == _bits(b)


def test_streams_are_their_own_generators() -> None:
    _, x, upstream = starter_values(5, 2, 2, 3, 2)
    draws = stream(5, INPUT_TAG).next_unit_block(12)
    assert np.array_equal(x.reshape(-1), (np.floor(draws * 33) - 16) * 0.125)
    up = stream(5, UPSTREAM_TAG).next_unit_block(24)
    flat = np.concatenate([u.reshape(-1) for u in upstream])
    assert np.array_equal(flat, (np.floor(up * 9) - 4) * 0.25)
    assert stream(5, INPUT_TAG).state != stream(5, UPSTREAM_TAG).state
    assert stream(5, INPUT_TAG).state != SplitMix64(5).state


def test_values_are_readable_steps() -> None:
    _, x, upstream = starter_values(3, 3, 4, 5, 2)
    assert np.all(np.abs(x) <= 2) and np.array_equal(x * 8, np.round(x * 8))
    for u in upstream:
        assert np.all(np.abs(u) <= 1) and np.array_equal(u * 4, np.round(u * 4))


def test_different_seeds_give_different_fixtures() -> None:
    assert starter_fixture(1, 1, 2, 3, 2) != starter_fixture(2, 1, 2, 3, 2)
    assert starter_fixture(1, 1, 2, 3, 2) == starter_fixture(1, 1, 2, 3, 2)


def test_empty_axes_use_the_flat_form() -> None:
    data = starter_fixture(1, 0, 2, 3, 2)
    assert data["input"] == {"shape": [0, 2, 3], "values": []}
    assert parse_fixture(data).input.shape == (0, 2, 3)


def test_dump_is_json_with_one_row_per_line() -> None:
    data = {"a": [[1.5, -0.0], [2, 3]], "b": {"c": 1e-6}}
    text = dump_fixture(data)
    assert json.loads(text) == data
    assert "[1.5, -0.0]" in text.splitlines()[2]
    assert text.endswith("}\n")


def test_zero_head_width_is_refused() -> None:
    from qkvcli.core.errors import ProjectionError, ZeroOutputWidth

    with pytest.raises(ProjectionError) as raised:
        starter_values(1, 1, 1, 3, 0)
    assert raised.value == ProjectionError("query", ZeroOutputWidth())


def test_init_generate_and_npy_give_the_reference_weights(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from qkvcli.cli import main
    from qkvcli.core.projections import QkvProjections
    from qkvcli.core.splitmix import SplitMix64
    from qkvcli.reading.load import load_fixture

    runner = CliRunner()
    args = ["--seed", "7", "--batch", "2", "--tokens", "3", "--d-model", "5", "--d-head", "4"]
    generated = tmp_path / "g.json"
    result = runner.invoke(main, ["init", *args, "--generate", "-o", str(generated)])
    assert result.exit_code == 0, result.output
    assert len(generated.read_text()) < 1500
    on_disk = tmp_path / "n.json"
    result = runner.invoke(main, ["init", *args, "--npy", "tensors", "-o", str(on_disk)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "tensors").iterdir()) == sorted(
        f"{name}.npy" for name in ("input", "query_weight", "key_weight", "value_weight",
                                   "query_upstream", "key_upstream", "value_upstream"))
    reference = QkvProjections.from_seed(5, 4, SplitMix64(7))
    first, second = load_fixture(generated), load_fixture(on_disk)
    for a, b, c in zip(first.weights, second.weights, reference.weights, strict=True):
        assert a.tobytes() == np.ascontiguousarray(b).tobytes() == c.tobytes()
    assert first.input.tobytes() == np.ascontiguousarray(second.input).tobytes()
    assert runner.invoke(main, ["run", str(generated), "-f", "text"]).exit_code == 0
    again = runner.invoke(main, ["init", *args, "--npy", "tensors", "-o", str(tmp_path / "m.json")])
    assert again.exit_code == 2
    assert "already exists (use --force to overwrite it)" in again.stderr


def test_init_npy_needs_an_output_file() -> None:
    from click.testing import CliRunner

    from qkvcli.cli import main

    result = CliRunner().invoke(main, ["init", "--npy", "tensors"])
    assert result.exit_code == 2
    assert "--npy needs -o FILE" in result.stderr
