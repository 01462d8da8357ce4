"""Slips in the chapter fixtures a learner gives `qkv check` (and edits of them): named
by the relation that holds on every fixture, even where a cheaper one fits one fixture
alone; a causal mask that leaks named once; one slip said on one summary line; "either"
in the summary said of every failing fixture."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from qkvcli.check import relate, stages
from qkvcli.check.relations import agreed, constants, every, leaked_band, relations
from qkvcli.cli import main
from qkvcli.core.results import Clause, Failure, found_at
from qkvcli.render.check import named_slips

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "implementations"
TOLERANCE = 1e-9
NAMED = constants(d_k=2, d_model=4, B=2, T=3)


def _items(x: np.ndarray, upstream: np.ndarray) -> tuple[tuple[str, np.ndarray], ...]:
    # [d,T] @ [T,h] -> [d,h]: item b's part of X^T dY
    return tuple((f"item:{b}", x[b].T @ upstream[b]) for b in range(x.shape[0]))


def test_alike_batch_items_name_the_item_every_fixture_agrees_on() -> None:
    """On two equal batch items, item 0's gradient alone is also half the sum: the factor
    is the cheaper relation there, but the missing item is what every fixture shows."""
    rng = np.random.default_rng(3)
    one = rng.normal(size=(1, 3, 4))
    alike, alike_up = np.concatenate([one, one]), np.concatenate([one[:, :, :2]] * 2)
    apart, apart_up = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 3, 2))
    found, held = [], []
    for x, up in ((alike, alike_up), (apart, apart_up)):
        parts = _items(x, up)
        expected, got = parts[0][1] + parts[1][1], parts[0][1]
        arguments = ("grad_w_query", got, expected, NAMED, ("row", "column"), TOLERANCE,
                     (parts,))
        found.append(relations(*arguments))
        held.append(every(*arguments))
    missing = Clause("parts", ("grad_w_query", "item:1=0"))
    assert Clause("factor", ("grad_w_query", "1/2")) in found[0]
    assert {clause.code for clause in found[0]} == {"factor"}
    assert missing in held[0] and found[1] == (missing,)
    assert agreed(found, held) == ((missing,), (missing,))
    assert agreed(found) == ((), ())  # what each fixture's cheapest relation alone agrees on


def test_the_duplicated_item_fixture_names_the_one_item_slip(tmp_path: Path) -> None:
    fixture = json.loads((ROOT / "fixtures" / "ch30-multi-head-attention.json").read_text())
    fixture["input"], fixture["upstream"] = fixture["input"] * 2, fixture["upstream"] * 2
    given = tmp_path / "ch30-alike.json"
    given.write_text(json.dumps(fixture))
    result = CliRunner().invoke(main, ["check", str(EXAMPLES / "wrong_mha_dw_one_item.py"),
                                       str(given), "--random", "0", "-f", "text"])
    slips = [line for line in result.stdout.splitlines() if line.startswith("slip:")]
    assert slips == ["slip: grad_w_query, grad_w_key and grad_w_value miss batch item 1: it "
                     "is not summed over the whole batch (multi-head-reverse)"], result.stdout


def test_a_band_of_zeros_past_the_diagonal_is_a_leaking_mask() -> None:
    weights = np.full((2, 4, 4), 0.25)
    weights[:, np.triu(np.ones((4, 4), dtype=bool), k=2)] = 0.0
    assert leaked_band(weights) == 2
    assert leaked_band(np.full((1, 3, 3), 0.3)) == 3  # nothing hidden: the offset is T
    weights[1, 3, 0] = 0.0  # a zero below the diagonal: no mask that leaks
    assert leaked_band(weights) is None
    weights = np.full((1, 4, 4), 0.25)
    weights[0, np.triu(np.ones((4, 4), dtype=bool), k=1)] = 0.0
    assert leaked_band(weights) is None  # qkv's own mask leaks nothing


def _head_run(x: np.ndarray, weights: tuple[np.ndarray, ...]) -> relate.Setting:
    return relate.Setting(constants(d_k=3), "head_forward", staged=True,
                          leaking=(1, lambda part: relate._head_staged(x, weights, True, part)))


def test_a_head_whose_mask_starts_one_key_late_is_named_by_that_mask() -> None:
    rng = np.random.default_rng(5)
    x, weights = rng.normal(size=(2, 5, 4)), tuple(rng.normal(size=(4, 3)) for _ in range(3))
    expected = relate._head_staged(x, weights, True, stages.PLAIN)
    for offset in (2, 3):
        got = relate._head_staged(x, weights, True, stages.WrongPart(hidden=f"from:{offset}"))
        why = relate.diagnose(("scores", "weights", "output"), got, expected,
                              _head_run(x, weights), Clause("value-differs"), TOLERANCE)
        assert why.code == "relation-differs"
        assert why.facts[0] == (Clause("variant", ("head_forward", f"mask:from:{offset}")),)
    # weights whose zeros are such a band but whose values are not that mask's: not named
    got = relate._head_staged(x, weights, True, stages.WrongPart(hidden="from:2"))
    off = (got[0], got[1] * 1.5, got[2])
    why = relate.diagnose(("scores", "weights", "output"), off, expected, _head_run(x, weights),
                          Clause("value-differs"), TOLERANCE)
    assert all("mask:from" not in str(clause) for clause in why.facts[0]), why


LEAKING_HEAD = '''
import sys
import numpy as np
sys.path.insert(0, {folder!r})
import numpy_head

_triu = np.triu
shim = type(sys)("np_leaking")
shim.__dict__.update(np.__dict__)
shim.triu = lambda m, k=0: _triu(m, k=2 if k == 1 else k)  # the slip: k=2 for k=1
numpy_head.np = shim
head_forward = numpy_head.head_forward
head_backward = numpy_head.head_backward
'''


def test_a_leaking_mask_is_one_slip_of_head_forward_and_the_mask_family(tmp_path: Path) -> None:
    learner = tmp_path / "leaking_head.py"
    learner.write_text(LEAKING_HEAD.format(folder=str(EXAMPLES)))
    result = CliRunner().invoke(main, ["check", str(learner),
                                       str(ROOT / "fixtures" / "ch28-causal-masking.json"),
                                       "--random", "0", "-f", "text"])
    slips = [line for line in result.stdout.splitlines() if line.startswith("slip:")]
    assert len(slips) == 1, result.stdout
    assert "the causal mask leaks: it hides only the keys 2 or more positions ahead" in slips[0]
    assert slips[0].endswith("(head-forward, mask)"), slips[0]


def test_a_layer_whose_mask_leaks_is_named_by_that_mask(tmp_path: Path) -> None:
    learner = tmp_path / "leaking_layer.py"
    learner.write_text(LEAKING_HEAD.format(folder=str(EXAMPLES)).replace(
        "import numpy_head", "import numpy_rope_mha as numpy_head").replace(
        "head_forward = numpy_head.head_forward\nhead_backward = numpy_head.head_backward",
        "rope, rope_reverse = numpy_head.rope, numpy_head.rope_reverse\n"
        "mha_forward, mha_backward = numpy_head.mha_forward, numpy_head.mha_backward"))
    result = CliRunner().invoke(main, ["check", str(learner),
                                       str(ROOT / "fixtures" / "ch30-multi-head-attention.json"),
                                       "--random", "0", "-f", "text"])
    slips = [line for line in result.stdout.splitlines() if line.startswith("slip:")]
    assert slips == ["slip: mha_forward: the causal mask leaks: it hides only the keys 2 or "
                     "more positions ahead, so each query also sees its next key (a mask such "
                     "as np.triu(..., k=2) where k=1 belongs) (multi-head)"], result.stdout


def test_a_finding_that_only_says_scores_are_wrong_is_the_slip_named_there() -> None:
    variant = Clause("relation-differs", ((Clause("variant", ("head_forward",
                                                               "divisor:2 d_h")),),
                                          Clause("value-differs")))
    generic = Clause("slip", (("not-scaled",),))
    failures = [found_at("head-forward", "chapter non-causal", "scores[0,0,1]", variant),
                found_at("scaling", "chapter non-causal", "scores", generic)]
    slips = named_slips(failures)
    assert [slip["checks"] for slip in slips] == [["head-forward", "scaling"]]
    assert "divided by 2*d_h" in slips[0]["slip"]
    # alone, or beside a slip of another tensor or fixture, it is still said
    other = found_at("head-forward", "contrast non-causal", "scores[0,0,0]", variant)
    assert len(named_slips([other, failures[1]])) == 2
    assert named_slips(failures[1:]) == [{"slip": "scores are not Q K^T / sqrt(d_k)",
                                          "checks": ["scaling"]}]


def test_slips_no_fixture_tells_apart_are_said_of_every_failing_fixture_in_the_summary() -> None:
    found = tuple(Clause("variant", ("mha_forward", code))
                  for code in ("rope=false", "positions:batch"))
    failure = Failure("multi-head", "mha[1,3,4/2] rope", "weights[0,0,0,0]",
                      code="relation-differs", facts=(found, Clause("value-differs")))
    said = named_slips([failure])[0]["slip"]
    assert said.startswith("either mha_forward gives qkv's results with rope=false")
    assert said.endswith("(the failing fixtures cannot tell them apart)")
    assert "on this fixture" not in said
    catalogued = found_at("scaling", "precision", "scores",
                          Clause("slip", (("by-d_k", "by-root-d_model"),)))
    said = named_slips([catalogued])[0]["slip"]
    assert said.startswith("either scores are divided by d_k"), said
    assert "on this fixture" not in said and "the same numbers here" not in said
