"""One attention head's parameters: validated once, then run by the engine as a layer of one head.

Here are the head's validated parameters (three projections, optional biases, the
score scale and RoPE) and the record of its full reverse pass. The forward and reverse
passes are :mod:`qkvcli.attention.engine`'s, on this head as a layer of one head; the
maths of each step is :mod:`qkvcli.attention.maths`'. Named as everywhere in qkv
(:mod:`qkvcli.core.names`): the forward tensors are ``query``, ``key``, ``value``,
``scores``, ``scaled_scores``, ``attention`` (the matrix ``A``; ``weights`` only ever
means W) and ``output``; each gradient is ``grad_`` and the tensor's name
(``grad_query`` is dL/dQ), with ``grad_input`` for dL/dX, ``grad_w_query`` for dL/dW_Q
and ``grad_b_query`` for dL/db_Q.

Forward, for ``X [B,T,d_model]``::

    Q = X W_Q + b_Q    K = X W_K + b_K    V = X W_V + b_V      [B,T,d_k] [B,T,d_k] [B,T,d_v]
    S = Q K^T                                                   [B,T,T] raw scores
    Z = S / sqrt(d_k)  (-inf above the diagonal when causal)    scaled scores
    A = softmax(Z) over the last axis (row max subtracted)      attention, rows sum to 1
    O = A V                                                     [B,T,d_v] output

A real layer may add two things (:meth:`AttentionHead.from_arrays`): a RoPE
(:class:`~qkvcli.core.rope.Rope`) turns Q and K after their biases, position by
position, before the scores (``S = rope(Q) rope(K)^T``; the reverse pass turns dQ and dK
back by the transpose), and a given ``scale`` replaces ``1/sqrt(d_k)`` (``Z = S * scale``).

Reverse for an upstream ``dO`` (``grad_output``): ``dA = dO V^T``, ``dV = A^T dO``,
``dZ = A * (dA - rowsum(dA * A))``, ``dS = dZ / sqrt(d_k)``, ``dQ = dS K``,
``dK = dS^T Q``; then each projection as in the chapter, ``dX`` summing three paths and
``db = sum over batch and tokens of dY``.

Widths: query and key always share ``d_k`` (the dot product needs it). The value width
``d_v`` must equal it too, the chapter's rule, unless the head is built with
``independent_value_width=True``.

A value input (``value_input=True``, MobileBERT's bottleneck): V is projected from an
input of its own, ``X_V``, and Q and K from another, ``X_QK``. The head's input is then
the two joined on the last axis, ``X = [X_QK | X_V]`` (``d_model`` the sum of their
widths), and its packed projection is the block matrix ``[[W_Q, W_K, 0], [0, 0, W_V]]``:
every product with a zero block is an exact zero, so ``X`` times it is each branch's own
product, and the reverse's ``dX`` is ``[dQ W_Q^T + dK W_K^T | dV W_V^T]``. Each
branch's weight keeps its own rows (:meth:`AttentionHead.input_columns`).

Validation is the engine's own (:mod:`qkvcli.core`): names, finite values, each branch's
weight, the branch widths and unique names, with the head's two extra rules
(:mod:`qkvcli.attention.errors`). No I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from qkvcli.attention import engine
from qkvcli.attention.engine import AttentionForward, HeadGradients, ParameterGradients
from qkvcli.attention.errors import (
    BiasShapeMismatch,
    GroupedWidthMismatch,
    KeyWidthMismatch,
    OutputGradientShapeMismatch,
    ScaleError,
    ValueInputError,
)
from qkvcli.attention.maths import AlibiForm, QkNorm, score_factor, softmax
from qkvcli.core.arrays import Array, ArrayLike, check_finite, readonly
from qkvcli.core.errors import BranchOutputWidthMismatch
from qkvcli.core.names import BRANCHES, DEFAULT_NAMES, validate_name
from qkvcli.core.record import Record
from qkvcli.core.rope import Rope, check_rope
from qkvcli.core.weights import (
    NamedWeights,
    check_branches,
    check_input_shape,
    check_model_widths,
    check_unique_names,
)


class AttentionGradients(ParameterGradients, HeadGradients):
    """The reverse pass of one head: from ``dA`` to ``dQ``, ``dK``, ``dV``, then on to the
    input and parameters (a bias gradient is ``None`` when the head has no such bias)."""


def output_loss(forward: AttentionForward, upstream: Array) -> float:
    """``L = <O, U>``: the scalar whose gradient the head's ``backward`` gives."""
    with np.errstate(over="ignore", invalid="ignore"):
        return float(np.sum(forward.output * upstream))


