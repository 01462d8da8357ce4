"""The fixtures ``qkv check`` runs on: the chapter's, the user's, seeded random shapes, and
the fixtures of RoPE and of multi-head attention.

The random shapes always start with the four that catch the usual slips, in this
order: ``d_model != d_head``, an empty batch, no tokens, and ``d_head = 1``; further
shapes are drawn from the same SplitMix64 generator. Values are uniform in ``[-1, 1)``
with all 53 bits used, so float32 arithmetic cannot pass the default tolerance.

The ``precision`` fixture is always checked, whatever ``--random`` says: its values
(drawn the same way, from its own seed) are exact neither in 6 decimals nor in float32,
so a lossy number writer or float32 arithmetic cannot pass on the chapter's exact
integers alone.

RoPE and multi-head attention have fixtures of their own (:func:`rope_cases`,
:func:`mha_cases`): a few shapes, bases and offsets, values drawn the same way.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from qkvcli.core.arrays import Array
from qkvcli.core.record import Record
from qkvcli.core.splitmix import SplitMix64
from qkvcli.gradcheck.settings import (  # the chapter's coordinates per tensor
    DEFAULT_SAMPLES,
    DEFAULT_STEP,
    DEFAULT_TOLERANCE,
)
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
    """One fixture: the input, the weights and the upstream gradients, float64.

    The projections and a head take ``W_Q``, ``W_K``, ``W_V`` and the projections' three
    upstream gradients (a head's ``grad_output`` is the value's); RoPE takes no weights,
    its ``base`` and ``offset``, and one upstream gradient; multi-head attention takes
    ``W_Q``, ``W_K``, ``W_V``, ``W_O``, its ``heads``, RoPE's ``base`` and ``offset``, and
    the output's upstream gradient. ``step``, ``tolerance`` and ``samples`` are the
    gradient check's settings (the fixture's own, else the chapter's). A later chapter's
    fixture given on the command line names the kinds it is a case of in ``kinds`` (their
    forwards: chapter 29's ``rope``; empty for a chapter 26 fixture, which the
    projections and a head take); a KV cache's ``capacity`` is its positions (0: room for
    every token).
    """

    label: str
    input: Array
    weights: tuple[Array, ...]
    upstream: tuple[Array, ...]
    step: float
    tolerance: float
    samples: int | None = DEFAULT_SAMPLES
    heads_only: bool = False  # a probe of a head's slips (contrast), not of the projections
    heads: int = 0
    base: float = 0.0
    offset: int = 0
    suffix: Array | None = None  # the last token's replacement in the prefix probe (else +1)
    query_width: int = 0  # a head on given operands: Q's (and K's) width in the input [Q|K|V]
    kinds: tuple[str, ...] = ()
    capacity: int = 0

    @property
    def tensors(self) -> tuple[Array, ...]:
        """The input and the weights: what the gradient check perturbs, in the order of
        the backward's results."""
        return (self.input, *self.weights)

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """``(batch, tokens, d_model, d_head)``."""
        batch, tokens, d_model = self.input.shape
        return int(batch), int(tokens), int(d_model), int(self.weights[0].shape[1])


class Run(Record):
    """A case as one kind of operation runs it: in one ``mode`` (a head's ``causal``,
    multi-head attention's ``(causal, rope)``; ``None`` for a kind that takes none), under
    its ``label`` (``chapter causal``), with the ``upstream`` gradients its backward gets."""

    case: Case
    mode: Any
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


def uniform(rng: SplitMix64, *dims: int) -> Array:
    """An array of ``dims`` drawn from ``rng``, uniform in ``[-1, 1)`` (all 53 bits used)."""
    size = 1
    for dim in dims:
        size *= dim
    values: Array = (rng.next_unit_block(size) * 2.0 - 1.0).reshape(dims)
    return values


def _drawn(label: str, shape: tuple[int, int, int, int], rng: SplitMix64, step: float,
           tolerance: float) -> Case:
    """A fixture of ``shape`` with values drawn from ``rng``, uniform in ``[-1, 1)``."""
    batch, tokens, d_model, d_head = shape
    draw = partial(uniform, rng)

    x = draw(batch, tokens, d_model)
    weights = (draw(d_model, d_head), draw(d_model, d_head), draw(d_model, d_head))
    upstream = tuple(draw(batch, tokens, d_head) for _ in range(3))
    return Case(label, x, weights, upstream, step, tolerance)


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

    w_query, w_key, w_value = case.weights
    layer = QkvProjections.from_arrays(w_query, w_key, w_value)
    with np.errstate(all="ignore"):
        outputs = layer.forward(case.input)
        gradients = layer.backward(case.input, *case.upstream)
    named = [*zip(BRANCHES, (outputs.query, outputs.key, outputs.value), strict=True),
             *zip(GRADIENTS, (gradients.grad_input, gradients.grad_w_query,
                              gradients.grad_w_key, gradients.grad_w_value), strict=True)]
    return next((name for name, values in named if not np.isfinite(values).all()), None)


