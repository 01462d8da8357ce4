"""qkv's own engine as an implementation: the reference every family compares with.

Every operation of the protocol answered by qkv's engine: ``forward`` and ``backward`` by
the chapter's projections (:class:`~qkvcli.core.projections.QkvProjections`),
``head_forward`` and ``head_backward`` by the attention engine's head
(:class:`~qkvcli.attention.head.AttentionHead`), ``rope``, ``rope_reverse``,
``mha_forward`` and ``mha_backward`` by the engine's RoPE and multi-head layer
(:mod:`qkvcli.check.reference`). The families take their expected values
from it, and it can be judged by them like any implementation (a test runs every family
on it and every one passes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from qkvcli.core.arrays import Array
from qkvcli.core.projections import QkvProjections
from qkvcli.protocol.python import PythonImplementation

if TYPE_CHECKING:
    from qkvcli.attention.cache import DecodingLayer
    from qkvcli.attention.head import AttentionHead

Bundle = tuple[Array, ...]


def forward(x: Array, w_query: Array, w_key: Array, w_value: Array) -> Bundle:
    """``(query, key, value)`` of the chapter's projections."""
    done = QkvProjections.from_arrays(w_query, w_key, w_value).forward(x)
    return done.query, done.key, done.value


def backward(x: Array, w_query: Array, w_key: Array, w_value: Array, grad_query: Array,
             grad_key: Array, grad_value: Array) -> Bundle:
    """``(grad_input, grad_w_query, grad_w_key, grad_w_value)`` of the projections."""
    done = QkvProjections.from_arrays(w_query, w_key, w_value).backward(
        x, grad_query, grad_key, grad_value)
    return done.grad_input, done.grad_w_query, done.grad_w_key, done.grad_w_value


def _head(w_query: Array, w_key: Array, w_value: Array) -> AttentionHead:
    """The engine's head (the attention engine imported only for the kinds that use it)."""
    from qkvcli.attention.head import AttentionHead

    return AttentionHead.from_arrays(w_query, w_key, w_value)


def head_forward(x: Array, w_query: Array, w_key: Array, w_value: Array,
                 causal: bool) -> Bundle:
    """``(scores, weights, output)`` of one head: the interface's scores are scaled and
    before the mask (the engine's ``scaled_scores`` are after it)."""
    from qkvcli.attention.maths import scale

    head = _head(w_query, w_key, w_value)
    done = head.forward(x, causal)
    return scale(done.scores, head.d_k, head.given_scale), done.attention, done.output


def head_backward(x: Array, w_query: Array, w_key: Array, w_value: Array, causal: bool,
                  grad_output: Array) -> Bundle:
    """``(grad_input, grad_w_query, grad_w_key, grad_w_value)`` of one head."""
    head = _head(w_query, w_key, w_value)
    grads = head.backward(x, head.forward(x, causal), grad_output)
    return grads.grad_input, grads.grad_w_query, grads.grad_w_key, grads.grad_w_value


def _checked_rope(x: Array, base: float, offset: int) -> None:
    """Refuse what the engine's RoPE refuses (odd or no width, a base of 0 or below, a
    negative offset: :class:`~qkvcli.core.errors.RopeError`) and an input without
    a token axis."""
    from qkvcli.core.rope import Rope, check_rope

    if x.ndim < 2:
        raise ValueError(f"RoPE needs [..., tokens, width], got rank {x.ndim}")
    check_rope(Rope(base, int(x.shape[-1]), "interleaved", offset), int(x.shape[-1]))


def rope(x: Array, base: float, offset: int) -> Array:
    """``x`` turned by RoPE (adjacent pairs), as the ``rope`` family's reference."""
    from qkvcli.check.reference import engine_rope

    _checked_rope(x, base, offset)
    return engine_rope(x, base, offset)


def rope_reverse(rotated: Array, base: float, offset: int) -> Array:
    """``rotated`` turned back."""
    from qkvcli.check.reference import engine_rope

    _checked_rope(rotated, base, offset)
    return engine_rope(rotated, base, offset, reverse=True)


def mha_forward(x: Array, w_query: Array, w_key: Array, w_value: Array, w_output: Array,
                heads: int, causal: bool, rope: bool, base: float, offset: int) -> Bundle:
    """``(weights, merged, output)`` of a multi-head layer."""
    from qkvcli.check.reference import engine_mha

    return engine_mha(x, (w_query, w_key, w_value, w_output), heads, causal, rope, base, offset)


def mha_backward(x: Array, w_query: Array, w_key: Array, w_value: Array, w_output: Array,
                 heads: int, causal: bool, rope: bool, base: float, offset: int,
                 grad_output: Array) -> Bundle:
    """The five gradients of a multi-head layer."""
    from qkvcli.check.reference import engine_mha_backward

    return engine_mha_backward(x, (w_query, w_key, w_value, w_output), heads, causal, rope,
                               base, offset, grad_output)