# What the head adds to the chapter's projections, in order (the quiz's last answer).
STAGES = ("scores Q K^T", "scaling by 1/sqrt(d_k)", "softmax weights", "weighted value mixture")

Biases = tuple[Array | None, Array | None, Array | None]


class AttentionHead(NamedWeights):
    """Three projections (optional biases) and one scaled dot-product attention head.

    Build one with :meth:`from_arrays`; instances are immutable.
    """

    __slots__ = ("_biases", "_independent", "_kv_groups", "_names", "_packed", "_rope", "_scale",
                 "_value_input", "_weights")

    def __init__(
        self, weights: tuple[Array, Array, Array], biases: Biases, names: tuple[str, str, str],
        independent: bool, scale: float | None = None, rope: Rope | None = None,
        kv_groups: int = 1, value_input: bool = False,
    ) -> None:
        # Private: from_arrays validates first.
        self._weights = weights
        self._biases = biases
        self._names = names
        self._independent = independent
        self._scale = scale
        self._rope = rope
        self._kv_groups = kv_groups
        self._value_input = value_input
        self._packed: tuple[Array, Array | None] | None = None

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
        value_input: bool = False,
    ) -> AttentionHead:
        """Validate and build a head from ``[d_model, d_out]`` weights and optional biases.

        ``scale`` is the score factor (``None``: ``1/sqrt(d_k)``); ``rope`` turns Q and K
        after their biases; ``kv_groups`` > 1 makes these the projections of a
        grouped-query layer, whose query width is ``kv_groups`` times the key width (only
        :class:`~qkvcli.attention.multihead.MultiHeadLayer` runs such projections).
        ``value_input``: the value weight reads an input of its own, joined after the
        query's and key's in ``X`` (see the module docstring); its rows may then differ
        from theirs.

        Order (first failure wins): per branch its name, finite weight, finite bias; per
        branch rank and non-zero widths (``"<branch> projection: ..."``); equal model
        widths (with ``value_input`` the query's and key's alone,
        :class:`~qkvcli.attention.errors.ValueInputError`); head widths (all equal, the
        chapter's error, or with an independent value width only query = key; grouped:
        query = kv_groups * key); bias shapes; unique
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
        if not value_input:
            check_model_widths(weights)
        elif weights[0].shape[0] != weights[1].shape[0]:
            raise ValueInputError(
                f"with a value input, the query and key projections read one input: their "
                f"model widths must match, got query {weights[0].shape[0]}, key "
                f"{weights[1].shape[0]}")
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
            independent_value_width, scale, rope, kv_groups, value_input,
        )

    # --- properties ---------------------------------------------------------------------

    @property
    def biases(self) -> Biases:
        return self._biases

    @property
    def independent_value_width(self) -> bool:
        return self._independent

    @property
    def scale(self) -> float:
        """The score factor: the given one, else ``1/sqrt(d_k)``."""
        return self.scale_of(self.d_k)

    def scale_of(self, d_k: int) -> float:
        """The score factor of a head ``d_k`` wide: the given one, else ``1/sqrt(d_k)``."""
        return score_factor(d_k, self._scale)

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
    def value_input(self) -> bool:
        """Whether V is projected from an input of its own, joined after Q's and K's."""
        return self._value_input

    def input_columns(self) -> tuple[slice, slice, slice]:
        """The columns of the input ``X`` each branch reads, query, key, value: all of
        them, or with a value input the first ones for Q and K and the rest for V."""
        if not self._value_input:
            every = slice(0, self.d_model)
            return every, every, every
        shared = int(self._weights[0].shape[0])
        return slice(0, shared), slice(0, shared), slice(shared, self.d_model)

    @property
    def d_model(self) -> int:
        """The input's width: the weights' rows (with a value input, Q's and V's joined)."""
        rows = int(self._weights[0].shape[0])
        return rows + int(self._weights[2].shape[0]) if self._value_input else rows

    @property
    def d_k(self) -> int:
        return int(self._weights[0].shape[1])

    @property
    def d_v(self) -> int:
        return int(self._weights[2].shape[1])

    # --- the head as a layer of one head (what the engine reads) --------------------------

    @property
    def heads(self) -> int:
        return 1

    @property
    def kv_heads(self) -> int:
        return 1

    @property
    def window(self) -> int | None:
        """A head alone has no sliding window (a layer may: :class:`MultiHeadLayer`)."""
        return None

    @property
    def softcap(self) -> float | None:
        """A head alone caps no scores (a layer may: :class:`MultiHeadLayer`)."""
        return None

    @property
    def alibi(self) -> Array | None:
        """A head alone has no ALiBi slopes (a layer may: :class:`MultiHeadLayer`)."""
        return None

    @property
    def alibi_form(self) -> AlibiForm:
        """The default form: a head alone has no ALiBi."""
        return AlibiForm()

    @property
    def clip(self) -> float | None:
        """A head alone clips no projections (a layer may: :class:`MultiHeadLayer`)."""
        return None

    @property
    def qk_norm(self) -> QkNorm | None:
        """A head alone normalises no Q or K (a layer may: :class:`MultiHeadLayer`)."""
        return None

    @property
    def branch_biases(self) -> tuple[bool, bool, bool]:
        """Which branches have a bias, query, key, value."""
        return (self._biases[0] is not None, self._biases[1] is not None,
                self._biases[2] is not None)

    @property
    def out_weight(self) -> Array | None:
        return None

    @property
    def out_bias(self) -> Array | None:
        return None

    def packed(self) -> tuple[Array, Array | None]:
        """``[W_Q|W_K|W_V]`` and the packed bias (``None`` unless a branch has one; a
        missing one is zeros), built once. With a value input, each weight in the rows of
        the columns of ``X`` it reads and zeros elsewhere (:meth:`input_columns`)."""
        if self._packed is None:
            bias = None
            if any(b is not None for b in self._biases):
                bias = np.concatenate([np.zeros(w.shape[1]) if b is None else b
                                       for w, b in zip(self._weights, self._biases, strict=True)])
            if self._value_input:
                weight = np.zeros((self.d_model, sum(int(w.shape[1]) for w in self._weights)))
                start = 0
                for w, rows in zip(self._weights, self.input_columns(), strict=True):
                    weight[rows, start:start + w.shape[1]] = w
                    start += int(w.shape[1])
            else:
                weight = np.ascontiguousarray(np.concatenate(self._weights, axis=1))
            self._packed = (weight, bias)
        return self._packed

    @property
    def parameter_count(self) -> int:
        """Weights plus biases: each weight's size (``d_model (2 d_k + d_v)`` without a
        value input) and each bias's width."""
        total = sum(int(w.size) for w in self._weights)
        return total + sum(int(b.size) for b in self._biases if b is not None)

    def with_parameters(
        self, weights: Sequence[Array], biases: Sequence[Array | None]
    ) -> AttentionHead:
        """The same head with other parameter values, unvalidated (probes that keep shapes)."""
        return AttentionHead(
            (weights[0], weights[1], weights[2]), (biases[0], biases[1], biases[2]),
            self._names, self._independent, self._scale, self._rope, self._kv_groups,
            self._value_input,
        )

    def with_rope(self, rope: Rope) -> AttentionHead:
        """The same head, its parameter arrays themselves, turning Q and K by ``rope``
        (a KV cache's binding tells the two apart by their RoPE alone); unvalidated:
        the layer checks it against a head's width."""
        return AttentionHead(self._weights, self._biases, self._names, self._independent,
                             self._scale, rope, self._kv_groups, self._value_input)

    def sliced(self, weights: Sequence[Array], biases: Sequence[Array | None],
               kv_groups: int = 1) -> AttentionHead:
        """Some heads of a layer: these parameters, this head's scale, RoPE and value
        input, ``kv_groups`` query heads per K/V head (default one: a head alone)."""
        return AttentionHead(
            (weights[0], weights[1], weights[2]), (biases[0], biases[1], biases[2]),
            self._names, self._independent, self._scale, self._rope, kv_groups,
            self._value_input,
        )

    # --- computation --------------------------------------------------------------------

    def check_input(self, x: ArrayLike) -> Array:
        """Validate ``x`` (rank three, final width ``d_model``, finite); return it as float64."""
        array = np.asarray(x, dtype=np.float64)
        check_input_shape(array, self.d_model)
        check_finite(array, "input")
        return array

    def forward(self, x: ArrayLike, causal: bool = False) -> AttentionForward:
        """Project, score, scale, (mask,) softmax and mix: the engine on a layer of this
        one head. Raises the input errors."""
        x = self.check_input(x)
        # Overflow is reported by the evidence (a non-finite tensor fails "forward"), not as
        # numpy warnings on stderr.
        with np.errstate(over="ignore", invalid="ignore"):
            return engine.forward(self, x, causal).heads[0]

    def backward(self, x: ArrayLike, forward: AttentionForward, grad_output: ArrayLike) -> (
        AttentionGradients
    ):
        """Reverse pass for ``grad_output`` (dO, ``[B,T,d_v]``) through the mixture, softmax,
        scores and projections (the engine's). Raises the input errors, then
        :class:`~qkvcli.attention.errors.OutputGradientShapeMismatch`."""
        x = self.check_input(x)
        batch, tokens = x.shape[:2]
        upstream = np.asarray(grad_output, dtype=np.float64)
        if upstream.shape != (batch, tokens, self.d_v):
            raise OutputGradientShapeMismatch((batch, tokens, self.d_v), tuple(upstream.shape))
        one = {name: value[:, None] for name, value in (
            ("query", forward.query), ("key", forward.key), ("value", forward.value),
            ("scores", forward.scores), ("scaled_scores", forward.scaled_scores),
            ("attention", forward.attention), ("rotated_query", forward.rotated_query),
            ("rotated_key", forward.rotated_key)) if value is not None}
        layer_forward = engine.LayerForward((forward,), forward.output, forward.output, one,
                                            forward.causal, forward.window)
        with np.errstate(over="ignore", invalid="ignore"):
            g = engine.backward(self, x, layer_forward, upstream)
        h = g.heads[0]
        return AttentionGradients(
            h.grad_attention, h.grad_scaled_scores, h.grad_scores, h.grad_query, h.grad_key,
            h.grad_value, *(getattr(g, name) for name in ParameterGradients.__record_fields__))


