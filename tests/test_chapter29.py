"""Chapter 29 (RoPE): the bundled fixture's report and trace byte for byte, the chapter's
validator and rejected inputs, a user's fixture of any table, against a reference written
here (plain NumPy pair by pair, and torch's autograd where torch is installed)."""

from __future__ import annotations

import io
import itertools
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rich.cells import cell_len

from qkvcli.attention.errors import ReleasedBuffer, RotaryRefusal
from qkvcli.chapters import ch29
from qkvcli.reading.json_values import parse_json_text
from qkvcli.reading.load import bundled_fixture_text
from qkvcli.reading.problems import FixtureError
from qkvcli.render.chapters import ch29 as report
from qkvcli.render.numbers import fmt_float
from qkvcli.render.rich.options import RichOptions

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "ch29"


def bundled() -> ch29.RopeEvidence:
    return ch29.build(ch29.parse(parse_json_text(bundled_fixture_text(ch29.FIXTURE))))


def test_the_bundled_fixture_is_shipped_twice_alike() -> None:
    assert (ROOT / "fixtures" / ch29.FIXTURE).read_bytes() == (
        ROOT / "qkvcli" / "data" / ch29.FIXTURE).read_bytes()


def test_text_is_the_anchor_byte_for_byte() -> None:
    assert report.text(bundled()) == (GOLDEN / "expected.txt").read_text(encoding="utf-8")


def test_trace_is_the_anchor_byte_for_byte() -> None:
    assert report.trace(bundled()) == (GOLDEN / "diagram-trace.txt").read_text(encoding="utf-8")


def test_the_first_line_names_the_chapter() -> None:
    assert report.text(bundled()).splitlines()[0] == f"chapter={ch29.NAME}"


def test_every_check_of_the_bundled_fixture_passes() -> None:
    evidence = bundled()
    assert [c.name for c in evidence.checks] == [
        "position_zero", "norms", "relative_dot", "shapes", "errors", "gradcheck",
        "tape_finite", "replay"]
    assert evidence.passed
    assert [len(t.checks) for t in evidence.gradcheck.tensors] == [12, 12]


# --- the validator and the rejected inputs -------------------------------------------------

TABLE = ch29.RotaryTable(4, 3, 100.0)


@pytest.mark.parametrize(("call", "message"), [
    (lambda: ch29.check_table(0, 0, math.nan), "rotary feature width must be nonzero"),
    (lambda: ch29.check_table(3, 0, math.nan), "rotary feature width must be even, got 3"),
    (lambda: ch29.check_table(4, 0, math.nan), "rotary position capacity must be nonzero"),
    (lambda: ch29.check_table(4, 2, 0.0),
     "rotary frequency base must be finite and positive, got 0.0"),
    (lambda: ch29.rotate_checked(TABLE, np.zeros(4), 2 ** 64),
     "rotary input needs at least rank two [..., tokens, features], got rank 1"),
    (lambda: ch29.rotate_checked(TABLE, np.zeros((1, 2)), 2 ** 64),
     "rotary input feature width must be 4, got 2"),
    (lambda: ch29.rotate_checked(TABLE, np.zeros((1, 4)), 2 ** 64),
     "rotary position interval overflows: offset 18446744073709551616 plus 1 tokens passes "
     "2^53, the last position binary64 holds exactly"),
    (lambda: ch29.rotate_checked(TABLE, np.zeros((2, 4)), 2),
     "rotary position interval [2, 4) exceeds capacity 3"),
], ids=["zero-width first", "odd width", "zero capacity", "base", "rank before position",
        "width before position", "overflow before range", "range"])
def test_the_validator_refuses_in_the_chapters_order(call: Any, message: str) -> None:
    with pytest.raises(RotaryRefusal) as raised:
        call()
    assert str(raised.value) == message


def test_a_released_buffer_is_refused_not_read() -> None:
    view = memoryview(bytearray(32)).cast("d", (1, 4))
    view.release()
    with pytest.raises(ReleasedBuffer) as raised:
        ch29.rotate_checked(TABLE, view, 0)
    assert raised.value.stage == "rotary-pairs"


