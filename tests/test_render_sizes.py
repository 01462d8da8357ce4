"""Realistic sizes: the summary form, streamed full dumps, vectorised formatting, --jobs."""

from __future__ import annotations

import hashlib
import json
import math
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from qkvcli.authoring.starter import generated_fixture_document
from qkvcli.check.chapter26 import build_evidence
from qkvcli.cli import main
from qkvcli.reading.load import load_fixture
from qkvcli.render.numbers import SMALL, fmt_float, iter_fixed, iter_vector
from qkvcli.render.report import iter_text, render_json, render_text
from qkvcli.render.tensors import (
    SUMMARY_THRESHOLD,
    Summaries,
    digest,
    l2_norm,
    shows_values,
    summarise,
    summarise_many,
)

# The chapter's reference outputs, as the repository holds them (tests/golden/ch26).
ANCHORS = Path(__file__).resolve().parent / "golden" / "ch26"


def _invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _unsigned_zero(text: str) -> str:
    # a value that rounds to zero is spelled 0.000000, never -0.000000 (issue 33)
    return text[1:] if text.startswith("-") and not text.strip("-0.") else text


def _reference(values: np.ndarray, precision: int = 6) -> str:
    # a vector keeps the reference's fixed point for every value, tiny ones included
    return ",".join(_unsigned_zero(f"{v:.{precision}f}") if math.isfinite(v)
                    else fmt_float(v, precision) for v in values.reshape(-1).tolist())


