"""Central-difference gradient checks of an attention head or layer: modes, budget, evaluations.

The objective is ``L = <Y, U>`` for the final output ``Y`` (a head's ``O``; a layer's
output after its optional output projection) and a fixed upstream ``U``. Tensors, by
internal name and in order: ``input``, ``w_query``, ``w_key``, ``w_value``, the biases
the model has (``b_query``, ``b_key``, ``b_value``), a norm's weights (``norm_query``,
``norm_key``) and biases (``norm_query_bias``, ``norm_key_bias``), then a layer's ``w_out``, ``b_out``;
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

Every evaluation is one call of the engine (:mod:`qkvcli.attention.engine`) on the
perturbed parameters, never a second derivation of the maths, and never a revalidation:
the layer was validated when it was built. A small model, and every ``fast``
direction, runs the whole layer (``full forward``: the chapter's bytes). A larger one
runs the engine on only what the perturbed coordinate reaches, and adds the terms of
``L`` it cannot reach, computed once from the unperturbed forward:

- a query weight or bias of head ``h``: its one projected column, then the layer of that
  one head (with its K/V head);
- a key or value weight or bias of K/V head ``g``: its one projected column, then the
  layer of the query heads of its group;
- an input coordinate of batch item ``b`` at token ``t``: that token's projections, then
  that batch item alone, and with a causal mask only its query rows from ``t`` on (the
  earlier ones never see token ``t``);
- an output-projection weight or bias of column ``j``: that column of ``Y``;
- a norm's weight reaches every head, and a norm over the layer's width ties every
  query (key) column to the others: those tensors, and the projections of such a layer,
  run the full forward.

``L = <Y, U>`` splits along those lines exactly: over batch items and rows, and through
``Y = C W_O + b_O`` over heads (``<C, U W_O^T>`` by head, plus ``<b_O, sum U>``).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from qkvcli.attention import engine
from qkvcli.attention.engine import BLOCK_ROWS, LayerForward, LayerGradients
from qkvcli.attention.head import AttentionGradients, AttentionHead
from qkvcli.attention.multihead import MultiHeadLayer
from qkvcli.core.arrays import Array
from qkvcli.core.names import BRANCHES
from qkvcli.core.projections import project
from qkvcli.core.record import Record
from qkvcli.gradcheck.batched import Checked, Copies, Points, check, perturbing
from qkvcli.gradcheck.central import sample_indices
from qkvcli.gradcheck.records import GradcheckResult, PointObjective, Progress, TensorObjective
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
HEAD_OVERHEAD = 1024
"""Multiply-adds one head costs an evaluation beside its arithmetic (each of the batched
products' per-matrix steps, the softmax's per-row reductions): a layer of thousands of
tiny heads is not free because its products are."""
RECOMPUTES_ALL = "full forward"
RECOMPUTES_HEAD = "perturbed head"
RECOMPUTES_GROUP = "perturbed K/V group"
RECOMPUTES_ITEM = "perturbed batch item"
RECOMPUTES_OUT = "perturbed output column"


def as_layer(model: AttentionHead | MultiHeadLayer) -> MultiHeadLayer:
    """A head as the one-head layer without output projection it is (the same arithmetic)."""
    return model if isinstance(model, MultiHeadLayer) else MultiHeadLayer.build(model, 1)


def forward_cost(layer: MultiHeadLayer, x: Array) -> int:
    """Multiply-adds of one forward pass of ``layer`` at ``x`` (projections, scores, mix,
    out), with :data:`HEAD_OVERHEAD` per head."""
    batch, tokens, d_model = x.shape
    p = layer.projections
    rows = batch * tokens
    projections = rows * d_model * (p.d_k + sum(int(w.shape[1]) for w in p.weights[1:]))
    attention = layer.heads * batch * tokens * tokens * (layer.d_k + layer.d_v + 4)
    out = 0 if layer.out_weight is None else rows * layer.concat_width * layer.e_out
    return int(projections + attention + out + layer.heads * HEAD_OVERHEAD)


def _units(multiply_adds: int) -> int:
    return max(1, -(-int(multiply_adds) // EVALUATION_UNIT))


def checked_tensors(layer: MultiHeadLayer, x: Array) -> list[tuple[str, Array]]:
    """Every checked tensor of ``layer`` at ``x`` by internal name, in order."""
    p = layer.projections
    named: list[tuple[str, Array | None]] = [("input", x)]
    named += [(f"w_{b}", w) for b, w in zip(BRANCHES, p.weights, strict=True)]
    named += [(f"b_{b}", bias) for b, bias in zip(BRANCHES, p.biases, strict=True)]
    norm = layer.qk_norm
    if norm is not None:
        named += [("norm_query", norm.query), ("norm_key", norm.key),
                  ("norm_query_bias", norm.query_bias), ("norm_key_bias", norm.key_bias)]
    named += [("w_out", layer.out_weight), ("b_out", layer.out_bias)]
    return [(name, values) for name, values in named if values is not None]


def _replaced(layer: MultiHeadLayer, name: str, probe: Array) -> MultiHeadLayer:
    """``layer`` with parameter ``name`` (not ``input``) replaced by ``probe``, unvalidated."""
    p = layer.projections
    weights, biases = list(p.weights), list(p.biases)
    out = [layer.out_weight, layer.out_bias]
    norm = layer.qk_norm
    if name.startswith("norm_") and norm is not None:
        return layer.with_qk_norm(probe if name == "norm_query" else norm.query,
                                  probe if name == "norm_key" else norm.key,
                                  probe if name == "norm_query_bias" else None,
                                  probe if name == "norm_key_bias" else None)
    if name in ("w_out", "b_out"):
        out[0 if name == "w_out" else 1] = probe
    elif name.startswith("w_"):
        weights[BRANCHES.index(name[2:])] = probe
    else:
        biases[BRANCHES.index(name[2:])] = probe
    return layer.with_parameters(weights, biases, out[0], out[1])


def _pairs(tokens: int, causal: bool, first: int = 0) -> int:
    """The (query, key) pairs the engine scores for the query rows from ``first``: every
    key without a mask; with one, each block of rows up to its last key."""
    if not causal:
        return (tokens - first) * tokens
    return sum((min(r + BLOCK_ROWS, tokens) - r) * min(r + BLOCK_ROWS, tokens)
               for r in range(first, tokens, BLOCK_ROWS))


def _attention_cost(layer: MultiHeadLayer, batch: int, pairs: int, heads: int) -> int:
    """Multiply-adds of ``heads`` heads' scores, softmax and mixture over ``pairs`` (query,
    key) pairs of each of ``batch`` items."""
    return heads * batch * pairs * (layer.d_k + layer.d_v + 4)


def evaluation_cost(layer: MultiHeadLayer, x: Array, name: str, reached: bool,
                    causal: bool = False, token: int = 0) -> tuple[int, str]:
    """Multiply-adds of one evaluation of tensor ``name``'s objective, and what it recomputes.

    ``reached``: the engine runs on only what the coordinate reaches (see the module
    docstring), and the cost counts the pairs that smaller call scores (an input
    coordinate at ``token`` under a causal mask: the rows from that token on)."""
    norm = layer.qk_norm
    if not reached or (norm is not None and (name.startswith("norm_") or (
            norm.span == "layer" and name not in ("input", "w_out", "b_out")))):
        return forward_cost(layer, x), RECOMPUTES_ALL
    batch, tokens, d_model = x.shape
    rows = batch * tokens
    if name == "input":  # one token's projections, one batch item's heads from that row on
        first = token if causal else 0
        width = sum(int(w.shape[1]) for w in layer.projections.weights)
        pairs = _pairs(tokens, causal, first)
        return (d_model * width + _attention_cost(layer, 1, pairs, layer.heads)
                + (tokens - first) * layer.concat_width, RECOMPUTES_ITEM)
    if name in ("w_out", "b_out"):
        return rows * (layer.concat_width + 1), RECOMPUTES_OUT
    pairs = _pairs(tokens, causal)
    if name.endswith("query"):  # one projected column, one head
        return rows * d_model + _attention_cost(layer, batch, pairs, 1), RECOMPUTES_HEAD
    per_kv = layer.heads // layer.kv_heads
    return rows * d_model + _attention_cost(layer, batch, pairs, per_kv), RECOMPUTES_GROUP


class CheckPlan:
    """Per checked tensor: its internal name, mode, sample count, planned checks and cost."""

    __slots__ = ("causes", "full_cost", "reached", "rows", "units")

    def __init__(self, layer: MultiHeadLayer, x: Array, mode: str, samples: int | None,
                 directions: int, reached: bool | None, causal: bool = False) -> None:
        self.reached = reaches_far(layer, x) if reached is None else reached
        self.full_cost = forward_cost(layer, x)
        self.rows: list[tuple[str, str, int | None, int, int, str]] = []
        self.causes: set[str] = set()
        self.units = 0
        _, tokens, d_model = x.shape
        for name, values in checked_tensors(layer, x):
            cost, recomputes = evaluation_cost(layer, x, name, self.reached, causal)
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
            if name == "input" and recomputes == RECOMPUTES_ITEM:  # each token's own rows
                self.units += sum(2 * _units(evaluation_cost(
                    layer, x, name, True, causal, (index // d_model) % tokens)[0])
                    for index in sample_indices(size, count))
            else:
                self.units += 2 * planned * _units(cost)

    def refuse_over(self, limit: int, has_fast: bool = True) -> None:
        """Raise :class:`~qkvcli.gradcheck.settings.TooManyEvaluations` over ``limit`` units
        (``has_fast``: whether the command offers ``--mode fast`` to check less)."""
        if self.units > limit:
            less = None
            if all(cause.startswith("--directions") for cause in self.causes):
                # fast mode's directions each run a whole forward: fewer of them, or the
                # sampled coordinates (which, on a large model, recompute only what they reach)
                less = "fewer --directions" + (
                    ", or --mode auto (sampled coordinates, cheaper evaluations)"
                    if self.reached else "")
            raise TooManyEvaluations(
                self.units, limit, ", ".join(sorted(self.causes))
                + f"; a unit is {EVALUATION_UNIT} multiply-adds of an evaluation, a whole "
                f"forward of this model costs {_units(self.full_cost)}", has_fast, weighted=True,
                less=less)


def plan_check(model: AttentionHead | MultiHeadLayer, x: Array, step: float, tolerance: float,
               samples: int | None = None, *, mode: str = "auto",
               directions: int = DEFAULT_DIRECTIONS, limit: int = MAX_EVALUATIONS,
               reached: bool | None = None, causal: bool = False,
               has_fast: bool = True) -> CheckPlan:
    """The check :func:`gradcheck_attention` would make, refused (before any work) when its
    units pass ``limit``. Raises what :func:`gradcheck_attention` raises before evaluating."""
    validate_settings(step, tolerance, samples, mode, directions)
    plan = CheckPlan(as_layer(model), np.asarray(x, dtype=np.float64), mode, samples,
                     directions, reached, causal)
    plan.refuse_over(limit, has_fast)
    return plan


def gradcheck_attention(
    model: AttentionHead | MultiHeadLayer, x: Array, upstream: Array,
    analytic: AttentionGradients | LayerGradients, causal: bool, step: float,
    tolerance: float, samples: int | None = None, progress: Progress | None = None, *,
    mode: str = "auto", directions: int = DEFAULT_DIRECTIONS,
    seed: int = DEFAULT_DIRECTION_SEED, limit: int = MAX_EVALUATIONS,
    reached: bool | None = None, forward: LayerForward | None = None, has_fast: bool = True,
) -> GradcheckResult:
    """Check the gradients ``analytic`` of a head's or layer's reverse pass at ``x``
    against central differences of ``L = <Y, U>``.

    ``mode``, ``samples``, ``directions`` and ``seed`` as run's check; ``limit`` is the
    budget in units (see the module docstring); ``reached`` forces (or forbids) the
    evaluations of only what a coordinate reaches (default :func:`reaches_far`), whose
    unreached terms come from ``forward`` (the layer's forward at ``x``) when given.
    ``progress(done, total)`` after each coordinate or direction. Raises
    :class:`~qkvcli.gradcheck.settings.GradcheckSettingError` (unusable settings) and
    :class:`~qkvcli.gradcheck.settings.TooManyEvaluations`, both before any evaluation.
    """
    plan = plan_check(model, x, step, tolerance, samples, mode=mode, directions=directions,
                      limit=limit, reached=reached, causal=causal, has_fast=has_fast)
    layer = as_layer(model)
    x64 = np.asarray(x, dtype=np.float64)
    u64 = np.asarray(upstream, dtype=np.float64)
    gradients = analytic_of(analytic)
    values_of = dict(checked_tensors(layer, x64))
    reach = Reach(layer, x64, u64, causal, forward) if plan.reached else None

    def tensors() -> Iterator[Checked]:
        for name, resolved, count, _, _, recomputes in plan.rows:
            values = values_of[name]
            whole = whole_objective(layer, x64, u64, causal, name)
            if resolved == "fast":
                yield Checked(name, values, gradients[name], Copies(whole, values), "fast",
                              None, recomputes)
                continue
            point = (reach.objective(name) if reach is not None and recomputes != RECOMPUTES_ALL
                     else perturbing(whole, values))
            yield Checked(name, values, gradients[name], Points(point, 2), resolved, count,
                          recomputes)

    return check(tensors(), step, tolerance, mode=mode, directions=directions, seed=seed,
                 total=sum(row[3] for row in plan.rows), progress=progress)


def whole_objective(layer: MultiHeadLayer, x: Array, upstream: Array, causal: bool,
           name: str) -> TensorObjective:
    """``L`` by the engine's forward of the whole layer with tensor ``name`` replaced."""

    def objective(probe: Array) -> float:
        # records=False: only Y, no per-head records (the same products: up to one block
        # of query rows, the very same bits)
        with np.errstate(over="ignore", invalid="ignore"):
            if name == "input":
                done = engine.forward(layer, probe, causal, records=False)
            else:
                done = engine.forward(_replaced(layer, name, probe), x, causal, records=False)
        return engine.loss(done, upstream)

    return objective


class _OutColumn(Record):
    """One column of an output projection: what :func:`~qkvcli.attention.engine.project_out` reads."""

    out_weight: Array
    out_bias: Array | None


class Reach:
    """Point objectives that run the engine on only what one coordinate reaches.

    ``L = <Y, U> = <C, G> + <b_O, sum U>`` (``G = U W_O^T``, or ``U`` without an output
    projection) is kept as its parts, computed once from the unperturbed forward: per head
    and per batch item and row the terms of ``<C, G>``, per output column
    ``<Y[..., j], U[..., j]>``. An evaluation projects afresh only the column (or token
    row) the perturbed parameter changes, runs the engine (without the output projection
    ``G`` stands for) on the heads, or the batch item and query rows, it reaches, and sums
    every part again.
    """

    def __init__(self, layer: MultiHeadLayer, x: Array, upstream: Array, causal: bool,
                 forward: LayerForward | None = None) -> None:
        self.layer, self.x, self.upstream, self.causal = layer, x, upstream, causal
        with np.errstate(over="ignore", invalid="ignore"):
            if forward is None:
                forward = engine.forward(layer, x, causal)
            self.projected = forward.stacked["projected"]
            self.concat = forward.concat
            self.by_column = (forward.output * upstream).sum(axis=(0, 1))  # [E_out]
            out_weight = layer.out_weight
            self.mixed_upstream = upstream if out_weight is None else upstream @ out_weight.T
            per_head = (forward.concat * self.mixed_upstream).reshape(
                *forward.concat.shape[:2], layer.heads, layer.d_v)
            self.by_row = per_head.sum(axis=(2, 3))  # [B,T]
            self.by_head = per_head.sum(axis=(0, 1, 3))  # [H]
            self.heads = layer.subset(0, layer.heads)  # the same heads, no output projection
            self.bias_part = (0.0 if layer.out_bias is None
                              else float(np.dot(layer.out_bias, upstream.sum(axis=(0, 1)))))

    def objective(self, name: str) -> PointObjective:
        """``L`` with one element of tensor ``name`` set to a value."""
        if name == "input":
            return self._input
        if name in ("w_out", "b_out"):
            return self._out(name)
        return self._heads(name)

    def _group(self, branch: int, column: int) -> tuple[int, int, list[int], int]:
        """The query heads ``first, count`` a column of ``branch`` reaches, the packed
        columns of their sub-layer, and where the column stands among them."""
        layer = self.layer
        dk, dv, per_kv = layer.d_k, layer.d_v, layer.heads // layer.kv_heads
        qw, kw = layer.heads * dk, layer.kv_heads * dk
        width = dk if branch < 2 else dv
        first, count = (column // dk, 1) if branch == 0 else ((column // width) * per_kv, per_kv)
        kv_first, kv_count = first // per_kv, max(1, count // per_kv)
        parts = [range(first * dk, (first + count) * dk),
                 range(qw + kv_first * dk, qw + (kv_first + kv_count) * dk),
                 range(qw + kw + kv_first * dv, qw + kw + (kv_first + kv_count) * dv)]
        starts = (first * dk, kv_first * dk, kv_first * dv)
        offset = sum(len(part) for part in parts[:branch]) + column - starts[branch]
        return first, count, [c for part in parts for c in part], offset

    def _heads(self, name: str) -> PointObjective:
        layer = self.layer
        p = layer.projections
        branch = BRANCHES.index(name[2:])
        is_weight = name.startswith("w_")
        weight, bias = p.weights[branch], p.biases[branch]
        values = weight if is_weight else bias
        assert values is not None
        probe = np.array(values, dtype=np.float64, copy=True)
        flat = probe.reshape(-1)
        dv = layer.d_v
        x = self.x[..., layer.input_columns()[branch]]  # the input the branch reads

        def point(index: int, value: float) -> float:
            column = index % probe.shape[-1]
            first, count, columns, offset = self._group(branch, column)
            original = flat[index]
            flat[index] = value
            try:
                w = probe if is_weight else weight
                b = probe if not is_weight else bias
                with np.errstate(over="ignore", invalid="ignore"):
                    projected = self.projected[..., columns]  # a copy: the heads it reaches
                    projected[..., offset] = project(
                        x, w[:, column:column + 1],
                        bias=None if b is None else b[column:column + 1])[..., 0]
                    done = engine.forward(layer.subset(first, count), self.x, self.causal,
                                          projected=projected, records=False)
                    mixed = self.mixed_upstream[..., first * dv:(first + count) * dv]
                    parts = (done.concat * mixed).reshape(
                        *done.concat.shape[:2], count, dv).sum(axis=(0, 1, 3))
            finally:
                flat[index] = original  # restore: evaluations never share state
            by_head = self.by_head.copy()
            by_head[first:first + count] = parts
            return float(by_head.sum()) + self.bias_part

        return point

    def _input(self, index: int, value: float) -> float:
        _, tokens, d_model = self.x.shape
        b, t = divmod(index // d_model, tokens)
        item = np.array(self.x[b:b + 1], dtype=np.float64, copy=True)
        item.reshape(-1)[index - b * tokens * d_model] = value
        first = t if self.causal else 0  # a causal query before t never sees token t
        with np.errstate(over="ignore", invalid="ignore"):
            projected = self.projected[b:b + 1].copy()
            weight, bias = self.layer.packed()
            projected[:, t:t + 1] = project(item[:, t:t + 1], weight, bias=bias)
            done = engine.forward(self.heads, item, self.causal, first_row=first,
                                  projected=projected, records=False)
            rows = (done.concat * self.mixed_upstream[b:b + 1, first:]).sum(axis=-1)
        by_row = self.by_row.copy()
        by_row[b, first:] = rows[0]
        return float(by_row.sum()) + self.bias_part

    def _out(self, name: str) -> PointObjective:
        layer = self.layer
        weight, bias = layer.out_weight, layer.out_bias
        assert weight is not None
        values = weight if name == "w_out" else bias
        assert values is not None
        probe = np.array(values, dtype=np.float64, copy=True)
        flat = probe.reshape(-1)

        def point(index: int, value: float) -> float:
            j = index % probe.shape[-1]
            original = flat[index]
            flat[index] = value
            try:
                w = probe if name == "w_out" else weight
                b = probe if name == "b_out" else bias
                column = _OutColumn(w[:, j:j + 1], None if b is None else b[j:j + 1])
                with np.errstate(over="ignore", invalid="ignore"):
                    y = engine.project_out(column, self.concat)  # type: ignore[arg-type]
                    part = float(np.sum(y[..., 0] * self.upstream[..., j]))
            finally:
                flat[index] = original
            by_column = self.by_column.copy()
            by_column[j] = part
            return float(by_column.sum())

        return point


def analytic_of(grads: AttentionGradients | LayerGradients) -> dict[str, Array]:
    """The gradients of a head's or layer's reverse pass by checked tensor's internal name."""
    named: dict[str, Array | None] = {
        "input": grads.grad_input, "w_query": grads.grad_w_query, "w_key": grads.grad_w_key,
        "w_value": grads.grad_w_value, "b_query": grads.grad_b_query,
        "b_key": grads.grad_b_key, "b_value": grads.grad_b_value,
        "w_out": getattr(grads, "grad_out_weight", None),
        "b_out": getattr(grads, "grad_out_bias", None),
        "norm_query": getattr(grads, "grad_norm_query", None),
        "norm_key": getattr(grads, "grad_norm_key", None),
        "norm_query_bias": getattr(grads, "grad_norm_query_bias", None),
        "norm_key_bias": getattr(grads, "grad_norm_key_bias", None),
    }
    return {name: value for name, value in named.items() if value is not None}


def reaches_far(layer: MultiHeadLayer, x: Array) -> bool:
    """Whether a coordinate's full forward is worth avoiding: scores or output of more than
    :data:`~qkvcli.gradcheck.settings.AUTO_FULL_LIMIT` elements (the chapter's stay whole)."""
    batch, tokens, _ = x.shape
    large = max(layer.heads * batch * tokens * tokens, batch * tokens * layer.e_out)
    return bool(large > AUTO_FULL_LIMIT)
