"""Learner-written slips no catalogue entry was written for, each a bundled
``wrong_*.py``: ``qkv check`` names each by the relation that explains it, in the family
its slip belongs to, for the projections, a head, RoPE and multi-head attention alike;
and a float32 softmax whose tiny weights underflow is named as precision, never as a
mask that hides the diagonal."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from qkvcli.cli import main

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "implementations"

NAMED = {
    # multi-head attention's backward
    "wrong_mha_backward_unscaled.py": (
        "multi-head-reverse", "grad_input counts the query path sqrt(d_k) times, counts the "
        "key path sqrt(d_k) times (qkv counts each once); grad_w_query and grad_w_key are "
        "sqrt(d_k) times qkv's (a 1/sqrt(d_k) left out)"),
    "wrong_mha_backward_ignores_mask.py": (
        "multi-head-reverse", "mha_backward gives qkv's results with causal=false: the causal "
        "mask is ignored"),
    "wrong_mha_dw_one_item.py": (
        "multi-head-reverse", "grad_w_query, grad_w_key and grad_w_value miss batch item 1: "
        "it is not summed over the whole batch"),
    "wrong_mha_no_key_path.py": ("multi-head-reverse", "grad_input misses the key path"),
    "wrong_mha_dv_uses_a.py": (
        "multi-head-reverse", "grad_value is computed with A instead of A^T (dV = A dO)"),
    "wrong_mha_dwq_transposed.py": ("multi-head-reverse", "grad_w_query is qkv's transposed"),
    "wrong_mha_dx_untransposed.py": (
        "multi-head-reverse", "mha_backward: grad_input's paths use the weights, not their "
        "transposes (dX = dQ W_Q + dK W_K + dV W_V)"),
    "wrong_rope_reverse_degrees.py": (
        "multi-head-reverse", "mha_backward: RoPE's angles are taken as degrees (each angle "
        "times pi/180) in the turn back through RoPE alone"),
    "wrong_mha_no_value_path.py": ("multi-head-reverse", "grad_input misses the value path"),
    "wrong_mha_dx_through_wq.py": (
        "multi-head-reverse", "mha_backward sends every path of grad_input through W_Q^T "
        "(dX = (dQ + dK + dV) W_Q^T)"),
    "wrong_mha_split_back_reshaped.py": (
        "multi-head-reverse", "mha_backward splits dC = dY W_O^T into the heads with a reshape "
        "and no transpose"),
    "wrong_mha_rowsum_over_queries.py": (
        "multi-head-reverse", "mha_backward: the softmax backward's row-sum term sums over "
        "the query axis instead of each query's keys"),
    "wrong_mha_dwo_from_input.py": (
        "multi-head-reverse", "mha_backward: grad_w_output is X^T dY instead of merged^T dY"),
    "wrong_mha_dv_without_wo.py": (
        "multi-head-reverse", "mha_backward: dV is made from the heads of dY, not of dY W_O^T"),
    # multi-head attention's forward
    "wrong_mha_softmax_max_over_queries.py": (
        "multi-head", "mha_forward: the softmax subtracts the maximum over the query axis "
        "instead of each query's own row"),
    "wrong_mha_rope_value_not_key.py": (
        "multi-head", "mha_forward: RoPE turns the queries and the values instead of the keys"),
    "wrong_mha_output_unmasked.py": (
        "multi-head", "mha_forward: the output is mixed with the unmasked weights (the weights "
        "returned are masked)"),
    "wrong_mha_scale_after_softmax.py": (
        "multi-head", "mha_forward: the scores are scaled after the softmax (softmax(Q K^T) / "
        "sqrt(d_h)) instead of before it"),
    "wrong_mha_merge_strided.py": (
        "multi-head", "mha_forward: the heads are merged strided (head h's column j at j*H + h) "
        "instead of side by side (at h*d_h + j)"),
    "wrong_mha_mask_after_softmax.py": (
        "multi-head", "mha_forward: the causal mask is applied after the softmax (the later "
        "keys' weights zeroed, the rows not normalised again)"),
    "wrong_mha_no_output_projection.py": (
        "multi-head", "output equals qkv's merged: the stages after merged are skipped"),
    "wrong_mha_rope_query_only.py": (
        "multi-head", "RoPE turns the queries only (the keys are not turned)"),
    "wrong_mha_rope_before_split.py": (
        "multi-head", "RoPE is applied before the head split"),
    "wrong_mha_softmax_over_heads.py": (
        "multi-head", "the softmax is taken over the heads axis instead of over each query's "
        "keys"),
    "wrong_mha_diagonal_nan.py": (
        "multi-head", "mha_forward: the causal mask hides the diagonal too (a position must "
        "see itself): mha_forward's weights holds NaN or infinity"),
    # RoPE, alone and inside the layer
    "wrong_rope_degrees.py": ("rope", "RoPE's angles are taken as degrees (each angle times "
                                      "pi/180)"),
    "wrong_rope_batch_positions.py": (
        "rope", "RoPE takes each position from the batch axis instead of the token axis"),
    # a head
    "wrong_head_no_key_path.py": ("head-reverse", "grad_input misses the key path"),
    "wrong_head_dwq_transposed.py": ("head-reverse", "grad_w_query is qkv's transposed"),
    "wrong_head_backward_unscaled.py": (
        "head-reverse", "grad_w_query and grad_w_key are sqrt(d_k) times qkv's (a 1/sqrt(d_k) "
        "left out)"),
    "wrong_head_diagonal_nan.py": (
        "head-forward", "head_forward: the causal mask hides the diagonal too (a position "
        "must see itself): head_forward's weights holds NaN or infinity"),
    "wrong_head_softmax_over_batch.py": (
        "head-forward", "head_forward: the softmax is taken over the batch axis instead of "
        "over each query's keys"),
    "wrong_head_no_softmax_reverse.py": (
        "head-reverse", "head_backward: the gradient skips the softmax's reverse (dZ = dA)"),
    "wrong_head_dq_dk_swapped.py": (
        "head-reverse", "head_backward: dQ and dK are each computed with the other's operand "
        "(dQ = dS Q, dK = dS^T K)"),
    "wrong_head_scale_precedence.py": (
        "head-forward", "head_forward: each head's scores are divided by 2*d_h instead of "
        "sqrt(d_h)"),
    "wrong_head_float32_softmax.py": (
        "head-forward", "weights agrees with qkv only to float32 rounding"),
    # the projections
    "wrong_projections_dx_through_wq.py": (
        "reverse", "grad_input sends every path through W_Q^T (dX = (dQ + dK + dV) W_Q^T)"),
    # a layer's KV cache
    "wrong_cache_positions_from_one.py": (
        "cache-steps", "cache_steps: RoPE counts positions from 1 instead of 0"),
    "wrong_cache_scale_dmodel.py": (
        "cache-steps", "cache_steps: each head's scores are divided by sqrt(d_model) instead "
        "of sqrt(d_h)"),
    "wrong_cache_own_key_out.py": (
        "cache-steps", "cache_steps: each step attends to the earlier keys alone, leaving its "
        "own key and value out"),
    "wrong_projections_dwq_transposed.py": ("reverse", "grad_w_query is qkv's transposed"),
    "wrong_projections_dw_mean.py": (
        "reverse", "grad_w_query is 1/(B*T) times qkv's (a mean over the B*T rows where qkv "
                   "sums); grad_w_key is 1/(B*T) times qkv's"),
}
"""Each example, the family whose line names its slip, and words of that name."""


def checked(example: str) -> str:
    found = CliRunner().invoke(main, ["check", str(EXAMPLES / example), "-f", "text"])
    assert found.exit_code == 1, found.output
    return found.output


@pytest.mark.parametrize("example", sorted(NAMED), ids=lambda name: name[6:-3])
def test_each_learner_slip_is_named_by_its_relation(example: str) -> None:
    family, words = NAMED[example]
    text = checked(example)
    line = next(line for line in text.splitlines() if line.startswith(family + " "))
    assert " FAIL " in line and words in line, text


def test_the_rope_slips_are_named_inside_the_layer_too() -> None:
    text = checked("wrong_rope_degrees.py")
    line = next(line for line in text.splitlines() if line.startswith("multi-head "))
    assert "RoPE's angles are taken as degrees" in line, text


def test_a_float32_softmax_is_never_a_mask_that_hides_the_diagonal() -> None:
    text = checked("wrong_head_float32_softmax.py")
    assert "diagonal" not in text, text
    mask = next(line for line in text.splitlines() if line.startswith("mask "))
    assert " SKIP " in mask and "right but for its precision" in mask, text
    scaling = next(line for line in text.splitlines() if line.startswith("scaling "))
    assert " PASS " in scaling  # its scores are right: the scaling is still judged


def test_a_layer_slip_no_example_was_written_for_is_named_too() -> None:
    """W_O transposed in the forward, and W_O left out of the backward alone: named by
    the stage with its part changed, though no file or catalogue entry has them."""
    import importlib.util

    from qkvcli.check.run import run_checks
    from qkvcli.protocol.python import PythonImplementation
    from qkvcli.render.check import family_detail

    spec = importlib.util.spec_from_file_location("numpy_rope_mha_wo",
                                                  EXAMPLES / "numpy_rope_mha.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def mha_forward(x, wq, wk, wv, wo, *rest):  # type: ignore[no-untyped-def]
        return module.mha_forward(x, wq, wk, wv, wo.T, *rest)

    def mha_backward(x, wq, wk, wv, wo, *rest):  # type: ignore[no-untyped-def]
        return module.mha_backward(x, wq, wk, wv, np.eye(wo.shape[0]), *rest)

    result = run_checks(PythonImplementation("wo", None, mha_forward=mha_forward,
                                             mha_backward=mha_backward), [], 1e-9)
    checks = {check.name: family_detail(check) for check in result.checks}
    assert "mha_forward uses W_O transposed (merged W_O^T)" in checks["multi-head"]
    result = run_checks(PythonImplementation("wo", None, mha_forward=module.mha_forward,
                                             mha_backward=mha_backward), [], 1e-9)
    checks = {check.name: family_detail(check) for check in result.checks}
    assert "mha_backward leaves W_O out of the reverse" in checks["multi-head-reverse"]


def test_every_slip_named_here_is_bundled() -> None:
    names = sorted(path.name for path in EXAMPLES.glob("wrong_*.py"))
    assert set(NAMED) <= set(names)


def test_a_head_is_compared_with_its_stages_one_part_changed(tmp_path: Path) -> None:
    """A head whose scores are divided by d_model: named by the layer's stages run as one
    head (a factor sqrt(d_k)/d_model is no size a relation names)."""
    source = (EXAMPLES / "numpy_head.py").read_text(encoding="utf-8")
    scaled = 'scale = 1.0 if BUG == "unscaled" else math.sqrt(d_k)'
    assert scaled in source
    (tmp_path / "numpy_qkv.py").write_bytes((EXAMPLES / "numpy_qkv.py").read_bytes())
    head = tmp_path / "head_by_d_model.py"
    head.write_text(source.replace(scaled, "scale = x.shape[2]"), encoding="utf-8")
    found = CliRunner().invoke(main, ["check", str(head), "-f", "text"])
    assert found.exit_code == 1, found.output
    line = next(line for line in found.output.splitlines() if line.startswith("head-forward "))
    assert "scores are divided by d_model instead of sqrt(d_h)" in line, found.output


def test_a_layer_mask_that_hides_the_diagonal_is_named_where_its_row_is_undefined(
        tmp_path: Path) -> None:
    """The mask hiding the diagonal leaves the first row no key: qkv's staged variant
    has no softmax there (NaN), a learner's -1e9 mask a uniform row; every other value
    fits, so the slip is named as it is in a head."""
    source = (EXAMPLES / "numpy_rope_mha.py").read_text(encoding="utf-8")
    future, masked = ("np.triu(np.ones((tokens, tokens), dtype=bool), k=first)",
                      "np.where(future, -np.inf, scores)")
    assert future in source and masked in source
    layer = tmp_path / "mha_diagonal.py"  # forward and backward alike
    layer.write_text(source.replace(future, future.replace("k=first", "k=0"))
                     .replace(masked, masked.replace("-np.inf", "-1e9")), encoding="utf-8")
    found = CliRunner().invoke(main, ["check", str(layer), "-f", "text"])
    assert found.exit_code == 1, found.output
    line = next(line for line in found.output.splitlines() if line.startswith("multi-head "))
    assert "the causal mask hides the diagonal too" in line, found.output


@pytest.mark.parametrize("example", ["wrong_mha_diagonal_nan.py", "wrong_head_diagonal_nan.py"])
def test_a_result_holding_nan_is_said_so_and_its_slip_named(example: str) -> None:
    """A mask hiding the diagonal with -inf makes query 0's row 0/0: every finding on a
    fixture with a first row says the result holds NaN, and the slip's name is the same
    as for the -1e9 mask, once above the verdict; a one-token fixture, all NaN, has
    nothing to tell one slip from another and is not named."""
    text = checked(example)
    forward = "multi-head" if "mha" in example else "head-forward"
    found = [line for line in text.splitlines() if line.startswith(f"  {forward} [")]
    nan = [line for line in found if "holds NaN or infinity" in line]
    assert nan and all("the causal mask hides the diagonal too" in line for line in nan
                       if "1,1," not in line), text
    assert not any("non-causal" in line for line in found), text  # only the mask is wrong
    operation = "mha_forward" if "mha" in example else "head_forward"
    slips = [line for line in text.splitlines() if line.startswith("slip: ")]
    families = f"{forward}, mask" if forward == "head-forward" else forward
    assert slips == [f"slip: {operation}: the causal mask hides the diagonal too (a position "
                     f"must see itself) ({families})"], text  # one slip, one line


def test_a_rope_holding_nan_is_said_so_and_never_named(tmp_path: Path) -> None:
    """RoPE whose first pair is NaN: no relation is measured on it, so no slip is named,
    and the failure still says it holds NaN, at the first NaN's coordinate."""
    import json

    path = tmp_path / "nan_rope.py"
    source = (EXAMPLES / "numpy_rope_mha.py").read_text(encoding="utf-8")
    turned = "    return _turn(x, base, offset, 1.0)\n"
    assert turned in source
    path.write_text(source.replace(turned, "    y = _turn(x, base, offset, 1.0)\n"
                                   "    y[..., 0] = np.nan\n    return y\n"), encoding="utf-8")
    found = CliRunner().invoke(main, ["check", str(path), "-f", "json"])
    assert found.exit_code == 1, found.output
    document = json.loads(found.stdout)
    rope = [f for f in document["failures"] if f["check"] == "rope"]
    assert rope and all(f["detail"] == "rope's rotated holds NaN or infinity" for f in rope)
    assert "slip:" not in CliRunner().invoke(main, ["check", str(path), "-f", "text"]).output


