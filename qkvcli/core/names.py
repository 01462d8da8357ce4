"""The one vocabulary of qkv: branch order, the names of outputs and gradients, parameter names.

Everywhere in the code (engine, attention, checks, renderers):

- outputs are ``query``, ``key``, ``value`` (Q, K, V), always in that order;
- the upstream gradients of the loss with respect to them are ``grad_query``,
  ``grad_key``, ``grad_value`` (dL/dQ, ...);
- the input gradient is ``grad_input`` (dL/dX), the weight gradients are
  ``grad_w_query``, ``grad_w_key``, ``grad_w_value`` (dL/dW_Q, ...) and bias gradients
  ``grad_b_query``, ... .

The JSON report keeps its published key names (``input_gradient``,
``query_weight_gradient``, ...); only renderers translate to them.

Parameter names: the reference's naming rule and the default names of the three weights.
"""

from __future__ import annotations

from collections.abc import Iterable

from qkvcli.core.errors import EmptyName, EmptyNameSegment, InvalidNameCharacter

BRANCHES: tuple[str, str, str] = ("query", "key", "value")
GRADIENTS: tuple[str, str, str, str] = ("grad_input", "grad_w_query", "grad_w_key", "grad_w_value")
"""What the reverse pass gives, in order: the fields of :class:`~qkvcli.core.outputs.QkvGradients`."""

DEFAULT_PREFIX = "decoder.block.0.attention"
DEFAULT_NAMES: tuple[str, str, str] = tuple(  # type: ignore[assignment]
    f"{DEFAULT_PREFIX}.{branch}.weight" for branch in BRANCHES
)


def validate_name(name: str) -> None:
    """Reject names outside lowercase ASCII, digits, ``_`` and non-empty dot segments."""
    if not name:
        raise EmptyName()
    previous_was_dot = True
    encoded = name.encode("utf-8")
    for index, byte in enumerate(encoded):
        if byte == 0x2E:  # "."
            if previous_was_dot:
                raise EmptyNameSegment(index)
            previous_was_dot = True
            continue
        if not (0x61 <= byte <= 0x7A or 0x30 <= byte <= 0x39 or byte == 0x5F):
            raise InvalidNameCharacter(index, byte)
        previous_was_dot = False
    if previous_was_dot:
        raise EmptyNameSegment(len(encoded))


DEFAULT_CHAPTER = 26
"""The course chapter ``qkv run`` and ``qkv report`` show without ``--chapter``: the Q/K/V
projections, qkv's own evidence."""
CHAPTER_IDS = {26: "26-qkv-projections", 27: "27-self-attention", 28: "28-causal-masking",
               29: "29-rope", 30: "30-multi-head-attention", 37: "37-incremental-attention"}
"""Each chapter's id, as its report's first line prints it and its fixture's
``"chapter"`` key gives it."""


def chapter_span(numbers: Iterable[int] | None = None) -> str:
    """The chapters ``numbers`` (default: every chapter qkv knows) in words, each run of
    consecutive chapters as one span: ``26 to 30 and 37``."""
    found = sorted(CHAPTER_IDS if numbers is None else numbers)
    spans: list[list[int]] = []
    for number in found:
        if spans and number == spans[-1][-1] + 1:
            spans[-1].append(number)
        else:
            spans.append([number])
    words = [str(span[0]) if len(span) == 1 else f"{span[0]} to {span[-1]}" for span in spans]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def chapter_of_id(name: object) -> int | None:
    """The chapter whose id is ``name`` (a fixture's ``"chapter"`` value); ``None`` when
    it names none of them."""
    for number, known in CHAPTER_IDS.items():
        if name == known:
            return number
    return None

QK_NORM_SPANS = ("head", "layer")
QK_NORM_KINDS = ("rms", "layer")
QK_NORM_AFTER = ("projection", "rope")
"""The words a fixture's ``qk_norm`` may say: over one head or the whole layer, RMSNorm
or LayerNorm, after the projection or after RoPE."""
ALIBI_ROUNDINGS = ("bfloat16",)
"""How a fixture may say its ALiBi slopes were rounded (``alibi_rounding``)."""
