"""Large tensors without giant JSON: ``.npy`` files and seeded generation."""

from __future__ import annotations

import hashlib
import json
import os
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from qkvcli.authoring.starter import (
    generated_fixture_document,
    npy_fixture_document,
    write_npy_atomic,
)
from qkvcli.core.splitmix import SplitMix64, xavier_uniform
from qkvcli.reading.load import load_fixture
from qkvcli.reading.parse import parse_fixture
from qkvcli.reading.problems import FixtureError
from qkvcli.reading.sources import generate_tensor, load_npy


def _chapter_like(tensor_value):
    return {
        "input": tensor_value,
        "weights": {
            "query": [[1, 0], [0, 1], [1, -1]],
            "key": [[0, 1], [1, 0], [-1, 1]],
            "value": [[1, 1], [1, -1], [0, 2]],
        },
    }


def _write_fixture(directory: Path, document) -> Path:
    path = directory / "f.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


# --- .npy ---------------------------------------------------------------------------------


def test_npy_input_next_to_the_fixture_is_read_whole_and_read_only(tmp_path):
    x = np.arange(12, dtype=np.float64).reshape(2, 2, 3) / 4
    (tmp_path / "data").mkdir()
    np.save(tmp_path / "data" / "x.npy", x)
    path = _write_fixture(tmp_path, _chapter_like({"npy": "data/x.npy"}))
    fixture = load_fixture(path)  # resolved against the fixture's directory, not the cwd
    assert np.array_equal(fixture.input, x)
    assert fixture.input.dtype == np.float64
    assert not fixture.input.flags.writeable
    assert not isinstance(fixture.input, np.memmap)  # a copy: the file may change meanwhile
    assert fixture.input.base is None or not isinstance(fixture.input.base, np.memmap)


@pytest.mark.parametrize(
    "array",
    [np.arange(6, dtype=np.int32).reshape(1, 2, 3), np.ones((1, 2, 3), dtype=np.float32),
     np.asfortranarray(np.arange(6.0).reshape(1, 2, 3)), np.ones((1, 2, 3), dtype=">f8")],
    ids=["int32", "float32", "fortran", "big-endian"],
)
def test_npy_other_numeric_layouts_become_float64(tmp_path, array):
    np.save(tmp_path / "x.npy", array)
    loaded = load_npy("x.npy", "$.input.npy", tmp_path, 1000)
    assert loaded.dtype == np.float64
    assert np.array_equal(loaded, array.astype(np.float64))


def test_weight_from_npy_keeps_its_name(tmp_path):
    np.save(tmp_path / "q.npy", np.array([[1.0, 0.0], [0.0, 1.0], [1.0, -1.0]]))
    document = _chapter_like([[[1, 2, -1], [0, 1, 2]]])
    document["weights"]["query"] = {"name": "my.query.weight", "npy": "q.npy"}
    fixture = parse_fixture(document, base_dir=tmp_path)
    assert fixture.names[0] == "my.query.weight"
    assert np.array_equal(fixture.weights[0], [[1, 0], [0, 1], [1, -1]])


def _error(tmp_path, raw, max_elements=1000) -> FixtureError:
    with pytest.raises(FixtureError) as caught:
        load_npy(raw, "$.input.npy", tmp_path, max_elements)
    assert caught.value.location == "$.input.npy"
    return caught.value


def test_npy_shape_is_checked_from_the_header_before_loading(tmp_path):
    # A header promising 10^12 elements over a few bytes of data: the size check must
    # fire from the header alone (loading would fail differently, or exhaust memory).
    from numpy.lib import format as npy_format

    with open(tmp_path / "huge.npy", "wb") as handle:
        npy_format.write_array_header_1_0(
            handle, {"descr": "<f8", "fortran_order": False, "shape": (1000, 1000, 1000000)}
        )
        handle.write(b"\0" * 64)
    error = _error(tmp_path, "huge.npy")
    assert error.message == (
        "shape [1000,1000,1000000] has 1000000000000 elements, more than the limit 1000 "
        "(raise it with --max-elements)"
    )


def test_npy_errors(tmp_path):
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    assert "object arrays (pickles) are refused" in _error(tmp_path, "objects.npy").message
    np.save(tmp_path / "complex.npy", np.ones(3, dtype=np.complex128))
    assert "dtype complex128 is not supported" in _error(tmp_path, "complex.npy").message
    (tmp_path / "text.npy").write_text("not numpy")
    assert _error(tmp_path, "text.npy").message == "text.npy is not a .npy file"
    assert _error(tmp_path, "missing.npy").message == "no such file: missing.npy"
    np.save(tmp_path / "nan.npy", np.array([1.0, np.nan]))
    assert _error(tmp_path, "nan.npy").message == (
        "nan.npy: value at flat index 1 is not finite (nan)"
    )
    np.save(tmp_path / "short.npy", np.arange(100.0))
    data = (tmp_path / "short.npy").read_bytes()
    (tmp_path / "short.npy").write_bytes(data[:-80])
    assert "cannot read short.npy" in _error(tmp_path, "short.npy").message
    assert "expected a non-empty relative path" in _error(tmp_path, 5).message


