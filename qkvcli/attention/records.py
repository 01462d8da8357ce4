"""The evidence of one attention head or layer, as plain immutable records: facts, no wording.

:func:`qkvcli.check.attend.build_attend_evidence` (one head, or a multi-head layer)
fills these records; :mod:`qkvcli.render.attend` words them. Names follow the vocabulary:
``weights`` is only ever W; the attention matrix ``A`` is ``attention``. Tensors are
held by vocabulary name (``w_query``, ``attention``, ``grad_attention``, ...); the
published JSON names (``query_weight``, ``weights``, ``weights_gradient``, ...) are the
renderers' business.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qkvcli.core.arrays import Array
from qkvcli.core.invariants import FutureZero, RowSums
from qkvcli.core.record import Record
from qkvcli.core.results import ShapeProbe

if TYPE_CHECKING:
    from qkvcli.core.results import FamilyCheck
    from qkvcli.core.rope import Rope
    from qkvcli.gradcheck.records import GradcheckResult
    from qkvcli.reading.attend import NormSpec

class AttendConfig(Record):
    batch: int
    tokens: int
    d_model: int
    d_k: int
    d_v: int
    causal: bool
    bias: tuple[bool, bool, bool]
    value_width: str
    layout: str
    layout_description: str
    scale: float
    parameter_count: int
    names: tuple[str, str, str]
    heads: int | None = None  # a multi-head layer (d_k and d_v are then per head)
    e_out: int | None = None  # the final output's width
    out_layout: str | None = None  # "out_proj", "c_proj" or None
    packed: str | None = None  # a packed projection's layout: "in_proj", "c_attn" or None
    kv_heads: int | None = None  # grouped-query attention: K/V heads shared by the heads
    rope: Rope | None = None  # rotary position embedding of Q and K
    scale_given: bool = False  # the fixture's "scale", not 1/sqrt(d_k)
    architecture: str | None = None  # the model the fixture says it was read from
    # (vocabulary name, checkpoint tensor name relative to the layer) of each parameter
    # read from a checkpoint: ("w_query", "q_proj.weight"), ("w_out", "o_proj.weight"), ...
    sources: tuple[tuple[str, str], ...] = ()
    window: int | None = None  # a sliding window (causal: the latest keys; else two-sided)
    softcap: float | None = None  # the scores' soft-cap: softcap * tanh(Z / softcap)
    alibi: tuple[float, ...] | None = None  # one ALiBi slope per head
    alibi_scaled: bool = False  # the ALiBi bias added before the scale (Falcon)
    alibi_rounding: str | None = None  # "bfloat16": the bias rounded as Falcon builds it
    clip_qkv: float | None = None  # the projections clamped to [-clip_qkv, clip_qkv]
    qk_norm: NormSpec | None = None  # Q and K normalised (kind, span, eps, offset)


class AttendPrimary(Record):
    """Every tensor of one forward and reverse pass, by vocabulary name in report order.

    Parameters ``w_query``, ``b_query``, ... (a layer adds ``w_packed``, ``b_packed``,
    ``w_out``, ``b_out`` as the fixture gave them); forward ``query`` ... ``scores``,
    ``scaled_scores``, ``attention``, ``concat``, ``output``; reverse ``grad_output`` (the
    upstream ``U``), ``grad_concat``, ``grad_attention``, ... ``grad_input``,
    ``grad_w_query``, ``grad_b_query``, ... Absent tensors (a missing bias) are left out.
    """

    tensors: dict[str, Array]
    loss: float

    def __getitem__(self, name: str) -> Array:
        return self.tensors[name]


class TokenRow(Record):
    """One query position: its attention over the keys, their sum, and its output."""

    batch: int
    token: int
    attention: tuple[float, ...]
    attention_sum: float
    output: tuple[float, ...]


class HullEvidence(Record):
    """``O_i = sum_j A_ij v_j`` recomputed term by term, and the coordinate box test."""

    barycentric_residual: float
    box_violations: int
    tolerance: float

    @property
    def passed(self) -> bool:
        return self.barycentric_residual <= self.tolerance and self.box_violations == 0


class HeadEvidence(Record):
    """One head of a layer: its attention rows, its mask and its convex hull."""

    head: int
    attention: RowSums
    mask: FutureZero
    hull: HullEvidence

    @property
    def passed(self) -> bool:
        return self.attention.passed and self.mask.passed and self.hull.passed


class Note(Record):
    """A teacher's remark (never a failure): a stable ``code`` and the widths it mentions.

    Codes: ``collapsed-roles`` (W_Q = W_K = W_V), ``symmetric-matching`` (W_Q = W_K) and
    ``independent-value-width`` (``d_v`` differs from ``d_k``).
    """

    code: str
    d_k: int
    d_v: int


class OtherMask(Record):
    """The scores, scaled scores and weights under the other mask than the report's
    (``causal``): the engine's forward alone, unchecked, for the page's causal toggle."""

    causal: bool
    scores: Array
    scaled_scores: Array
    attention: Array


class DecodeStep(Record):
    """One token decoded through the KV cache: its ``position`` ``t``; ``worst``, the
    largest ``|cached - full|`` over the batch and the output's width, the step's output
    against row ``t`` of the layer's causal pass over every token; the shapes of the keys
    and the values the cache held for it (``[B, G, min(t+1, window), d]``, G the K/V
    heads) and their bytes."""

    position: int
    worst: float
    keys: tuple[int, ...]
    values: tuple[int, ...]
    held_bytes: int


class DecodeEvidence(Record):
    """The layer decoded one token at a time (``qkv attend --decode``): each step's facts,
    the tolerance they are judged by, the window (``None``: the cache keeps every token;
    else a ring of ``min(window, T)`` positions), the storage made once (its keys' and
    values' shapes, their bytes), and ``held_worst``, the largest difference of the keys
    and values the cache holds after the last step from the full pass's own (the keys as
    the scores read them: turned, normalised)."""

    steps: tuple[DecodeStep, ...]
    tolerance: float
    window: int | None
    storage_keys: tuple[int, ...]
    storage_values: tuple[int, ...]
    storage_bytes: int
    held_worst: float

    @property
    def worst(self) -> float:
        """The largest difference of any step (NaN if any step's is)."""
        return max((s.worst for s in self.steps), key=lambda w: (w != w, w), default=0.0)

    @property
    def passed(self) -> bool:
        """At least one step, every step's output and the held keys and values within the
        tolerance (a NaN is not)."""
        return bool(self.steps) and all(s.worst <= self.tolerance for s in self.steps) and (
            self.held_worst <= self.tolerance)


class AttendEvidence(Record):
    """Everything one run found; ``checks`` holds a judgement per family of attend's plan
    (:data:`qkvcli.check.plans.ATTEND_ORDER`)."""

    chapter: str
    seed: int
    config: AttendConfig
    primary: AttendPrimary
    rows: tuple[TokenRow, ...]
    attention: RowSums
    mask: FutureZero
    hull: HullEvidence
    probes: tuple[ShapeProbe, ShapeProbe]
    notes: tuple[Note, ...]
    replay_bitwise: bool
    gradcheck: GradcheckResult
    checks: tuple[FamilyCheck, ...]
    heads: tuple[HeadEvidence, ...] = ()  # per head, for a multi-head layer
    upstream_given: bool = False  # U from the fixture's upstream.output, not from the seed
    other_mask: OtherMask | None = None  # asked for by the page's causal toggle
    decode: DecodeEvidence | None = None  # asked for by --decode

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)
