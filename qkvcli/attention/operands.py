"""A head run on Q, K and V themselves: their checks in the chapters' order, then the one engine.

Chapters 27 and 28 study one attention head whose query, key and value are given (or
projected from ``X`` by :mod:`qkvcli.core.projections`). :func:`check_operands` refuses
what such a head cannot take, in the course's order (first failure wins): each
operand's rank (query, key, value), equal batch sizes, equal token counts, at least one
token, non-zero query and key widths, equal query and key widths, a non-zero value
width. :func:`attend` then runs :mod:`qkvcli.attention.engine` on them: the engine
projects ``[Q|K|V]`` through identity weights, or takes them as given (``projected``),
so the scale, the mask, the softmax and its reverse are the engine's, written once in
:mod:`qkvcli.attention.maths`.

:func:`causal_probabilities` is chapter 28's causal softmax as its own operation (the
mask of :func:`~qkvcli.attention.maths.causal_mask`, the softmax of
:func:`~qkvcli.attention.maths.softmax`), with the checks of its score input;
:func:`reverse` refuses a pass that kept none of what its reverse needs. Each error
stores its fields and builds its message from them. No I/O.
"""

from __future__ import annotations

import numpy as np

from qkvcli.attention import engine
from qkvcli.attention.engine import LayerForward, LayerGradients
from qkvcli.attention.head import AttentionHead
from qkvcli.attention.maths import causal_mask, softmax
from qkvcli.attention.multihead import MultiHeadLayer
from qkvcli.core.arrays import Array
from qkvcli.core.errors import QkvError
from qkvcli.core.record import Record

OPERANDS = ("query", "key", "value")


class OperandRank(QkvError):
    def __init__(self, operand: str, rank: int) -> None:
        self.operand = operand
        self.rank = rank
        super().__init__(f"self-attention {operand} must have rank three [batch, tokens, "
                         f"features], got rank {rank}")


class OperandBatchMismatch(QkvError):
    def __init__(self, query: int, key: int, value: int) -> None:
        self.query, self.key, self.value = query, key, value
        super().__init__(f"self-attention batch sizes must match, got query {query}, key {key}, "
                         f"value {value}")


class OperandTokenMismatch(QkvError):
    def __init__(self, query: int, key: int, value: int) -> None:
        self.query, self.key, self.value = query, key, value
        super().__init__(f"self-attention token counts must match, got query {query}, key {key}, "
                         f"value {value}")


class EmptyTokenAxis(QkvError):
    def __init__(self) -> None:
        self.tokens = 0
        super().__init__("self-attention needs at least one token so every probability row "
                         "has a key")


class EmptyFeatureWidth(QkvError):
    def __init__(self, operand: str) -> None:
        self.operand = operand
        super().__init__(f"self-attention {operand} needs a nonzero feature width")


class QueryKeyWidthMismatch(QkvError):
    def __init__(self, query: int, key: int) -> None:
        self.query, self.key = query, key
        super().__init__(f"self-attention query and key widths must match, got query {query}, "
                         f"key {key}")


class CausalSoftmaxRank(QkvError):
    def __init__(self, rank: int) -> None:
        self.rank = rank
        super().__init__(f"causal softmax needs scores of rank two or more [..., queries, keys], "
                         f"got rank {rank}")


class CausalSoftmaxNonSquare(QkvError):
    def __init__(self, queries: int, keys: int) -> None:
        self.queries, self.keys = queries, keys
        super().__init__(f"causal softmax needs as many queries as keys, got {queries} queries "
                         f"and {keys} keys")


class ReleasedOperand(QkvError):
    def __init__(self, operation: str, operand: int) -> None:
        self.operation, self.operand = operation, operand
        super().__init__(f"the reverse of {operation} needs its saved operand {operand}, which "
                         "the forward pass did not keep")