def test_npy_paths_stay_inside_the_fixture_directory(tmp_path):
    inside = tmp_path / "fixture"
    inside.mkdir()
    np.save(tmp_path / "outside.npy", np.ones(3))
    absolute = str(tmp_path / "outside.npy")
    assert "absolute path" in _error(inside, absolute).message
    assert _error(inside, "../outside.npy").message == (
        "../outside.npy: '..' is refused; give a path inside the fixture's directory"
    )
    os.symlink(tmp_path / "outside.npy", inside / "link.npy")
    assert _error(inside, "link.npy").message == (
        "link.npy resolves outside the fixture's directory; refused"
    )
    (inside / "sub").mkdir()
    np.save(inside / "ok.npy", np.ones(3))
    # '..' is refused even when it stays inside: one rule, no path arithmetic to get wrong.
    assert "'..' is refused" in _error(inside, "sub/../ok.npy").message
    assert load_npy("ok.npy", "$.input.npy", inside, 10).shape == (3,)


def test_npy_error_carries_the_json_location(tmp_path):
    document = _chapter_like([[[1, 2, -1], [0, 1, 2]]])
    document["upstream"] = {"key": {"npy": "nope.npy"}}
    with pytest.raises(FixtureError) as caught:
        parse_fixture(document, base_dir=tmp_path)
    assert str(caught.value) == "$.upstream.key.npy: no such file: nope.npy"
    document["upstream"] = {"key": {"npy": "a.npy", "generate": {}}}
    with pytest.raises(FixtureError, match='give either "npy" or "generate"'):
        parse_fixture(document, base_dir=tmp_path)
    document["upstream"] = {"key": {"npy": "a.npy", "shape": [1]}}
    with pytest.raises(FixtureError, match='unknown key "shape"'):
        parse_fixture(document, base_dir=tmp_path)


def test_write_npy_atomic_round_trips_and_leaves_no_temporary(tmp_path):
    array = np.arange(6.0).reshape(2, 3)
    write_npy_atomic(tmp_path / "a.npy", array)
    assert np.array_equal(np.load(tmp_path / "a.npy"), array)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npy"]


# --- generation ---------------------------------------------------------------------------


def test_uniform_generation_is_splitmix_two_u_minus_one():
    values = generate_tensor(42, (3, 4))
    rng = SplitMix64(42)
    expected = [2.0 * rng.next_unit_f64() - 1.0 for _ in range(12)]
    assert values.reshape(-1).tolist() == expected
    assert values.min() >= -1.0 and values.max() < 1.0


def test_scaled_uniform_equals_xavier_initialization():
    limit = float(np.sqrt(6.0 / (5 + 3)))
    assert np.array_equal(generate_tensor(9, (5, 3), scale=limit),
                          xavier_uniform(5, 3, SplitMix64(9)))


def test_generation_does_not_depend_on_block_size(monkeypatch):
    whole = generate_tensor(3, (50,), "normal")
    monkeypatch.setattr("qkvcli.reading.sources.GENERATE_BLOCK", 7)
    assert np.array_equal(generate_tensor(3, (50,), "normal"), whole)
    assert np.array_equal(generate_tensor(3, (50,)), generate_tensor(3, (50,)))



def _digest(array) -> str:
    return hashlib.sha256(np.ascontiguousarray(array, dtype="<f8").tobytes()).hexdigest()


