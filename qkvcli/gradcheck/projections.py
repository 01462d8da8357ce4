"""The chapter's gradient check of the projections: choose a mode per tensor and run it.

The objective is ``L = <Q,U_Q> + <K,U_K> + <V,U_V>``, evaluated in float64; the checked
tensors are the input and the three weights, in that order. Modes, per tensor (see
:mod:`qkvcli.gradcheck.settings`):

* ``full``: every coordinate, by central differences (:mod:`qkvcli.gradcheck.central`)
  whose evaluations are batched (:mod:`qkvcli.gradcheck.batched`);
* ``sampled``: the evenly spaced coordinates of
  :func:`~qkvcli.gradcheck.central.sample_indices` (``samples``, default
  :data:`~qkvcli.gradcheck.settings.DEFAULT_SAMPLES`), evaluated the same way;
* ``fast``: seeded random directions (:mod:`qkvcli.gradcheck.batched`);
* ``auto`` (the default): ``sampled`` when a sample count is given; otherwise ``full``
  for tensors of up to :data:`~qkvcli.gradcheck.settings.AUTO_FULL_LIMIT` elements and
  ``sampled`` above.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from qkvcli.core.arrays import Array
from qkvcli.core.projections import QkvProjections
from qkvcli.gradcheck.batched import Checked, check
from qkvcli.gradcheck.central import sample_indices
from qkvcli.gradcheck.probes import StackedObjective, loss_terms
from qkvcli.gradcheck.records import GradcheckResult, Progress
from qkvcli.gradcheck.settings import (
    AUTO_FULL_LIMIT,
    DEFAULT_DIRECTION_SEED,
    DEFAULT_DIRECTIONS,
    DEFAULT_MODE,
    resolve_mode,
    validate_settings,
)

TENSOR_NAMES: tuple[str, str, str, str] = ("input", "query_weight", "key_weight", "value_weight")
# Elements of stacked probes and products per vectorized batch (float64: 4 MiB; larger
# batches measured slower: the products stop fitting in cache).
BATCH_ELEMENTS = 1 << 19


def gradcheck_projections(
    projections: QkvProjections,
    x: Array,
    upstream: tuple[Array, Array, Array],
    analytic: tuple[Array, Array, Array, Array],
    step: float,
    tolerance: float,
    samples: int | None = None,
    progress: Progress | None = None,
    *,
    mode: str = DEFAULT_MODE,
    directions: int = DEFAULT_DIRECTIONS,
    seed: int = DEFAULT_DIRECTION_SEED,
) -> GradcheckResult:
    """Check the input gradient and the three weight gradients of ``projections`` at ``x``.

    ``analytic`` is ``(grad_input, grad_w_query, grad_w_key, grad_w_value)``;
    ``upstream`` is ``(grad_query, grad_key, grad_value)``. ``mode`` is one of
    :data:`~qkvcli.gradcheck.settings.MODES` (see the module docstring); ``directions``
    and ``seed`` (SplitMix64, drawn in input, query, key, value order) are used by
    ``fast``. ``progress(done, total)``, when given, is called after each coordinate or
    direction, counting across all four tensors. With the defaults a tensor of up to
    4096 elements gets every coordinate, as the chapter does.

    Raises :class:`~qkvcli.gradcheck.settings.GradcheckSettingError` for unusable settings.
    """
    validate_settings(step, tolerance, samples, mode, directions)
    x64 = np.asarray(x, dtype=np.float64)
    tensors_values = (x64, *projections.weights)
    plans: list[tuple[str, int | None, int]] = []
    for values in tensors_values:
        resolved, count = resolve_mode(mode, int(values.size), samples)
        planned = directions if resolved == "fast" else len(sample_indices(values.size, count))
        plans.append((resolved, count, planned))
    batch, tokens, _ = x64.shape
    branch_output = int(batch * tokens) * projections.d_head  # [B,T,d_head]: what a weight reaches
    # The unperturbed loss terms, computed once (every weight's objective needs them).
    base = loss_terms(projections, x64, upstream)

    def tensors() -> Iterator[Checked]:
        for index, values in enumerate(tensors_values):
            resolved, count, planned = plans[index]
            # One coordinate at a time, a large tensor needs only what its coordinate
            # reaches recomputed: a row of [Q|K|V] for a large input, a column of one
            # branch for a weight that is large or whose branch output is. Small ones (the
            # chapter's) keep whole-copy evaluations, the path whose sums the golden files
            # pin bit for bit.
            reach = branch_output if index > 0 else 0
            local = resolved != "fast" and max(int(values.size), reach) > AUTO_FULL_LIMIT
            per_slot = StackedObjective.slot_elements(projections, x64, index, local)
            fits = max(1, BATCH_ELEMENTS // max(1, per_slot))  # an empty input costs nothing
            if resolved == "fast":
                slots = 2 * max(1, min(directions, fits // 2))
            else:
                slots = min(3 * max(planned, 1), fits)
            objective = StackedObjective(projections, x64, upstream, index, slots, local, base)
            yield Checked(TENSOR_NAMES[index], values, analytic[index], objective, resolved,
                          count, objective.recomputes)

    return check(tensors(), step, tolerance, mode=mode, directions=directions, seed=seed,
                 total=sum(planned for _, _, planned in plans), progress=progress)
