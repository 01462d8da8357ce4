"""Central-difference gradient checks of an attention head or layer: modes, budget, evaluations.

The objective is ``L = <Y, U>`` for the final output ``Y`` (a head's ``O``; a layer's
output after its optional output projection) and a fixed upstream ``U``. Tensors, by
internal name and in order: ``input``, ``w_query``, ``w_key``, ``w_value``, the biases
the model has (``b_query``, ``b_key``, ``b_value``), then a layer's ``w_out``, ``b_out``;
weights in our layout (``[in, out]``). :mod:`qkvcli.render.attend` publishes the names.

Modes are run's (:mod:`qkvcli.gradcheck.settings`): ``full``, ``sampled``, ``fast`` and
``auto``. ``auto`` is run's rule (every coordinate up to 4096 elements, 6 samples above,
``--samples`` when given) with one more: a tensor whose full check would cost more than
:data:`AUTO_FULL_UNITS` units is sampled too.

The budget counts what an evaluation costs: one evaluation counts
``ceil(multiply_adds / EVALUATION_UNIT)`` units (at least one), and a check over the
limit (``--max-evaluations``, default run's) is refused before any work
(:class:`~qkvcli.gradcheck.settings.TooManyEvaluations`). A chapter-sized evaluation
counts one, as in run.

Evaluations (:attr:`TensorCheck.recomputes`): a small model, and every ``fast``
direction, run a fresh forward pass of the whole model from perturbed copies
(``full forward``: the chapter's bytes). A larger one recomputes, one coordinate at a
time, only what the coordinate reaches (:class:`~qkvcli.attention.shortcuts.Shortcuts`,
for every layer kind: grouped K/V heads, RoPE, a given scale), within a stated bound of
the full forward's ``L`` (:func:`~qkvcli.attention.shortcuts.shortcut_bound`;
tests/test_attend_shortcuts.py, tests/test_attend_shortcut_kinds.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from qkvcli.attention.head import AttentionGradients, AttentionHead
from qkvcli.attention.multihead import LayerForward, LayerGradients, MultiHeadLayer, layer_loss
from qkvcli.attention.shortcuts import PointObjective, Shortcuts
from qkvcli.core.arrays import Array
from qkvcli.core.names import BRANCHES
from qkvcli.core.splitmix import SplitMix64
from qkvcli.gradcheck.batched import batched_coordinates, directional_checks
from qkvcli.gradcheck.central import sample_indices
from qkvcli.gradcheck.records import GradcheckResult, Progress, TensorCheck, Ticker
from qkvcli.gradcheck.settings import (
    AUTO_FULL_LIMIT,
    DEFAULT_DIRECTION_SEED,
    DEFAULT_DIRECTIONS,
    DEFAULT_SAMPLES,
    MAX_EVALUATIONS,
    TooManyEvaluations,
    resolve_mode,
    validate_settings,
)

EVALUATION_UNIT = 1 << 16
"""Multiply-adds one unit of the budget stands for (a chapter-sized evaluation costs one)."""
AUTO_FULL_UNITS = 2 * AUTO_FULL_LIMIT
"""Largest full check (in units) ``auto`` still runs on one tensor, larger ones are sampled:
what a 4096-element tensor of one-unit evaluations costs, run's own limit."""
RECOMPUTES_ALL = "full forward"
RECOMPUTES_SCORES = "perturbed head scores"
RECOMPUTES_VALUE = "perturbed value column"
RECOMPUTES_TOKEN = "perturbed token rows"
RECOMPUTES_OUT = "perturbed output column"

TensorObjective = Callable[[Array], float]
"""``L`` at a whole perturbed copy of the checked tensor."""


def as_layer(model: AttentionHead | MultiHeadLayer) -> MultiHeadLayer:
    """A head as the one-head layer without output projection it is (the same arithmetic)."""
    return model if isinstance(model, MultiHeadLayer) else MultiHeadLayer.build(model, 1)


def forward_cost(layer: MultiHeadLayer, x: Array) -> int:
    """Multiply-adds of one forward pass of ``layer`` at ``x`` (projections, scores, mix, out)."""
    batch, tokens, d_model = x.shape
    p = layer.projections
    rows = batch * tokens
    projections = rows * d_model * (2 * p.d_k + p.d_v)
    attention = layer.heads * batch * tokens * tokens * (layer.d_k + layer.d_v + 4)
    out = 0 if layer.out_weight is None else rows * p.d_v * layer.e_out
    return int(projections + attention + out)