# Digests taken before generation moved in place (blocks of 1 << 20 then): the same spec
# must give the same bits forever. Sizes cross the old and the new block boundaries.
PINNED_GENERATION = [
    ((5, (3, 70001), "uniform", 1.0),
     "6b293ad64216cf005ab9cf0e115bc3e4901edbf300e2d83f719b9133756a6490"),
    ((7, (70001, 3), "normal", 1.0),
     "40af707866c8f2c4ee8bd84a9f1113875194be0eb1b4158686498f96eb92d89d"),
    ((11, (1_100_003,), "uniform", 0.07426106572325057),
     "5d7adb887f19f1419fdc6f3feb92b18a020ecb14f0fac8fd436aa795e43a378f"),
    ((13, (1_048_577,), "normal", 2.5),
     "90ac06cf6b79c34db2e24f21ec5482548a39f2ba33da454963b0eb64ba53c2b3"),
    ((0, (0,), "uniform", 1.0),
     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
    ((1, (1,), "normal", 1.0),
     "d5cefd83d82d293462bc8961ba28d6db6e660e37e8403684a77ec53804347753"),
]


@pytest.mark.parametrize(("spec", "digest"), PINNED_GENERATION,
                         ids=["uniform", "normal", "scaled-uniform", "scaled-normal", "empty", "one"])
def test_generated_tensors_keep_their_bits(spec, digest):
    assert _digest(generate_tensor(*spec)) == digest


def test_generated_fixture_keeps_its_bits():
    fixture = parse_fixture(generated_fixture_document(5, 2, 3, 8, 4))
    tensors = (fixture.input, *fixture.weights, *fixture.upstream)
    assert _digest(np.concatenate([t.reshape(-1) for t in tensors])) == (
        "ae1f2914958472d70e56d1ea5756ac2571e3a9df208c8ff9e3c04fc3a995d21c")


def _traced_peak(function):
    tracemalloc.start()
    try:
        result = function()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("distribution", ["uniform", "normal"])
def test_generation_allocates_little_beyond_its_output(distribution):
    # 8 MiB of output; generating it once cost 24-32 MiB more in uint64 temporaries.
    values, peak = _traced_peak(lambda: generate_tensor(3, (1 << 20,), distribution, 0.5))
    assert peak <= values.nbytes + 4 * 2**20


def test_loading_a_generated_fixture_peaks_near_its_tensors_size():
    document = generated_fixture_document(5, 4, 256, 1024, 16)  # an 8 MiB input
    fixture, peak = _traced_peak(lambda: parse_fixture(document))
    held = sum(t.nbytes for t in (fixture.input, *fixture.weights, *fixture.upstream))
    assert peak <= held + 4 * 2**20

def test_normal_generation_looks_normal():
    values = generate_tensor(1, (20000,), "normal")
    assert abs(values.mean()) < 0.05 and abs(values.std() - 1.0) < 0.05


@pytest.mark.parametrize(
    ("spec", "location", "message"),
    [
        ({"shape": [2]}, "$.input.generate", 'missing key "seed"'),
        ({"seed": -1, "shape": [2]}, "$.input.generate.seed", "expected an integer from 0"),
        ({"seed": 1, "shape": [2, -1]}, "$.input.generate.shape[1]", "non-negative integer"),
        ({"seed": 1, "shape": [100, 100]}, "$.input.generate.shape", "more than the limit 1000"),
        ({"seed": 1, "shape": [2], "distribution": "cauchy"}, "$.input.generate.distribution",
         "expected one of uniform, normal"),
        ({"seed": 1, "shape": [2], "scale": 0}, "$.input.generate.scale", "greater than zero"),
        ({"seed": 1, "shape": [2], "sede": 1}, "$.input.generate", 'did you mean "seed"'),
    ],
    ids=["no-seed", "negative-seed", "negative-dim", "too-large", "distribution", "scale",
         "typo"],
)
def test_generate_errors(spec, location, message):
    with pytest.raises(FixtureError) as caught:
        parse_fixture(_chapter_like({"generate": spec}), max_elements=1000)
    assert caught.value.location == location
    assert message in caught.value.message


def test_generated_document_loads_and_matches_its_npy_form(tmp_path):
    document = generated_fixture_document(5, 2, 3, 8, 4)
    assert len(json.dumps(document)) < 2000
    generated = parse_fixture(document)
    assert generated.input.shape == (2, 3, 8) and generated.d_head == 4
    npy_document, arrays = npy_fixture_document(document, "tensors")
    (tmp_path / "tensors").mkdir()
    for relative, array in arrays.items():
        write_npy_atomic(tmp_path / relative, array)
    assert npy_document["input"] == {"npy": "tensors/input.npy"}
    from_files = load_fixture(_write_fixture(tmp_path, npy_document))
    for a, b in zip((generated.input, *generated.weights, *generated.upstream),
                    (from_files.input, *from_files.weights, *from_files.upstream), strict=True):
        assert a.tobytes() == np.ascontiguousarray(b).tobytes()
    assert len(set(generated.input.reshape(-1).tolist())) == generated.input.size


def test_generated_shapes_with_an_empty_axis_still_respect_the_limit() -> None:
    # [10**11, 0, 3] holds no values, but the work over its other axes is not small.
    document = _chapter_like({"generate": {"seed": 1, "shape": [10**11, 0, 3]}})
    with pytest.raises(FixtureError) as caught:
        parse_fixture(document)
    assert caught.value.location == "$.input.generate.shape"
    assert "raise it with --max-elements" in caught.value.message
