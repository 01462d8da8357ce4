"""The fixtures ``qkv check`` runs on: the chapter's, the user's, and seeded random shapes.

The random shapes always start with the four that catch the usual slips, in this
order: ``d_model != d_head``, an empty batch, no tokens, and ``d_head = 1``; further
shapes are drawn from the same SplitMix64 generator. Values are uniform in ``[-1, 1)``
with all 53 bits used, so float32 arithmetic cannot pass the default tolerance.

The ``precision`` fixture is always checked, whatever ``--random`` says: its values
(drawn the same way, from its own seed) are exact neither in 6 decimals nor in float32,
so a lossy number writer or float32 arithmetic cannot pass on the chapter's exact
integers alone.
"""

from __future__ import annotations

import numpy as np

from qkvcli.core.arrays import Array
from qkvcli.core.record import Record
from qkvcli.core.splitmix import SplitMix64
from qkvcli.gradcheck.settings import DEFAULT_SAMPLES  # the chapter's coordinates per tensor
from qkvcli.reading.fixture import Fixture
from qkvcli.reading.load import load_fixture

SPECIAL_SHAPES: tuple[tuple[int, int, int, int], ...] = (
    # (batch, tokens, d_model, d_head)
    (2, 3, 5, 3),  # d_model != d_head
    (0, 3, 4, 2),  # empty batch
    (2, 0, 4, 3),  # no tokens
    (2, 3, 4, 1),  # one head column
)


class Case(Record):
    """One fixture: input, weights (query, key, value) and upstream gradients, float64.

    ``step``, ``tolerance`` and ``samples`` are the gradient check's settings (the
    fixture's own, else the chapter's).
    """

    label: str
    input: Array
    weights: tuple[Array, Array, Array]
    upstream: tuple[Array, Array, Array]
    step: float
    tolerance: float
    samples: int | None = DEFAULT_SAMPLES
    heads_only: bool = False  # a probe of a head's slips (contrast), not of the projections

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """``(batch, tokens, d_model, d_head)``."""
        batch, tokens, d_model = self.input.shape
        return int(batch), int(tokens), int(d_model), int(self.weights[0].shape[1])


class Run(Record):
    """A case as one kind of operation runs it: in one ``mode`` (a head's ``causal``;
    ``None`` for the projections, which take none), under its ``label`` (``chapter
    causal``), with the ``upstream`` gradients its backward gets."""

    case: Case
    mode: bool | None
    label: str
    upstream: tuple[Array, ...]


def fixtures_of(runs: list[Run]) -> dict[str, str]:
    """Each run's label and its fixture's (``chapter causal``: ``chapter``), for a family's
    judgement to count the fixtures that failed, not the runs."""
    return {run.label: run.case.label for run in runs}


def fixture_case(label: str, fixture: Fixture) -> Case:
    """A :class:`Case` from a loaded :class:`~qkvcli.reading.fixture.Fixture`."""
    samples = fixture.samples if fixture.samples is not None else DEFAULT_SAMPLES
    return Case(label, fixture.input, fixture.weights, fixture.upstream, fixture.step,
                fixture.tolerance, samples)


def chapter_case() -> Case:
    """The bundled chapter fixture, labelled ``chapter``."""
    return fixture_case("chapter", load_fixture())


def random_shapes(count: int, rng: SplitMix64) -> list[tuple[int, int, int, int]]:
    """The special shapes first (as many as ``count`` allows), then drawn ones."""
    shapes = list(SPECIAL_SHAPES[:count])
    while len(shapes) < count:
        draws = [int(v % 4) for v in rng.next_u64_block(4)]
        shapes.append((1 + draws[0] % 3, 1 + draws[1], 1 + draws[2] + 2, 1 + draws[3]))
    return shapes


PRECISION_SHAPE = (1, 3, 4, 2)
PRECISION_SEED = 27


