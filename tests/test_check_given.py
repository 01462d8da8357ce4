"""``qkv check IMPL FIXTURE...``: a fixture the user gives is judged or refused, never
dropped (one named on its own that no operation of the implementation takes is a usage
error; a directory's are said one by one, and a directory none of whose fixtures is
judged is refused); each file judged once."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner, Result

from qkvcli.cli import main
from qkvcli.cli.check import build_cases
from qkvcli.gradcheck.settings import DEFAULT_SAMPLES

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "implementations"
ROPE_MHA = str(EXAMPLES / "numpy_rope_mha.py")
HEAD = str(EXAMPLES / "numpy_head.py")


@pytest.fixture(autouse=True)
def _in_a_folder_with_the_fixtures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for path in (ROOT / "fixtures").glob("ch*.json"):
        shutil.copyfile(path, tmp_path / path.name)
    monkeypatch.chdir(tmp_path)


def check(*arguments: str) -> Result:
    return CliRunner().invoke(main, ["check", *arguments, "--random", "0"])


def rope_only(tmp_path: Path) -> str:
    """The RoPE and multi-head example with its mha_forward misnamed: it offers RoPE."""
    source = Path(ROPE_MHA).read_text().replace("def mha_forward", "def multihead_forward")
    path = tmp_path / "misnamed.py"
    path.write_text(source)
    return path.name


def test_a_named_fixture_no_offered_operation_takes_is_a_usage_error(tmp_path: Path) -> None:
    impl = rope_only(tmp_path)
    result = check(impl, "ch30-multi-head-attention.json", "-f", "json")
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr == ("Error: ch30-multi-head-attention.json: a fixture of mha_forward, "
                             "which misnamed.py does not define (it defines: rope, "
                             "rope_reverse)\n")


def test_a_chapter_26_fixture_needs_the_projections_or_a_head() -> None:
    result = check(ROPE_MHA, "ch26-qkv-projections.json")
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("Error: ch26-qkv-projections.json: a fixture of forward "
                                    "or head_forward, which ")
    assert result.stderr.count("\n") == 1


def test_a_command_program_is_held_to_the_same_rule() -> None:
    command = f"python {EXAMPLES / 'command_qkv.py'}"
    result = check("--command", command, "ch29-rope.json")
    assert result.exit_code == 2, result.output
    assert result.stderr == (f"Error: ch29-rope.json: a fixture of rope, which {command} does "
                             "not define (it defines: forward, backward)\n")


def test_a_directory_says_each_fixture_it_skips_and_judges_the_rest(tmp_path: Path) -> None:
    impl = rope_only(tmp_path)
    folder = tmp_path / "mixed"
    folder.mkdir()
    for name in ("ch27-self-attention.json", "ch29-rope.json"):
        shutil.copyfile(name, folder / name)
    result = check(impl, "mixed", "-f", "json")
    assert result.exit_code == 0, result.output
    assert "mixed/ch29-rope.json" in json.loads(result.stdout)["fixtures"]
    assert [line for line in result.stderr.splitlines() if line.startswith("qkv:")] == [
        "qkv: not checked: mixed/ch27-self-attention.json: a fixture of head_forward, which "
        "misnamed.py does not define (it defines: rope, rope_reverse)"]


def test_a_directory_none_of_whose_fixtures_is_judged_is_a_usage_error(tmp_path: Path) -> None:
    folder = tmp_path / "later"
    folder.mkdir()
    shutil.copyfile("ch29-rope.json", folder / "ch29-rope.json")
    result = check(str(EXAMPLES / "numpy_qkv.py"), "later")
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines()[-1].startswith("Error: later: none of its fixtures is of "
                                                     "an operation ")


def test_a_fixture_given_twice_is_judged_once() -> None:
    result = check(ROPE_MHA, "ch29-rope.json", "./ch29-rope.json", "ch29-rope.json", "-f", "json")
    assert result.exit_code == 0, result.output
    fixtures = json.loads(result.stdout)["fixtures"]
    assert fixtures.count("ch29-rope.json") == 1
    assert "./ch29-rope.json" not in fixtures


def big_layer(path: Path, samples: int | None) -> Path:
    """A chapter 30 fixture of 1 x 64 x 256, 8 heads: the chapter's check of every
    coordinate is over run's budget; the check's samples a few."""
    data = json.loads(Path("ch30-multi-head-attention.json").read_text())
    rng = np.random.default_rng(30)
    data.update(heads=8, input=rng.uniform(-1, 1, (1, 64, 256)).tolist(),
                upstream=rng.uniform(-1, 1, (1, 64, 256)).tolist(),
                suffix=rng.uniform(-1, 1, 256).tolist(),
                weights={name: rng.uniform(-0.1, 0.1, (256, 256)).tolist()
                         for name in ("query", "key", "value", "output")})
    data["rope"]["positions"] = 128
    if samples is not None:
        data["gradcheck"]["samples"] = samples
    path.write_text(json.dumps(data))
    return path


def test_a_large_layer_is_read_by_the_checks_own_budget(tmp_path: Path) -> None:
    path = big_layer(tmp_path / "big30.json", None)
    cases = build_cases((path,), 0, 26, 1 << 22)
    assert cases[1].label == str(path) and cases[1].samples == DEFAULT_SAMPLES


def test_a_gradient_check_too_large_names_what_check_offers(tmp_path: Path) -> None:
    path = big_layer(tmp_path / "big30.json", 100_000)
    result = check(ROPE_MHA, str(path))
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"Error: {path}: its gradient check would make ")
    assert result.stderr.endswith("(give the fixture a smaller $.gradcheck.samples)\n")
    assert "--max-evaluations" not in result.stderr and "--mode" not in result.stderr


def changed(source: str, path: Path, change: Callable[[dict[str, Any]], None]) -> str:
    data = json.loads(Path(source).read_text())
    change(data)
    path.write_text(json.dumps(data))
    return path.name


def scaled(key: str, factor: float) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        data[key] = (np.asarray(data[key], dtype=np.float64) * factor).tolist()
    return change


def one(key: str, value: float) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        data[key][0][0][0] = value
    return change


def huge_step(data: dict[str, Any]) -> None:
    data["query"][0][0][0] = 1e160
    data["gradcheck"]["step"] = 1e150


@pytest.mark.parametrize(("impl", "source", "change", "said"), [
    (HEAD, "ch27-self-attention.json", one("query", 1e300),
     "$.query[0][0][0]: 1e+300, beside which the gradient check's step 1e-06 rounds back"),
    (HEAD, "ch27-self-attention.json", scaled("value", 1e12),
     "$.value[0][0][0]: 3e+12, beside which the gradient check's step 1e-06 rounds back"),
    (ROPE_MHA, "ch29-rope.json", scaled("query", 1e300),
     "$.query[0][0]: 1e+300, beside which the gradient check's step 1e-06 rounds back"),
    (HEAD, "ch27-self-attention.json", huge_step,
     "its head_forward scores overflows float64 once the gradient check moves its input "
     "and weights by the step 1e+150"),
], ids=["27-query-1e300", "27-value-1e12", "29-query-1e300", "27-overflow-near"])
def test_what_the_gradient_check_cannot_resolve_is_refused_up_front(
        impl: str, source: str, change: Callable[[dict[str, Any]], None], said: str,
        tmp_path: Path) -> None:
    name = changed(source, tmp_path / "bad.json", change)
    result = check(impl, name)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"Error: {name}: {said}"), result.stderr
    assert result.stderr.count("\n") == 1


def test_a_fixture_the_engine_fails_its_own_gradient_check_on_is_refused(
        tmp_path: Path) -> None:
    """Values a thousand times the chapter's: the step resolves them, but the fixture's
    tolerance is finer than central differences reach there, for qkv's engine too."""
    name = changed("ch27-self-attention.json", tmp_path / "scaled.json", scaled("value", 1e3))
    result = check(HEAD, name)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"Error: {name}: qkv's own engine fails head-gradcheck "
                                    "on it (non-causal): worst ")
    assert result.stderr.endswith("a correct implementation would too: change "
                                  "$.gradcheck.step or $.gradcheck.tolerance to fit its "
                                  "numbers\n")
    assert result.stderr.count("\n") == 1