def _units(multiply_adds: int) -> int:
    return max(1, -(-int(multiply_adds) // EVALUATION_UNIT))


class _PointSlots:
    """:class:`~qkvcli.gradcheck.records.Objective` over a point objective: each slot one
    perturbed coordinate, each evaluation a complete evaluation of ``L``."""

    def __init__(self, point: PointObjective, slots: int) -> None:
        self.point = point
        self.slots = slots
        self._where = [0] * slots
        self._value = [0.0] * slots

    def put(self, k: int, flat_index: int, value: float) -> None:
        self._where[k] = flat_index
        self._value[k] = value

    def slot(self, k: int) -> Array:
        raise ValueError("a point objective has no slot copies; use put")

    def evaluate(self, count: int) -> Array:
        return np.array([self.point(self._where[k], self._value[k]) for k in range(count)])


class _CopySlots:
    """:class:`~qkvcli.gradcheck.records.Objective` over whole perturbed copies (``fast``)."""

    def __init__(self, tensor: TensorObjective, values: Array) -> None:
        self.tensor = tensor
        self.slots = 2
        self._copies = [np.array(values, dtype=np.float64, copy=True) for _ in range(2)]

    def put(self, k: int, flat_index: int, value: float) -> None:
        self._copies[k].reshape(-1)[flat_index] = value

    def slot(self, k: int) -> Array:
        return self._copies[k]

    def evaluate(self, count: int) -> Array:
        return np.array([self.tensor(self._copies[k]) for k in range(count)])


def _copy_point(tensor: TensorObjective, values: Array) -> PointObjective:
    """The point objective that perturbs a copy, evaluates it whole, and restores it."""
    probe = np.array(values, dtype=np.float64, copy=True)
    flat = probe.reshape(-1)

    def point(index: int, value: float) -> float:
        original = flat[index]
        flat[index] = value
        try:
            return tensor(probe)
        finally:
            flat[index] = original  # restore: evaluations never share state

    return point


def _tensors(layer: MultiHeadLayer, x: Array) -> list[tuple[str, Array]]:
    """Every checked tensor of ``layer`` at ``x`` by internal name, in order."""
    p = layer.projections
    named: list[tuple[str, Array | None]] = [("input", x)]
    named += [(f"w_{b}", w) for b, w in zip(BRANCHES, p.weights, strict=True)]
    named += [(f"b_{b}", bias) for b, bias in zip(BRANCHES, p.biases, strict=True)]
    named += [("w_out", layer.out_weight), ("b_out", layer.out_bias)]
    return [(name, values) for name, values in named if values is not None]


def evaluation_cost(layer: MultiHeadLayer, x: Array, name: str, shortcuts: bool) -> tuple[
    int, str
]:
    """Multiply-adds of one evaluation of tensor ``name``'s objective, and what it recomputes.

    A shortcut's cost counts every head it reaches: a key or value column of a K/V head
    reaches the ``heads / kv_heads`` query heads of its group. With RoPE a query or key
    column changes two columns of the turned Q or K (a rank-two change of the scores, one
    more ``T^2`` per head) and is turned at every position. A causal mask's skipped blocks
    are not subtracted: the budget counts whole ``T x T`` score matrices (an upper bound).
    """
    if not shortcuts:
        return forward_cost(layer, x), RECOMPUTES_ALL
    batch, tokens, d_model = x.shape
    rows, tt = batch * tokens, batch * tokens * tokens
    p = layer.projections
    per = layer.heads // layer.kv_heads  # query heads a K/V head's column reaches
    turned = p.rope is not None
    if name == "input":
        per_head = tokens * tokens * 6 + tokens * 2 * (layer.d_k + layer.d_v)
        widths = sum(int(w.shape[1]) for w in p.weights)
        return d_model * widths + layer.heads * per_head, RECOMPUTES_TOKEN
    if name in ("w_out", "b_out"):
        return rows * p.d_v + rows, RECOMPUTES_OUT
    if name.endswith("value"):
        return rows * d_model + per * tt, RECOMPUTES_VALUE
    reached = per if name.endswith("key") else 1
    # a rank-one change (rank-two with RoPE, whose column is turned too), then the softmax
    per_head = (9 if turned else 8) * tt
    return rows * d_model + (4 * rows if turned else 0) + reached * per_head, RECOMPUTES_SCORES


class CheckPlan:
    """Per checked tensor: its internal name, mode, sample count, planned checks and cost."""

    __slots__ = ("causes", "full_cost", "rows", "shortcuts", "units")

    def __init__(self, layer: MultiHeadLayer, x: Array, mode: str, samples: int | None,
                 directions: int, shortcuts: bool | None) -> None:
        self.shortcuts = reaches_far(layer, x) if shortcuts is None else shortcuts
        self.full_cost = forward_cost(layer, x)
        self.rows: list[tuple[str, str, int | None, int, int, str]] = []
        self.causes: set[str] = set()
        self.units = 0
        for name, values in _tensors(layer, x):
            cost, recomputes = evaluation_cost(layer, x, name, self.shortcuts)
            size = int(values.size)
            resolved, count = resolve_mode(mode, size, samples)
            if mode == "auto" and resolved == "full" and 2 * size * _units(cost) > AUTO_FULL_UNITS:
                resolved, count = "sampled", DEFAULT_SAMPLES  # auto's cost rule
            if resolved == "fast":
                planned, cost, recomputes = directions, self.full_cost, RECOMPUTES_ALL
                self.causes.add(f"--directions {directions}")
            else:
                planned = len(sample_indices(size, count))
                self.causes.add("every coordinate" if resolved == "full"
                                else f"--samples {count}")
            self.rows.append((name, resolved, count, planned, cost, recomputes))
            self.units += 2 * planned * _units(cost)

    def refuse_over(self, limit: int) -> None:
        """Raise :class:`~qkvcli.gradcheck.settings.TooManyEvaluations` over ``limit`` units."""
        if self.units > limit:
            less = None
            if all(cause.startswith("--directions") for cause in self.causes):
                # fast mode's directions each run a whole forward: fewer of them, or the
                # sampled coordinates (which, on a large model, recompute only what they reach)
                less = "fewer --directions" + (
                    ", or --mode auto (sampled coordinates, cheaper evaluations)"
                    if self.shortcuts else "")
            raise TooManyEvaluations(
                self.units, limit, ", ".join(sorted(self.causes))
                + f"; a unit is {EVALUATION_UNIT} multiply-adds of an evaluation, a whole "
                f"forward of this model costs {_units(self.full_cost)}", weighted=True,
                less=less)


def plan_check(model: AttentionHead | MultiHeadLayer, x: Array, step: float, tolerance: float,
               samples: int | None = None, *, mode: str = "auto",
               directions: int = DEFAULT_DIRECTIONS, limit: int = MAX_EVALUATIONS,
               shortcuts: bool | None = None) -> CheckPlan:
    """The check :func:`gradcheck_attention` would make, refused (before any work) when its
    units pass ``limit``. Raises what :func:`gradcheck_attention` raises before evaluating."""
    validate_settings(step, tolerance, samples, mode, directions)
    plan = CheckPlan(as_layer(model), np.asarray(x, dtype=np.float64), mode, samples,
                     directions, shortcuts)
    plan.refuse_over(limit)
    return plan


def gradcheck_attention(
    model: AttentionHead | MultiHeadLayer, x: Array, upstream: Array,
    analytic: dict[str, Array], causal: bool, step: float, tolerance: float,
    samples: int | None = None, progress: Progress | None = None, *, mode: str = "auto",
    directions: int = DEFAULT_DIRECTIONS, seed: int = DEFAULT_DIRECTION_SEED,
    limit: int = MAX_EVALUATIONS, shortcuts: bool | None = None,
    forward: LayerForward | None = None,
) -> GradcheckResult:
    """Check ``analytic`` (by internal name: ``analytic["input"]`` is dL/dX, ...) of
    ``model`` at ``x`` against central differences of ``L = <Y, U>``.

    ``mode``, ``samples``, ``directions`` and ``seed`` as run's check; ``limit`` is the
    budget in units (see the module docstring); ``shortcuts`` forces (or forbids) the
    cheaper evaluations (default :func:`reaches_far`), which start from ``forward`` (the
    layer's forward at ``x``) when given. ``progress(done, total)`` after
    each coordinate or direction. Raises
    :class:`~qkvcli.gradcheck.settings.GradcheckSettingError` (unusable settings) and
    :class:`~qkvcli.gradcheck.settings.TooManyEvaluations`, both before any evaluation.
    """
    plan = plan_check(model, x, step, tolerance, samples, mode=mode, directions=directions,
                      limit=limit, shortcuts=shortcuts)
    layer = as_layer(model)
    x64 = np.asarray(x, dtype=np.float64)
    u64 = np.asarray(upstream, dtype=np.float64)
    fast = Shortcuts(layer, x64, u64, causal, forward) if plan.shortcuts else None
    values_of = dict(_tensors(layer, x64))
    ticker = Ticker(progress, sum(row[3] for row in plan.rows))
    rng = SplitMix64(seed)
    checks = []
    for name, resolved, count, _, _, recomputes in plan.rows:
        values = values_of[name]
        whole = _tensor_objective(layer, x64, u64, causal, name)
        shape = tuple(values.shape)
        if resolved == "fast":
            found = directional_checks(_CopySlots(whole, values), name, values, analytic[name],
                                       directions, rng, step, tolerance, ticker)
            checks.append(TensorCheck(name, shape, directions, tuple(found), "fast",
                                      recomputes))
            continue
        point = fast.objective(name) if fast is not None else _copy_point(whole, values)
        indices = sample_indices(values.size, count)
        found = batched_coordinates(_PointSlots(point, 2), name, values, analytic[name],
                                    indices, step, tolerance, ticker)
        requested = values.size if count is None else count
        checks.append(TensorCheck(name, shape, requested, tuple(found), resolved, recomputes))
    return GradcheckResult(step, tolerance, tuple(checks), mode)


def _tensor_objective(layer: MultiHeadLayer, x: Array, upstream: Array, causal: bool,
                      name: str) -> TensorObjective:
    """``L`` by a fresh forward of ``layer`` with tensor ``name`` replaced by the probe."""
    p = layer.projections

    def objective(probe: Array) -> float:
        weights, biases = list(p.weights), list(p.biases)
        out = [layer.out_weight, layer.out_bias]
        probe_x = x
        if name == "input":
            probe_x = probe
        elif name in ("w_out", "b_out"):
            out[0 if name == "w_out" else 1] = probe
        elif name.startswith("w_"):
            weights[BRANCHES.index(name[2:])] = probe
        else:
            biases[BRANCHES.index(name[2:])] = probe
        probe_layer = layer.with_parameters(weights, biases, out[0], out[1])
        return layer_loss(probe_layer.forward(probe_x, causal), upstream)

    return objective


def analytic_of(grads: AttentionGradients | LayerGradients) -> dict[str, Array]:
    """The gradients of a head's or layer's reverse pass by checked tensor's internal name."""
    named: dict[str, Array | None] = {
        "input": grads.grad_input, "w_query": grads.grad_w_query, "w_key": grads.grad_w_key,
        "w_value": grads.grad_w_value, "b_query": grads.grad_b_query,
        "b_key": grads.grad_b_key, "b_value": grads.grad_b_value,
        "w_out": getattr(grads, "grad_out_weight", None),
        "b_out": getattr(grads, "grad_out_bias", None),
    }
    return {name: value for name, value in named.items() if value is not None}


def gradcheck_head(head: AttentionHead, x: Array, upstream: Array,
                   analytic: AttentionGradients, causal: bool, step: float, tolerance: float,
                   samples: int | None = None, **settings: Any) -> GradcheckResult:
    """:func:`gradcheck_attention` of one head, with the gradients of its ``backward``."""
    return gradcheck_attention(head, x, upstream, analytic_of(analytic), causal, step,
                               tolerance, samples, **settings)


def gradcheck_layer(layer: MultiHeadLayer, x: Array, upstream: Array, analytic: LayerGradients,
                    causal: bool, step: float, tolerance: float, samples: int | None = None,
                    **settings: Any) -> GradcheckResult:
    """:func:`gradcheck_attention` of a layer, with the gradients of its ``backward``."""
    return gradcheck_attention(layer, x, upstream, analytic_of(analytic), causal, step,
                               tolerance, samples, **settings)


def reaches_far(layer: MultiHeadLayer, x: Array) -> bool:
    """Whether a coordinate's full forward is worth avoiding: scores or output of more than
    :data:`~qkvcli.gradcheck.settings.AUTO_FULL_LIMIT` elements (the chapter's stay whole).
    The shortcuts model every layer kind (grouped K/V heads, RoPE, a given scale)."""
    batch, tokens, _ = x.shape
    large = max(layer.heads * batch * tokens * tokens, batch * tokens * layer.e_out)
    return bool(large > AUTO_FULL_LIMIT)
