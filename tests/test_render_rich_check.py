"""``qkv check``'s rich view ends with the slips it names: at 80 columns by 24 rows the last
screen says what went wrong, not only which families failed."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from qkvcli.cli import main

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "implementations"
ROWS = 24


def last_screen(name: str, *extra: str) -> tuple[str, str]:
    """The rich view of ``qkv check`` on the example ``name`` as an 80x24 terminal's last
    screen shows it (stderr's lines take their rows too), and the whole of stdout."""
    result = CliRunner().invoke(main, ["check", str(EXAMPLES / name), "-f", "rich", *extra],
                                env={"COLUMNS": "80", "LINES": str(ROWS)})
    assert result.exit_code == 1, result.output
    below = len(result.stderr.splitlines())
    shown = result.stdout.splitlines()[-(ROWS - below):]
    assert all(len(line) <= 80 for line in shown)
    return " ".join(" ".join(shown).split()), result.stdout


@pytest.mark.parametrize(("name", "slips"), [
    ("wrong_head_unscaled.py",
     ["slip: scores are Q K^T: the 1/sqrt(d_k) scaling is missing (head-forward, scaling)"]),
    ("wrong_rope_not_inverted.py",
     ["slip: rope_reverse turns forward again instead of back (rope-reverse)",
      "slip: the backward turns dQ and dK forward through RoPE again instead of back "
      "(multi-head-reverse)"]),
    ("wrong_head_diagonal.py",
     ["slip: the causal mask hides the diagonal too (a position must see itself) "
      "(head-forward, mask)"]),
    ("wrong_mha_softmax_over_heads.py",  # named by relation: the engine with a stage changed
     ["slip: mha_forward: the softmax is taken over the heads axis instead of over each "
      "query's keys (multi-head)"]),
    ("wrong_head_float32_softmax.py",  # named by relation: float32 rounding
     ["slip: weights agrees with qkv only to float32 rounding"]),
], ids=["unscaled", "two-slips", "mask", "relation-stage", "relation-float32"])
def test_the_last_screen_names_the_slip(name: str, slips: list[str]) -> None:
    screen, _ = last_screen(name)
    for slip in slips:
        assert slip in screen
    assert "verdict: FAIL" in screen
    # the diagnosis's own words: the text report says them too
    text = CliRunner().invoke(main, ["check", str(EXAMPLES / name), "-f", "text"]).stdout
    for slip in slips:
        words = slip.removeprefix("slip: ")
        assert (words.rsplit(" (", 1)[0] if words.endswith(")") else words) in text


def test_a_slip_found_on_every_fixture_is_named_once() -> None:
    # Its words hold each fixture's cache length; it is still one slip.
    screen, _ = last_screen("wrong_cache_no_reset.py")
    assert screen.count("slip: the cache kept positions from an earlier run") == 1
    assert "reset did not empty it (cache-refusals, cache-replay)" in screen


def test_without_a_named_slip_the_first_finding_is_repeated() -> None:
    screen, _ = last_screen("wrong_modifies_input.py")
    assert "slip:" not in screen
    assert ("first finding: purity: chapter: forward changed its argument x[0,0,0] from 1.0 "
            "to 2.0") in screen


def test_a_passing_check_names_no_slip() -> None:
    result = CliRunner().invoke(main, ["check", str(EXAMPLES / "numpy_qkv.py"), "-f", "rich"],
                                env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "slip:" not in result.stdout and "first finding" not in result.stdout


def test_a_programs_stderr_keeps_its_lines() -> None:
    import io

    from rich.console import Console

    from qkvcli.check.result import CheckResult
    from qkvcli.core.results import FamilyCheck
    from qkvcli.render.rich.check import render_check_rich

    result = CheckResult("./prog", ("chapter",), (FamilyCheck("protocol", False, "failed"),), (),
                         stderr="prog: one\nprog: two\x07\n", command=True)
    console = Console(file=io.StringIO(), width=80, color_system=None, record=True)
    console.print(render_check_rich(result))
    shown = console.export_text().splitlines()
    at = shown.index("program stderr:")
    assert shown[at + 1:at + 3] == ["prog: one", "prog: two\\x07"]  # a control byte escaped