class ScaleProbe(Record):
    """The scale probe: ``A[0,0]`` without and with the head's score scale, and ``A[0,1]``."""

    d_k: int
    scale: float
    unscaled_focus: float
    scaled_focus: float
    orthogonal_probability: float

    @property
    def softened(self) -> bool:
        return self.scaled_focus < self.unscaled_focus

    @property
    def holds(self) -> bool:
        """The focus is softened exactly when the scale shrinks the scores."""
        return self.softened == (self.scale < 1.0)


def scale_probe(d_k: int, given: float | None = None) -> ScaleProbe:
    """The scale probe of a head ``d_k`` wide whose score scale is ``given`` (``None``:
    ``1/sqrt(d_k)``): two tokens whose queries, keys and values are ``e0`` and ``e1``
    (the head's projections the identity), so the scores are the identity and only the
    scale moves the weights. Chapter 27's claim, and every head's and layer's."""
    units = np.zeros((1, 2, d_k))
    units[0, 0, 0] = 1.0
    if d_k > 1:
        units[0, 1, 1] = 1.0
    identity = np.eye(d_k)
    done = AttentionHead.from_arrays(identity, identity, identity, scale=given).forward(units)
    unscaled = softmax(np.array(done.scores))
    return ScaleProbe(d_k, score_factor(d_k, given), float(unscaled[0, 0, 0]),
                      float(done.attention[0, 0, 0]), float(done.attention[0, 0, 1]))
