"""The evidence of one attention head, as frozen data: configuration, tensors and findings.

:func:`qkvcli.attention.evidence.build_attend_evidence` fills these records; renderers
read them.
"""

from __future__ import annotations

from dataclasses import dataclass

from qkvcli.attention.notes import Note
from qkvcli.core.arrays import Array
from qkvcli.evidence.records import Check
from qkvcli.gradcheck.records import GradcheckResult


@dataclass(frozen=True)
class AttendConfig:
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


@dataclass(frozen=True)
class AttendPrimary:
    """Every tensor of one forward and reverse pass, by stable name in report order."""

    tensors: dict[str, Array]
    loss: float

    def __getitem__(self, name: str) -> Array:
        return self.tensors[name]


@dataclass(frozen=True)
class TokenRow:
    """One query position: its weights over the keys, their sum, and its output."""

    batch: int
    token: int
    weights: tuple[float, ...]
    weight_sum: float
    output: tuple[float, ...]


@dataclass(frozen=True)
class WeightEvidence:
    min_weight: float
    max_row_deviation: float
    tolerance: float

    @property
    def passed(self) -> bool:
        return self.min_weight >= 0.0 and self.max_row_deviation <= self.tolerance


@dataclass(frozen=True)
class MaskEvidence:
    applicable: bool
    max_masked_weight: float

    @property
    def passed(self) -> bool:
        return not self.applicable or self.max_masked_weight == 0.0


@dataclass(frozen=True)
class HullEvidence:
    """``O_i = sum_j A_ij v_j`` recomputed term by term, and the coordinate box test."""

    barycentric_residual: float
    box_violations: int
    tolerance: float

    @property
    def passed(self) -> bool:
        return self.barycentric_residual <= self.tolerance and self.box_violations == 0


@dataclass(frozen=True)
class HeadEvidence:
    """One head of a layer: its weights' row sums, its mask and its convex hull."""

    head: int
    weights: WeightEvidence
    mask: MaskEvidence
    hull: HullEvidence

    @property
    def passed(self) -> bool:
        return self.weights.passed and self.mask.passed and self.hull.passed


@dataclass(frozen=True)
class AttentionShapeProbe:
    input: tuple[int, ...]
    weights: tuple[int, ...]
    output: tuple[int, ...]
    grad_input: tuple[int, ...]


@dataclass(frozen=True)
class AttendEvidence:
    chapter: str
    seed: int
    config: AttendConfig
    primary: AttendPrimary
    rows: tuple[TokenRow, ...]
    weights: WeightEvidence
    mask: MaskEvidence
    hull: HullEvidence
    probes: tuple[AttentionShapeProbe, AttentionShapeProbe]
    notes: tuple[Note, ...]
    replay_bitwise: bool
    gradcheck: GradcheckResult
    checks: tuple[Check, ...]
    heads: tuple[HeadEvidence, ...] = ()  # per head, for a multi-head layer

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)