def test_the_rejected_inputs_record_what_the_validator_raised() -> None:
    errors = bundled().errors
    assert [e.case for e in errors] == ["zero-width", "odd-width", "invalid-base", "input-rank",
                                        "width-mismatch", "position-range", "offset-overflow",
                                        "released-input"]
    assert all(e.rejected and e.message for e in errors)
    assert dict(errors[5].fields) == {"offset": 2, "tokens": 2, "capacity": 3}


def test_an_empty_token_axis_at_the_end_of_the_table_is_valid() -> None:
    out = ch29.rotate_checked(TABLE, np.zeros((2, 0, 4)), 3)
    assert out.shape == (2, 0, 4)


# --- any fixture of the chapter's kind ------------------------------------------------------


def reference_rotation(x: np.ndarray, positions: np.ndarray, base: float, layout: str) -> np.ndarray:
    """Pair by pair, written from the chapter's definition: pair ``i`` turned
    counterclockwise by ``position * base^(-2i/features)``."""
    tokens, features = x.shape
    out = np.array(x, dtype=np.float64)
    for t in range(tokens):
        for i in range(features // 2):
            a, b = (2 * i, 2 * i + 1) if layout == "adjacent" else (i, i + features // 2)
            angle = positions[t] * base ** (-2.0 * i / features)
            c, s = math.cos(angle), math.sin(angle)
            out[t, a] = x[t, a] * c - x[t, b] * s
            out[t, b] = x[t, b] * c + x[t, a] * s
    return out


def random_document(seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    features = int(rng.choice([2, 4, 6, 8]))
    tokens = int(rng.integers(1, 6))
    offset = int(rng.integers(0, 20))
    shift = int(rng.integers(0, 20))
    layout = "adjacent" if seed % 2 else "half"
    return {
        "rope": {"features": features, "positions": offset + shift + tokens + int(rng.integers(0, 4)),
                 "base": float(rng.uniform(2.0, 20000.0)), "layout": layout,
                 "offset": offset, "shift": shift},
        "query": rng.normal(size=(tokens, features)).tolist(),
        "key": rng.normal(size=(tokens, features)).tolist(),
        "upstream": {"query": rng.normal(size=(tokens, features)).tolist(),
                     "key": rng.normal(size=(tokens, features)).tolist()},
        "gradcheck": {"step": 1e-6, "tolerance": 1e-6},
    }


@pytest.mark.parametrize("seed", range(12))
def test_a_random_fixture_agrees_with_the_reference(seed: int) -> None:
    document = random_document(seed)
    rope = document["rope"]
    evidence = ch29.build(ch29.parse(parse_json_text(json.dumps(document))))
    q, k = np.array(document["query"]), np.array(document["key"])
    tokens = q.shape[0]
    positions = np.arange(rope["offset"], rope["offset"] + tokens, dtype=np.float64)
    shifted = positions + rope["shift"]
    p = evidence.primary
    rq = reference_rotation(q, positions, rope["base"], rope["layout"])
    rk = reference_rotation(k, positions, rope["base"], rope["layout"])
    np.testing.assert_allclose(p.rotated_query, rq, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(p.rotated_key, rk, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(p.shifted_query, reference_rotation(
        q, shifted, rope["base"], rope["layout"]), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(p.dot_grid, rq @ rk.T, rtol=1e-12, atol=1e-12)
    pairs = rope["features"] // 2
    inverse = rope["base"] ** (-2.0 * np.arange(pairs) / rope["features"])
    np.testing.assert_allclose(p.tables.inverse_frequencies, inverse, rtol=1e-14)
    np.testing.assert_allclose(p.tables.angles, positions[:, None] * inverse, rtol=1e-14)
    np.testing.assert_allclose(p.tables.cosines, np.cos(positions[:, None] * inverse), atol=1e-14)
    np.testing.assert_allclose(p.tables.sines, np.sin(positions[:, None] * inverse), atol=1e-14)
    uq, uk = np.array(document["upstream"]["query"]), np.array(document["upstream"]["key"])
    assert p.loss == pytest.approx(float(np.sum(rq * uq) + np.sum(rk * uk)), rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(p.input_norms, np.linalg.norm(q, axis=1), rtol=1e-14)
    assert evidence.passed, [c for c in evidence.checks if not c.passed]
    assert report.text(evidence).endswith(f"next={report.NEXT}\n")
    assert report.trace(evidence).count("\nPOSITION|") == tokens


@pytest.mark.parametrize("seed", range(6))
def test_the_gradients_agree_with_torch_autograd(seed: int) -> None:
    torch = pytest.importorskip("torch")
    document = random_document(seed)
    rope = document["rope"]
    evidence = ch29.build(ch29.parse(parse_json_text(json.dumps(document))))
    q = torch.tensor(document["query"], dtype=torch.float64, requires_grad=True)
    k = torch.tensor(document["key"], dtype=torch.float64, requires_grad=True)
    tokens, features = q.shape
    positions = torch.arange(rope["offset"], rope["offset"] + tokens, dtype=torch.float64)
    inverse = rope["base"] ** (-2.0 * torch.arange(features // 2, dtype=torch.float64) / features)
    angles = positions[:, None] * inverse[None, :]
    cos, sin = torch.cos(angles), torch.sin(angles)

    def turn(x: Any) -> Any:
        if rope["layout"] == "adjacent":
            a, b = x[:, 0::2], x[:, 1::2]
            return torch.stack((a * cos - b * sin, b * cos + a * sin), dim=-1).reshape(x.shape)
        a, b = x[:, : features // 2], x[:, features // 2:]
        return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)

    uq = torch.tensor(document["upstream"]["query"], dtype=torch.float64)
    uk = torch.tensor(document["upstream"]["key"], dtype=torch.float64)
    loss = (turn(q) * uq).sum() + (turn(k) * uk).sum()
    loss.backward()
    p = evidence.primary
    np.testing.assert_allclose(p.rotated_query, turn(q).detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(p.query_gradient, q.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(p.key_gradient, k.grad.numpy(), rtol=1e-12, atol=1e-12)
    assert p.loss == pytest.approx(float(loss.detach()), rel=1e-12, abs=1e-12)


def test_a_wrong_gradient_fails_the_check() -> None:
    fixture = ch29.parse(parse_json_text(bundled_fixture_text(ch29.FIXTURE)))
    found = ch29.primary(fixture, ch29.judge_session(fixture))
    wrong = found._replace(query_gradient=found.query_gradient + np.eye(3, 4))
    query_check, key_check = ch29.gradient_check(fixture, wrong).tensors
    assert not query_check.passed and key_check.passed


def test_an_offset_moves_the_positions_and_keeps_the_identity_check() -> None:
    document = json.loads(bundled_fixture_text(ch29.FIXTURE))
    document["rope"].update(offset=2, shift=1)
    evidence = ch29.build(ch29.parse(document))
    assert evidence.primary.tables.positions == (2, 3, 4)
    assert "offset:2->3" in report.text(evidence)
    assert "COMMON_SHIFT|before_positions=[2,3,4]|after_positions=[3,4,5]" in report.trace(evidence)
    assert evidence.primary.position_zero_identity and evidence.passed
    # position 0 is not among the fixture's: its row is turned
    assert not np.array_equal(evidence.primary.rotated_query[0], evidence.primary.query[0])


# --- bad fixtures: one problem, named by its $.path -----------------------------------------


def bad(change: Any) -> str:
    document = json.loads(bundled_fixture_text(ch29.FIXTURE))
    change(document)
    with pytest.raises(FixtureError) as raised:
        ch29.parse(document)
    return str(raised.value)


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d.update(extra=1), '$: unknown key "extra"; expected one of chapter, description, '
     'rope, query, key, upstream, gradcheck, invariant_tolerance'),
    (lambda d: d.update(chapter="30-multi-head-attention"),
     '$.chapter: expected "29-rope", got "30-multi-head-attention"'),
    (lambda d: d.pop("key"), '$: missing key "key"'),
    (lambda d: d["rope"].update(features=3), "$.rope.features: rotary feature width must be even, got 3"),
    (lambda d: d["rope"].update(positions=0),
     "$.rope.positions: rotary position capacity must be nonzero"),
    (lambda d: d["rope"].update(base=-1),
     "$.rope.base: rotary frequency base must be finite and positive, got -1.0"),
    (lambda d: d["rope"].update(layout="spiral"),
     "$.rope.layout: expected \"adjacent\" or \"half\", got \"spiral\""),
    (lambda d: d.update(query=[[1, 0], [0, 1]]),
     "$.query: rotary input feature width must be 4, got 2"),
    (lambda d: d.update(key=[[1, 0, 1, 0]]),
     "$.key: expected shape [3,4] (tokens, features), got [1,4]"),
    (lambda d: d["rope"].update(shift=4),
     "$.rope.shift: rotary position interval [4, 7) exceeds capacity 6"),
    (lambda d: d["rope"].update(offset=-1),
     "$.rope.offset: expected a non-negative integer, got -1"),
    (lambda d: d["upstream"].update(query=[[1, 2, 3, 4]]),
     "$.upstream.query: expected shape [3,4] (tokens, features), got [1,4]"),
], ids=["unknown key", "another chapter", "missing key", "odd features", "no positions", "base",
        "layout", "width", "key shape", "shift past the table", "negative offset", "upstream shape"])
def test_a_bad_fixture_names_the_path(change: Any, message: str) -> None:
    assert bad(change) == message
# --- JSON and figure ------------------------------------------------------------------------


def test_the_json_document_has_its_declared_keys() -> None:
    document = report.json_document(bundled())
    assert list(document) == list(report.JSON_KEYS)
    text = json.dumps(document, allow_nan=False)
    again = json.loads(text)
    assert again["chapter"] == ch29.NAME and again["passed"] is True
    assert again["tensors"]["rotated_query"]["shape"] == [3, 4]
    assert [e["case"] for e in again["errors"]] == [e.case for e in bundled().errors]


@pytest.mark.parametrize("width", [80, 120])
def test_the_figure_renders(width: int) -> None:
    rich_console = pytest.importorskip("rich.console")
    console = rich_console.Console(file=io.StringIO(), width=width, force_terminal=True,
                                   color_system=None, record=True)
    console.print(report.figure(bundled(), width))
    shown = console.export_text()
    assert "RoPE" in shown and "position 2" in shown
    assert max(cell_len(line) for line in shown.splitlines()) <= width  # cells, as drawn


def drawn(width: int, evidence: ch29.RopeEvidence | None = None) -> str:
    """A figure (the bundled fixture's unless ``evidence`` is given) printed as the CLI
    prints it: drawn for the width."""
    rich_console = pytest.importorskip("rich.console")
    console = rich_console.Console(file=io.StringIO(), width=width, force_terminal=True,
                                   color_system=None)
    console.print(report.figure(bundled() if evidence is None else evidence, width))
    return console.file.getvalue()  # type: ignore[no-any-return]


@pytest.mark.parametrize("width", [40, 60, 80, 120])
def test_the_figure_lays_out_for_its_width(width: int) -> None:
    """No line wider than the screen, no number cut (``…``) or wrapped (each of Q's and K's
    turned values, the angles and the dot products shows whole), the verdict at the end;
    and the CLI's width check (measured as the narrowest layout) asks for no more."""
    from rich.measure import Measurement

    shown = drawn(width)
    assert max(cell_len(line) for line in shown.splitlines()) <= width  # cells, as drawn
    assert "…" not in shown
    assert shown.rstrip().splitlines()[-1] == "verdict: PASS (8 of 8 checks passed)"
    evidence = bundled()
    p, t = evidence.primary, evidence.primary.tables
    for values in (p.rotated_query, p.rotated_key, t.angles, t.cosines, t.sines, p.dot_grid):
        for value in np.asarray(values).reshape(-1):
            assert fmt_float(float(value), RichOptions().precision) in shown
    rich_console = pytest.importorskip("rich.console")
    console = rich_console.Console(file=io.StringIO(), width=width, color_system=None)
    wide = console.options.update_width(10_000)
    assert Measurement.get(console, wide, report.figure(evidence, 10_000)).minimum <= 40


@pytest.mark.parametrize("seed", range(6))
def test_a_random_figure_fits_every_width_it_asks_for(seed: int) -> None:
    """From the width the CLI's check measures (the narrowest layout) up, a random
    fixture's figure draws within the width and cuts no number."""
    from rich.measure import Measurement

    evidence = ch29.build(ch29.parse(parse_json_text(json.dumps(random_document(seed)))))
    rich_console = pytest.importorskip("rich.console")
    console = rich_console.Console(file=io.StringIO(), width=200, color_system=None)
    need = Measurement.get(console, console.options.update_width(10_000),
                           report.figure(evidence, 10_000)).minimum
    for width in sorted({need, need + 7, max(need, 60), max(need, 100), max(need, 160)}):
        shown = drawn(width, evidence)
        assert max(cell_len(line) for line in shown.splitlines()) <= width  # cells, as drawn
        assert "…" not in shown and "verdict: PASS" in shown


def test_the_figure_keeps_its_wide_layout_where_there_is_room() -> None:
    """The angles stand in Q's and K's own tables from 80 columns, in one table below."""
    assert "for Q and K alike" not in drawn(120) and "for Q and K alike" in drawn(60)


def test_the_guide_explains_every_key_of_the_report_and_trace() -> None:
    from tests.test_docs import GUIDE, definitions, explanation, text_keys, trace_keys

    defined = definitions(GUIDE.read_text(encoding="utf-8"))
    evidence = bundled()
    missing = []
    for keys, joiner, suffix in ((text_keys(report.text(evidence)), "=", ":"),
                                 (trace_keys(report.trace(evidence)), "|", "=")):
        for key, subs in sorted(keys.items()):
            found = explanation(defined, key + joiner)
            if found is None:
                missing.append(key + joiner)
                continue
            missing += [f"{key}{joiner} {sub}{suffix}" for sub in sorted(subs)
                        if f"`{sub}{suffix}`" not in found.body]
    assert missing == []


def test_the_chapter_is_found_by_its_number() -> None:
    import importlib

    chapter = importlib.import_module("qkvcli.chapters.ch29")
    shown = importlib.import_module("qkvcli.render.chapters.ch29")
    assert chapter.NAME.startswith("29-") and chapter.FIXTURE == f"ch{chapter.NAME}.json"
    assert (ROOT / "qkvcli" / "data" / chapter.FIXTURE).is_file()
    for name in ("parse", "build"):
        assert callable(getattr(chapter, name))
    for name in ("text", "trace", "json_document", "figure"):
        assert callable(getattr(shown, name))


def test_position_zero_is_check_s_family_and_fails_for_a_rotation_counted_from_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Positions counted from 1: a row at position 0 is turned by one step. check's
    # position-zero family, run on the chapter's rotation, says so.
    original = ch29.rotate_checked

    def from_one(table: Any, values: Any, offset: int) -> Any:
        return original(table, values, offset + 1)

    monkeypatch.setattr(ch29, "rotate_checked", from_one)
    fixture = ch29.parse(parse_json_text(bundled_fixture_text(ch29.FIXTURE)))
    assert not ch29.position_zero_holds(fixture)
    monkeypatch.undo()
    assert ch29.position_zero_holds(fixture)


def test_replay_is_check_s_family_and_fails_when_the_reverse_drifts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Each turn back moves a little further: a second rope_reverse differs from the first
    # in its last bits, which check's replay family, run on the chapter's rotation, finds.
    original = ch29.rotate_checked
    calls = itertools.count()

    def drifting(table: Any, values: Any, offset: int, inverse: bool = False) -> Any:
        turned = original(table, values, offset, inverse)
        return turned + next(calls) * 1e-12 if inverse else turned

    monkeypatch.setattr(ch29, "rotate_checked", drifting)
    assert [c.name for c in bundled().checks if not c.passed] == ["replay"]
    monkeypatch.undo()
    assert bundled().passed
