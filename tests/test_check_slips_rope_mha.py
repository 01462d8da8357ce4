"""A learner's RoPE and multi-head slips, each written out in plain NumPy
(``examples/implementations/numpy_rope_mha.py`` with its ``BUG`` set): each fails the
family its slip belongs to with the slip named, where the fixtures tell it apart from
every other; a backward that disagrees with its own forward fails the gradient check."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from qkvcli.check.result import CheckResult
from qkvcli.check.run import run_checks
from qkvcli.protocol.python import PythonImplementation
from qkvcli.render.check import SLIP_WORDS, family_detail

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "implementations" / "numpy_rope_mha.py"


def with_bug(bug: str) -> ModuleType:
    """A fresh copy of the example with one slip switched on."""
    spec = importlib.util.spec_from_file_location(f"numpy_rope_mha_{bug or 'right'}", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.BUG = bug
    return module


@functools.cache
def checked(bug: str) -> CheckResult:
    """The whole check of the example with ``bug``, once per bug (results are immutable)."""
    module = with_bug(bug)
    return run_checks(PythonImplementation(bug, None, rope=module.rope,
                                           rope_reverse=module.rope_reverse,
                                           mha_forward=module.mha_forward,
                                           mha_backward=module.mha_backward), [], 1e-9)


NAMED = {
    # RoPE: the rotation, and its reverse with it
    "base-ignored": ("rope", "base-ignored"),
    "base-squared": ("rope", "base-squared"),
    "cos-sin-swapped": ("rope", "cos-sin-swapped"),
    "offset-ignored": ("rope", "offset-ignored"),
    "float32-angles": ("rope", "float32-angles"),
    # multi-head attention's forward
    "strided-heads": ("multi-head", "strided-heads"),
    "merge-reversed": ("multi-head", "merge-reversed"),
    "unscaled": ("multi-head", "unscaled"),
    "one-softmax": ("multi-head", "one-softmax"),
    "mask-one-head": ("multi-head", "mask-one-head"),
    "rope-on-value": ("multi-head", "rope-on-value"),
    # a backward alone, its forward right
    "dwo-transposed": ("multi-head-reverse", "wo-gradient-transposed"),
    "dx-last-head": ("multi-head-reverse", "input-last-head"),
    "dw-first-item": ("multi-head-reverse", "first-item"),
    "rope-backward-ignored": ("multi-head-reverse", "rope-backward-ignored"),
    "not-inverted": ("multi-head-reverse", "rope-backward-not-inverted"),
}
"""Each slip of the example: the family that names it, and the slip's code."""


def test_the_example_without_a_slip_passes_every_family() -> None:
    result = checked("")
    assert result.passed, [family_detail(c) for c in result.checks if not c.passed]


@pytest.mark.parametrize("bug", sorted(NAMED))
def test_each_slip_fails_its_family_naming_it(bug: str) -> None:
    family, slip = NAMED[bug]
    checks = {check.name: check for check in checked(bug).checks}
    assert checks[family].outcome == "failed"
    assert f": {SLIP_WORDS[slip]}: " in family_detail(checks[family]), family_detail(checks[family])


@pytest.mark.parametrize("bug", ["dwo-transposed", "dx-last-head", "dw-first-item",
                                 "rope-backward-ignored"])
def test_a_backward_that_disagrees_with_its_own_forward_fails_the_gradient_check(bug: str) -> None:
    checks = {check.name: check for check in checked(bug).checks}
    assert checks["multi-head"].passed  # the forward is right
    assert checks["multi-head-gradcheck"].outcome == "failed"


@pytest.mark.parametrize("bug", ["strided-heads", "one-softmax", "rope-on-value"])
def test_a_slip_with_its_own_consistent_backward_passes_the_gradient_check(bug: str) -> None:
    """The gradient check judges the backward against the implementation's own forward:
    a wrong function with the right derivative of it is wrong in multi-head, not there."""
    checks = {check.name: check for check in checked(bug).checks}
    assert checks["multi-head"].outcome == "failed"
    assert checks["multi-head-gradcheck"].passed, family_detail(checks["multi-head-gradcheck"])


def test_a_rope_slip_at_position_zero_fails_position_zero_too() -> None:
    checks = {check.name: check for check in checked("cos-sin-swapped").checks}
    assert checks["position-zero"].outcome == "failed"
    assert "position 0 is not the identity" in family_detail(checks["position-zero"])


LAYER_ROPE = {
    # a rotation slip inside the layer: the multi-head family names it as the rotation's
    "base-ignored": ("base-ignored", "base-squared"),  # base 100: 10000 is its square
    "base-squared": ("base-ignored", "base-squared"),
    "cos-sin-swapped": ("turned-back", "cos-sin-swapped"),  # one angle's turn in any score
    "float32-angles": ("float32-angles",),
    "half-split": ("half-split",),
}
"""Each rotation slip of the example, and the slips the layer's fixtures cannot tell it
from (every one named, as either)."""


@pytest.mark.parametrize("bug", sorted(LAYER_ROPE))
def test_a_rope_slip_inside_the_layer_is_named_by_multi_head_too(bug: str) -> None:
    detail = family_detail({c.name: c for c in checked(bug).checks}["multi-head"])
    for slip in LAYER_ROPE[bug]:
        words = SLIP_WORDS.get(f"rope-{slip}", SLIP_WORDS[slip])
        assert words in detail, detail
    if len(LAYER_ROPE[bug]) > 1:
        assert "either" in detail, detail