def _drawn(label: str, shape: tuple[int, int, int, int], rng: SplitMix64, step: float,
           tolerance: float) -> Case:
    """A fixture of ``shape`` with values drawn from ``rng``, uniform in ``[-1, 1)``."""
    batch, tokens, d_model, d_head = shape

    def uniform(*dims: int) -> Array:
        size = 1
        for dim in dims:
            size *= dim
        values: Array = (rng.next_unit_block(size) * 2.0 - 1.0).reshape(dims)
        return values

    x = uniform(batch, tokens, d_model)
    weights = (uniform(d_model, d_head), uniform(d_model, d_head), uniform(d_model, d_head))
    upstream = tuple(uniform(batch, tokens, d_head) for _ in range(3))
    return Case(label, x, weights, (upstream[0], upstream[1], upstream[2]), step, tolerance)


def precision_case(step: float, tolerance: float) -> Case:
    """The fixture every check includes, labelled ``precision[1,3,4->2]``."""
    label = "precision[{},{},{}->{}]".format(*PRECISION_SHAPE)
    return _drawn(label, PRECISION_SHAPE, SplitMix64(PRECISION_SEED), step, tolerance)


CONTRAST_SHAPE = (2, 4, 5, 3)  # √d_model 2.24, d_k 3, √d_k 1.73: all differ
CONTRAST_SEED = 29
CONTRAST_SCALE = 16.0  # batch item 1: token t is about 16 e_t
CONTRAST_QUERIES = ((-1.98, 0.004, -0.003), (1.353, 0.02, 0.01))  # W_Q rows 2 and 3


def contrast_case(step: float, tolerance: float) -> Case:
    """The fixture every check includes to tell a head's slips apart, labelled
    ``contrast[2,4,5->3]``: drawn values (scores ``Q Kᵀ`` not symmetric, batch items
    that differ, widths where ``√d_model``, ``d_k`` and ``√d_k`` all differ),
    then batch item 1 made of rows of very different magnitude: its token ``t`` is about
    16 ``e_t`` and ``W_K``'s first four rows share a first column of about 1.5, so query 3's
    scores reach about +300 and query 2's all lie near -440, about 739 below: a softmax
    that subtracts the whole tensor's maximum underflows there into subnormal numbers
    (finite, but wrong from the fourth digit), while the row's own maximum keeps it exact
    and no score is large enough for exp to overflow."""
    label = "contrast[{},{},{}->{}]".format(*CONTRAST_SHAPE)
    case = _drawn(label, CONTRAST_SHAPE, SplitMix64(CONTRAST_SEED), step, tolerance)
    x, (w_query, w_key, _) = case.input, case.weights
    tokens = CONTRAST_SHAPE[1]
    x[1] = CONTRAST_SCALE * np.eye(tokens, CONTRAST_SHAPE[2]) + 0.001 * x[1]
    w_key[:tokens, 0] = 1.5 + 0.002 * w_key[:tokens, 0]
    w_query[2:4, :] = CONTRAST_QUERIES
    return case._replace(heads_only=True)


def random_cases(count: int, seed: int, step: float, tolerance: float) -> list[Case]:
    """``count`` seeded random fixtures labelled ``random-1[b,t,d->h]``, ...; same seed, same values."""
    rng = SplitMix64(seed)
    return [_drawn("random-{}[{},{},{}->{}]".format(number, *shape), shape, rng, step, tolerance)
            for number, shape in enumerate(random_shapes(count, rng), 1)]


def overflowing(case: Case) -> str | None:
    """The first of qkv's results on ``case`` that is not finite (``"query"``,
    ``"grad_w_key"``...), or ``None``: such a fixture cannot be checked, since the
    protocol carries finite numbers only and inf - inf has no error to measure."""
    import numpy as np

    from qkvcli.core.names import BRANCHES, GRADIENTS
    from qkvcli.core.projections import QkvProjections

    layer = QkvProjections.from_arrays(*case.weights)
    with np.errstate(all="ignore"):
        outputs = layer.forward(case.input)
        gradients = layer.backward(case.input, *case.upstream)
    named = [*zip(BRANCHES, (outputs.query, outputs.key, outputs.value), strict=True),
             *zip(GRADIENTS, (gradients.grad_input, gradients.grad_w_query,
                              gradients.grad_w_key, gradients.grad_w_value), strict=True)]
    return next((name for name, values in named if not np.isfinite(values).all()), None)