def test_a_softmax_over_the_batch_is_named_on_causal_fixtures_too() -> None:
    """Its -1e9 mask hides a cell in every batch item alike, so the softmax over the batch
    makes that cell 1/B where -inf would make it 0/0: qkv's stage compared as the learner
    wrote it names the slip on every fixture, causal ones included."""
    text = checked("wrong_head_softmax_over_batch.py")
    causal = [line for line in text.splitlines()
              if line.startswith("  head-forward [") and " causal]" in line]
    assert len(causal) >= 4, text
    assert all("the softmax is taken over the batch axis" in line for line in causal), text


def test_a_catalogued_slip_the_fixtures_cannot_tell_from_others_is_said_as_either() -> None:
    """RoPE's positions read off the batch axis turn a query and its keys alike, so inside
    the layer it gives what no RoPE gives: the catalogue's "RoPE ignored" alone would
    say more than the fixtures show; every way that fits is said, the slip among them."""
    text = checked("wrong_rope_batch_positions.py")
    line = next(line for line in text.splitlines() if line.startswith("multi-head "))
    assert "on this fixture, either" in line, text
    assert "RoPE takes each position from the batch axis instead of the token axis" in line
    assert "rope=true is ignored" not in text, text


@pytest.mark.parametrize("example", ["wrong_cache_positions_from_one.py",
                                     "wrong_cache_scale_dmodel.py",
                                     "wrong_cache_own_key_out.py"])
