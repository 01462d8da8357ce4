"""One attention head on top of the projections: its parameters, forward and reverse.

Here are the head's validated parameters, the two pieces of the attention matrix (a
numerically stable softmax and the causal mask) and the records of one forward and
one reverse pass. Named as everywhere in qkv (:mod:`qkvcli.core.names`): the forward
tensors are ``query``, ``key``, ``value``, ``scores``, ``scaled_scores``, ``attention``
(the matrix ``A``; ``weights`` only ever means W) and ``output``; each gradient is
``grad_`` and the tensor's name (``grad_query`` is dL/dQ), with ``grad_input`` for
dL/dX, ``grad_w_query`` for dL/dW_Q and ``grad_b_query`` for dL/db_Q.

Forward, for ``X [B,T,d_model]``::

    Q = X W_Q + b_Q    K = X W_K + b_K    V = X W_V + b_V      [B,T,d_k] [B,T,d_k] [B,T,d_v]
    S = Q K^T                                                   [B,T,T] raw scores
    Z = S / sqrt(d_k)  (-inf above the diagonal when causal)    scaled scores
    A = softmax(Z) over the last axis (row max subtracted)      attention, rows sum to 1
    O = A V                                                     [B,T,d_v] output

A real layer may add two things (:meth:`AttentionHead.from_arrays`): a RoPE (:class:`Rope`)
turns Q and K after their biases, position by position, before the scores (``S =
rope(Q) rope(K)^T``; the reverse pass turns dQ and dK back by the transpose), and a given
``scale`` replaces ``1/sqrt(d_k)`` (``Z = S * scale``). Without them the arithmetic is
the chapter's, bit for bit.

Reverse for an upstream ``dO`` (``grad_output``): ``dA = dO V^T``, ``dV = A^T dO``,
``dZ = A * (dA - rowsum(dA * A))``, ``dS = dZ / sqrt(d_k)``, ``dQ = dS K``,
``dK = dS^T Q``; then each projection as in the chapter, ``dX`` summing three paths and
``db = sum over batch and tokens of dY``.

Widths: query and key always share ``d_k`` (the dot product needs it). The value width
``d_v`` must equal it too, the chapter's rule, unless the head is built with
``independent_value_width=True``.

Validation is the engine's own (:mod:`qkvcli.core`): names, finite values, each branch's
weight, the branch widths and unique names, with the head's two extra rules
(:mod:`qkvcli.attention.errors`). No I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from qkvcli.attention.errors import (
    BiasShapeMismatch,
    GroupedWidthMismatch,
    KeyWidthMismatch,
    OutputGradientShapeMismatch,
    RopeError,
    ScaleError,
)
from qkvcli.core.arrays import Array, ArrayLike, check_finite, readonly
from qkvcli.core.errors import BranchOutputWidthMismatch
from qkvcli.core.names import BRANCHES, DEFAULT_NAMES, validate_name
from qkvcli.core.record import Record
from qkvcli.core.weights import (
    check_branches,
    check_input_shape,
    check_model_widths,
    check_unique_names,
)


def stable_softmax(z: Array) -> Array:
    """Softmax over the last axis with the row maximum subtracted first.

    ``-inf`` entries get weight exactly 0. Each row needs one finite entry (a causal
    row always has its diagonal); empty axes give empty results.
    """
    if z.size == 0:
        return np.zeros(z.shape)
    shifted = z - np.max(z, axis=-1, keepdims=True)  # largest entry becomes 0: exp <= 1
    exps = np.exp(shifted)
    result: Array = exps / np.sum(exps, axis=-1, keepdims=True)
    return result


def causal_mask(tokens: int) -> Array:
    """``True`` above the diagonal: key positions after the query position."""
    return np.triu(np.ones((tokens, tokens), dtype=bool), k=1)


ROPE_LAYOUTS = ("half", "interleaved")


class Rope(Record):
    """Rotary position embedding of the first ``dims`` coordinates of each query and key head.

    Position ``t`` (``0 .. T-1``) turns pair ``i`` (``i < dims/2``) by the angle
    ``t * theta^(-2i/dims)``. ``layout`` says which coordinates pair up: ``"half"``
    pairs ``i`` with ``i + dims/2`` (LLaMA's and GPT-NeoX's ``rotate_half``),
    ``"interleaved"`` pairs ``2i`` with ``2i+1`` (GPT-J). Coordinates from ``dims`` on
    pass through (GPT-NeoX's partial rotary).
    """

    theta: float
    dims: int
    layout: str = "half"

    def pairs(self) -> tuple[Any, Any]:
        """The two coordinate index arrays that rotate together, ``[dims/2]`` each."""
        half = self.dims // 2
        if self.layout == "half":
            return np.arange(half), np.arange(half, self.dims)
        return np.arange(0, self.dims, 2), np.arange(1, self.dims, 2)

    def rotate(self, x: Array, inverse: bool = False) -> Array:
        """``x [..., T, d]`` with each position's pairs turned (``inverse``: turned back,
        the transpose, which carries a gradient from after the rotation to before it)."""
        tokens = x.shape[-2]
        exponents = np.arange(0, self.dims, 2, dtype=np.float64) / self.dims
        inverse_frequency = 1.0 / (self.theta ** exponents)  # [dims/2]
        angles = np.arange(tokens, dtype=np.float64)[:, None] * inverse_frequency[None, :]
        cos, sin = np.cos(angles), np.sin(angles)  # [T, dims/2]
        if inverse:
            sin = -sin
        half = self.dims // 2
        # the pairs as slices (views, not pairs()' gathered copies): the same arithmetic
        first, second = ((slice(0, half), slice(half, self.dims)) if self.layout == "half"
                         else (slice(0, self.dims, 2), slice(1, self.dims, 2)))
        a, b = x[..., first], x[..., second]
        # every coordinate turns: nothing to copy first
        out = np.empty(x.shape) if self.dims == x.shape[-1] else np.array(x, dtype=np.float64)
        out[..., first] = a * cos - b * sin
        out[..., second] = b * cos + a * sin
        return out


def check_rope(rope: Rope, width: int) -> None:
    """Refuse a RoPE that cannot turn a head of ``width`` coordinates (:class:`RopeError`)."""
    if rope.layout not in ROPE_LAYOUTS:
        raise RopeError(f"rope layout must be \"half\" or \"interleaved\", got {rope.layout!r}")
    if not (math.isfinite(rope.theta) and rope.theta > 0.0):
        raise RopeError(f"rope theta must be finite and positive, got {rope.theta!r}")
    if rope.dims < 2 or rope.dims % 2 or rope.dims > width:
        raise RopeError(f"rope dims must be even, at least 2 and at most the head's key width "
                        f"{width}, got {rope.dims}")


class AttentionForward(Record):
    """Every intermediate of one forward pass, in the order they are computed.

    ``attention`` is the attention matrix ``A`` (``weights`` is only ever W).
    """

    query: Array
    key: Array
    value: Array
    scores: Array
    scaled_scores: Array
    attention: Array
    output: Array
    rotated_query: Array | None = None  # RoPE's Q and K, which the scores use
    rotated_key: Array | None = None


class HeadGradients(Record):
    """One head's reverse pass from ``dA`` to ``dQ``, ``dK``, ``dV`` (a layer's per head)."""

    grad_attention: Array
    grad_scaled_scores: Array
    grad_scores: Array
    grad_query: Array
    grad_key: Array
    grad_value: Array


class AttentionGradients(HeadGradients):
    """The reverse pass on to the input and parameters, in the order computed; a bias
    gradient is ``None`` when the head has no such bias."""

    grad_input: Array
    grad_w_query: Array
    grad_w_key: Array
    grad_w_value: Array
    grad_b_query: Array | None
    grad_b_key: Array | None
    grad_b_value: Array | None


def output_loss(forward: AttentionForward, upstream: Array) -> float:
    """``L = <O, U>``: the scalar whose gradient the head's ``backward`` gives."""
    with np.errstate(over="ignore", invalid="ignore"):
        return float(np.sum(forward.output * upstream))