def test_a_fixture_on_which_the_engine_fails_another_family_is_refused(tmp_path: Path) -> None:
    """Chapter 26's input a thousand times larger: each softmax row so saturated that
    changing the last token leaves an earlier output unchanged, qkv's too."""
    name = changed("ch26-qkv-projections.json", tmp_path / "saturated.json",
                   scaled("input", 1e3))
    result = check(HEAD, name)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"Error: {name}: qkv's own engine fails head-prefix on "
                                    "it: changing the last token's input left ")
    assert result.stderr.endswith("a correct implementation would too: change its numbers\n")
    # the projections' families alone judge it: nothing there a correct one fails
    assert check(str(EXAMPLES / "numpy_qkv.py"), name).exit_code == 0


def test_a_larger_scale_the_gradient_check_reaches_still_passes(tmp_path: Path) -> None:
    name = changed("ch27-self-attention.json", tmp_path / "scaled.json", scaled("value", 10))
    result = check(HEAD, name, "-f", "text")
    assert result.exit_code == 0, result.output


def test_too_few_rope_positions_for_the_tokens_names_positions(tmp_path: Path) -> None:
    def more_tokens(data: dict[str, Any]) -> None:
        for key in ("query", "key"):
            data[key] += [data[key][0]] * 4
        data["upstream"] = {name: rows + [rows[0]] * 4
                            for name, rows in data["upstream"].items()}
    name = changed("ch29-rope.json", tmp_path / "tokens.json", more_tokens)
    result = check(ROPE_MHA, name)
    assert result.exit_code == 2, result.output
    assert result.stderr == (f"Error: {name}: $.rope.positions: 6 positions, fewer than the 7 "
                             "tokens need (from $.rope.offset 0: positions [0, 7))\n")


