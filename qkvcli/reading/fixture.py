"""The validated fixture (:class:`Fixture`, the record every chapter command runs on) and
the fixture format's published keys.

The published JSON Schema (``qkvcli/data/fixture.schema.json``, named by
:data:`SCHEMA_NAME`) lists the same keys; ``tests/test_schema.py`` keeps them in step.

A fixture file is JSON a person can write by hand::

    {
      "chapter": "26-qkv-projections",
      "seed": 26,
      "input": [[[1, 2, -1], [0, 1, 2]]],
      "weights": {
        "query": {"name": "decoder.block.0.attention.query.weight",
                  "values": [[1, 0], [0, 1], [1, -1]]},
        "key":   [[0, 1], [1, 0], [-1, 1]],
        "value": {"shape": [3, 2], "values": [1, 1, 1, -1, 0, 2]}
      },
      "upstream": {"query": ..., "key": ..., "value": ...},
      "gradcheck": {"step": 1e-6, "tolerance": 2e-6, "samples": null},
      "expect": {"loss": 3.5, "query": ..., "tolerance": 0}
    }

Every key but ``input`` and ``weights`` is optional. It is read by
:func:`qkvcli.reading.load.load_fixture` and validated by :mod:`qkvcli.reading.parse`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from qkvcli.core.arrays import Array
from qkvcli.core.names import BRANCHES
from qkvcli.core.record import Record
from qkvcli.gradcheck.settings import DEFAULT_DIRECTIONS, DEFAULT_MODE, DEFAULT_STEP, DEFAULT_TOLERANCE
from qkvcli.reading.limits import DEFAULT_SEED

SCHEMA_NAME = "fixture.schema.json"
TOP_KEYS = (
    "chapter", "seed", "input", "weights", "upstream", "gradcheck", "expect", "value_width",
)
WEIGHT_KEYS = ("name", "shape", "values")
GRADCHECK_KEYS = ("step", "tolerance", "samples")
# The packed PyTorch form of the three weights (read by qkvcli.reading.layouts).
PACKED_KEYS = ("in_proj_weight", "in_proj_bias")
# Top-level keys only qkv attend reads (qkvcli.reading.attend): a layer's heads, and the
# function a real layer computes.
LAYER_KEYS = ("heads", "kv_heads")
FUNCTION_KEYS = ("causal", "rope", "scale", "architecture", "window", "softcap", "alibi",
                 "alibi_scaled", "alibi_rounding", "clip_qkv", "qk_norm")
# A second input, the one the value projection reads (MobileBERT's layer input beside its
# bottleneck): only attend reads it.
INPUT_KEYS = ("value_input",)
LAYER_TOP_KEYS = LAYER_KEYS + FUNCTION_KEYS + INPUT_KEYS


def uses_extensions(data: dict[str, Any]) -> bool:
    """Whether a fixture uses any key beyond the chapter's plain weights form.

    Fixtures without extensions keep the chapter's reader, its order and its messages.
    """
    if "value_width" in data:
        return True
    weights = data.get("weights")
    if not isinstance(weights, dict):
        return False
    if any(key in weights for key in PACKED_KEYS):
        return True
    return any(
        isinstance(weights.get(branch), dict)
        and ("bias" in weights[branch] or "layout" in weights[branch])
        for branch in BRANCHES
    )


if TYPE_CHECKING:
    from qkvcli.reading.expect import Expectations


class Fixture(Record):
    """A validated fixture: every array float64, finite, and of consistent shape.

    Data only: :func:`qkvcli.check.chapter26.projections_of` builds the engine that runs it.
    """

    input: Array
    weights: tuple[Array, Array, Array]
    names: tuple[str, str, str]
    upstream: tuple[Array, Array, Array]
    step: float = DEFAULT_STEP
    tolerance: float = DEFAULT_TOLERANCE
    samples: int | None = None
    seed: int = DEFAULT_SEED
    chapter: str = "custom"
    expect: Expectations | None = None
    layout: str = "separate"
    mode: str = DEFAULT_MODE  # mode and directions: set from the command line
    directions: int = DEFAULT_DIRECTIONS

    @property
    def batch(self) -> int:
        return int(self.input.shape[0])

    @property
    def tokens(self) -> int:
        return int(self.input.shape[1])

    @property
    def d_model(self) -> int:
        return int(self.input.shape[2])

    @property
    def d_head(self) -> int:
        return int(self.weights[0].shape[1])