VALUES = {
    "uniform": np.random.default_rng(0).uniform(-1, 1, 5000),
    "wide": np.random.default_rng(1).normal(0, 1e5, 5000),
    "ties": (np.random.default_rng(2).integers(-10**7, 10**7, 5000) + 0.5) / 1e6,
    "dyadic": np.random.default_rng(3).integers(-50, 50, 500) / 128.0,
    "special": np.array([0.0, -0.0, -1e-9, 1e-9, 5e-7, -5e-7, 1e9, -1e12, 999999999.9999996,
                         np.nan, np.inf, -np.inf, 1e300, 123.4565]),
}
# Up to SMALL values take Python's own formatting; repeated, the specials take the arrays'.
VALUES["special_vectorised"] = np.tile(VALUES["special"], SMALL // VALUES["special"].size + 1)


@pytest.mark.parametrize("name", list(VALUES), ids=list(VALUES))
@pytest.mark.parametrize("precision", [6, 0, 3, 9])
def test_vectorised_formatting_gives_the_per_float_bytes(name, precision):
    values = VALUES[name]
    assert "".join(iter_fixed(values, precision, chunk=333)) == _reference(values, precision)


def test_digest_is_sha256_of_little_endian_float64_c_order():
    a = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    expected = hashlib.sha256(a.astype("<f8").tobytes()).hexdigest()
    assert digest(a) == expected
    view = np.concatenate([a, a], axis=2)[..., :4]  # a strided view: same values, same digest
    assert digest(view) == expected
    assert digest(a.astype(np.float32)) == expected
    changed = a.copy()
    changed[1, 2, 3] = np.nextafter(changed[1, 2, 3], 99.0)
    assert digest(changed) != expected


def test_summary_fields():
    a = np.arange(10, dtype=np.float64).reshape(2, 5)
    s = summarise(a)
    assert (s.shape, s.count, s.head, s.tail) == ((2, 5), 10, (0, 1, 2, 3), (6, 7, 8, 9))
    assert (s.minimum, s.maximum, s.mean) == (0.0, 9.0, 4.5)
    assert s.l2_norm == pytest.approx(np.sqrt(285.0))


def test_l2_norm_depends_on_the_values_only():
    # Above OpenBLAS's 10,000-element threading cut-off; BLAS ddot's last bits would follow
    # the thread count. The summary's norm must not follow the layout or the thread count.
    a = np.random.default_rng(5).uniform(-1, 1, (4, 64, 96))
    norm = l2_norm(a)
    assert norm == l2_norm(np.asfortranarray(a)) == l2_norm(np.concatenate([a, a], 2)[..., :96])
    assert norm == summarise(a).l2_norm
    assert norm == pytest.approx(float(np.linalg.norm(a.reshape(-1))), rel=1e-13)
    assert l2_norm(np.array([3.0, 4.0])) == 5.0


def test_summaries_computed_ahead_are_the_ones_computed_alone():
    rng = np.random.default_rng(6)
    # Enough elements in all for the second thread; sizes out of order, one strided view.
    arrays = [rng.uniform(-1, 1, 5000), rng.uniform(-1, 1, (700, 1024)),
              rng.uniform(-1, 1, (64, 96))[:, ::2], rng.uniform(-1, 1, (400, 1024))]
    assert summarise_many(arrays) == [summarise(a) for a in arrays]
    ahead = Summaries(arrays[1:])
    assert [ahead(a) for a in arrays] == [summarise(a) for a in arrays]
    assert ahead(arrays[1]) is ahead(arrays[1])  # found again, not recomputed
    assert ahead(arrays[1].copy()) == summarise(arrays[1])  # another object: computed
    bad = np.array([object()])  # the smallest: dealt to the caller's lane, or after one more
    for extra in ([], [np.zeros(2)]):  # small array to the worker's: either failure is raised
        with pytest.raises(TypeError):
            summarise_many([*arrays, *extra, bad])


def test_threshold():
    assert shows_values(SUMMARY_THRESHOLD, "summary")
    assert not shows_values(SUMMARY_THRESHOLD + 1, "summary")
    assert shows_values(10**9, "full") and not shows_values(1, "none")
    small = np.ones(SUMMARY_THRESHOLD)
    assert "".join(iter_vector(small, "summary")).startswith("[1.000000,")
    big = "".join(iter_vector(np.ones(SUMMARY_THRESHOLD + 1), "summary"))
    assert big.startswith("{shape:[4097] count:4097 head:[1.000000,1.000000")
    assert big.endswith(f"sha256:{digest(np.ones(SUMMARY_THRESHOLD + 1))}}}")


def _evidence(directory: Path, seed: int, *shape: int):
    path = directory / f"gen-{seed}-{'x'.join(map(str, shape))}.json"
    path.write_text(json.dumps(generated_fixture_document(seed, *shape)), encoding="utf-8")
    return build_evidence(load_fixture(path, max_elements=1 << 22))


@pytest.fixture(scope="module")
def large_evidence(tmp_path_factory):
    return _evidence(tmp_path_factory.mktemp("large"), 4, 2, 48, 64, 8)  # input 6144 elements


def test_chapter_output_is_unchanged_in_every_policy():
    expected = (ANCHORS / "expected.txt").read_text(encoding="utf-8")
    evidence = build_evidence(load_fixture())
    for policy in ("summary", "full"):
        assert render_text(evidence, policy) == expected
    for args in ((), ("--full",), ("--tensors", "full"), ("--tensors", "summary")):
        assert _invoke("report", "--format", "text", *args).stdout == expected


def test_full_json_streams_the_bytes_json_dumps_gives(large_evidence):
    from qkvcli.render.document import dumps, tensor_json
    from qkvcli.render.report import evidence_json

    document = evidence_json(large_evidence, "full")
    assert document["tensors"]["input"] == tensor_json(large_evidence.primary.input)
    assert render_json(large_evidence, "full") == dumps(document)


def test_summary_json_forms(large_evidence):
    summary = json.loads(render_json(large_evidence))["tensors"]
    assert summary["input"]["count"] == 6144 and "values" not in summary["input"]
    assert summary["input"]["summary"]["sha256"] == digest(large_evidence.primary.input)
    assert "values" in summary["query_weight"]  # 512 elements: small, shown in full
    none = json.loads(render_json(large_evidence, "none"))["tensors"]
    assert set(none["query_weight"]) == {"shape", "count", "sha256"}


def test_cli_tensors_option(tmp_path):
    path = tmp_path / "big.json"
    path.write_text(json.dumps(generated_fixture_document(4, 2, 48, 64, 8)), encoding="utf-8")
    default = _invoke("run", str(path), "-f", "text", "--mode", "fast").stdout
    assert "input=shape:[2,48,64] values:{shape:[2,48,64] count:6144 head:" in default
    full = _invoke("run", str(path), "-f", "text", "--mode", "fast", "--full").stdout
    assert full == _invoke("run", str(path), "-f", "text", "--mode", "fast",
                           "--tensors", "full").stdout
    assert "input=shape:[2,48,64] values:[" in full and len(full) > len(default)
    out = tmp_path / "out.json"
    result = _invoke("report", str(path), "-f", "json", "--tensors", "full", "-o", str(out),
                     "--mode", "fast")
    assert result.exit_code == 0
    assert len(json.loads(out.read_text(encoding="utf-8"))["tensors"]["input"]["values"]) == 6144


def _peak_of_full_text(evidence) -> int:
    tracemalloc.start()
    try:
        for _ in iter_text(evidence, "full"):
            pass
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_streaming_memory_does_not_grow_with_the_dump(tmp_path):
    small = _evidence(tmp_path, 5, 2, 64, 128, 16)
    large = _evidence(tmp_path, 5, 8, 256, 128, 16)
    text_small = sum(len(piece) for piece in iter_text(small, "full"))
    text_large = sum(len(piece) for piece in iter_text(large, "full"))
    assert text_large > 10 * text_small
    peak_small, peak_large = _peak_of_full_text(small), _peak_of_full_text(large)
    # Bounded by a chunk, not by the text: far below the large dump's size.
    assert peak_large < text_large / 2
    assert peak_large < 2 * peak_small + (1 << 20)


def test_jobs_gives_the_serial_summary_junit_and_status(tmp_path):
    directory = tmp_path / "many"
    directory.mkdir()
    for seed in range(4):
        (directory / f"f{seed}.json").write_text(
            json.dumps(generated_fixture_document(seed, 1, 4, 6, 3)), encoding="utf-8")
    (directory / "bad.json").write_text('{"bad": 1}', encoding="utf-8")
    serial = _invoke("run", str(directory), "--junit", str(tmp_path / "a.xml"))
    parallel = _invoke("run", str(directory), "--junit", str(tmp_path / "b.xml"), "--jobs", "3")
    assert serial.exit_code == parallel.exit_code == 2
    assert serial.stdout == parallel.stdout
    assert serial.stderr == parallel.stderr.replace("b.xml", "a.xml")  # "qkv: wrote FILE"
    assert (tmp_path / "a.xml").read_bytes() == (tmp_path / "b.xml").read_bytes()


def test_perturbed_evaluations_recompute_only_their_part_and_agree_with_the_loop():
    from qkvcli.core.outputs import weighted_loss
    from qkvcli.core.projections import QkvProjections
    from qkvcli.gradcheck.central import check_tensor
    from qkvcli.gradcheck.projections import gradcheck_projections

    rng = np.random.default_rng(7)
    x = rng.uniform(-1, 1, (2, 48, 64))  # 6144 elements: above the whole-copy limit
    layer = QkvProjections.from_arrays(*[rng.uniform(-1, 1, (64, 8)) for _ in range(3)])
    upstream = tuple(rng.uniform(-1, 1, (2, 48, 8)) for _ in range(3))
    analytic = tuple(layer.backward(x, *upstream))
    result = gradcheck_projections(layer, x, upstream, analytic, 1e-6, 2e-6, 9, mode="sampled")
    assert result.passed
    assert [t.recomputes for t in result.tensors] == ["perturbed row"] + ["perturbed branch"] * 3
    looped = check_tensor("input", x, analytic[0], 1e-6, 2e-6, 9,
                          lambda probe: weighted_loss(layer.forward(probe), upstream))
    for local, loop in zip(result.tensors[0].checks, looped.checks, strict=True):
        assert local.flat_index == loop.flat_index
        assert abs(local.numerical - loop.numerical) <= 2e-6 / 20