def check_operands(query: Array, key: Array, value: Array) -> None:
    """Refuse Q, K, V a head cannot take, in the module's order; raises the first
    failure (:class:`OperandRank`, :class:`OperandBatchMismatch`,
    :class:`OperandTokenMismatch`, :class:`EmptyTokenAxis`, :class:`EmptyFeatureWidth`,
    :class:`QueryKeyWidthMismatch`)."""
    arrays = (query, key, value)
    for name, array in zip(OPERANDS, arrays, strict=True):
        if array.ndim != 3:
            raise OperandRank(name, array.ndim)
    batches = [int(a.shape[0]) for a in arrays]
    if len(set(batches)) != 1:
        raise OperandBatchMismatch(*batches)
    tokens = [int(a.shape[1]) for a in arrays]
    if len(set(tokens)) != 1:
        raise OperandTokenMismatch(*tokens)
    if tokens[0] == 0:
        raise EmptyTokenAxis()
    for name, array in zip(OPERANDS[:2], arrays[:2], strict=True):
        if array.shape[2] == 0:
            raise EmptyFeatureWidth(name)
    if query.shape[2] != key.shape[2]:
        raise QueryKeyWidthMismatch(int(query.shape[2]), int(key.shape[2]))
    if value.shape[2] == 0:
        raise EmptyFeatureWidth("value")


class HeadRun(Record):
    """One forward pass of a head on given Q, K, V: the layer and input the engine ran
    (identity projections of ``[Q|K|V]``) and its :class:`~qkvcli.attention.engine.LayerForward`."""

    layer: MultiHeadLayer
    joined: Array
    forward: LayerForward


def identity_layer(d_k: int, d_v: int) -> MultiHeadLayer:
    """One head whose projections pick ``Q``, ``K``, ``V`` out of ``[Q|K|V]`` unchanged."""
    width = 2 * d_k + d_v
    eye = np.eye(width)
    head = AttentionHead.from_arrays(eye[:, :d_k], eye[:, d_k:2 * d_k], eye[:, 2 * d_k:],
                                     independent_value_width=True)
    return MultiHeadLayer.build(head, 1)


def attend(query: Array, key: Array, value: Array, causal: bool, records: bool = True) -> HeadRun:
    """The engine's forward pass of one head on ``query`` ``[B,T,d_k]``, ``key`` and
    ``value`` ``[B,T,d_v]``, checked first (:func:`check_operands`, raising its errors);
    ``causal`` masks the keys after each query. ``records=False``: the engine keeps only
    the output (what :func:`reverse` refuses)."""
    query, key, value = (np.asarray(a, dtype=np.float64) for a in (query, key, value))
    check_operands(query, key, value)
    d_k, d_v = int(query.shape[2]), int(value.shape[2])
    layer = identity_layer(d_k, d_v)
    # [B,T,d_k] | [B,T,d_k] | [B,T,d_v] -> [B,T,2 d_k + d_v]: the projections' output as given
    joined = np.concatenate([query, key, value], axis=-1)
    with np.errstate(over="ignore", invalid="ignore"):
        forward = engine.forward(layer, joined, causal, projected=joined, records=records)
    return HeadRun(layer, joined, forward)


def reverse(run: HeadRun, upstream: Array) -> LayerGradients:
    """The engine's reverse pass of ``run`` for ``dO = upstream`` (its ``dQ``, ``dK``,
    ``dV`` are ``heads[0]``'s). Raises :class:`ReleasedOperand` when the forward kept no
    probabilities (``records=False``)."""
    if "attention" not in run.forward.stacked:
        raise ReleasedOperand("causal-softmax" if run.forward.causal else "softmax", 0)
    with np.errstate(over="ignore", invalid="ignore"):
        return engine.backward(run.layer, run.joined, run.forward, upstream)


def loss(run: HeadRun, upstream: Array) -> float:
    """``L = <O, U>``, the objective of the head's reverse pass and gradient check."""
    return engine.loss(run.forward, upstream)


def additive_mask(tokens: int, causal: bool) -> Array:
    """The mask as the scores' addend, ``[T,T]``: ``0`` where a query sees a key,
    ``-inf`` where it may not (all ``0`` without a mask)."""
    hidden = causal_mask(tokens) if causal else np.zeros((tokens, tokens), dtype=bool)
    return np.where(hidden, -np.inf, 0.0)


def causal_probabilities(scores: Array) -> Array:
    """Chapter 28's causal softmax of scaled scores ``[..., T, T]``: the keys after each
    query masked, then each row normalised. Raises :class:`CausalSoftmaxRank` (rank
    below two) or :class:`CausalSoftmaxNonSquare`."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim < 2:
        raise CausalSoftmaxRank(scores.ndim)
    queries, keys = int(scores.shape[-2]), int(scores.shape[-1])
    if queries != keys:
        raise CausalSoftmaxNonSquare(queries, keys)
    masked = np.where(causal_mask(queries), -np.inf, scores)
    return softmax(masked)