def test_an_unknown_chapter_id_is_said_before_any_other_key(tmp_path: Path) -> None:
    name = changed("ch30-multi-head-attention.json", tmp_path / "ffn.json",
                   lambda data: data.update(chapter="31-ffn"))
    result = check(ROPE_MHA, name)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f'Error: {name}: $.chapter: "31-ffn" is not a chapter\'s '
                                    'id; qkv reads "26-qkv-projections", ')


def test_a_save_failures_folder_it_cannot_make_names_the_option(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder the up-front checks accept but the system will not make (``/proc/nope``
    on Linux): refused before the run, naming the option, as the other outputs are."""
    made = Path.mkdir

    def refuse(path: Path, *args: Any, **kwargs: Any) -> None:
        if path.name == "out":
            raise PermissionError(13, "Permission denied")
        made(path, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", refuse)
    result = check(ROPE_MHA, "ch29-rope.json", "--save-failures", "out", "-f", "json")
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr == ("Error: --save-failures out: cannot create the directory "
                             "(Permission denied)\n")


def test_a_one_token_layer_is_not_counted_by_the_prefix_family(tmp_path: Path) -> None:
    # Its claim is that every earlier token's output is kept: one token has none, so a
    # one-token fixture with a suffix is not among the fixtures the family says it judged.
    def first_token(data: dict[str, Any]) -> None:
        data["input"] = [item[:1] for item in data["input"]]
        data["upstream"] = [item[:1] for item in data["upstream"]]

    one_token = changed("ch30-multi-head-attention.json", tmp_path / "one.json", first_token)

    def prefix(*fixtures: str) -> dict[str, Any]:
        result = check(ROPE_MHA, *fixtures, "-f", "json")
        assert result.exit_code == 0, result.output
        checks = json.loads(result.output)["checks"]
        return next(entry for entry in checks if entry["name"] == "multi-head-prefix")

    alone, given = prefix(), prefix(one_token)
    assert given["passed"] and given["detail"] == alone["detail"]