# What the head adds to the chapter's projections, in order (the quiz's last answer).
STAGES = ("scores Q K^T", "scaling by 1/sqrt(d_k)", "softmax weights", "weighted value mixture")

Biases = tuple[Array | None, Array | None, Array | None]


class AttentionHead:
    """Three projections (optional biases) and one scaled dot-product attention head.

    Build one with :meth:`from_arrays`; instances are immutable.
    """

    __slots__ = ("_biases", "_independent", "_kv_groups", "_names", "_rope", "_scale", "_weights")

    def __init__(
        self, weights: tuple[Array, Array, Array], biases: Biases, names: tuple[str, str, str],
        independent: bool, scale: float | None = None, rope: Rope | None = None,
        kv_groups: int = 1,
    ) -> None:
        # Private: from_arrays validates first.
        self._weights = weights
        self._biases = biases
        self._names = names
        self._independent = independent
        self._scale = scale
        self._rope = rope
        self._kv_groups = kv_groups

    @classmethod
    def from_arrays(
        cls,
        w_query: ArrayLike,
        w_key: ArrayLike,
        w_value: ArrayLike,
        biases: Sequence[ArrayLike | None] = (None, None, None),
        names: Sequence[str] | None = None,
        independent_value_width: bool = False,
        scale: float | None = None,
        rope: Rope | None = None,
        kv_groups: int = 1,
    ) -> AttentionHead:
        """Validate and build a head from ``[d_model, d_out]`` weights and optional biases.

        ``scale`` is the score factor (``None``: ``1/sqrt(d_k)``); ``rope`` turns Q and K
        after their biases; ``kv_groups`` > 1 makes these the projections of a
        grouped-query layer, whose query width is ``kv_groups`` times the key width (only
        :class:`~qkvcli.attention.multihead.MultiHeadLayer` runs such projections).

        Order (first failure wins): per branch its name, finite weight, finite bias; per
        branch rank and non-zero widths (``"<branch> projection: ..."``); equal model
        widths; head widths (all equal, the chapter's error, or with an independent value
        width only query = key; grouped: query = kv_groups * key); bias shapes; unique
        names; the scale (finite, positive); RoPE's dims (even, at most the key width).
        Raises a ``QkvError``.
        """
        names = tuple(DEFAULT_NAMES if names is None else names)
        if len(names) != 3 or len(biases) != 3:
            raise ValueError("expected three names and three biases")
        weights = tuple(readonly(w) for w in (w_query, w_key, w_value))
        bias_arrays = tuple(None if b is None else readonly(b) for b in biases)
        for name, weight, bias in zip(names, weights, bias_arrays, strict=True):
            validate_name(name)
            check_finite(weight, "parameter")
            if bias is not None:
                check_finite(bias, "parameter")
        check_branches(weights)
        check_model_widths(weights)
        head = tuple(int(w.shape[1]) for w in weights)
        if kv_groups > 1:
            if not independent_value_width and head[1] != head[2]:
                raise BranchOutputWidthMismatch(*head)
            if head[0] != kv_groups * head[1]:
                raise GroupedWidthMismatch(head[0], head[1], kv_groups)
        else:
            if not independent_value_width and len(set(head)) != 1:
                raise BranchOutputWidthMismatch(*head)
            if head[0] != head[1]:
                raise KeyWidthMismatch(head[0], head[1])
        for branch, width, bias in zip(BRANCHES, head, bias_arrays, strict=True):
            if bias is not None and bias.shape != (width,):
                raise BiasShapeMismatch(branch, width, tuple(bias.shape))
        check_unique_names(names)
        if scale is not None and not (math.isfinite(scale) and scale > 0.0):
            raise ScaleError(scale)
        if rope is not None:
            check_rope(rope, head[1] if kv_groups > 1 else head[0])
        return cls(
            (weights[0], weights[1], weights[2]),
            (bias_arrays[0], bias_arrays[1], bias_arrays[2]),
            (names[0], names[1], names[2]),
            independent_value_width, scale, rope, kv_groups,
        )

    # --- properties ---------------------------------------------------------------------

    @property
    def weights(self) -> tuple[Array, Array, Array]:
        return self._weights

    @property
    def biases(self) -> Biases:
        return self._biases

    @property
    def names(self) -> tuple[str, str, str]:
        return self._names

    @property
    def independent_value_width(self) -> bool:
        return self._independent

    @property
    def scale(self) -> float:
        """The score factor: the given one, else ``1/sqrt(d_k)``."""
        return self.scale_of(self.d_k)

    def scale_of(self, d_k: int) -> float:
        """The score factor of a head ``d_k`` wide: the given one, else ``1/sqrt(d_k)``."""
        return 1.0 / math.sqrt(d_k) if self._scale is None else self._scale

    @property
    def given_scale(self) -> float | None:
        """The score factor the head was built with, ``None`` for ``1/sqrt(d_k)``."""
        return self._scale

    @property
    def rope(self) -> Rope | None:
        return self._rope

    @property
    def kv_groups(self) -> int:
        return self._kv_groups

    @property
    def d_model(self) -> int:
        return int(self._weights[0].shape[0])

    @property
    def d_k(self) -> int:
        return int(self._weights[0].shape[1])

    @property
    def d_v(self) -> int:
        return int(self._weights[2].shape[1])

    @property
    def parameter_count(self) -> int:
        """Weights plus biases: ``d_model (2 d_k + d_v)`` and each bias's width."""
        total = sum(int(w.size) for w in self._weights)
        return total + sum(int(b.size) for b in self._biases if b is not None)

    def with_parameters(
        self, weights: Sequence[Array], biases: Sequence[Array | None]
    ) -> AttentionHead:
        """The same head with other parameter values, unvalidated (probes that keep shapes)."""
        return AttentionHead(
            (weights[0], weights[1], weights[2]), (biases[0], biases[1], biases[2]),
            self._names, self._independent, self._scale, self._rope, self._kv_groups,
        )

    def sliced(self, weights: Sequence[Array], biases: Sequence[Array | None]) -> AttentionHead:
        """One head of a layer: these parameters, this head's scale and RoPE, no groups."""
        return AttentionHead(
            (weights[0], weights[1], weights[2]), (biases[0], biases[1], biases[2]),
            self._names, self._independent, self._scale, self._rope, 1,
        )

    # --- computation --------------------------------------------------------------------

    def check_input(self, x: ArrayLike) -> Array:
        """Validate ``x`` (rank three, final width ``d_model``, finite); return it as float64."""
        array = np.asarray(x, dtype=np.float64)
        check_input_shape(array, self.d_model)
        check_finite(array, "input")
        return array

    def forward(self, x: ArrayLike, causal: bool = False) -> AttentionForward:
        """Project, score, scale, (mask,) softmax and mix. Raises the input errors."""
        x = self.check_input(x)
        # Overflow is reported by the evidence (a non-finite tensor fails "forward"), not as
        # numpy warnings on stderr.
        with np.errstate(over="ignore", invalid="ignore"):
            return self._forward(x, causal)

    def _forward(self, x: Array, causal: bool) -> AttentionForward:
        projected = []
        for weight, bias in zip(self._weights, self._biases, strict=True):
            y = x @ weight  # [B,T,d_model] @ [d_model,d_out] -> [B,T,d_out]
            projected.append(y if bias is None else y + bias)
        query, key, value = projected
        rotated_query = rotated_key = None
        matched_query, matched_key = query, key
        if self._rope is not None:  # after the biases, before the scores (as HF applies it)
            matched_query = rotated_query = self._rope.rotate(query)
            matched_key = rotated_key = self._rope.rotate(key)
        # [B,T,d_k] @ [B,d_k,T] -> [B,T,T]
        scores = matched_query @ np.swapaxes(matched_key, -1, -2)
        if self._scale is None:  # the chapter's division, bit for bit
            scaled_scores = scores / math.sqrt(self.d_k)
        else:
            scaled_scores = scores * self._scale
        if causal:
            scaled_scores = np.where(causal_mask(x.shape[1]), -np.inf, scaled_scores)
        attention = stable_softmax(scaled_scores)
        output = attention @ value  # [B,T,T] @ [B,T,d_v] -> [B,T,d_v]
        return AttentionForward(query, key, value, scores, scaled_scores, attention, output,
                                rotated_query, rotated_key)

    def backward(self, x: ArrayLike, forward: AttentionForward, grad_output: ArrayLike) -> (
        AttentionGradients
    ):
        """Reverse pass for ``grad_output`` (dO, ``[B,T,d_v]``) through the mixture, softmax,
        scores and projections. Raises the input errors, then
        :class:`~qkvcli.attention.errors.OutputGradientShapeMismatch`."""
        x = self.check_input(x)
        batch, tokens = x.shape[:2]
        upstream = np.asarray(grad_output, dtype=np.float64)
        if upstream.shape != (batch, tokens, self.d_v):
            raise OutputGradientShapeMismatch((batch, tokens, self.d_v), tuple(upstream.shape))
        with np.errstate(over="ignore", invalid="ignore"):
            return self._backward(x, forward, upstream)

    def _backward(
        self, x: Array, forward: AttentionForward, grad_output: Array
    ) -> AttentionGradients:
        batch, tokens, d_model = x.shape
        a = forward.attention
        # [B,T,d_v] @ [B,d_v,T] -> [B,T,T]
        grad_attention = grad_output @ np.swapaxes(forward.value, -1, -2)
        grad_value = np.swapaxes(a, -1, -2) @ grad_output  # [B,T,T]^T @ [B,T,d_v] -> [B,T,d_v]
        # softmax reverse: dZ_ij = A_ij (dA_ij - sum_l dA_il A_il); masked A_ij = 0 gives dZ_ij = 0
        grad_scaled_scores = a * (
            grad_attention - np.sum(grad_attention * a, axis=-1, keepdims=True)
        )
        if self._scale is None:
            grad_scores = grad_scaled_scores / math.sqrt(self.d_k)
        else:
            grad_scores = grad_scaled_scores * self._scale
        rope = self._rope
        matched_key = forward.key if forward.rotated_key is None else forward.rotated_key
        matched_query = forward.query if forward.rotated_query is None else forward.rotated_query
        grad_query = grad_scores @ matched_key  # [B,T,T] @ [B,T,d_k] -> [B,T,d_k]
        grad_key = np.swapaxes(grad_scores, -1, -2) @ matched_query  # [B,T,T]^T @ [B,T,d_k]
        if rope is not None:  # back through the rotation: its transpose turns the other way
            grad_query = rope.rotate(grad_query, inverse=True)
            grad_key = rope.rotate(grad_key, inverse=True)
        rows = x.reshape(batch * tokens, d_model)  # X_(BT): [BT, d_model]
        grad_input = np.zeros_like(x)
        grad_w: list[Array] = []
        grad_b: list[Array | None] = []
        for weight, bias, grad in zip(
            self._weights, self._biases, (grad_query, grad_key, grad_value), strict=True
        ):
            grad_input += grad @ weight.T  # [B,T,d_out] @ [d_out,d_model] -> [B,T,d_model]
            flat = grad.reshape(batch * tokens, weight.shape[1])
            grad_w.append(rows.T @ flat)  # [d_model,BT] @ [BT,d_out] -> [d_model,d_out]
            grad_b.append(None if bias is None else flat.sum(axis=0))
        return AttentionGradients(
            grad_attention, grad_scaled_scores, grad_scores, grad_query, grad_key, grad_value,
            grad_input, grad_w[0], grad_w[1], grad_w[2], grad_b[0], grad_b[1], grad_b[2],
        )