def test_a_cache_whose_steps_are_wrong_is_not_judged_on_its_refusals(example: str) -> None:
    """The refused steps' values are compared with the engine's; where the plain steps
    are already wrong (cache-steps fails), that comparison would blame the refusal: the
    family is not run and says why, and the one slip named is the steps'."""
    text = checked(example)
    line = next(line for line in text.splitlines() if line.startswith("cache-refusals "))
    assert " SKIP " in line and "its cache_steps is wrong already" in line, text
    slips = [line for line in text.splitlines() if line.startswith("slip: ")]
    assert len(slips) == 1 and slips[0].endswith("(cache-steps)"), text


def test_a_cache_that_only_refuses_wrongly_is_still_judged(tmp_path: Path) -> None:
    """A cache right step by step but whose refused step counts a position is judged on
    its refusals: the skip is for caches wrong before the refusal alone."""
    source = (EXAMPLES / "wrong_cache_append_before_check.py").read_text(encoding="utf-8")
    assert "append-before-check" in source
    text = checked("wrong_cache_append_before_check.py")
    line = next(line for line in text.splitlines() if line.startswith("cache-refusals "))
    assert " FAIL " in line, text


def test_two_weight_gradients_swapped_are_one_slip_naming_both() -> None:
    """dW_K and dW_V swapped: one finding on two tensors is one slip line naming both."""
    text = checked("wrong_projections_dwk_dwv_swapped.py")
    slips = [line for line in text.splitlines() if line.startswith("slip: ")]
    assert slips == ["slip: grad_w_key uses the value branch's gradient dL/dV; grad_w_value "
                     "uses the key branch's gradient dL/dK (reverse)"], text


def test_one_slip_in_the_forward_and_the_reverse_is_one_slip_line() -> None:
    """Scores divided by d_k forward and back: the head-forward's catalogued name and the
    reverse's relation (divisor d_h) are one slip, named once with every family."""
    text = checked("wrong_head_scale_dk.py")
    slips = [line for line in text.splitlines() if line.startswith("slip: ")]
    assert slips == ["slip: scores are divided by d_k instead of sqrt(d_k) (head-forward, "
                     "scaling, head-reverse)"], text