def _decoding(w_query: Array, w_key: Array, w_value: Array, w_output: Array, heads: int,
              base: float, capacity: int) -> DecodingLayer:
    """The engine's causal layer with RoPE from position 0, its table ``capacity`` rows:
    the layer a learner's cache of ``capacity`` positions serves."""
    from qkvcli.attention.cache import DecodingLayer
    from qkvcli.check.reference import checked_layer

    return DecodingLayer(checked_layer((w_query, w_key, w_value, w_output), heads, base),
                         max(capacity, 1))


def cache_steps(x: Array, w_query: Array, w_key: Array, w_value: Array, w_output: Array,
                heads: int, base: float, capacity: int, step: int) -> Bundle:
    """``(output, keys, values, lengths)`` of a KV cache of ``capacity`` positions, reset,
    fed ``step`` tokens of ``x`` at a time: each step's output at its tokens' rows (zeros
    for a step the cache refuses: more than one token, the cache full, or a score its
    softmax cannot read; the cache is then as it was), the cached rotated keys and values
    ``[B,H,length,d_h]`` after the last step, the cache's length after each step. Raises
    ``ValueError`` for a capacity or step below 1 and the engine's errors for a layer it
    cannot make."""
    from qkvcli.attention.cache import KvCache
    from qkvcli.attention.cache import step as cache_step
    from qkvcli.attention.errors import CacheFull, IncrementalSoftmaxRefusal, SingleTokenRequired

    if capacity < 1 or step < 1:
        raise ValueError(f"capacity and step must be at least 1, got {capacity} and {step}")
    if x.ndim != 3:
        raise ValueError(f"input must be [batch, tokens, d_model], got rank {x.ndim}")
    layer = _decoding(w_query, w_key, w_value, w_output, heads, base, capacity)
    batch, tokens, _ = (int(d) for d in x.shape)
    cache = KvCache.for_layer(layer, batch, capacity)
    output = np.zeros((batch, tokens, int(w_output.shape[1])))
    lengths = []
    for start in range(0, tokens, step):
        try:
            done = cache_step(layer, cache, x[:, start:start + step])
            output[:, start:start + step] = done.output
        except (SingleTokenRequired, CacheFull, IncrementalSoftmaxRefusal):
            pass  # refused: the cache is as it was
        lengths.append(cache.length)
    return (output, cache.logical_keys(), cache.logical_values(),
            np.array(lengths, dtype=np.float64))


def cache_prefix(x: Array, w_query: Array, w_key: Array, w_value: Array, w_output: Array,
                 heads: int, base: float) -> Bundle:
    """``(output, rotated_key, value)`` of the same layer's causal pass over the prefix
    ``x``: what each cached step and the cache after it are judged by."""
    from qkvcli.attention import engine

    layer = _decoding(w_query, w_key, w_value, w_output, heads, base, int(x.shape[1]))
    with np.errstate(over="ignore", invalid="ignore"):
        done = engine.forward(layer.layer, x, True)
    return done.output, done.stacked["rotated_key"], done.stacked["value"]


def operands_forward(query: Array, key: Array, value: Array, causal: bool) -> Bundle:
    """``(scores, scaled_scores, masked_scores, weights, output)`` of one head on given
    ``Q``, ``K``, ``V`` (chapters 27 and 28): the scores ``Q K^T``, scaled, then masked
    (``-inf`` where a query may not look), the probabilities and the output. Raises the
    operands' typed errors (:func:`~qkvcli.attention.operands.check_operands`)."""
    from qkvcli.attention.maths import scale
    from qkvcli.attention.operands import attend

    run = attend(query, key, value, causal)
    done = run.forward.heads[0]
    scores = np.array(done.scores)
    return (scores, scale(scores, int(query.shape[2]), run.layer.given_scale),
            np.array(run.forward.stacked["scaled_scores"][:, 0]), np.array(done.attention),
            np.array(done.output))


def operands_backward(query: Array, key: Array, value: Array, causal: bool,
                      grad_output: Array) -> Bundle:
    """``(grad_query, grad_key, grad_value, grad_weights, grad_scaled_scores,
    grad_scores)`` of ``L = <O, grad_output>``: every array the reverse pass makes."""
    from qkvcli.attention.operands import attend, reverse

    done = reverse(attend(query, key, value, causal), grad_output).heads[0]
    return tuple(np.array(g) for g in (done.grad_query, done.grad_key, done.grad_value,
                                       done.grad_attention, done.grad_scaled_scores,
                                       done.grad_scores))


def engine_implementation() -> PythonImplementation:
    """qkv's engine, in this process, as the families call any implementation."""
    engine = PythonImplementation("qkv's engine", forward, backward, head_forward,
                                  head_backward, rope=rope, rope_reverse=rope_reverse,
                                  mha_forward=mha_forward, mha_backward=mha_backward,
                                  cache_steps=cache_steps)
    engine.fresh = True  # every result is a new array of the engine's
    return engine


def operands_implementation() -> PythonImplementation:
    """qkv's engine as one head on given ``Q``, ``K``, ``V`` (engine-only operations: the
    implementation chapters 27 and 28 judge)."""
    engine = PythonImplementation("qkv's engine", None, operands_forward=operands_forward,
                                  operands_backward=operands_backward)
    engine.fresh = True
    return engine