ROPE_SHAPES: tuple[tuple[tuple[int, int, int], float, int], ...] = (
    ((1, 3, 4), 100.0, 0),  # the chapter's sizes
    ((2, 5, 6), 10000.0, 0),  # LLaMA's base; half-split differs from adjacent from d = 4
    ((2, 5, 6), 100.0, 3),  # an offset: positions 3 .. 7
    ((1, 3, 2), 10.0, 1),  # one pair
    ((0, 3, 4), 100.0, 0),  # an empty batch
    ((2, 0, 4), 100.0, 2),  # no tokens
    ((1, 3, 4), 10.0, 2),  # a base whose square is not 10000: an ignored base and a squared one differ
)
ROPE_SEED = 29


def rope_cases() -> list[Case]:
    """The fixtures of RoPE, labelled ``rope[2,5,6,base=100,offset=3]``: ``x [batch,
    tokens, d]`` drawn uniform in ``[-1, 1)`` (exact neither in 6 decimals nor in
    float32); the upstream gradient of the rotation is ``x`` itself (what ``rope_reverse``
    is given)."""
    rng = SplitMix64(ROPE_SEED)
    found = []
    for shape, base, offset in ROPE_SHAPES:
        x = uniform(rng, *shape)
        label = "rope[{},{},{},base={:g},offset={}]".format(*shape, base, offset)
        found.append(Case(label, x, (), (x,), DEFAULT_STEP, DEFAULT_TOLERANCE, base=base,
                          offset=offset))
    return found


MHA_SHAPES: tuple[tuple[tuple[int, int, int], int, float, int], ...] = (
    ((1, 3, 4), 2, 100.0, 0),  # the chapter's sizes: two heads of width 2
    ((2, 4, 8), 2, 100.0, 1),  # heads of width 4: half-split pairs differ from adjacent ones
    ((2, 4, 6), 3, 10000.0, 2),  # three heads, batch items that differ, an offset
    ((0, 3, 4), 2, 100.0, 0),  # an empty batch
    ((1, 1, 4), 2, 100.0, 0),  # one token
)
MHA_SEED = 30


def mha_cases() -> list[Case]:
    """The fixtures of multi-head attention, labelled ``mha[2,4,6/3,base=10000,offset=2]``
    (the input's shape and the head count, RoPE's base and offset): the input, ``W_Q``,
    ``W_K``, ``W_V``, ``W_O`` ``[d_model, d_model]`` and the output's upstream gradient,
    drawn uniform in ``[-1, 1)``."""
    rng = SplitMix64(MHA_SEED)
    found = []
    for (batch, tokens, width), heads, base, offset in MHA_SHAPES:
        x = uniform(rng, batch, tokens, width)
        weights = tuple(uniform(rng, width, width) for _ in range(4))
        label = f"mha[{batch},{tokens},{width}/{heads},base={base:g},offset={offset}]"
        found.append(Case(label, x, weights, (uniform(rng, batch, tokens, width),),
                          DEFAULT_STEP, DEFAULT_TOLERANCE, heads=heads, base=base,
                          offset=offset))
    return found


CACHE_SHAPES: tuple[tuple[tuple[int, int, int], int, float], ...] = (
    ((2, 4, 8), 2, 100.0),  # heads of width 4: two pairs, each turned at its own rate
    ((2, 5, 6), 3, 10000.0),  # three heads, batch items that differ
)
CACHE_SEED = 37


def cache_cases() -> list[Case]:
    """The fixtures of a KV cache, labelled ``cache[2,4,8/2,base=100]``: chapter 37's (its
    input rows ``cos t, -sin t``, identity ``W_Q``, ``W_K``, ``W_V`` and ``W_O`` swapping
    the two heads' blocks) first, then the input and the four weights drawn uniform in
    ``[-1, 1)``. Each is fed one token a step into a cache with room for every token."""
    from qkvcli.attention.maths import rotate  # the engine's RoPE: imported when a cache is
    from qkvcli.core.rope import Rope

    # the first head's rows are [1, 0] turned back to each position (at base 100 a head of
    # width 2 turns by t), so its turned keys are all [1, 0]
    back = rotate(np.tile([1.0, 0.0], (3, 1)), Rope(100.0, 2), inverse=True)
    turn = np.concatenate([back, [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]], axis=1)[None]
    eye = np.eye(4)
    swap = np.roll(eye, 2, axis=1)  # out = [m2, m3, m0, m1]
    found = [Case("cache[1,3,4/2,base=100]", turn, (eye, eye, eye, swap), (), DEFAULT_STEP,
                  DEFAULT_TOLERANCE, heads=2, base=100.0)]
    rng = SplitMix64(CACHE_SEED)
    for (batch, tokens, width), heads, base in CACHE_SHAPES:
        x = uniform(rng, batch, tokens, width)
        weights = tuple(uniform(rng, width, width) for _ in range(4))
        found.append(Case(f"cache[{batch},{tokens},{width}/{heads},base={base:g}]", x, weights,
                          (), DEFAULT_STEP, DEFAULT_TOLERANCE, heads=heads, base=base))
    return found
